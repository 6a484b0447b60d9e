"""Reversible patches of a library's classes: one set per library, installed and removed whole.

A :class:`PatchSet` replaces methods on classes with wrappers and, on
:meth:`~PatchSet.remove`, puts back exactly what was there (the class's own
attribute, or none when the method was inherited). A wrapper that somebody
else has wrapped over in the meantime cannot be taken out without removing
their wrapper too: it stays, and turns into a plain pass-through, since every
wrapper asks :attr:`PatchSet.active` first.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Callable, List, Tuple

__all__ = ["PatchSet"]

_MISSING: Any = object()

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


class PatchSet:
    """Wrappers for one library, with what they replaced, and the guards they made."""

    def __init__(self, library: str) -> None:
        self.library = library
        self.active = False  # read by every wrapper, without a lock: a plain attribute
        self._patches: List[Tuple[type, str, Any, Callable[..., Any]]] = []
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()
        self._live_lock = threading.Lock()

    def wrap(self, owner: type, name: str, make: Wrap) -> None:
        """Plan to replace ``owner.name`` by ``make(original)`` (applied by :meth:`install`)."""
        original = getattr(owner, name)
        wrapper = functools.wraps(original)(make(original))
        self._patches.append((owner, name, owner.__dict__.get(name, _MISSING), wrapper))

    def install(self) -> None:
        """Apply every planned patch, in order (plan the entry point last)."""
        self.active = True
        for owner, name, _, wrapper in self._patches:
            setattr(owner, name, wrapper)

    def remove(self) -> None:
        """Put back what each patch replaced, in reverse order, and drop the live guards."""
        self.active = False
        for owner, name, before, wrapper in reversed(self._patches):
            if owner.__dict__.get(name) is not wrapper:
                continue  # wrapped over by someone else: ours stays, as a pass-through
            if before is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, before)
        with self._live_lock:
            live = list(self._live)
            self._live.clear()
        for guard in live:
            guard.abandon()

    def track(self, guard: Any) -> None:
        """Remember a guard made by a wrapper, so :meth:`remove` can stop it guarding."""
        with self._live_lock:
            self._live.add(guard)

    def targets(self) -> List[Tuple[type, str]]:
        """The (class, attribute) pairs this set patches."""
        return [(owner, name) for owner, name, _, _ in self._patches]
