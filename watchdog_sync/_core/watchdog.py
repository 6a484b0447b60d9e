"""The one shared watchdog thread: a heap of deadlines.

Every Budget in the process schedules its expiry here; no timer owns a thread.
Callbacks run on the watchdog thread, outside its lock; one that raises
(even a ``BaseException`` such as :class:`Cancelled`) is logged and never
stops the thread, and no wait of the thread is longer than an hour, so a far
deadline can never overflow the OS wait. The thread is a daemon, started on first
use. A child after ``fork()`` starts with an empty heap and no thread (:mod:`.forks`): the
parent's timers stay the parent's, and the child's first timer starts its own thread.

At interpreter exit, when no thread can start (:mod:`.threads`): if the thread is
not running by then, a callback due at once runs in the calling thread, and a later
one is dropped (it could not run before the process ends).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from typing import Callable, List, Optional, Tuple

from .forks import on_fork_in_child
from .threads import threads_can_start

__all__ = ["THREAD_NAME", "TimerHandle", "call_at"]

THREAD_NAME = "watchdog_sync-watchdog"

# The longest single wait of the thread: a timer further away is waited for in
# steps (lock waits overflow past ``threading.TIMEOUT_MAX``, about 292 years).
_MAX_WAIT = 3600.0

_log = logging.getLogger("watchdog_sync")


class TimerHandle:
    """A scheduled callback; ``cancel()`` stops it from running (lazy removal)."""

    __slots__ = ("_fn", "cancelled", "when")

    def __init__(self, when: float, fn: Callable[[], None]) -> None:
        self.when = when
        self._fn: Optional[Callable[[], None]] = fn
        self.cancelled = False

    def cancel(self) -> None:
        """Takes no lock: many threads cancel at once (a hundred streams whose heads came
        together), and a lock every one of them takes became a convoy under the GIL."""
        if not self.cancelled:
            self.cancelled = True
            self._fn = None
            _WATCHDOG._cancelled += 1  # a count for compaction only: a lost one just delays it

    def _take(self) -> Optional[Callable[[], None]]:
        fn, self._fn = self._fn, None
        return fn


class _Watchdog:
    def __init__(self) -> None:
        self._empty()

    def _empty(self) -> None:
        """No timer, no callback and no thread; also a forked child's start (:mod:`.forks`):
        the parent's timers and callbacks are the parent's to run, and its lock may be held
        by a thread that does not exist in the child."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: List[Tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._cancelled = 0  # timers cancelled since the last compaction, counted without the lock
        self._thread: Optional[threading.Thread] = None

    def _running(self) -> bool:
        """With the lock held: the thread runs, started if need be; False at interpreter
        exit, when none can start. Callers look at that before they take the lock: at exit
        the thread may have been stopped holding it (a daemon thread ends where it stands
        when it next wants the GIL, as after a wait that took the lock back), and a lock
        nobody will release would hold the exiting process for ever."""
        if self._thread is not None and self._thread.is_alive():
            return True
        if not threads_can_start():
            return False
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()
        return True

    def call_at(self, when: float, fn: Callable[[], None]) -> TimerHandle:
        if isinstance(when, bool) or not isinstance(when, (int, float)) or math.isnan(when):
            raise ValueError(f"when must be a time on time.monotonic(), got {when!r}")
        handle = TimerHandle(when, fn)
        if threads_can_start():  # see _running(); at exit, the lock is not even taken
            with self._lock:
                if self._running():
                    self._compact_if_mostly_dead()
                    heapq.heappush(self._heap, (when, next(self._seq), handle))
                    if self._heap[0][2] is handle:
                        self._wake.notify()
                    return handle
        if when <= time.monotonic():
            _run_one(fn)
        return handle

    def _compact_if_mostly_dead(self) -> None:
        """With the lock held, before a push: drop the cancelled timers once they are most of
        the heap, so that they never pile up (the heap grows only by pushes)."""
        if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
            self._cancelled = 0
            self._heap = [entry for entry in self._heap if not entry[2].cancelled]
            heapq.heapify(self._heap)

    def _collect(self) -> List[Callable[[], None]]:
        """Wait until something is due; return the callbacks to run (lock held inside)."""
        with self._lock:
            while True:
                now = time.monotonic()
                due: List[Callable[[], None]] = []
                while self._heap and self._heap[0][0] <= now:
                    _, _, handle = heapq.heappop(self._heap)
                    if handle.cancelled:
                        self._cancelled = max(0, self._cancelled - 1)
                        continue
                    fn = handle._take()
                    if fn is not None:
                        due.append(fn)
                if due:
                    return due
                timeout = self._heap[0][0] - now if self._heap else _MAX_WAIT
                self._wake.wait(min(timeout, _MAX_WAIT))

    def _run(self) -> None:
        while True:
            for fn in self._collect():
                _run_one(fn)


def _run_one(fn: Callable[[], None]) -> None:
    try:
        fn()
    except BaseException:  # a Cancelled or SystemExit too: the thread serves everyone
        _log.exception("watchdog_sync: a watchdog callback raised; the thread goes on")


_WATCHDOG = _Watchdog()
on_fork_in_child(_WATCHDOG._empty)


def call_at(when: float, fn: Callable[[], None]) -> TimerHandle:
    """Run ``fn`` on the watchdog thread once ``time.monotonic()`` reaches ``when``."""
    return _WATCHDOG.call_at(when, fn)
