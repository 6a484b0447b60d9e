"""A stream's idle limits, resolved once at the public edge into one frozen value.

:func:`stream_limits` reads every spelling the contract allows (a float or ``timedelta``,
``None`` / ``inf`` / ``<= 0`` for off, the markers for "as the idle limit" and "the
environment's default") into a :class:`StreamLimits`; nothing below reads a marker again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from .._core.config import AS_IDLE, ENV_IDLE_TIMEOUT, first_limit, idle_setting
from .._core.errors import StreamIdleTimeout

__all__ = ["StreamLimits", "first_event_error", "stream_limits"]


@dataclasses.dataclass(frozen=True)
class StreamLimits:
    """Seconds allowed between data events (``idle``) and until the first one (``first``);
    ``None``: off. ``first_named``: the first limit was given by its own name, so a timeout
    before the first event names that setting."""

    idle: Optional[float] = None
    first: Optional[float] = None
    first_named: bool = False


def stream_limits(idle_timeout: Any, first_timeout: Any, first_name: str) -> StreamLimits:
    """Resolve an entry point's two limits (``first_name``: its first-event argument's name).

    Raises:
        TypeError, ValueError: a bad duration (the message names the argument).
    """
    idle = idle_setting(idle_timeout)
    first = first_limit(first_timeout, idle, first_name)
    named = first_timeout is not AS_IDLE and first_timeout is not None
    return StreamLimits(idle, first, named)


def first_event_error(
    first: float, sends: int, lifetime: float, *, phase: Optional[str] = None
) -> StreamIdleTimeout:
    """What a request's stream silent ``first`` seconds before its first event raises, after
    ``sends`` sends (``lifetime``: seconds since the last one; ``phase``: where the request
    was, connecting, waiting for the head, ..., when known)."""
    times = "once" if sends == 1 else f"{sends} times"
    return StreamIdleTimeout(
        f"no first event within {first:g}s of sending the request (sent {times}); "
        "if the server is legitimately this slow, raise first_event_timeout= (or "
        f"idle_timeout=, or the {ENV_IDLE_TIMEOUT} environment variable)",
        idle_timeout=first,
        chunks_received=0,
        stream_lifetime=lifetime,
        stage="http",
        elapsed=lifetime,
        phase=phase,
    )
