"""instrument(idle_timeout=..., first_event_timeout=...): the stream limits in force, each the
tightest that any live ``instrument()`` call sets, read per request by the urllib3 and httpx
patches.
"""

from __future__ import annotations

from typing import Any, List, Optional

from .._core.config import AS_IDLE, instrument_idle
from .._core.tightest import Tightest
from .limits import StreamLimits

__all__ = ["add_instrument_limits", "instrument_limits", "limits_in_force"]


def instrument_limits(idle_timeout: Any, first_event_timeout: Any) -> Optional[StreamLimits]:
    """One ``instrument()`` call's stream limits; ``None`` when neither is on.

    ``first_event_timeout`` left out (``AS_IDLE``) is the idle limit; ``None``,
    ``inf`` and ``<= 0`` turn either off.

    Raises:
        TypeError, ValueError: a bad duration, or a malformed environment variable.
    """
    idle = instrument_idle(idle_timeout, "idle_timeout")
    first = instrument_idle(first_event_timeout, "first_event_timeout")
    named = first is not AS_IDLE
    if not named:
        first = idle
    if idle is None and first is None:
        return None
    return StreamLimits(idle, first, named)


def _tightest(live: List[StreamLimits]) -> StreamLimits:
    idles = [limits.idle for limits in live if limits.idle is not None]
    firsts = [limits.first for limits in live if limits.first is not None]
    return StreamLimits(
        min(idles) if idles else None,
        min(firsts) if firsts else None,
        any(limits.first_named for limits in live),
    )


_LIVE: Tightest[StreamLimits] = Tightest(_tightest)
add_instrument_limits = _LIVE.add  # returns the function that takes them out again


def limits_in_force() -> Optional[StreamLimits]:
    """The stream limits every event stream read through urllib3 or httpx obeys now."""
    return _LIVE.current
