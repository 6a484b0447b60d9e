"""FakeClock: a monotonic clock whose time moves only when told, for instant timing tests."""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Callable, List, Tuple

__all__ = ["FakeClock"]


class _FakeTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock for ``Budget(clock=...)``: ``sleep()`` and ``advance()`` move time at once.

    Budgets on a FakeClock sleep by advancing it, and their ``on_done``
    callbacks run inside ``advance()`` when their deadline is reached.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._timers: List[Tuple[float, int, _FakeTimer, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.sleeps: List[float] = []

    def __call__(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        """Record the sleep and advance the clock by it."""
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move time forward and run every timer that became due, in order."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go back")
        with self._lock:
            self._now += seconds
            due = []
            while self._timers and self._timers[0][0] <= self._now:
                due.append(heapq.heappop(self._timers))
        for _, _, timer, fn in due:
            if not timer.cancelled:
                fn()

    def call_at(self, when: float, fn: Callable[[], None]) -> _FakeTimer:
        """Schedule ``fn`` for when this clock reaches ``when``."""
        timer = _FakeTimer()
        with self._lock:
            heapq.heappush(self._timers, (when, next(self._seq), timer, fn))
        return timer
