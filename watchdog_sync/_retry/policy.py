"""RetryPolicy: how often a call is retried, how long it waits, and which failures count.

The loop that applies a policy is ``loop.py`` (retry_call, @retrying).
"""

from __future__ import annotations

import inspect
import math
import random as _random
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple, TypeVar

from .._core import config as _config
from .._core.config import DEFAULT_MAX_ATTEMPTS, deprecated
from .._core.durations import Duration, validate_duration
from .budget import RetryBudget
from .classify import Classification
from .classify import classify as _default_classify

if sys.version_info >= (3, 10):
    from typing import ParamSpec

    P = ParamSpec("P")
elif TYPE_CHECKING:  # Python 3.9: only type checkers need it (annotations are strings)
    from typing_extensions import ParamSpec

    P = ParamSpec("P")

__all__ = ["RetryPolicy", "checked_policy", "default_policy"]

T = TypeVar("T")

_NESTED_MODES = ("defer", "independent")


_POSITIONAL = (
    "max_attempts",
    "initial_backoff",
    "multiplier",
    "max_backoff",
    "jitter",
    "respect_retry_after",
    "classify",
    "retry_budget",
)


@dataclass(frozen=True, repr=False)
class _PolicyFields:
    """A policy's fields, validated and normalised before the object is built."""

    max_attempts: int
    initial_backoff: float
    multiplier: float
    max_backoff: float
    jitter: float
    respect_retry_after: bool
    classify: Callable[[BaseException], Classification]
    retry_budget: Optional[RetryBudget]
    max_retry_after: float
    random: Callable[[], float]
    attempt_timeout: Optional[float]


