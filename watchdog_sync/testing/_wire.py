"""Bytes on the wire for the FaultGateway: one client connection, its requests and responses.

Every wait here is a short bounded step (``TICK``) that checks the gateway's
stop event, so a held connection notices both a client that went away and a
gateway that is stopping within a tick.
"""

from __future__ import annotations

import contextlib
import http
import select
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

__all__ = [
    "TICK",
    "phrase",
    "BadRequest",
    "ClientGone",
    "Connection",
    "EndExchange",
    "Exchange",
    "Request",
    "Stopping",
]

TICK = 0.05
"""The longest single wait on a socket or the stop event, in seconds."""

_MAX_HEAD_BYTES = 64 * 1024
_RECV_BYTES = 64 * 1024
_SEND_BYTES = 16 * 1024
_LINGER_SECONDS = 0.5
_LINGER_MAX_BYTES = 4 * 1024 * 1024
_SERVER = "watchdog-sync-fault-gateway"


class EndExchange(Exception):
    """The exchange cannot go on: the connection must be closed."""


class ClientGone(EndExchange):
    """The client closed or reset the connection."""


class Stopping(EndExchange):
    """The gateway is stopping."""


class BadRequest(EndExchange):
    """The request cannot be served; answer ``status`` with ``message`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Idle(EndExchange):
    """No request began before the request timeout on a kept-alive connection."""


@dataclass(frozen=True)
class Request:
    """One parsed HTTP request."""

    method: str
    target: str
    version: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        """Whether the client allows another request on this connection."""
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"


class Connection:
    """One accepted client socket, every operation bounded by ``TICK`` and the stop event."""

    def __init__(self, sock: socket.socket, stop: threading.Event) -> None:
        self.sock = sock
        self._stop = stop
        self._buffer = bytearray()
        self.closed = False
        sock.settimeout(TICK)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise Stopping("the gateway is stopping")

    def handshake(self, context: ssl.SSLContext, timeout: float) -> None:
        """Wrap the socket in TLS and finish the handshake within ``timeout`` seconds."""
        tls = context.wrap_socket(self.sock, server_side=True, do_handshake_on_connect=False)
        self.sock = tls
        tls.setblocking(False)
        give_up = time.monotonic() + timeout
        while True:
            self._check_stop()
            if time.monotonic() > give_up:
                raise ClientGone("TLS handshake timed out")
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                select.select([tls], [], [], TICK)
            except ssl.SSLWantWriteError:
                select.select([], [tls], [], TICK)
            except OSError as exc:
                raise ClientGone(f"TLS handshake failed: {exc}") from exc
        tls.settimeout(TICK)

    def _recv(self) -> bytes:
        """Up to ``_RECV_BYTES``; b"" if nothing arrived within a tick. ClientGone at EOF."""
        self._check_stop()
        try:
            data = self.sock.recv(_RECV_BYTES)
        except (socket.timeout, ssl.SSLWantReadError):
            return b""
        except OSError as exc:
            raise ClientGone(str(exc)) from exc
        if not data:
            raise ClientGone("the client closed the connection")
        return data

    def read_request(self, timeout: float, max_body: int, *, first: bool) -> Request:
        """Read one request (head and Content-Length body) within ``timeout`` seconds.

        Raises ``ClientGone`` if the client closes before a request begins,
        ``BadRequest`` for a malformed, oversized or too slow request.
        """
        give_up = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._buffer and len(self._buffer) <= _MAX_HEAD_BYTES:
            self._buffer += self._read_until(give_up, started=bool(self._buffer) or first)
        end = self._buffer.find(b"\r\n\r\n")
        if not 0 <= end <= _MAX_HEAD_BYTES:
            raise BadRequest(431, "request head larger than 64 KiB")
        head, _, rest = bytes(self._buffer).partition(b"\r\n\r\n")
        self._buffer = bytearray(rest)
        method, target, version, headers = _parse_head(head)
        if "transfer-encoding" in headers:
            raise BadRequest(411, "chunked request bodies are not supported; send Content-Length")
        length_text = headers.get("content-length", "0").strip()
        if not length_text.isdigit():
            raise BadRequest(400, "Content-Length is not a number")
        length = int(length_text)
        if length > max_body:
            raise BadRequest(413, f"request body of {length} bytes is over the {max_body} limit")
        while len(self._buffer) < length:
            self._buffer += self._read_until(give_up, started=True)
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return Request(method, target, version, headers, body)

    def _read_until(self, give_up: float, *, started: bool) -> bytes:
        while True:
            data = self._recv()
            if data:
                return data
            if time.monotonic() > give_up:
                if started:
                    raise BadRequest(408, "the request did not arrive in time")
                raise _Idle("no request on a kept-alive connection")

    def send(self, data: bytes) -> None:
        """Send all of ``data``, raising ``ClientGone`` or ``Stopping`` instead of blocking."""
        view = memoryview(data)
        sent = 0
        while sent < len(view):
            self._check_stop()
            try:
                sent += self.sock.send(view[sent : sent + _SEND_BYTES])
            except (socket.timeout, ssl.SSLWantWriteError):
                continue
            except OSError as exc:
                raise ClientGone(str(exc)) from exc

    def wait(self, seconds: Optional[float]) -> None:
        """Wait ``seconds`` (``None``: until the client leaves or the gateway stops).

        Anything the client sends meanwhile is read and dropped. Raises
        ``ClientGone`` when the client disconnects, ``Stopping`` when the
        gateway stops.
        """
        give_up = None if seconds is None else time.monotonic() + seconds
        while True:
            self._check_stop()
            step = TICK
            if give_up is not None:
                step = min(step, give_up - time.monotonic())
                if step <= 0:
                    return
            pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
            if pending or select.select([self.sock], [], [], step)[0]:
                self._recv()

    def reset(self) -> None:
        """Close with a TCP RST (SO_LINGER 0) instead of a FIN."""
        with contextlib.suppress(OSError):  # the client may be gone already: nothing to reset
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close()

    def linger_close(self) -> None:
        """Half-close, drain what the client still sends (bounded), then close.

        Closing with unread request bytes would make the kernel send a RST that
        can destroy the error response before the client reads it.
        """
        try:
            self.sock.shutdown(socket.SHUT_WR)
            give_up = time.monotonic() + _LINGER_SECONDS
            drained = 0
            while time.monotonic() < give_up and drained < _LINGER_MAX_BYTES:
                drained += len(self._recv())
        except (EndExchange, OSError):
            pass  # the client finished or left: either way we are done
        self.close()

    def close(self) -> None:
        """Close the socket (idempotent)."""
        if not self.closed:
            self.closed = True
            self.sock.close()


def phrase(status: int) -> str:
    """The reason phrase for ``status`` (a generic one for unregistered codes like 529)."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error" if status >= 400 else "Status"


