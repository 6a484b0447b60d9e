"""A proxy's CONNECT reply, read within one deadline.

http.client reads the reply to ``CONNECT`` line by line, each read waiting up to the
socket's timeout, so a proxy that sends one header line every half second keeps the
connect phase alive for ever: every line resets the timeout. :class:`TunnelView` is the
socket as http.client's tunnel code sees it: the same socket for sending, and reads that
all end by one deadline, the connect timeout counted from the start of the tunnel.
"""

from __future__ import annotations

import contextlib
import io
import socket
import time
from typing import Any, Optional, Tuple

from urllib3.exceptions import ConnectTimeoutError

__all__ = ["TunnelView", "timeout_of"]


def timeout_of(sock: Any) -> Tuple[bool, Optional[float]]:
    """``(True, sock's timeout)``, or ``(False, None)`` when ``sock`` cannot say.

    urllib3's pyopenssl ``WrappedSocket`` has ``settimeout`` but no ``gettimeout``: its
    timeout is that of the raw socket it wraps (``.socket``, as ``shutdown_socket`` reads).
    """
    getter = getattr(sock, "gettimeout", None)
    if getter is None:
        getter = getattr(getattr(sock, "socket", None), "gettimeout", None)
    if getter is None:
        return False, None
    return True, getter()


class _DeadlineReads(io.RawIOBase):
    """Reads from ``sock``, each waiting at most until ``deadline`` (``time.monotonic``)."""

    def __init__(self, sock: Any, deadline: float, timeout: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline
        self._timeout = timeout

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left > 0:
            self._sock.settimeout(left)
            with contextlib.suppress(socket.timeout):
                return int(self._sock.recv_into(buffer))
        # urllib3's own connect timeout, so that requests raises ConnectTimeout
        raise ConnectTimeoutError(
            f"the proxy did not finish its reply to CONNECT within {self._timeout:.2f}s "
            "(the connect timeout)"
        )


class TunnelView:
    """``sock`` for http.client's ``_tunnel``: sends pass through, reads end by a deadline.

    ``restore()`` puts back the socket's own timeout once the tunnel is up.
    """

    def __init__(self, sock: Any, timeout: float) -> None:
        self._sock = sock
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._known, self._own_timeout = timeout_of(sock)

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        if mode != "rb":
            raise ValueError(f"a tunnel's reply is only read (mode 'rb'), not {mode!r}")
        return io.BufferedReader(_DeadlineReads(self._sock, self._deadline, self._timeout))

    def restore(self) -> None:
        if not self._known:
            return  # a socket-like object that did not say its timeout: left as the reads set it
        with contextlib.suppress(OSError):  # closed after a refused tunnel: nothing to restore
            self._sock.settimeout(self._own_timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)
