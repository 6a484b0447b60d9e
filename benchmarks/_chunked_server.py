"""The loopback SSE server that stream_overhead.py, sdk_overhead.py and instrument_overhead.py
share.

It runs in its own process (so that it does not compete with the client for the
GIL), accepts on 127.0.0.1 until its time is up, and answers each connection in
a thread of its own with ``answer(conn, request_head, events)``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import socket
import threading
import time
from typing import Callable, Iterator, Tuple

Answer = Callable[[socket.socket, bytes, int], None]

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)


def chunk(event: bytes) -> bytes:
    """One HTTP chunk holding ``event``."""
    return b"%x\r\n" % len(event) + event + b"\r\n"


def read_request(conn: socket.socket) -> bytes:
    """The request head, after reading its whole body (so closing never resets the client)."""
    request = b""
    while b"\r\n\r\n" not in request:
        piece = conn.recv(65536)
        if not piece:
            return request
        request += piece
    head, _, body = request.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return head


def _serve(listener: socket.socket, answer: Answer, events: int, stop_at: float) -> None:
    listener.settimeout(0.5)
    while time.monotonic() < stop_at:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        threading.Thread(target=_answer_one, args=(answer, conn, events), daemon=True).start()


def _answer_one(answer: Answer, conn: socket.socket, events: int) -> None:
    with conn:
        try:
            answer(conn, read_request(conn), events)
        except OSError:
            return


@contextlib.contextmanager
def running(answer: Answer, events: int, seconds: float = 600.0) -> Iterator[Tuple[str, int]]:
    """Serve ``answer`` for at most ``seconds``; yields ``("127.0.0.1", port)``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    server = multiprocessing.get_context("fork").Process(
        target=_serve,
        args=(listener, answer, events, time.monotonic() + seconds),
        daemon=True,
    )
    server.start()
    try:
        yield "127.0.0.1", listener.getsockname()[1]
    finally:
        server.terminate()
        server.join(5)
        listener.close()
