"""stream_sse against real local sockets: events on time, silence detected, bounded."""

from __future__ import annotations

import errno
import gc
import json
import socket
import struct
import threading
import time
import tracemalloc
from typing import Callable, Dict, Iterator, List

import pytest

import watchdog_sync as ws
from watchdog_sync import stream_sse

from .internals import private_session
from .rawserver import (
    RawServer,
    end_body,
    read_request_head,
    send_body_piece,
    send_sse_head,
    wait_for_disconnect,
)

pytestmark = pytest.mark.timeout(30)

Handler = Callable[[socket.socket, threading.Event], None]


def event(n: int) -> bytes:
    return b"data: " + json.dumps({"n": n}).encode() + b"\n\n"


def streaming(count: int, *, framing: str = "chunked", gap: float = 0.0) -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn, framing)
        for n in range(count):
            send_body_piece(conn, event(n), framing)
            if gap and stop.wait(gap):
                return
        end_body(conn, framing)

    return handler


@pytest.fixture
def disconnects() -> Iterator[List[float]]:
    yield []


def then_silent(count: int, seen: List[float], *, close: bool = False) -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn, close=close)
        for n in range(count):
            send_body_piece(conn, event(n))
        if wait_for_disconnect(conn, stop):
            seen.append(time.monotonic())

    return handler


def test_a_normal_stream_yields_every_event_and_completes() -> None:
    with RawServer(streaming(5)) as server:
        stream = stream_sse(server.url, json={"q": 1}, idle_timeout=2)
        data = [json.loads(e.data)["n"] for e in stream]
    assert data == [0, 1, 2, 3, 4]
    assert stream.status == 200
    assert stream.stats.items == 5
    assert stream.stats.ended_by == "completed"
    assert stream.truncated is False


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_both_framings_deliver_each_event_within_50ms(framing: str) -> None:
    sent: List[float] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn, framing)
        for n in range(4):
            sent.append(time.monotonic())
            send_body_piece(conn, event(n), framing)
            if stop.wait(0.15):
                return
        end_body(conn, framing)

    with RawServer(handler) as server:
        lags = []
        for e in stream_sse(server.url, idle_timeout=2):
            lags.append(time.monotonic() - sent[json.loads(e.data)["n"]])
    assert len(lags) == 4
    assert max(lags) < 0.05


@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "connection-close"])
def test_200_then_silence_times_out_like_a_read_timeout_and_shuts_the_socket(close: bool) -> None:
    """With `Connection: close`, http.client drops conn.sock early: the socket must still shut."""
    seen: List[float] = []
    with RawServer(then_silent(0, seen, close=close)) as server:
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout) as info:
            list(stream_sse(server.url, idle_timeout=0.4))
        fired = time.monotonic()
        deadline = time.monotonic() + 2
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)  # wait for the server to observe the shutdown (the subject)
    err = info.value
    assert (err.errno, err.code, err.chunks_received, err.retryable) == (
        errno.ETIMEDOUT,
        "ETIMEDOUT",
        0,
        True,
    )
    assert 0.35 <= fired - started < 1.2
    assert seen and seen[0] - fired < 0.5  # the server saw the connection end at once


def test_a_stall_after_events_delivers_them_first_then_times_out() -> None:
    with RawServer(then_silent(3, [])) as server:
        got = []
        with pytest.raises(ws.StreamIdleTimeout) as info:
            for e in stream_sse(server.url, idle_timeout=0.3):
                got.append(e.data)
    assert len(got) == 3
    assert info.value.chunks_received == 3
    assert info.value.retryable is False


def test_keepalive_comments_are_not_activity() -> None:
    def pings(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        for _ in range(100):
            send_body_piece(conn, b": keep-alive\n\n")
            if stop.wait(0.1):
                return

    with RawServer(pings) as server:
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout):
            list(stream_sse(server.url, idle_timeout=0.5))
        assert time.monotonic() - started < 1.5


