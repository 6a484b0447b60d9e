"""A stream sent without a session uses its thread's private one: one open stream at a time,
cookies cleared before each request, closed when a redirect or a failure may have left an
open connection in its pool."""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
from typing import List

import pytest

import watchdog_sync as ws
from watchdog_sync import stream_sse

from .internals import private_session
from .rawserver import RawServer, end_body, read_request_head, send_body_piece, send_sse_head

pytestmark = pytest.mark.timeout(30)

DONE = b"data: [DONE]\n\n"


def sessions() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, ws.Session))


def test_a_thread_reuses_its_session_once_the_stream_holding_it_ends() -> None:
    first, let_go = private_session()
    assert let_go is not None
    other, no_let_go = private_session()  # the first is still held: a new one, not kept
    assert other is not first and no_let_go is None
    other.close()  # its caller's to close, once the head is in
    let_go(True)
    again, let_go = private_session()
    assert again is first and let_go is not None
    let_go(True)


def test_each_thread_has_its_own() -> None:
    mine, let_go = private_session()
    assert let_go is not None
    let_go(True)
    theirs: List[ws.Session] = []

    def other() -> None:
        session, release = private_session()
        theirs.append(session)
        assert release is not None
        release(True)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(5)
    assert theirs and theirs[0] is not mine


def test_a_session_let_go_as_not_reusable_is_replaced() -> None:
    first, let_go = private_session()
    assert let_go is not None
    let_go(False)
    second, let_go = private_session()
    assert let_go is not None
    let_go(True)
    assert second is not first


def test_no_cookie_reaches_the_next_stream_and_no_session_is_made_per_stream() -> None:
    heads: List[bytes] = []

    def sets_a_cookie(conn: socket.socket, stop: threading.Event) -> None:
        heads.append(read_request_head(conn))
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Set-Cookie: tracking=abc123; Path=/\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        send_body_piece(conn, DONE)
        end_body(conn)

    _, let_go = private_session()  # this thread's session exists before the count
    assert let_go is not None
    let_go(True)
    with RawServer(sets_a_cookie) as server:
        before = sessions()
        counts = []
        for _ in range(3):
            assert [e.data for e in stream_sse(server.url, idle_timeout=5)] == ["[DONE]"]
            counts.append(sessions())
    assert counts == [before] * 3
    assert len(heads) == 3
    assert not any(b"\r\ncookie:" in head.lower() for head in heads)


def test_a_thread_interleaving_many_streams_fills_no_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    def waits_then_ends(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, b"data: first\n\n")
        release.wait(10)
        send_body_piece(conn, DONE)
        end_body(conn)

    caplog.set_level(logging.WARNING, logger="urllib3")
    with RawServer(waits_then_ends, max_connections=16) as server:
        streams = [stream_sse(server.url, idle_timeout=5) for _ in range(12)]
        firsts = [next(iter(stream)).data for stream in streams]  # all 12 open at once
        release.set()
        rests = [[e.data for e in stream] for stream in streams]
    assert firsts == ["first"] * 12
    assert rests == [["[DONE]"]] * 12
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]


def test_a_redirect_leaves_no_connection_open_at_the_first_server() -> None:
    left: List[float] = []

    def streams(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, DONE)
        end_body(conn)

    with RawServer(streams) as target:

        def redirects(conn: socket.socket, stop: threading.Event) -> None:
            read_request_head(conn)
            conn.sendall(
                b"HTTP/1.1 302 Found\r\nLocation: %s/events\r\nContent-Length: 0\r\n\r\n"
                % target.url.encode()
            )
            conn.settimeout(0.05)
            give_up = time.monotonic() + 10
            while not stop.is_set() and time.monotonic() < give_up:  # keep-alive until closed
                try:
                    if conn.recv(4096) == b"":
                        left.append(time.monotonic())
                        return
                except socket.timeout:
                    continue

        with RawServer(redirects) as first:
            events = [e.data for e in stream_sse(f"{first.url}/start", method="GET")]
            ended = time.monotonic()
            give_up = ended + 2
            while not left and time.monotonic() < give_up:
                time.sleep(0.01)  # wait for the first server to see the close (the subject)
    assert events == ["[DONE]"]
    assert left and left[0] - ended < 1.0


def test_a_failed_request_lets_the_threads_session_go_and_it_is_replaced() -> None:
    first, let_go = private_session()
    assert let_go is not None
    let_go(True)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nothing listens there: refused
    with pytest.raises(ws.TransportError):
        list(stream_sse(f"http://127.0.0.1:{port}/v1", idle_timeout=5))
    after, let_go = private_session()  # not held: the failure let it go, as not reusable
    assert let_go is not None and after is not first
    let_go(True)


def test_a_forked_child_makes_its_own_session_not_its_parents() -> None:
    """After fork() the child's thread gets a new session of its own, even where its parent's
    thread held one free: the parent's pool is not the child's."""
    first, let_go = private_session()
    assert let_go is not None
    let_go(True)  # free: the parent's thread would get it again
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's outcome goes through the pipe)
        try:
            session, _ = private_session()
            os.write(write_end, b"new" if session is not first else b"parent's")
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        answer = os.read(read_end, 16)
    finally:
        os.close(read_end)
        os.waitpid(child, 0)
    again, let_go = private_session()
    assert answer == b"new" and again is first and let_go is not None
    let_go(True)
