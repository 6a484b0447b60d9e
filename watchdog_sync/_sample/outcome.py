"""What one sample run produced, decided by the same rules in thread and process isolation.

The rules (documented on :func:`watchdog_sync.run_sample`):

- ``fn`` returned while the sample's budget still had time: success, reason ``None``.
- The sample's own budget ended (its timeout, or ``fn`` cancelled it): reason
  ``'deadline_exceeded'`` (or ``'cancelled'``), whatever ``fn`` did afterwards;
  a value returned late is discarded, an error raised late is kept as
  ``last_error`` of the :class:`DeadlineExceeded`.
- ``fn`` raised while there was time: ``classify(error).reason``. A
  :class:`DeadlineExceeded` of ``fn``'s own inner deadline is a stage's own cap
  that ran out before the sample's deadline: it comes back as an
  :class:`OperationTimeout` (reason ``'operation_timeout'``, the inner error as
  ``__cause__``), so the reason always agrees with the class, and
  ``'deadline_exceeded'`` (a :class:`DeadlineExceeded`) means run_sample's
  timeout.
- An error whose ``str()`` or whose attributes raise is still reported: its
  text is replaced by a note, and a ``classify`` that fails on it gives
  ``'unknown'``.

The end of an *outer* scope's budget is not an outcome: the runners raise its
:class:`Cancelled` so that scope converts it, as every entry point does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from .._core.budget import Budget
from .._core.errors import (
    Cancelled,
    DeadlineExceeded,
    OperationCancelled,
    OperationTimeout,
    WatchdogError,
)
from .._core.scope import error_for
from .._retry.classify import classify

__all__ = [
    "Cause",
    "Outcome",
    "ended",
    "failure_reason",
    "safe_text",
    "settle",
    "stop_if_outer",
]

Cause = Tuple[Budget, str]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The decided result of a run, before timing is added (see ``SampleResult``)."""

    value: Any = None
    error: Optional[BaseException] = None
    reason: Optional[str] = None
    abandoned: bool = False


def safe_text(error: BaseException) -> str:
    """``str(error)``, or a note saying that it raised (a hostile ``__str__``)."""
    try:
        return str(error)
    except Exception as exc:
        return f"<str() of this {type(error).__name__} raised {type(exc).__name__}>"


def failure_reason(error: BaseException) -> str:
    """The reason for an error ``fn`` raised while its budget still had time."""
    try:
        return classify(error).reason
    except Exception:  # classify read an attribute (.response, ...) that raised
        return "unknown"


def _own_timeout(error: DeadlineExceeded) -> OperationTimeout:
    """``fn``'s own inner deadline, seen from the sample: a stage's cap that ran out first."""
    stage = f" (stage {error.stage!r})" if error.stage else ""
    made = OperationTimeout(
        f"a deadline of the sample's own{stage} ran out while the sample still had time: "
        f"{safe_text(error)}",
        stage=error.stage,
        attempt=error.attempt,
        elapsed=error.elapsed,
        remaining=error.remaining,
        request_id=error.request_id,
    )
    made.__cause__ = error
    return made


def ended(
    cause: Cause,
    error: Optional[BaseException] = None,
    *,
    note: str = "",
    abandoned: bool = False,
    phase: Optional[str] = None,
) -> Outcome:
    """The sample's own budget ended: a timeout, or a cancel by ``fn`` itself.

    ``phase``: ``'wait'`` when the caller's wait for the sample ended it (a worker
    abandoned, a child process killed)."""
    reason = "deadline_exceeded" if cause[1] == "deadline_exceeded" else "cancelled"
    if isinstance(error, (DeadlineExceeded, OperationCancelled)) and error.reason == reason:
        return Outcome(error=error, reason=reason, abandoned=abandoned)  # the scope's own error
    describable = _str_works(error)  # error_for puts str(error) into its message
    signal = Cancelled(cause[0], cause[1], phase=phase)
    made = error_for(signal, last_error=error if describable else None)
    if note or not describable:
        late = "" if error is None or describable else f"; last error: {_text(error)}"
        tail = f"; {note}" if note else ""
        made = _rebuilt(made, f"{made.message}{late}{tail}", error)
    return Outcome(error=made, reason=reason, abandoned=abandoned)


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {safe_text(error)}"


def _str_works(error: Optional[BaseException]) -> bool:
    try:
        str(error)
    except Exception:
        return False
    return True


def _rebuilt(made: WatchdogError, message: str, last: Optional[BaseException]) -> WatchdogError:
    """``made`` with another message (errors are built with their fields, never changed)."""
    if isinstance(made, DeadlineExceeded):
        return DeadlineExceeded(
            message,
            attempts=made.attempts,
            last_error=last,
            phase=made.phase,
            stage=made.stage,
            elapsed=made.elapsed,
            remaining=made.remaining,
            request_id=made.request_id,
        )
    return OperationCancelled(
        message,
        stage=made.stage,
        elapsed=made.elapsed,
        remaining=made.remaining,
        request_id=made.request_id,
    )


def settle(
    cause: Optional[Cause], *, returned: bool, value: Any, error: Optional[BaseException]
) -> Outcome:
    """Decide the outcome of a call that finished; ``cause`` is how its budget ended, if it did."""
    if cause is not None:
        return ended(cause, error)
    if returned:
        return Outcome(value=value)
    assert error is not None
    if isinstance(error, Cancelled):
        # About a budget no scope of ours owns (fn checked a stray Budget): report it.
        error = error_for(error)
    elif isinstance(error, DeadlineExceeded):
        error = _own_timeout(error)
    return Outcome(error=error, reason=failure_reason(error))


def stop_if_outer(budget: Budget, cause: Optional[Cause]) -> None:
    """Raise the outer scope's :class:`Cancelled` if an enclosing budget ended the sample."""
    if cause is not None and cause[0] is not budget:
        raise Cancelled(cause[0], cause[1])
