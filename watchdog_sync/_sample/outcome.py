"""What one sample run produced, decided by the same rules in thread and process isolation.

The rules (documented on :func:`watchdog_sync.run_sample`):

- ``fn`` returned while the sample's budget still had time: success, reason ``None``.
- The sample's own budget ended (its timeout, or ``fn`` cancelled it): reason
  ``'deadline_exceeded'`` (or ``'cancelled'``), whatever ``fn`` did afterwards;
  a value returned late is discarded, an error raised late is kept as
  ``last_error`` of the :class:`DeadlineExceeded`.
- ``fn`` raised while there was time: ``classify(error).reason``, except that a
  :class:`DeadlineExceeded` of ``fn``'s own inner deadline is ``'operation_timeout'``
  (``'deadline_exceeded'`` is kept for run_sample's timeout).

The end of an *outer* scope's budget is not an outcome: the runners raise its
:class:`Cancelled` so that scope converts it, as every entry point does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from .._core.budget import Budget
from .._core.errors import Cancelled, DeadlineExceeded, OperationCancelled
from .._core.scope import error_for
from .._retry.classify import classify

__all__ = ["Cause", "Outcome", "ended", "failure_reason", "settle", "stop_if_outer"]

Cause = Tuple[Budget, str]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The decided result of a run, before timing is added (see ``SampleResult``)."""

    value: Any = None
    error: Optional[BaseException] = None
    reason: Optional[str] = None
    abandoned: bool = False


def failure_reason(error: BaseException) -> str:
    """The reason for an error ``fn`` raised while its budget still had time."""
    if isinstance(error, DeadlineExceeded):
        return "operation_timeout"  # fn's own inner deadline, not run_sample's timeout
    return classify(error).reason


def ended(
    cause: Cause,
    error: Optional[BaseException] = None,
    *,
    note: str = "",
    abandoned: bool = False,
) -> Outcome:
    """The sample's own budget ended: a timeout, or a cancel by ``fn`` itself."""
    reason = "deadline_exceeded" if cause[1] == "deadline_exceeded" else "cancelled"
    if isinstance(error, (DeadlineExceeded, OperationCancelled)) and error.reason == reason:
        return Outcome(error=error, reason=reason, abandoned=abandoned)  # the scope's own error
    made = error_for(Cancelled(cause[0], cause[1]), last_error=error)
    if note:
        made.args = (f"{made.message}; {note}",)
    return Outcome(error=made, reason=reason, abandoned=abandoned)


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
    return Outcome(error=error, reason=failure_reason(error))


def stop_if_outer(budget: Budget, cause: Optional[Cause]) -> None:
    """Raise the outer scope's :class:`Cancelled` if an enclosing budget ended the sample."""
    if cause is not None and cause[0] is not budget:
        raise Cancelled(cause[0], cause[1])
