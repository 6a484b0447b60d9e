"""One attempt's own time limit (``RetryPolicy(attempt_timeout=...)``, Envoy's ``per_try_timeout``).

An attempt runs with a child of the call's budget current, so every wait and
every socket of its I/O belongs to that child. At ``attempt_timeout`` (a
timer on the one watchdog thread) the child is cancelled if the attempt is
still running: its sockets are shut from outside and its waits raise
``Cancelled``, which the attempt's exit turns into
``OperationTimeout(reason='attempt_timeout')``, retryable. An attempt that
returned in time has committed: what it opened (a stream whose first chunk
it returned) lives on under the call's budget, never cut by the attempt's
limit. An attempt that returns only after its limit (work nothing could
interrupt) is late, and late work is no success: it fails the same way.

The limit never extends the call: when the call's budget ends first, that end
is the call's (``DeadlineExceeded`` as before), not an attempt timeout.
"""

from __future__ import annotations

import math
import threading
import types
from typing import Callable, Optional, Type

from .._core import scope as _scope
from .._core.budget import Budget
from .._core.errors import Cancelled, OperationTimeout

__all__ = ["ATTEMPT_TIMEOUT", "Attempt"]

ATTEMPT_TIMEOUT = "attempt_timeout"


class Attempt:
    """The context one attempt runs in: its budget current, its limit armed.

    ``with Attempt(budget, limit, number=n, stage=s):`` runs the block with a
    child of ``budget`` current; ``limit`` None runs it under ``budget`` itself,
    as an attempt without a limit of its own always did.
    """

    def __init__(
        self, budget: Budget, limit: Optional[float], *, number: int, stage: Optional[str]
    ) -> None:
        self._call = budget
        self._limit = limit
        self._number = number
        self._stage = stage
        self._lock = threading.Lock()
        self._running = True
        self._fired = False
        self._timer: Optional[Budget] = None
        self._unregister: Callable[[], None] = _noop
        self.budget = budget
        if limit is not None:
            self.budget = budget.child(stage=stage)
            self._timer = budget.child(limit, stage=stage)
            self._unregister = self._timer.on_done(self._on_timer)
        self._scope = _scope.using_budget(self.budget)

    def __enter__(self) -> Budget:
        return self._scope.__enter__()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[types.TracebackType],
    ) -> None:
        self._scope.__exit__(exc_type, exc, tb)
        if self._timer is None:
            return
        late = self._finish()
        if isinstance(exc, Cancelled):
            if exc.budget is self.budget and exc.reason == ATTEMPT_TIMEOUT:
                raise self._error(exc.phase, exc.progress) from None
            return  # the call's end, or an outer scope's: theirs to convert
        if exc is None and late:
            raise self._error()

    def _on_timer(self, timer: Budget) -> None:
        """On the watchdog thread: the limit (or the call's budget) ended."""
        if not self._own_end(timer):
            return  # the call's budget ended: its own error says so
        with self._lock:
            if not self._running:
                return  # the attempt returned in time: what it opened lives on
            self._fired = True
        self.budget.cancel(ATTEMPT_TIMEOUT)

    def _finish(self) -> bool:
        """End the attempt; True when it reached its limit (fired, or returned late)."""
        assert self._timer is not None
        with self._lock:
            self._running = False
            fired = self._fired
        self._unregister()
        late = not fired and self._own_end(self._timer)
        if late:
            self.budget.cancel(ATTEMPT_TIMEOUT)  # anything it left bound to the attempt ends too
        return fired or late

    @staticmethod
    def _own_end(timer: Budget) -> bool:
        """True when ``timer`` ended by its own limit, not by the call's budget ending."""
        cause = timer.end_cause()
        return cause is not None and cause[0] is timer

    def _error(
        self, phase: Optional[str] = None, progress: Optional[str] = None
    ) -> OperationTimeout:
        """The attempt's failure; ``phase`` and ``progress``: where its I/O was, if it said."""
        assert self._limit is not None
        left = self._call.remaining()
        where = f" in stage {self._stage!r}" if self._stage else ""
        how = f" ({progress})" if progress else ""
        return OperationTimeout(
            f"attempt {self._number}{where} reached its attempt_timeout of {self._limit:.2f}s"
            f"{how}; {left:.2f}s of the call's budget left: it is retried if the policy allows "
            "and time remains",
            reason=ATTEMPT_TIMEOUT,
            phase=phase,
            retryable=True,
            stage=self._stage,
            attempt=self._number,
            elapsed=self.budget.elapsed(),
            remaining=None if math.isinf(left) else left,
        )


def _noop() -> None:
    return None