def test_a_drip_feed_ends_at_the_deadline_inside_a_scope() -> None:
    with RawServer(streaming(1000, gap=0.1)) as server:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.8):
            for _ in stream_sse(server.url, idle_timeout=0.5):
                pass
        assert time.monotonic() - started < 1.3


def test_an_explicit_budget_ends_the_stream_with_deadline_exceeded() -> None:
    with RawServer(then_silent(1, [])) as server, pytest.raises(ws.DeadlineExceeded):
        list(stream_sse(server.url, idle_timeout=None, budget=ws.Budget(0.4)))


def test_consumer_break_releases_the_connection() -> None:
    seen: List[float] = []
    with RawServer(then_silent(2, seen)) as server:
        stream = stream_sse(server.url, idle_timeout=5)
        for _ in stream:
            break
        stream.close()
        deadline = time.monotonic() + 2
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)  # wait for the server to observe the close (the subject)
    assert seen
    assert stream.stats.ended_by == "closed"


def test_a_stream_without_a_session_closes_its_connection_when_it_ends_cleanly() -> None:
    """It sends with its thread's private session, not one of its own; the connection,
    held by the response, is closed at the body's end, not left pooled."""
    seen: List[float] = []
    counted = threading.Event()

    def complete_then_watch(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        counted.wait(5)  # the rest once the open stream's sessions were counted
        for n in range(1, 3):
            send_body_piece(conn, event(n))
        end_body(conn)
        if wait_for_disconnect(conn, stop):
            seen.append(time.monotonic())

    def sessions() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, ws.Session))

    _, let_go = private_session()  # this thread's session exists before the count
    assert let_go is not None
    let_go(True)
    with RawServer(complete_then_watch) as server:
        before = sessions()
        stream = stream_sse(server.url, idle_timeout=5)
        first = json.loads(next(iter(stream)).data)["n"]
        open_sessions = sessions()
        counted.set()
        assert open_sessions == before  # no session of its own
        assert [first, *(json.loads(e.data)["n"] for e in stream)] == [0, 1, 2]
        ended = time.monotonic()
        deadline = time.monotonic() + 2
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)  # wait for the server to observe the close (the subject)
    assert seen and seen[0] - ended < 1.0
    assert stream.stats.ended_by == "completed"


def test_a_stream_dropped_after_a_break_without_close_releases_the_connection() -> None:
    seen: List[float] = []
    with RawServer(then_silent(2, seen)) as server:
        for _ in stream_sse(server.url, idle_timeout=5):
            break  # the stream is dropped here, never closed
        deadline = time.monotonic() + 2
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)  # wait for the server to observe the close (the subject)
    assert seen


def test_a_huge_line_fails_with_bounded_memory() -> None:
    def huge(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        piece = b"x" * 65536
        send_body_piece(conn, b"data: ")
        for _ in range(1024):  # up to 64 MiB, stopping when the client leaves
            if stop.is_set():
                return
            send_body_piece(conn, piece)

    limit = 1024 * 1024
    with RawServer(huge) as server:
        tracemalloc.start()
        try:
            with pytest.raises(ws.StreamProtocolError) as info:
                list(stream_sse(server.url, idle_timeout=5, max_event_bytes=limit))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert info.value.reason == "event_too_large"
    assert peak < limit * 3 + 512 * 1024


def test_events_sent_with_a_too_large_one_are_delivered_before_the_error() -> None:
    """Regression: events sharing a read with the too-large event were lost."""

    def burst(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0) + event(1) + b"data: " + b"z" * 200 + b"\n\n")
        end_body(conn)

    got = []
    with RawServer(burst) as server, pytest.raises(ws.StreamProtocolError) as info:
        for e in stream_sse(server.url, idle_timeout=2, max_event_bytes=128):
            got.append(json.loads(e.data)["n"])
    assert info.value.reason == "event_too_large"
    assert got == [0, 1]


