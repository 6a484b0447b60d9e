"""Validation of durations at the edge: seconds as float or timedelta, never bool or NaN.

The one rule for "off" (documented in the reference, "Limits and off"):

* ``None`` (or ``math.inf``) turns a limit off: no limit of its own, the
  budget of the call or scope still applies.
* Idle limits (``idle_timeout``, ``first_event_timeout``,
  ``first_item_timeout``) also treat any value ``<= 0`` as off: the seed's rule
  (:func:`idle_limit`).
* Every other limit (a budget's ``timeout``, ``connect_timeout``, backoff
  waits) rejects negatives with a ``ValueError`` naming the parameter.

A finite value above :data:`MAX_SECONDS` (7 days) is clamped to it: a week is
"forever" for one I/O call, and every operating-system wait stays in range
(``poll()`` overflows past 24.8 days, ``time_t`` waits past 292 years).
"""

from __future__ import annotations

import datetime
import math
from typing import Optional, Union

__all__ = ["MAX_SECONDS", "Duration", "idle_limit", "off", "validate_duration"]

Duration = Union[float, int, datetime.timedelta]

MAX_SECONDS = 7 * 24 * 3600.0


def validate_duration(
    value: Optional[Duration], name: str, *, allow_none: bool = True, allow_zero: bool = True
) -> Optional[float]:
    """Return ``value`` in seconds as a float, or ``None`` for "no limit".

    ``math.inf`` also means no limit; a finite value above :data:`MAX_SECONDS`
    is clamped to it. Raises ``TypeError`` for bools and non-numbers,
    ``ValueError`` for NaN, negatives (and zero unless allowed) and integers
    too large for a float, each message naming the parameter.
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
    try:
        seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)
    except OverflowError:
        raise ValueError(
            f"{name} is too large to be a number of seconds; pass None (or math.inf) for "
            "no limit, or a value up to 7 days"
        ) from None
    if math.isnan(seconds):
        raise ValueError(f"{name} must be a number of seconds, not NaN")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} seconds, got {seconds!r}")
    if math.isinf(seconds):
        if allow_none:
            return None
        raise ValueError(f"{name} must be a finite number of seconds, got inf")
    return min(seconds, MAX_SECONDS)


def idle_limit(value: Optional[Duration], name: str) -> Optional[float]:
    """An idle limit in seconds, or ``None`` when it is off (``None``, ``<= 0`` or ``inf``)."""
    if isinstance(value, datetime.timedelta) and value <= datetime.timedelta(0):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
        return None
    return validate_duration(value, name)


def off(seconds: Optional[float]) -> float:
    """A resolved limit passed on to another entry point: ``None`` (off) becomes ``inf``.

    ``inf`` means "off" to every entry point, so no old meaning of ``None`` applies.
    """
    return math.inf if seconds is None else seconds
