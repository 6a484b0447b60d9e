"""A forked child never acts on its parent's sockets, timers or threads (DESIGN, Core rules).

Real forks beside real connections on 127.0.0.1: the child starts with no budget, no
watchdog entry and no registered socket of its parent's, so nothing it does reaches a
socket it inherited (a shutdown reaches the parent's end too: the socket is shared).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Callable, List

import watchdog_sync as ws
from tests.internals import reader_sockets, watchdog_call_at
from tests.rawserver import RawServer, chunk, read_request_head

PIECE_EVERY = 0.1


def _dripping(started: threading.Event) -> Callable[[socket.socket, threading.Event], None]:
    """Keep-alive: each request's body is ``/drip/N``'s N chunks, one every PIECE_EVERY s."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            head = read_request_head(conn)
            if not head:
                return
            pieces = int(head.split(b" ", 2)[1].rsplit(b"/", 1)[1])
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for n in range(pieces):
                conn.sendall(chunk(b"piece %d\n" % n))
                started.set()
                if stop.wait(PIECE_EVERY):
                    return
            conn.sendall(b"0\r\n\r\n")

    return handler


def _fork(child: Callable[[], bool]) -> int:
    """Fork; the child runs ``child`` and exits 0 if it returned True (1 if not, 2 if it
    raised), whatever happens. Returns the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if child() else 1
        finally:
            os._exit(code)
    return pid


def _exit_code(pid: int, limit: float = 20.0) -> int:
    """The child's exit code; killed (and the test failed) if it is not done in ``limit`` s."""
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status), status
            return os.WEXITSTATUS(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung")


def test_a_child_never_shuts_the_socket_its_parent_reuses_from_the_pool() -> None:
    """The parent's request is in flight under deadline(1.5) when it forks; the child runs a
    request under a deadline of its own and lives past 1.5 s; the parent's next request, with
    no deadline, reuses the pooled connection across the old deadline and reads it whole."""
    started = threading.Event()
    read_end, write_end = os.pipe()
    with RawServer(_dripping(started)) as server, ws.Session() as session:
        first: List[int] = []

        def in_flight() -> None:
            with ws.deadline(1.5):
                first.append(len(session.get(server.url + "/drip/6").content))

        thread = threading.Thread(target=in_flight)
        thread.start()
        assert started.wait(5)

        def child() -> bool:
            os.close(write_end)
            with ws.deadline(10), ws.Session() as own:
                ok = own.get(server.url + "/drip/1").status_code == 200
            os.read(read_end, 1)  # lives until the parent's second request is read
            return ok

        pid = _fork(child)
        os.close(read_end)
        try:
            thread.join(10)
            assert first, "the parent's first request failed"
            # Across the first request's deadline, on the connection it gave back to the pool.
            body = session.get(server.url + "/drip/15").content
        finally:
            os.write(write_end, b"x")
            os.close(write_end)
        assert body.count(b"piece") == 15
        assert _exit_code(pid) == 0
        assert server.accepted == 2  # the parent's one connection, and the child's


def test_a_child_starts_outside_its_parents_scope() -> None:
    """A fork inside a deadline scope: the child's current budget is unbounded, and a
    scope it opens is bounded by its own limit only."""
    with ws.deadline(0.5) as parent:

        def child() -> bool:
            outside = ws.current_budget().deadline is None
            with ws.deadline(30) as own:
                return outside and own.remaining() > 20 and own.parent is not parent

        pid = _fork(child)
    assert _exit_code(pid) == 0


def test_a_child_runs_no_watchdog_entry_of_its_parent() -> None:
    """A timer the parent scheduled never runs in a child that uses the watchdog after the
    fork (its own timer does)."""
    fired: List[str] = []
    parents = watchdog_call_at(time.monotonic() + 0.3, lambda: fired.append("parent"))

    def child() -> bool:
        own = threading.Event()
        watchdog_call_at(time.monotonic() + 0.6, own.set)  # starts the child's watchdog thread
        return own.wait(10) and fired == []

    pid = _fork(child)
    try:
        assert _exit_code(pid) == 0
    finally:
        parents.cancel()


def test_a_child_forked_by_a_stream_reader_holds_no_socket_of_its_parents() -> None:
    """A fork from inside a guarded stream's reader thread: the child has no registered
    sockets of its parent's to shut."""
    results: List[bool] = []

    def source() -> object:
        assert reader_sockets() is not None  # the parent's reader registers its sockets
        pid = _fork(lambda: reader_sockets() is None)
        results.append(_exit_code(pid) == 0)
        yield 1

    with ws.guard_stream(source(), idle_timeout=10) as stream:
        assert list(stream) == [1]
    assert results == [True]