class RetryPolicy(_PolicyFields):
    """How a call is retried: how often, how long to wait, and which failures count.

    The wait before retry number ``attempt + 1`` (``attempt`` 0-based: the
    first retry waits about ``initial_backoff``) is::

        backoff(attempt) = min(initial_backoff * multiplier**attempt, max_backoff)
                           * uniform[1 - jitter, 1 + jitter]

    When the failure carries a ``Retry-After`` (from ``classify``) and
    ``respect_retry_after`` is true, the wait is
    ``min(max(retry_after * uniform[1, 1 + jitter], backoff(attempt)), max_retry_after)``:
    never below the server's value (jitter only upward), capped at
    ``max_retry_after``.

    Keyword arguments only (positional ones still work, with a
    ``DeprecationWarning``), validated here, once, when the policy is built.

    Args:
        max_attempts: attempts in all, the first included (``>= 1``; 1 turns
            retries off). The default policy of :func:`retry_call` and
            :class:`ChatClient` has ``WATCHDOG_SYNC_MAX_ATTEMPTS`` or 6.
        initial_backoff: seconds before the first retry, before jitter.
        multiplier: growth of the backoff per retry (``>= 1``).
        max_backoff: cap on the backoff before jitter, in seconds.
        jitter: relative spread of each wait, ``0 <= jitter <= 1``.
        respect_retry_after: honour the server's ``Retry-After``.
        classify: ``classify(exc) -> Classification``; decides what is retried.
        retry_budget: a :class:`RetryBudget` shared with other calls, or ``None``.
        max_retry_after: cap on a ``Retry-After`` wait, in seconds.
        random: a source of floats in ``[0, 1)`` for the jitter (pass
            ``random.Random(seed).random`` for repeatable waits).
        attempt_timeout: seconds each attempt may take (Envoy's
            ``per_try_timeout``); ``None`` (the default) or ``inf``: no limit
            of its own. Each attempt runs in a child of the call's budget; when
            an attempt reaches the limit, its sockets are shut and its waits end
            as for a deadline, and it fails with
            ``OperationTimeout(reason='attempt_timeout')``, retryable like any
            other failure: within the call's budget, never past it (the call's
            own end is still ``DeadlineExceeded``). An attempt that returned in
            time has committed: a stream it opened (``ChatClient.stream``: the
            request up to the first chunk) lives on under the call's budget.
            An attempt that returns only after its limit (work nothing could
            interrupt) fails the same way. ``0`` or less: ``ValueError``.

    The waits are not limits and cannot be off: each is a finite number of
    seconds ``>= 0`` (``0`` retries at once), more than 7 days is clamped to
    7 days; ``None``, negatives and ``inf`` are errors naming the argument.

    Frozen: derive a variant with ``dataclasses.replace(policy, max_attempts=3)``.
    The policy never waits itself; :func:`retry_call` does, inside the budget.
    """

    def __init__(
        self,
        *args: Any,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        initial_backoff: Duration = 1.5,
        multiplier: float = 2.0,
        max_backoff: Duration = 60.0,
        jitter: float = 0.25,
        respect_retry_after: bool = True,
        classify: Callable[[BaseException], Classification] = _default_classify,
        retry_budget: Optional[RetryBudget] = None,
        max_retry_after: Duration = 60.0,
        random: Callable[[], float] = _random.random,
        attempt_timeout: Optional[Duration] = None,
    ) -> None:
        given: Dict[str, Any] = {
            "max_attempts": max_attempts,
            "initial_backoff": initial_backoff,
            "multiplier": multiplier,
            "max_backoff": max_backoff,
            "jitter": jitter,
            "respect_retry_after": respect_retry_after,
            "classify": classify,
            "retry_budget": retry_budget,
            "max_retry_after": max_retry_after,
            "random": random,
            "attempt_timeout": attempt_timeout,
        }
        if args:
            _positional(args, given)
        super().__init__(**_validated(**given))

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt + 1`` (``attempt`` is 0-based).

        ``min(initial_backoff * multiplier**attempt, max_backoff) * uniform[1 - jitter, 1 + jitter]``
        """
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
            raise ValueError(f"attempt must be a whole number >= 0, got {attempt!r}")
        try:
            base = self.initial_backoff * self.multiplier**attempt
        except OverflowError:
            base = math.inf
        return min(base, self.max_backoff) * (1.0 - self.jitter + 2.0 * self.jitter * self.random())

    def wait(self, attempt: int, retry_after: Optional[float]) -> float:
        """The wait after failed attempt ``attempt + 1``, with the server's ``Retry-After``.

        ``backoff(attempt)`` without a ``Retry-After`` (or with
        ``respect_retry_after=False``); otherwise
        ``min(max(retry_after * uniform[1, 1 + jitter], backoff(attempt)), max_retry_after)``.
        """
        backoff = self.backoff(attempt)
        if retry_after is None or not self.respect_retry_after:
            return backoff
        server = retry_after * (1.0 + self.jitter * self.random())
        return min(max(server, backoff), self.max_retry_after)

    def __repr__(self) -> str:
        extras = "" if self.retry_budget is None else f", retry_budget={self.retry_budget!r}"
        if self.classify is not _default_classify:
            extras += f", classify={_name(self.classify)}"
        if self.random is not _random.random:
            extras += f", random={_name(self.random)}"
        if self.attempt_timeout is not None:
            extras += f", attempt_timeout={self.attempt_timeout}"
        return (
            f"RetryPolicy(max_attempts={self.max_attempts}, initial_backoff={self.initial_backoff}, "
            f"multiplier={self.multiplier}, max_backoff={self.max_backoff}, jitter={self.jitter}, "
            f"respect_retry_after={self.respect_retry_after}, "
            f"max_retry_after={self.max_retry_after}{extras})"
        )


# help() and the docs show the keyword-only signature; ``*args`` only carries the
# deprecated positional spelling.
_INIT = inspect.signature(RetryPolicy.__init__)
RetryPolicy.__signature__ = _INIT.replace(  # type: ignore[attr-defined]
    parameters=[p for name, p in _INIT.parameters.items() if name not in ("self", "args")],
    return_annotation=inspect.Signature.empty,
)


def checked_policy(policy: Optional[RetryPolicy], hint: str = "") -> RetryPolicy:
    if policy is None:
        return default_policy()
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a RetryPolicy or None, not {type(policy).__name__}{hint}")
    return policy


def default_policy() -> RetryPolicy:
    """The policy of a call given none: ``WATCHDOG_SYNC_MAX_ATTEMPTS`` (else 6) attempts."""
    return RetryPolicy(max_attempts=_config.max_attempts())


def _positional(args: Tuple[Any, ...], given: Dict[str, Any]) -> None:
    """Map the old positional arguments onto ``given``, with a ``DeprecationWarning``."""
    if len(args) > len(_POSITIONAL):
        raise TypeError(f"RetryPolicy takes keyword arguments only ({len(args)} positional given)")
    names = _POSITIONAL[: len(args)]
    deprecated(
        "RetryPolicy takes keyword arguments only; positional ones are deprecated: write "
        + ", ".join(f"{name}=..." for name in names)
    )
    for name, value in zip(names, args):
        given[name] = value


def _validated(
    *,
    max_attempts: Any,
    initial_backoff: Any,
    multiplier: Any,
    max_backoff: Any,
    jitter: Any,
    respect_retry_after: Any,
    classify: Any,
    retry_budget: Any,
    max_retry_after: Any,
    random: Any,
    attempt_timeout: Any,
) -> Dict[str, Any]:
    """Every check of a policy's arguments, in one place; returns the normalised fields."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise TypeError(
            f"max_attempts must be a whole number >= 1, not {type(max_attempts).__name__}"
        )
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1 (1 means no retry), got {max_attempts}")
    _number(multiplier, "multiplier", low=1.0, high=math.inf)
    _number(jitter, "jitter", low=0.0, high=1.0)
    if not isinstance(respect_retry_after, bool):
        raise TypeError(
            f"respect_retry_after must be True or False, not {type(respect_retry_after).__name__}"
        )
    if not callable(classify):
        raise TypeError("classify must be a callable: classify(exc) -> Classification")
    if retry_budget is not None and not isinstance(retry_budget, RetryBudget):
        raise TypeError(
            f"retry_budget must be a RetryBudget or None, not {type(retry_budget).__name__}"
        )
    if not callable(random):
        raise TypeError("random must be a callable returning floats in [0, 1)")
    return {
        "max_attempts": max_attempts,
        "initial_backoff": _seconds(initial_backoff, "initial_backoff"),
        "multiplier": float(multiplier),
        "max_backoff": _seconds(max_backoff, "max_backoff"),
        "jitter": float(jitter),
        "respect_retry_after": respect_retry_after,
        "classify": classify,
        "retry_budget": retry_budget,
        "max_retry_after": _seconds(max_retry_after, "max_retry_after"),
        "random": random,
        "attempt_timeout": validate_duration(attempt_timeout, "attempt_timeout", allow_zero=False),
    }


def _seconds(value: Duration, name: str) -> float:
    seconds = validate_duration(value, name, allow_none=False)
    assert seconds is not None
    return seconds


def _number(value: float, name: str, *, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or not low <= value <= high:
        upper = "" if math.isinf(high) else f" and <= {high}"
        raise ValueError(f"{name} must be >= {low}{upper}, got {value!r}")


def _name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)
