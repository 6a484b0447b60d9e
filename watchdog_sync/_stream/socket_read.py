"""One read of an event stream's socket in its consumer's thread, waiting at most a given time.

* A plain TCP socket on Linux: one blocking ``recv()`` under the kernel's receive timeout
  (``SO_RCVTIMEO``), then, only if that timed out, a ``poll()`` for the rest; when the
  event comes first the read is one system call, which lets the GIL go once. The kernel's
  timer runs up to an eighth of the wait late, plus a tick: the kernel timeout is 7/8 of
  the wait less :data:`KERNEL_MARGIN`, set to 3/4 of that and kept while later waits stay
  between it and twice it (a budget's time left shrinks read by read).
* Otherwise (TLS, whose decrypted bytes a kernel timeout cannot see; other systems):
  ``poll()``, then a non-blocking ``recv()``.

A signal whose handler returns restarts the kernel's wait (PEP 475), so an idle limit can
end up to 7/8 of itself late per signal; the budget's end still shuts the socket from
outside on time.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import ssl
import struct
import sys
import time
from typing import Any, Callable, List, Optional

__all__ = ["KERNEL_MARGIN", "READ_SIZE", "SocketRead"]

READ_SIZE = 65536  # the most one read takes: what a read's events can add to the buffer
# What a non-blocking read raises when nothing can be taken yet (TLS: no whole record).
WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
KERNEL_MARGIN = 0.025  # more than two ticks at 100 a second (Linux's coarsest)
_KERNEL_TIMEOUT = sys.platform.startswith("linux") and hasattr(socket, "SO_RCVTIMEO")
_NONE = math.inf  # the kernel's receive timeout when unset: none
_KEPT = 0.75  # the share of a read's wait its kernel timeout is set to


class SocketRead:
    """Reads of one socket by its consumer: :meth:`read` waits at most the time given.

    Made for ``None`` too (a body the stack had read whole): then nothing is ever read.
    """

    __slots__ = ("_kernel", "_poll", "_set", "_sock", "_tls")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._kernel = _KERNEL_TIMEOUT and type(sock) is socket.socket
        self._poll: Optional[Callable[[Optional[int]], List[Any]]] = None  # None: select()
        if sock is not None and hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)  # readable: data, its end, a shutdown
            self._poll = poller.poll
        self._set = _NONE  # the kernel's receive timeout as last set

    def own(self) -> None:
        """The consumer reads the socket from now on: blocking, where its kernel times out."""
        if self._kernel:
            self._sock.settimeout(None)

    def forget(self) -> None:
        """Before the connection is pooled or closed: no kernel receive timeout is left."""
        if self._set != _NONE:
            with contextlib.suppress(OSError):  # a socket closed already is not pooled
                self._set_kernel_timeout(_NONE)

    def read(self, timeout: Optional[float]) -> Optional[bytes]:
        """One ``recv()``, waiting at most ``timeout`` seconds (``None``: no limit) for bytes:
        ``b""`` at the socket's end, ``None`` when nothing came in time (over TLS, or no
        whole record yet).

        Raises the socket's ``OSError``.
        """
        if not self._kernel or (timeout is not None and timeout <= 2 * KERNEL_MARGIN):
            return self._polled(timeout)
        bulk = _NONE if timeout is None else (timeout - KERNEL_MARGIN) * 0.875
        if not bulk / 2 <= self._set <= bulk:  # a shorter one wakes early, to no harm
            self._set_kernel_timeout(bulk * _KEPT)
        started = time.monotonic()
        try:
            return self._sock.recv(READ_SIZE)  # type: ignore[no-any-return]
        except BlockingIOError:  # the kernel's timeout
            if timeout is None:
                return None
        return self._polled(max(0.0, timeout - (time.monotonic() - started)))

    def _polled(self, timeout: Optional[float]) -> Optional[bytes]:
        """``poll()`` to the millisecond (rounded up: one wake-up, within one past the
        limit), then ``recv()``, unless TLS holds decrypted bytes already."""
        sock = self._sock
        if not (self._tls and sock.pending()):
            poll = self._poll
            if poll is not None:
                if not poll(None if timeout is None else math.ceil(timeout * 1e3)):
                    return None
            elif not select.select([sock], [], [], timeout)[0]:
                return None
        try:
            return sock.recv(READ_SIZE)  # type: ignore[no-any-return]
        except WOULD_BLOCK:  # TLS: not a whole record yet
            return None

    def _set_kernel_timeout(self, seconds: float) -> None:
        whole = 0 if seconds == _NONE else int(seconds)
        micro = 0 if seconds == _NONE else max(1, int((seconds - whole) * 1e6))
        self._sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", whole, micro)
        )
        self._set = seconds
