"""Validation of durations at the edge: seconds as float or timedelta, never bool or NaN."""

from __future__ import annotations

import datetime
import math
from typing import Optional, Union

__all__ = ["Duration", "validate_duration"]

Duration = Union[float, int, datetime.timedelta]


def validate_duration(
    value: Optional[Duration], name: str, *, allow_none: bool = True, allow_zero: bool = True
) -> Optional[float]:
    """Return ``value`` in seconds as a float, or ``None`` for "no limit".

    ``math.inf`` also means no limit. Raises ``TypeError`` for bools and
    non-numbers, ``ValueError`` for NaN, negatives (and zero unless allowed),
    each message naming the parameter.
    """
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must be a number of seconds, not None")
    if isinstance(value, bool) or not isinstance(value, (int, float, datetime.timedelta)):
        raise TypeError(
            f"{name} must be a number of seconds (int, float or timedelta), "
            f"not {type(value).__name__}"
        )
    seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)
    if math.isnan(seconds):
        raise ValueError(f"{name} must be a number of seconds, not NaN")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} seconds, got {seconds!r}")
    if math.isinf(seconds):
        if allow_none:
            return None
        raise ValueError(f"{name} must be a finite number of seconds, got inf")
    return seconds