def _parse_head(head: bytes) -> tuple[str, str, str, Dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, "malformed request line")
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(400, "malformed header line")
        headers[name.lower()] = value.strip()
    return parts[0], parts[1], parts[2], headers


class Exchange:
    """The response side of one request: status line, headers, framed body.

    Framing: with a ``length`` the body is exactly that many bytes; without,
    ``"chunked"`` sends each ``write()`` as one HTTP chunk and ``"close"``
    sends raw bytes ended by closing the socket.
    """

    def __init__(
        self,
        conn: Connection,
        framing: str,
        request: Request,
        request_id: str,
        *,
        keep_alive: bool = True,
    ) -> None:
        self.conn = conn
        self.framing = framing
        self.request = request
        self.request_id = request_id
        self._keep_alive = keep_alive and request.keep_alive
        self.status: Optional[int] = None
        self._mode = ""
        self.reusable = False

    def head(
        self,
        status: int,
        content_type: str,
        *,
        length: Optional[int] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        """Send the status line and headers."""
        lines = [
            f"HTTP/1.1 {status} {phrase(status)}",
            f"Server: {_SERVER}",
            f"Content-Type: {content_type}",
            f"X-Request-ID: {self.request_id}",
        ]
        if length is not None:
            self._mode = "length"
            lines.append(f"Content-Length: {length}")
        elif self.framing == "chunked":
            self._mode = "chunked"
            lines.append("Transfer-Encoding: chunked")
        else:
            self._mode = "close"
        if self._mode == "close" or not self._keep_alive:
            lines.append("Connection: close")
        else:
            lines.append("Connection: keep-alive")
        if content_type.startswith("text/event-stream"):
            lines.append("Cache-Control: no-cache")
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        self.status = status
        self.conn.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def informational(self, status: int, headers: Mapping[str, str]) -> None:
        """Send a ``1xx`` interim response (its status line and headers); no final one yet."""
        if not 100 <= status < 200 or status == 101:
            raise ValueError(f"an interim response has a 1xx status other than 101, not {status}")
        lines = [f"HTTP/1.1 {status} {phrase(status)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self.status = status
        self.conn.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def status_line(self, status: int) -> None:
        """Send the status line alone: the headers follow one at a time (:meth:`header_line`)."""
        self.status = status
        self.conn.send(f"HTTP/1.1 {status} {phrase(status)}\r\n".encode("latin-1"))

    def header_line(self, name: str, value: str) -> None:
        """Send one header line of a head begun by :meth:`status_line` (never its end)."""
        self.conn.send(f"{name}: {value}\r\n".encode("latin-1"))

    def write(self, data: bytes) -> None:
        """Send part of the body (one HTTP chunk in chunked mode)."""
        if self._mode == "chunked":
            self.conn.send(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.conn.send(data)

    def finish(self) -> None:
        """End the body cleanly; the connection may then serve another request."""
        if self._mode == "chunked":
            self.conn.send(b"0\r\n\r\n")
        self.reusable = self._mode != "close" and self._keep_alive
