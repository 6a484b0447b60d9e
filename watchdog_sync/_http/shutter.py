"""The one socket shutter: how a read blocked in another thread is woken, and when it may be.

Every part that stops a read from outside (a request's connections under urllib3, an httpx
response's socket, a response head still coming, the sockets a guarded stream's reader thread
reads) holds its sockets in a :class:`SocketSet`: sockets go in as they appear, ``shut``
shuts every one held and every one put in after it, and ``release`` forgets them all, so no
shutdown ever reaches a socket that may be back in a pool (urllib3 3581). A set made before a
``fork()`` is the parent's: in the child it holds and shuts nothing, as a shutdown of an
inherited socket ends the parent's connection too.
:func:`shutdown_socket` is the shutdown itself.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Any, Dict

from .._core.forks import generation

__all__ = ["SocketSet", "shutdown_socket"]

_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset


def shutdown_socket(sock: Any) -> None:
    """Shut a (plain or TLS) socket down so a blocked read in another thread wakes.

    The connection is abandoned: its close() will also reset it (SO_LINGER 0), so a server
    blocked writing into a full window learns at once that nobody reads. A graceful close
    after the reader drained the socket leaves the server probing a zero window until the
    kernel drops the orphan (``tcp_fin_timeout``, 60 s).
    """
    if sock is None:
        return
    raw = sock if isinstance(sock, socket.socket) else getattr(sock, "socket", None)
    if not isinstance(raw, socket.socket):
        return
    with contextlib.suppress(OSError):
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    with contextlib.suppress(OSError):
        # The base method, so an SSLSocket is shut at the TCP level without TLS state changes.
        socket.socket.shutdown(raw, socket.SHUT_RDWR)


class SocketSet:
    """Sockets one operation reads, each under a key (the socket's or its owner's ``id``).

    Thread-safe: ``shut`` usually runs on the watchdog thread while the operation reads.
    ``fired``: ``shut`` ran (the operation was stopped from outside).
    """

    __slots__ = ("_generation", "_lock", "_released", "_sockets", "fired")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: Dict[int, Any] = {}
        self._released = False
        self._generation = generation()  # the process it was made in (see the module's doc)
        self.fired = False

    def put(self, key: int, sock: Any) -> None:
        """Hold ``sock`` (replacing what ``key`` held); shut it at once if already fired.
        Nothing in a forked child of the process the set was made in."""
        if self._generation != generation():
            return  # its lock may even be held by a thread the child does not have
        with self._lock:
            if self._released:
                return
            self._sockets[key] = sock
            if self.fired:
                shutdown_socket(sock)

    def drop(self, key: int) -> None:
        """Forget what ``key`` held (it goes back to a pool, or is not ours to shut)."""
        with self._lock:
            self._sockets.pop(key, None)

    def clear(self) -> None:
        """Forget every socket held; later ones are still held (and shut if fired)."""
        with self._lock:
            self._sockets.clear()

    def shut(self) -> bool:
        """Shut every socket held and every one put after this; True if one was shut now.
        Nothing in a forked child of the process the set was made in."""
        if self._generation != generation():
            return False
        with self._lock:
            if self._released:
                return False
            self.fired = True
            for sock in self._sockets.values():
                shutdown_socket(sock)
            return bool(self._sockets)

    def release(self) -> None:
        """Forget every socket and hold no more: nothing is shut from here on."""
        with self._lock:
            self._released = True
            self._sockets.clear()
