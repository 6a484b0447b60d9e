"""The sockets a guarded stream's reader thread is blocked on, so the stream can shut them.

:func:`guard_stream` runs its source in a reader thread whose context holds a
:class:`ReaderSockets` (``READER_SOCKETS``). A read through a connection that
:func:`instrument` patched registers its socket there for the length of the
read; when the stream ends early (idle timeout, the budget's end, ``close()``)
it shuts every registered socket, which wakes the blocked ``recv``: no reader
thread is left behind, with or without an ``on_timeout`` hook.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
from typing import Any, Callable, Optional

from .._core.budget import _noop
from .._core.forks import process_local
from .shutter import SocketSet

__all__ = ["READER_SOCKETS", "ReaderSockets", "reading"]


class ReaderSockets:
    """Sockets being read by one reader thread; :meth:`shut` shuts them, and later ones at once."""

    def __init__(self) -> None:
        self._sockets = SocketSet()
        self._next = itertools.count()

    def add(self, sock: Any) -> Callable[[], None]:
        """Register ``sock`` for one read; returns the function that unregisters it."""
        key = next(self._next)  # one key per read: the same socket may be read twice at once
        self._sockets.put(key, sock)
        return functools.partial(self._sockets.drop, key)

    def shut(self) -> bool:
        """Shut every registered socket (and any registered later); True if one was shut."""
        return self._sockets.shut()


# A child forked by a reader thread's source is no reader of its parent's (:mod:`.forks`).
READER_SOCKETS: contextvars.ContextVar[Optional[ReaderSockets]] = process_local(
    contextvars.ContextVar("watchdog_sync_reader_sockets", default=None)
)


def reading(sock: Any) -> Callable[[], None]:
    """Register ``sock`` with the current reader thread's :class:`ReaderSockets`, if any."""
    if sock is None:
        return _noop
    readers = READER_SOCKETS.get()
    if readers is None:
        return _noop
    return readers.add(sock)
