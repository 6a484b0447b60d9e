"""retry_call and @retrying: the one budget-aware retry owner, and the loop behind them.

A call retries inside one budget: attempts, backoff sleeps and ``Retry-After``
waits all spend the same wall clock, a wait that would end past the deadline
fails at once, and only failures that ``classify`` calls retryable are tried
again. A ``retry_call`` running inside an attempt of another one makes a
single attempt and leaves the decision to the outer loop, so nested layers
never multiply their attempts.
"""

from __future__ import annotations

import contextvars
import functools
import math
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Literal, Optional, Tuple, TypeVar

from .._core import scope as _scope
from .._core.budget import Budget
from .._core.calls import CallMark
from .._core.errors import Cancelled, DeadlineExceeded, RetryExhausted, WatchdogError
from .._core.events import Event, emit, event_fields
from .._core.phase import in_phase
from .._core.redact import describe
from .attempt import Attempt
from .budget import RetryBudget
from .policy import RetryPolicy, checked_policy

if sys.version_info >= (3, 10):
    from typing import ParamSpec

    P = ParamSpec("P")
elif TYPE_CHECKING:  # Python 3.9: only type checkers need it (annotations are strings)
    from typing_extensions import ParamSpec

    P = ParamSpec("P")

__all__ = ["in_retry_attempt", "retry_call", "retrying"]

T = TypeVar("T")

_NESTED_MODES = ("defer", "independent")
_IN_ATTEMPT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "watchdog_sync_in_attempt", default=False
)


def in_retry_attempt() -> bool:
    """True inside an attempt of a :func:`retry_call` (ChatClient's attempts included):
    nothing below it re-sends on its own; it raises, and that loop decides."""
    return _IN_ATTEMPT.get()


def retry_call(
    fn: Callable[..., T],
    *args: Any,
    policy: Optional[RetryPolicy] = None,
    budget: Optional[Budget] = None,
    stage: Optional[str] = None,
    nested: Literal["defer", "independent"] = "defer",
    **kwargs: Any,
) -> T:
    """Call ``fn(*args, **kwargs)``, retrying retryable failures inside one budget.

    Args:
        fn: the operation; an attempt fails when it raises an ``Exception``.
        policy: the :class:`RetryPolicy`; by default 6 attempts (or
            ``WATCHDOG_SYNC_MAX_ATTEMPTS``), backoff ``1.5 * 2**n`` s ±25 %.
            Its ``attempt_timeout`` bounds each attempt: one that reaches it
            fails with ``OperationTimeout(reason='attempt_timeout')``, retried
            like any retryable failure.
        budget: a :class:`Budget` to run under, joined with the current scope's
            (the tighter wins); by default the current scope's budget.
        stage: a name for events and errors.
        nested: inside an attempt of another ``retry_call`` (same thread, or a
            thread started with ``carry_budget``), ``"defer"`` makes exactly one
            attempt and re-raises its error unchanged for the outer loop to
            decide; ``"independent"`` runs a full loop of its own.

    Returns:
        What ``fn`` returned.

    Raises:
        Exception: a failure ``policy.classify`` calls not retryable, unchanged
            (a 401 stays a 401), on its first occurrence.
        RetryExhausted: every attempt failed (``reason='retry_exhausted'``), or the
            policy's RetryBudget refused a retry (``'retry_budget_exhausted'``).
        DeadlineExceeded: the budget ran out, during an attempt or a backoff, or
            the next wait would have ended past the deadline (it fails at once,
            without sleeping); ``.attempts`` and ``.last_error`` say how far it got.
        OperationCancelled: the budget was cancelled; backoff sleeps wake at once.

    An end of an enclosing scope's budget is left to that scope, which raises
    the error. Keyword arguments named like the options above go to
    ``retry_call`` itself: wrap ``fn`` in ``functools.partial`` to pass them.
    """
    return _call(fn, args, kwargs, policy, budget, stage, nested)