def test_invalid_utf8_is_a_malformed_event() -> None:
    def bad(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, b"data: \xff\xfe\n\n")
        end_body(conn)

    with RawServer(bad) as server, pytest.raises(ws.StreamProtocolError) as info:
        list(stream_sse(server.url, idle_timeout=2))
    assert info.value.reason == "malformed_event"


def test_a_non_sse_answer_is_a_clear_error() -> None:
    def as_json(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        )

    with RawServer(as_json) as server, pytest.raises(ws.StreamProtocolError) as info:
        list(stream_sse(server.url, idle_timeout=2))
    assert info.value.reason == "unexpected_content_type"
    assert "application/json" in str(info.value)


def test_a_429_is_an_http_status_error_with_retry_after_and_a_redacted_body() -> None:
    def limited(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        body = b'{"error": {"message": "slow down, key sk-live-abcdef123456 is hot"}}'
        conn.sendall(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )

    with RawServer(limited) as server, pytest.raises(ws.HTTPStatusError) as info:
        list(
            stream_sse(
                server.url, idle_timeout=2, headers={"Authorization": "Bearer sk-live-abcdef123456"}
            )
        )
    err = info.value
    assert (err.status, err.retry_after, err.retryable, err.reason) == (
        429,
        3.0,
        True,
        "rate_limited",
    )
    assert "slow down" in err.body
    assert "sk-live-abcdef123456" not in str(err) + err.body + repr(err)


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": "Bearer zz-plain-key-7Q3xP9"}, {"X-Api-Key": "zz-plain-key-7Q3xP9"}],
    ids=["bearer", "x-api-key"],
)
def test_a_bare_key_echoed_in_an_error_body_is_redacted(headers: Dict[str, str]) -> None:
    def unauthorized(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        body = b'{"error": {"message": "Incorrect API key provided: zz-plain-key-7Q3xP9"}}'
        conn.sendall(
            b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )

    with RawServer(unauthorized) as server, pytest.raises(ws.HTTPStatusError) as info:
        list(stream_sse(server.url, idle_timeout=2, headers=headers))
    err = info.value
    assert "Incorrect API key provided" in err.body
    assert "zz-plain-key-7Q3xP9" not in str(err) + err.body + repr(err)


def test_connection_refused_is_a_transport_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ws.TransportError) as info:
        list(stream_sse(f"http://127.0.0.1:{port}/", idle_timeout=2))
    assert info.value.transport_code == "ECONNREFUSED"


def test_a_reset_mid_stream_is_a_transport_error_after_the_events() -> None:
    def reset_after_two(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        send_body_piece(conn, event(1))
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    got = []
    with RawServer(reset_after_two) as server, pytest.raises(ws.TransportError):
        for e in stream_sse(server.url, idle_timeout=2):
            got.append(e.data)
    assert len(got) == 2


def test_a_half_event_at_eof_is_not_delivered_and_is_reported() -> None:
    def half(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn, "close")
        send_body_piece(conn, event(0) + b'data: {"n": 9', "close")

    with RawServer(half) as server:
        stream = stream_sse(server.url, idle_timeout=2)
        data = [e.data for e in stream]
    assert data == ['{"n": 0}']
    assert stream.truncated is True


def test_a_plain_requests_session_is_refused() -> None:
    import requests

    with pytest.raises(TypeError, match=r"watchdog_sync\.Session"):
        stream_sse("http://127.0.0.1:1/", session=requests.Session())  # type: ignore[arg-type]


def test_urllib3_still_exposes_the_http_client_response_we_read() -> None:
    """Fails loudly if urllib3 stops keeping http.client's response as `raw._fp`."""
    import http.client

    from watchdog_sync import Session

    with RawServer(streaming(1)) as server, Session() as session:
        response = session.post(server.url, stream=True, timeout=5)
        raw = response.raw._fp
        assert isinstance(raw, http.client.HTTPResponse)
        assert raw.chunked is True
        assert hasattr(raw.fp, "read1")
        response.close()
