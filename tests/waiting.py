"""Bounded polling for tests that wait on another thread or the server side."""

from __future__ import annotations

import time
from typing import Callable


def wait_for(predicate: Callable[[], bool], limit: float = 5.0) -> bool:
    """Poll ``predicate`` every 10 ms until it is true (True) or ``limit`` seconds pass (False)."""
    give_up = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.01)
    return True
