"""The setting in force among the live ``instrument()`` calls: the tightest of their values.

Each call adds its value and gets back the function that takes it out again
(idempotent); :attr:`Tightest.current` is recomputed under a lock at each
change and read per request without one (a plain attribute).
"""

from __future__ import annotations

import threading
from typing import Callable, Generic, List, Optional, TypeVar

__all__ = ["Tightest"]

T = TypeVar("T")


class Tightest(Generic[T]):
    """The live values of one setting, and ``current``: ``combine`` of them (``None``: none live)."""

    def __init__(self, combine: Callable[[List[T]], T]) -> None:
        self._combine = combine
        self._values: List[T] = []
        self._lock = threading.Lock()
        self.current: Optional[T] = None

    def add(self, value: T) -> Callable[[], None]:
        """Put ``value`` among the live ones; returns the function that takes it out."""
        with self._lock:
            self._values.append(value)
            self.current = self._combine(self._values)
        taken = [False]

        def remove() -> None:
            with self._lock:
                if taken[0]:
                    return
                taken[0] = True
                self._values.remove(value)
                self.current = self._combine(self._values) if self._values else None

        return remove
