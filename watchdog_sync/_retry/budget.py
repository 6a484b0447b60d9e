"""RetryBudget: one thread-safe cap on retries shared by many callers, against retry storms.

Like the retry budgets of gRPC and Finagle: every attempt deposits, every
retry withdraws, and a retry is allowed only while, over a sliding window,

    retries <= ratio * attempts + min_retries_per_second * window

so when a service fails for everybody, retries stay a small share of the
traffic instead of multiplying it by ``max_attempts``.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Deque, List

from .._core.clock import ClockLike, as_clock
from .._core.durations import Duration, validate_duration

__all__ = ["RetryBudget"]

_SLOTS = 10  # the window is counted in this many time slots


class RetryBudget:
    """A retry allowance shared by every call whose :class:`RetryPolicy` holds it.

    Args:
        ratio: retries allowed per attempt over the window (``0.2``: at most
            one retry for every five attempts, retries included).
        min_retries_per_second: a floor, so that callers with little traffic
            can still retry: ``min_retries_per_second * window`` retries are
            always allowed per window.
        window: seconds of history that count (a sliding window, in ten slots).
        clock: the monotonic clock (injectable for tests).

    Thread-safe. ``retry_call`` deposits before every attempt and withdraws
    before every retry; when the withdrawal is refused the call fails at once
    with ``RetryExhausted(reason='retry_budget_exhausted')``. The budget itself
    never sleeps, so it has nothing to time out or cancel.
    """

    __slots__ = (
        "_clock",
        "_floor",
        "_lock",
        "_slot_width",
        "_slots",
        "min_retries_per_second",
        "ratio",
        "window",
    )

    def __init__(
        self,
        ratio: float = 0.2,
        min_retries_per_second: float = 10.0,
        *,
        window: Duration = 10.0,
        clock: ClockLike = time.monotonic,
    ) -> None:
        self.ratio = _non_negative(ratio, "ratio")
        self.min_retries_per_second = _non_negative(
            min_retries_per_second, "min_retries_per_second"
        )
        seconds = validate_duration(window, "window", allow_none=False, allow_zero=False)
        assert seconds is not None
        now = as_clock(clock).now
        self.window = seconds
        self._floor = self.min_retries_per_second * seconds
        self._slot_width = seconds / _SLOTS
        self._clock = now
        self._lock = threading.Lock()
        # Each slot: [slot number, attempts, retries]; at most _SLOTS of them.
        self._slots: Deque[List[int]] = collections.deque()

    def deposit(self) -> None:
        """Record one attempt (first tries and retries alike)."""
        with self._lock:
            self._current()[1] += 1

    def try_withdraw(self) -> bool:
        """Take one retry if the budget allows it now; ``False`` (and nothing taken) if not."""
        with self._lock:
            slot = self._current()
            attempts = sum(s[1] for s in self._slots)
            retries = sum(s[2] for s in self._slots)
            if retries + 1 > self.ratio * attempts + self._floor:
                return False
            slot[2] += 1
            return True

    def _current(self) -> List[int]:
        number = math.floor(self._clock() / self._slot_width)
        while self._slots and self._slots[0][0] <= number - _SLOTS:
            self._slots.popleft()
        if not self._slots or self._slots[-1][0] != number:
            self._slots.append([number, 0, 0])
        return self._slots[-1]

    def __repr__(self) -> str:
        with self._lock:
            attempts = sum(s[1] for s in self._slots)
            retries = sum(s[2] for s in self._slots)
        return (
            f"RetryBudget(ratio={self.ratio!r}, min_retries_per_second="
            f"{self.min_retries_per_second!r}, window={self.window!r}; "
            f"recent attempts={attempts}, retries={retries})"
        )


def _non_negative(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)
