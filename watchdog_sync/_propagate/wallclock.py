"""A deadline that crosses machines: wall-clock epoch seconds out, a local budget in.

A monotonic clock means nothing on another machine, so a task message carries
its caller's deadline as wall-clock epoch seconds (``time.time()``), and also
the seconds the caller had left when it sent the message. The receiver trusts
the wall-clock deadline (so time spent in the queue counts against the
budget) but never gives more than the caller had at sending: a receiver whose
clock runs behind the sender's cannot stretch the budget. A receiver whose
clock runs ahead ends the work early by the difference; that is the clock-skew
assumption, documented in ``docs/howto-propagate.md``.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Optional

from .._core.durations import MAX_SECONDS

__all__ = ["SentDeadline", "parse_seconds", "time_left"]

_log = logging.getLogger("watchdog_sync")


class SentDeadline:
    """What a sender writes into a message: its deadline on the wall clock, and its time left."""

    __slots__ = ("at", "left")

    def __init__(self, at: float, left: float) -> None:
        self.at = at
        self.left = left

    @classmethod
    def from_remaining(cls, remaining: float, wall_now: float) -> SentDeadline:
        """The deadline of a budget with ``remaining`` seconds left, on a wall clock at ``wall_now``."""
        left = min(max(remaining, 0.0), MAX_SECONDS)
        return cls(wall_now + left, left)


def parse_seconds(value: Any, name: str) -> Optional[float]:
    """``value`` (a number or its text) as finite seconds, or ``None`` (logged) when malformed.

    Malformed: not a number or its text (at most 64 characters), NaN, infinite, or an int
    too large for a float (a JSON header may hold ``10**400``).
    """
    if value is None:
        return None
    number: Optional[float] = None
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
        isinstance(value, (str, bytes)) and len(value) <= 64
    ):
        try:
            number = float(value)
        except (ValueError, OverflowError):  # garbage text; an int past float's range (10**400)
            number = None
    if number is None or not math.isfinite(number):
        _log.warning(
            "ignoring the malformed %s header %s: no deadline taken from it", name, _shown(value)
        )
        return None
    return number


def _shown(value: Any) -> str:
    """At most 64 characters of ``value``'s repr; a huge int by its size (its repr may raise)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"<an int of {value.bit_length()} bits>"
    return repr(value)[:64]


def time_left(at: Optional[float], left: Optional[float], wall_now: float) -> Optional[float]:
    """Seconds the receiver may still spend: ``min(at - wall_now, left)``; ``None`` when neither.

    Negative when the wall-clock deadline has already passed (the caller gave up).
    """
    bounds = []
    if at is not None:
        bounds.append(at - wall_now)
    if left is not None:
        bounds.append(max(left, 0.0))
    return min(bounds) if bounds else None
