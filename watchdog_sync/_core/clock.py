"""The clock protocol: what budgets and guarded streams read time from, wait on and schedule on.

Two clocks implement it. :class:`SystemClock` is real time (``time.monotonic``
by default, or any callable returning monotonic seconds): it waits for real
and schedules on the one watchdog thread. ``watchdog_sync.testing.FakeClock``
is test time: it moves only when a test says so, and everything that waits on
it wakes when the time it waits for is reached.

``Budget(clock=...)`` and ``guard_stream(clock=...)`` take either a
:class:`Clock` or a plain callable such as ``time.monotonic``; :func:`as_clock`
turns the second kind into a :class:`SystemClock`.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol, Union, runtime_checkable

from . import watchdog as _watchdog

__all__ = ["MONOTONIC", "Clock", "ClockLike", "SystemClock", "Timer", "as_clock"]


class Timer(Protocol):
    """A callback scheduled by :meth:`Clock.call_at`."""

    def cancel(self) -> None:
        """Stop the callback from running; harmless once it ran."""


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock that can also wait and schedule callbacks.

    ``sleep`` is the caller's own pause (a test clock jumps ahead by it);
    ``wait`` waits for another thread (a test clock waits until a test moves
    time past the timeout, or somebody notifies the condition).
    """

    def now(self) -> float:
        """The current time, in seconds; never goes back."""

    def sleep(self, seconds: float, wake: Optional[threading.Event] = None) -> None:
        """Let ``seconds`` pass for the caller; return early once ``wake`` is set."""

    def wait(self, condition: threading.Condition, timeout: float) -> None:
        """With ``condition``'s lock held: wait until notified or ``timeout`` seconds pass."""

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback()`` once this clock reaches ``when`` (at once if it has)."""


ClockLike = Union[Clock, Callable[[], float]]


class SystemClock:
    """Real time, read from ``read`` (``time.monotonic`` by default).

    ``sleep`` and ``wait`` block for real; ``call_at`` runs the callback on the
    one shared watchdog thread (never in the caller), so it may be called with
    a lock held that the callback takes.
    """

    __slots__ = ("now",)

    def __init__(self, read: Callable[[], float] = time.monotonic) -> None:
        self.now: Callable[[], float] = read

    def sleep(self, seconds: float, wake: Optional[threading.Event] = None) -> None:
        if wake is None:
            time.sleep(seconds)
        else:
            wake.wait(seconds)

    def wait(self, condition: threading.Condition, timeout: float) -> None:
        condition.wait(min(timeout, threading.TIMEOUT_MAX))

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        if self.now is not time.monotonic:  # another base: the same distance on the real clock
            when = time.monotonic() + (when - self.now())
        return _watchdog.call_at(when, callback)

    def __repr__(self) -> str:
        return f"<SystemClock {self.now!r}>"


MONOTONIC = SystemClock()


def as_clock(clock: ClockLike, name: str = "clock") -> Clock:
    """``clock`` as a :class:`Clock`: itself, or a plain callable wrapped in a SystemClock.

    Raises:
        TypeError: ``clock`` is neither (the message names the parameter).
    """
    if clock is time.monotonic:
        return MONOTONIC
    if isinstance(clock, Clock):
        return clock
    if callable(clock):
        return SystemClock(clock)
    raise TypeError(
        f"{name} must be a callable returning monotonic seconds (such as time.monotonic) or a "
        f"clock with now(), sleep(), wait() and call_at() (such as FakeClock), "
        f"not {type(clock).__name__}"
    )