def retrying(
    policy: Optional[RetryPolicy] = None, *, stage: Optional[str] = None
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Decorator form of :func:`retry_call`; the function keeps its signature and docstring.

    ::

        @retrying(RetryPolicy(max_attempts=3), stage="locate")
        def locate(name: str) -> str: ...

    Each call runs under the current scope's budget, with the same behaviour
    on timeout, cancel and nesting as ``retry_call`` (``nested="defer"``).
    """
    policy = checked_policy(policy, hint=" (write @retrying(), with parentheses)")

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        if not callable(fn):
            raise TypeError(f"@retrying decorates a callable, not {type(fn).__name__}")

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            return _call(fn, args, kwargs, policy, None, stage, "defer")

        return wrapper

    return decorate


def _call(
    fn: Callable[..., T],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    policy: Optional[RetryPolicy],
    budget: Optional[Budget],
    stage: Optional[str],
    nested: str,
) -> T:
    if not callable(fn):
        raise TypeError(f"retry_call needs a callable to call, not {type(fn).__name__}")
    if nested not in _NESTED_MODES:
        raise ValueError(f"nested must be 'defer' or 'independent', got {nested!r}")
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget or None, not {type(budget).__name__}")
    policy = checked_policy(policy)
    # An entry point's scope (as _scope.entry_scope), keeping the owner for the loop's errors.
    active, owner, release = _scope.joined_budget(budget, None, stage=stage)
    mark = CallMark("retry", budget=active, stage=stage or active.stage)
    loop: Optional[_Loop] = None
    try:
        with event_fields(**mark.fields()), _scope.boundary(active, owner):
            if nested == "defer" and _IN_ATTEMPT.get():
                active.check()
                result = fn(*args, **kwargs)  # one attempt: the outer loop decides
            else:
                loop = _Loop(policy, active, owner, stage or active.stage)
                result = loop.run(fn, args, kwargs)
    except BaseException as exc:
        mark.end(exc, attempt=1 if loop is None else loop.attempts)
        raise
    finally:
        release()
    mark.end(attempt=1 if loop is None else loop.attempts)
    return result


class _Loop:
    """The state of one retry_call: attempts so far and the last error."""

    def __init__(
        self,
        policy: RetryPolicy,
        budget: Budget,
        owner: Budget,
        stage: Optional[str],
    ) -> None:
        self.policy = policy
        self.budget = budget
        self.owner = owner  # the budget whose end this call answers for
        self.stage = stage
        self.attempts = 0
        self.last: Optional[Exception] = None

    def run(self, fn: Callable[..., T], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> T:
        try:
            while True:
                self.budget.check()
                self.attempts += 1
                if self.policy.retry_budget is not None:
                    self.policy.retry_budget.deposit()
                self._emit("attempt_start")
                token = _IN_ATTEMPT.set(True)
                attempt = Attempt(
                    self.budget,
                    self.policy.attempt_timeout,
                    number=self.attempts,
                    stage=self.stage,
                )
                try:
                    with attempt:
                        result = fn(*args, **kwargs)
                except Exception as exc:
                    self.last = exc
                else:
                    self._emit("success")
                    return result
                finally:
                    _IN_ATTEMPT.reset(token)
                self._after_failure(self.last)
        except Cancelled as exc:
            self._emit("give_up", reason=exc.reason)
            if not _scope.owns(self.owner, exc):
                raise
            raise _scope.error_for(
                exc, attempts=self.attempts, last_error=self.last, stage=self.stage
            ) from None
        finally:
            # The last error's traceback holds this frame, and so this loop: a cycle.
            self.last = None

    def _after_failure(self, error: Exception) -> None:
        """Back off if another attempt may help; otherwise raise what the caller gets."""
        info = self.policy.classify(error)
        self._emit(
            "attempt_failed",
            reason=info.reason,
            transport_code=info.transport_code,
            status=info.status,
            phase=info.phase,
        )
        if not info.retryable or _marked_permanent(error):
            self._emit("give_up", reason=info.reason)
            raise error
        if self.attempts >= self.policy.max_attempts:
            self._emit("give_up", reason="retry_exhausted")
            raise self._exhausted(error) from error
        delay = self.policy.wait(self.attempts - 1, info.retry_after)
        self.budget.check()
        left = self.budget.remaining()
        if delay >= left:
            self._emit("give_up", reason="deadline_exceeded", delay_ms=delay * 1000.0)
            raise self._too_late(error, delay, left) from error
        retry_budget = self.policy.retry_budget
        if retry_budget is not None and not retry_budget.try_withdraw():
            self._emit("give_up", reason="retry_budget_exhausted")
            raise self._refused(error, retry_budget) from error
        self._emit("backoff", reason=info.reason, delay_ms=delay * 1000.0)
        with in_phase("backoff"):
            self.budget.sleep(delay)

    def _exhausted(self, error: Exception) -> RetryExhausted:
        return RetryExhausted(
            f"gave up after {self._tried()}{self._where()}; last error: {describe(error)}. "
            "The failure looks transient: try again later, or allow more attempts "
            "(RetryPolicy(max_attempts=...)) or a longer backoff if the service recovers slowly",
            attempts=self.attempts,
            last_error=error,
            retryable=True,
            **self._fields(),
        )

    def _refused(self, error: Exception, retry_budget: RetryBudget) -> RetryExhausted:
        return RetryExhausted(
            f"the shared retry budget was spent ({retry_budget!r}): too many retries across "
            f"callers recently, so no retry after {self._tried()}{self._where()}; "
            f"last error: {describe(error)}. The service is failing for many callers: try "
            "again later, or raise the RetryBudget's ratio or min_retries_per_second",
            reason="retry_budget_exhausted",
            attempts=self.attempts,
            last_error=error,
            retryable=False,
            **self._fields(),
        )

    def _too_late(self, error: Exception, delay: float, left: float) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"not retrying after {self._tried()}{self._where()}: the next wait of {delay:.2f}s "
            f"would end past the deadline ({left:.2f}s left); last error: {describe(error)}. "
            "Give the call a larger timeout (timeout=..., deadline(...)) if the work needs it",
            attempts=self.attempts,
            last_error=error,
            phase="backoff",
            **self._fields(),
        )

    def _tried(self) -> str:
        return f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"

    def _where(self) -> str:
        return f" in stage {self.stage!r}" if self.stage else ""

    def _fields(self) -> Dict[str, Any]:
        remaining = self.budget.remaining()
        return {
            "stage": self.stage,
            "attempt": self.attempts,
            "elapsed": self.budget.elapsed(),
            "remaining": None if math.isinf(remaining) else remaining,
        }

    def _emit(self, kind: str, **fields: Any) -> None:
        remaining = self.budget.remaining()
        emit(
            Event(
                kind,
                stage=self.stage,
                attempt=self.attempts,
                elapsed_ms=self.budget.elapsed() * 1000.0,
                remaining_ms=None if math.isinf(remaining) else remaining * 1000.0,
                **fields,
            )
        )


def _marked_permanent(error: Exception) -> bool:
    """An inner layer said no: permanent for every outer layer, whatever ``classify`` says."""
    return isinstance(error, WatchdogError) and error.retryable is False
