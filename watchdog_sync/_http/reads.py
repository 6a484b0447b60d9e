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
import threading
from typing import Any, Callable, Dict, Optional

from .._core.budget import _noop
from .guard import shutdown_socket

__all__ = ["READER_SOCKETS", "ReaderSockets", "reading"]


class ReaderSockets:
    """Sockets being read by one reader thread; :meth:`shut` shuts them, and later ones at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: Dict[int, Any] = {}
        self._next = 0
        self._shut = False

    def add(self, sock: Any) -> Callable[[], None]:
        """Register ``sock`` for one read; returns the function that unregisters it."""
        with self._lock:
            if self._shut:
                shut_now = True
            else:
                shut_now = False
                self._next += 1
                key = self._next
                self._sockets[key] = sock
        if shut_now:
            shutdown_socket(sock)
            return _noop

        def remove() -> None:
            with self._lock:
                self._sockets.pop(key, None)

        return remove

    def shut(self) -> bool:
        """Shut every registered socket (and any registered later); True if one was shut."""
        with self._lock:
            self._shut = True
            sockets, self._sockets = list(self._sockets.values()), {}
        for sock in sockets:
            shutdown_socket(sock)
        return bool(sockets)


READER_SOCKETS: contextvars.ContextVar[Optional[ReaderSockets]] = contextvars.ContextVar(
    "watchdog_sync_reader_sockets", default=None
)


def reading(sock: Any) -> Callable[[], None]:
    """Register ``sock`` with the current reader thread's :class:`ReaderSockets`, if any."""
    if sock is None:
        return _noop
    readers = READER_SOCKETS.get()
    if readers is None:
        return _noop
    return readers.add(sock)
