"""A tiny raw-socket server on 127.0.0.1 for tests that need exact bytes and timing.

Each accepted connection runs ``handler(conn, stop)`` in its own thread; ``stop`` is set
when the server stops, and every connection is closed then. Bounded: at most
``max_connections`` accepted, and stop() joins every thread. Beside it, the bytes the handlers
send: an event stream's head, its events, HTTP chunks.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from typing import Callable, Iterator, List, Optional

Handler = Callable[[socket.socket, threading.Event], None]

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    """``data`` as one HTTP chunk."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


def event(n: int, pad: int = 0) -> bytes:
    """The event ``data: {"n": n, "pad": "x" * pad}``."""
    return b'data: {"n": %d, "pad": "%s"}\n\n' % (n, b"x" * pad)


def read_request_head(conn: socket.socket, limit: int = 65536) -> bytes:
    """Read the request headers (or up to EOF / limit), then drop its Content-Length body.

    The body is read too: a server that closes with unread request bytes in its receive
    buffer makes the kernel send a reset, which can reach the client before the answer it
    has not read yet (a flaky ECONNRESET in the tests that answer a POST).
    """
    data = b""
    while b"\r\n\r\n" not in data and len(data) < limit:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data + read_request_body(conn, data)


class RawServer:
    def __init__(
        self,
        handler: Handler,
        *,
        tls: Optional[ssl.SSLContext] = None,
        max_connections: int = 32,
    ) -> None:
        self._handler = handler
        self._tls = tls
        self._max = max_connections
        self._stop = threading.Event()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self.port = int(self._listener.getsockname()[1])
        self.accepted = 0
        self._threads: List[threading.Thread] = []
        self._conns: List[socket.socket] = []
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept_loop, name="rawserver-accept")

    @property
    def url(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> RawServer:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        while not self._stop.is_set() and self.accepted < self._max:
            try:
                conn, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(conn,), name="rawserver-conn")
            with self._lock:
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self._tls is not None:
                conn.settimeout(5)
                conn = self._tls.wrap_socket(conn, server_side=True)
                conn.settimeout(None)
                with self._lock:
                    self._conns.append(conn)
            self._handler(conn, self._stop)
        except OSError:
            pass  # the client went away or the server stopped: the test decides what that means
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        if self._acceptor.is_alive():
            self._acceptor.join(5)
        with self._lock:
            conns = list(self._conns)
            threads = list(self._threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(5)
        for conn in conns:
            conn.close()
        self._listener.close()


def silent(conn: socket.socket, stop: threading.Event) -> None:
    """A handler that reads the request and never answers (until the server stops)."""
    read_request_head(conn)
    stop.wait(30)


def mute(conn: socket.socket, stop: threading.Event) -> None:
    """A handler that accepts, reads nothing and says nothing: a TLS handshake never
    completes, and a large request body fills the buffers until its send blocks."""
    stop.wait(10)


def send_sse_head(
    conn: socket.socket, framing: str = "chunked", status: str = "200 OK", *, close: bool = False
) -> None:
    """Response headers of an event stream, chunked or close-delimited."""
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    head += "Transfer-Encoding: chunked\r\n" if framing == "chunked" else "Connection: close\r\n"
    if close and framing == "chunked":
        head += "Connection: close\r\n"
    conn.sendall(head.encode() + b"\r\n")


def send_body_piece(conn: socket.socket, data: bytes, framing: str = "chunked") -> None:
    """One piece of the body: its own HTTP chunk, or raw bytes when close-delimited."""
    if framing == "chunked":
        conn.sendall(chunk(data))
    else:
        conn.sendall(data)


def end_body(conn: socket.socket, framing: str = "chunked") -> None:
    if framing == "chunked":
        conn.sendall(b"0\r\n\r\n")


def wait_for_disconnect(conn: socket.socket, stop: threading.Event, limit: float = 10.0) -> bool:
    """Wait until the client closes its side (True) or the server stops / limit passes."""
    conn.settimeout(0.05)
    waited = 0.0
    while not stop.is_set() and waited < limit:
        try:
            if conn.recv(4096) == b"":
                return True
        except socket.timeout:
            waited += 0.05
        except OSError:
            return True
    return False


def three_events_until_disconnect(gone: List[bool]) -> Handler:
    """A handler: headers, three events, then ``gone.append(True)`` once the client closes
    (also when it closes while the events go out), ``False`` if it never does."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        try:
            for n in range(3):
                send_body_piece(conn, event(n))
        except OSError:  # the client took one event and closed while these went out
            gone.append(True)
            return
        gone.append(wait_for_disconnect(conn, stop))

    return handler


class Answer:
    """Answers every request on a connection with ``reply(path)``; counts the requests and
    keeps their heads."""

    def __init__(self, reply: Callable[[bytes], bytes]) -> None:
        self.reply = reply
        self.paths: List[bytes] = []
        self.heads: List[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        for _ in range(64):
            head = read_request_head(conn)
            if not head or stop.is_set():
                return
            path = head.split(b" ", 2)[1]
            with self._lock:
                self.paths.append(path)
                self.heads.append(head)
            if b"content-length: 0\r\n" not in head.lower() and b"POST" in head[:5]:
                read_request_body(conn, head)
            conn.sendall(self.reply(path))

    def first_attempts(self, path: bytes) -> int:
        with self._lock:
            return self.paths.count(path)


def read_request_body(conn: socket.socket, head: bytes) -> bytes:
    """Read the rest of a request body of Content-Length bytes; returns what it read.

    ``head`` is what was read so far (the headers and any body bytes after them); a body
    already complete there is not waited for again.
    """
    headers, _, rest = head.partition(b"\r\n\r\n")
    length = 0
    for line in headers.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    more = b""
    while len(rest) + len(more) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        more += piece
    return more


@contextlib.contextmanager
def full_accept_queue() -> Iterator[int]:
    """The port of a listener on 127.0.0.1 that never accepts, its accept queue filled: a new
    connect() there hangs (Linux drops the SYN), as to a server that does not answer."""
    listener = socket.socket()
    filled: List[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        address = listener.getsockname()
        while len(filled) < 64:
            sock = socket.socket()
            filled.append(sock)
            sock.settimeout(0.2)
            if sock.connect_ex(address) != 0:  # it hung: the queue is full
                break
        else:
            raise AssertionError("the accept queue never filled")
        yield address[1]
    finally:
        for sock in filled:
            sock.close()
        listener.close()
