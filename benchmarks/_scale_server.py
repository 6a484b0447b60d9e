"""The event-stream server and process plumbing that scale.py, httpx_scale.py and
idle_scale.py share.

The server runs in its own process (so that it does not compete with the clients for the
GIL) and holds every connection in one selector loop: a subclass says what a connection's
request bytes start (``on_read``) and what each due send does (``on_due``). Every client
run is a fresh process of the benchmark's own script (``run_worker``). Loopback only; the
server ends by itself after ``SERVER_SECONDS``.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import multiprocessing
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)
SERVER_SECONDS = 900.0  # the server process ends by itself after this

_T = TypeVar("_T", bound="Sampler")


def raise_nofile(wanted: int) -> None:
    """Raise this process's soft limit on open files to ``wanted`` (at most the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        limit = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


def request_complete(data: bytes) -> bool:
    """Whether ``data`` holds a whole request: its head and its Content-Length body."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return True


class Conn:
    """One client connection, as the server's loop keeps it."""

    __slots__ = ("answered", "request", "sent", "silent_at", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.request = b""
        self.answered = False
        self.sent = 0
        self.silent_at = 0.0  # idle_scale.py: the last event goes out no earlier than this


class SelectorServer:
    """Accepts on ``listener``, hands each read to ``on_read`` and each due send (in the
    order of their times) to ``on_due``, until ``run``'s ``stop_at``."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self._due: List[Tuple[float, int, Conn]] = []  # (send time, tie-breaker, connection)
        self._order = 0

    def schedule(self, when: float, conn: Conn, tie: Optional[int] = None) -> None:
        """A send to ``conn`` at ``when``; ``tie`` keeps a connection's place among equals."""
        if tie is None:
            self._order += 1
            tie = self._order
        heapq.heappush(self._due, (when, tie, conn))

    def on_read(self, conn: Conn, piece: bytes) -> None:
        """``piece`` came from ``conn`` (b"": the client left or reset)."""
        raise NotImplementedError

    def on_due(self, when: float, tie: int, conn: Conn) -> None:
        """The send scheduled for ``when`` is due."""
        raise NotImplementedError

    def run(self, stop_at: float) -> None:
        raise_nofile(4096)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        due = self._due
        while time.monotonic() < stop_at:
            wait = max(0.0, due[0][0] - time.monotonic()) if due else 0.5
            for key, _ in self.selector.select(min(wait, 0.5)):
                if key.data is None:
                    self._accept()
                    continue
                conn: Conn = key.data
                try:
                    piece = conn.sock.recv(65536)
                except OSError:
                    piece = b""
                self.on_read(conn, piece)
            now = time.monotonic()
            while due and due[0][0] <= now + 0.0002:
                self.on_due(*heapq.heappop(due))
        self.selector.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, Conn(sock))


class EventServer(SelectorServer):
    """scale.py's server: reads each request, then sends the stream ``events`` chunks made
    by ``chunk(index)``, ``gap`` seconds apart (a fixed rate, as tokens come), and ends it."""

    def __init__(
        self, listener: socket.socket, events: int, gap: float, chunk: Callable[[int], bytes]
    ) -> None:
        super().__init__(listener)
        self._events = events
        self._gap = gap
        self._chunk = chunk

    def on_read(self, conn: Conn, piece: bytes) -> None:
        conn.request += piece
        if piece and not request_complete(conn.request):
            return
        self.selector.unregister(conn.sock)
        if not piece:
            conn.sock.close()
            return
        conn.sock.settimeout(2.0)  # small writes into an empty socket buffer: never waits
        try:
            conn.sock.sendall(HEAD)
        except OSError:
            conn.sock.close()
            return
        self.schedule(time.monotonic(), conn)

    def on_due(self, when: float, tie: int, conn: Conn) -> None:
        try:
            conn.sock.sendall(self._chunk(conn.sent))
            conn.sent += 1
            if conn.sent == self._events:
                conn.sock.sendall(b"0\r\n\r\n")
                conn.sock.close()
                return
        except OSError:
            conn.sock.close()
            return
        self.schedule(when + self._gap, conn, tie)


@contextlib.contextmanager
def serving(make: Callable[[socket.socket], SelectorServer], most_streams: int) -> Iterator[str]:
    """Run ``make(listener)``'s server in a forked process, sized for ``most_streams`` open
    at once; yields the URL to post to. The server is ended on the way out."""
    raise_nofile(most_streams * 2 + 256)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(max(1024, most_streams * 2))
    stop_at = time.monotonic() + SERVER_SECONDS
    server = multiprocessing.get_context("fork").Process(
        target=lambda: make(listener).run(stop_at), daemon=True
    )
    server.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/chat/completions"
    finally:
        server.terminate()
        server.join(5)
        listener.close()


def run_worker(script: str, args: Sequence[str], seconds: float, label: str) -> Dict[str, Any]:
    """Run ``script --worker *args`` in a fresh process (at most ``seconds`` + 30); its last
    line of output is its result, as JSON."""
    done = subprocess.run(
        [sys.executable, script, "--worker", *args],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"{label} failed:\n{done.stderr[-2000:]}")
    result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def cpu_seconds() -> float:
    """This process's user + system CPU time so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(ordered: List[float], fraction: float) -> float:
    """The sample at index ``int(fraction * n)`` of the sorted ones (nan if none), as
    scale.py and httpx_scale.py report them."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Sampler:
    """A daemon thread, in a client process, that runs ``_run`` from the ``with`` block's
    start; the block's end sets ``_stop`` and joins the thread (at most 5 s)."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self: _T) -> _T:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        raise NotImplementedError
