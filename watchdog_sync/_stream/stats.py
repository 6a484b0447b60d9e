"""StreamStats: what a guarded stream did so far."""

from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["StreamStats"]


@dataclasses.dataclass(frozen=True)
class StreamStats:
    """What a guarded stream did so far.

    Attributes:
        items: items delivered to the consumer.
        first_item_after: seconds from the stream's creation to the source's
            first item, or ``None`` if none came yet.
        lifetime: seconds from creation to the end (or to now while running).
        ended_by: ``'completed'``, ``'idle_timeout'``, ``'deadline'``,
            ``'cancelled'``, ``'error'``, ``'closed'``, or ``None`` while running.
    """

    items: int
    first_item_after: Optional[float]
    lifetime: float
    ended_by: Optional[str]
