"""FakeClock: a monotonic clock whose time moves only when told, for instant timing tests."""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Callable, List, Optional, Tuple

from .._core.clock import Clock

__all__ = ["FakeClock"]


class _FakeTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


_Entry = Tuple[float, int, _FakeTimer, Callable[[], None]]


class FakeClock(Clock):
    """A clock for ``Budget(clock=...)`` and ``guard_stream(clock=...)`` whose time moves
    only through :meth:`sleep` and :meth:`advance`, at once, without real waiting.

    Budgets on a FakeClock sleep by advancing it, and their ``on_done``
    callbacks run inside the ``advance()`` that reaches their deadline (or
    inside the ``cancel()`` that ends them). A thread waiting on it (a
    guarded stream's consumer waiting for its idle limit) waits until another
    thread advances the clock past its timeout; nothing else wakes it but the
    event it waits for.

    Calling the clock (``clock()``) returns :meth:`now`, so it also works where a
    plain ``time.monotonic``-like callable is expected.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._waiters_changed = threading.Condition(self._lock)
        self._waiters = 0
        self._timers: List[_Entry] = []
        self._seq = itertools.count()
        self.sleeps: List[float] = []

    def now(self) -> float:
        """The clock's time, in seconds."""
        return self._now

    def __call__(self) -> float:
        return self._now

    def sleep(self, seconds: float, wake: Optional[threading.Event] = None) -> None:
        """Record the sleep (in :attr:`sleeps`) and advance the clock by it.

        ``wake`` is accepted for the clock protocol; the sleep is over at once anyway.
        """
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move time forward and run every timer that became due, in order.

        Threads waiting on this clock (``wait``) whose timeout has passed wake up.
        """
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

    def call_at(self, when: float, callback: Callable[[], None]) -> _FakeTimer:
        """Run ``callback()`` when this clock reaches ``when``: inside the ``advance()``
        that gets there, or at once, in this call, if the clock is already there."""
        timer = _FakeTimer()
        with self._lock:
            due = when <= self._now
            if not due:
                heapq.heappush(self._timers, (when, next(self._seq), timer, callback))
        if due:
            callback()
        return timer

    def wait(self, condition: threading.Condition, timeout: float) -> None:
        """With ``condition``'s lock held, wait until it is notified or an ``advance()``
        moves the clock ``timeout`` seconds on (no real time limit)."""
        if timeout <= 0:
            return

        def wake() -> None:
            with condition:
                condition.notify_all()

        timer = _FakeTimer()
        with self._lock:  # the deadline is taken on the time a concurrent advance() sees
            heapq.heappush(self._timers, (self._now + timeout, next(self._seq), timer, wake))
            self._waiters += 1
            self._waiters_changed.notify_all()
        try:
            condition.wait()
        finally:
            timer.cancel()
            with self._lock:
                self._waiters -= 1

    def wait_for_waiters(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block (in real time, at most ``timeout`` seconds) until ``count`` threads wait
        on this clock, e.g. a stream's consumer waiting for its idle limit; then an
        ``advance()`` is sure to be measured from their wait. False if they never did.
        """
        with self._lock:
            return self._waiters_changed.wait_for(lambda: self._waiters >= count, timeout)

    def __repr__(self) -> str:
        with self._lock:
            pending = sum(1 for entry in self._timers if not entry[2].cancelled)
        return f"<FakeClock now={self._now:g} timers={pending}>"
