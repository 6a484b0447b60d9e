"""Thread isolation: ``fn`` runs in a daemon worker thread inside the sample's deadline scope.

The caller waits on the worker with a bounded wait. At the deadline every
library wait in the worker raises ``Cancelled``, which the worker's scope turns
into ``DeadlineExceeded``; a worker stuck where the library cannot reach it
(pure CPU, a C call, ``time.sleep``, a socket read of a client the library does
not bound) gets :data:`JOIN_GRACE` more, and is then *abandoned*: reported,
counted by :func:`abandoned_workers`, logged once as a warning that names the
likely cause (``stuck.py``), and left to finish on its own (its late outcome is
discarded).
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import logging
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from .._core.budget import Budget
from .._core.scope import boundary
from .outcome import Cause, Outcome, ended, settle, stop_if_outer
from .stuck import advice

__all__ = ["JOIN_GRACE", "THREAD_PREFIX", "abandoned_workers", "run_in_thread"]

JOIN_GRACE = 0.05
"""Seconds a worker gets after the deadline to unwind before it is abandoned."""

THREAD_PREFIX = "watchdog_sync-sample"

_log = logging.getLogger("watchdog_sync")
_lock = threading.Lock()  # guards every worker's finished/abandoned flags and the count
_abandoned_alive = 0
_numbers = itertools.count(1)


def abandoned_workers() -> int:
    """How many abandoned sample worker threads are still running.

    ``run_sample(..., isolate="thread")`` abandons a worker that did not stop
    within :data:`JOIN_GRACE` seconds after its deadline (it was stuck in code
    the library cannot interrupt). The thread keeps running until ``fn``
    returns; this count goes down when it does. A harness can watch it and
    switch to ``isolate="process"`` (or stop) when it grows. Thread-safe.
    """
    with _lock:
        return _abandoned_alive


class _Worker:
    """One worker thread and the outcome it hands to the caller."""

    def __init__(
        self,
        budget: Budget,
        real_deadline: float,
        fn: Callable[..., Any],
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        wake: threading.Event,
    ) -> None:
        self._budget = budget
        self._real_deadline = real_deadline
        self._call: Callable[[], Any] = functools.partial(fn, *args, **kwargs)
        self._wake = wake
        self.done = threading.Event()
        self.finished = False
        self.abandoned = False
        self.returned = False
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.cause: Optional[Cause] = None
        self.started = time.monotonic()
        name = getattr(fn, "__qualname__", type(fn).__name__)
        self.thread = threading.Thread(
            target=self._run,
            args=(contextvars.copy_context(),),
            name=f"{THREAD_PREFIX}-{next(_numbers)} ({name})",
            daemon=True,
        )

    def _run(self, context: contextvars.Context) -> None:
        try:
            self.value = context.run(self._in_scope)
            self.returned = True
        except BaseException as exc:
            # The thread boundary (as in concurrent.futures): nothing is swallowed here; the
            # caller re-raises an outer scope's Cancelled and reports everything else.
            self.error = exc
        finally:
            cause = self._budget.end_cause()
            if cause is None and time.monotonic() > self._real_deadline:
                cause = (self._budget, "deadline_exceeded")  # a test clock that did not move
            self.cause = cause
            self._finish()

    def _in_scope(self) -> Any:
        with boundary(self._budget):
            return self._call()

    def _finish(self) -> None:
        global _abandoned_alive
        with _lock:
            self.finished = True
            was_abandoned = self.abandoned
            if was_abandoned:
                _abandoned_alive -= 1
        self.done.set()
        self._wake.set()
        if was_abandoned:
            _log.info(
                "watchdog_sync: abandoned sample worker %r ended %.2fs after it started; "
                "its outcome was discarded",
                self.thread.name,
                time.monotonic() - self.started,
            )

    def abandon(self, why: str) -> Optional[str]:
        """Mark the worker abandoned unless it has just finished; if it was, return what to
        do about it (read from where it is stuck), else None."""
        global _abandoned_alive
        with _lock:
            if self.finished:
                return None
            self.abandoned = True
            _abandoned_alive += 1
            alive = _abandoned_alive
        remedy = advice(self.thread)
        _log.warning(
            "watchdog_sync: sample worker %r was abandoned: %s; %s. It keeps running until "
            "that returns (%d abandoned worker(s) alive)",
            self.thread.name,
            why,
            remedy,
            alive,
        )
        return remedy


def run_in_thread(
    budget: Budget,
    real_deadline: float,
    fn: Callable[..., Any],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
) -> Outcome:
    """Run ``fn`` in a worker thread under ``budget``; return by ``real_deadline + JOIN_GRACE``.

    Raises the outer scope's ``Cancelled`` when an enclosing budget ended first.
    """
    wake = threading.Event()
    worker = _Worker(budget, real_deadline, fn, args, kwargs, wake)
    unregister = budget.on_done(lambda _ended: wake.set())
    remedy: Optional[str] = None
    why = "the caller was interrupted"
    try:
        worker.thread.start()
        wake.wait(max(0.0, real_deadline - time.monotonic()))
        if not worker.done.is_set():
            budget.cancel("deadline_exceeded")  # no-op if it ended already; wakes library waits
            worker.done.wait(JOIN_GRACE)
            why = f"it did not stop within {JOIN_GRACE:.2f}s after its budget ended"
    finally:
        unregister()
        if worker.thread.ident is not None and not worker.done.is_set():
            budget.cancel("cancelled")  # we leave (deadline or an interrupt): stop what we can
            remedy = worker.abandon(why)
    if remedy is not None:
        cause = budget.end_cause() or (budget, "deadline_exceeded")
        stop_if_outer(budget, cause)
        return ended(
            cause,
            note=f"worker thread {worker.thread.name!r} could not be interrupted and was "
            f"abandoned: {remedy}",
            abandoned=True,
            phase="wait",
        )
    stop_if_outer(budget, worker.cause)
    return settle(worker.cause, returned=worker.returned, value=worker.value, error=worker.error)
