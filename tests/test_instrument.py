"""instrument(): bare requests and urllib3 calls are bounded by the deadline() scope, on real sockets."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import requests
import trustme
import urllib3
from urllib3 import connection as urllib3_connection
from urllib3 import connectionpool as urllib3_pool
from urllib3 import response as urllib3_response

import watchdog_sync as ws
from watchdog_sync.testing import READER_THREAD_NAME

from .rawserver import (
    RawServer,
    read_request_head,
    send_body_piece,
    send_sse_head,
    silent,
    wait_for_disconnect,
)

pytestmark = pytest.mark.timeout(30)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
PATCHED_CLASSES = (
    urllib3_pool.HTTPConnectionPool,
    urllib3_connection.HTTPConnection,
    urllib3_connection.HTTPSConnection,
    urllib3_response.HTTPResponse,
)


def answer_ok_keepalive(conn: socket.socket, stop: threading.Event) -> None:
    while not stop.is_set():
        if not read_request_head(conn):
            return
        conn.sendall(OK)


def answer_after_a_while(conn: socket.socket, stop: threading.Event) -> None:
    """Slow but finishing: the answer comes 0.8 s after the request."""
    read_request_head(conn)
    if not stop.wait(0.8):
        conn.sendall(OK)


def drip_close_delimited(conn: socket.socket, stop: threading.Event) -> None:
    """A body without a length, ended by closing: one byte every 0.1 s for 5 s."""
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
    for _ in range(50):
        conn.sendall(b"x")
        if stop.wait(0.1):
            return


@pytest.fixture
def instrumented() -> Iterator[None]:
    undo = ws.instrument()
    try:
        yield
    finally:
        undo()


def _snapshot() -> List[Dict[str, Any]]:
    return [dict(vars(cls)) for cls in PATCHED_CLASSES]


def _ends_by_deadline(call: Any, limit: float) -> Tuple[ws.DeadlineExceeded, float]:
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(limit):
        call()
    return info.value, time.monotonic() - started


@pytest.mark.parametrize("method", ["get", "post"])
def test_a_bare_requests_call_ends_at_the_deadline(instrumented: None, method: str) -> None:
    """requests.get/post with a 30 s timeout inside deadline(1): DeadlineExceeded at ~1 s."""
    with RawServer(silent) as server:
        call = getattr(requests, method)
        _, elapsed = _ends_by_deadline(lambda: call(server.url, json={"q": 1}, timeout=30), 1.0)
    assert 0.9 <= elapsed < 1.6


def test_an_except_exception_retry_loop_cannot_swallow_the_deadline(instrumented: None) -> None:
    """A legacy loop that retries every Exception makes one attempt, then the scope ends."""
    attempts = []

    def legacy(url: str) -> None:
        for _ in range(5):
            attempts.append(1)
            try:
                requests.get(url, timeout=30)
                return
            except Exception:
                continue

    with RawServer(silent) as server:
        _, elapsed = _ends_by_deadline(lambda: legacy(server.url), 0.5)
    assert len(attempts) == 1
    assert elapsed < 1.2


def test_a_close_delimited_drip_raises_instead_of_a_cut_body(instrumented: None) -> None:
    """A body ended by close looks complete once shut: the read says it was the deadline."""
    with RawServer(drip_close_delimited) as server:
        _, elapsed = _ends_by_deadline(lambda: requests.get(server.url, timeout=30), 1.0)
    assert 0.9 <= elapsed < 1.6


def test_a_streamed_body_read_in_the_scope_stops_at_the_deadline(instrumented: None) -> None:
    with RawServer(drip_close_delimited) as server:

        def read_all() -> None:
            with requests.get(server.url, stream=True, timeout=30) as response:
                for _ in response.iter_content(1):
                    pass

        _, elapsed = _ends_by_deadline(read_all, 0.6)
    assert 0.5 <= elapsed < 1.2


def test_urllib3_retries_do_not_outlive_the_budget(instrumented: None) -> None:
    """PoolManager (3 retries by default) preloading the body: one connection, then the end."""
    with RawServer(silent) as server, urllib3.PoolManager() as manager:
        _, elapsed = _ends_by_deadline(lambda: manager.request("GET", server.url), 0.5)
        assert server.accepted == 1
    assert elapsed < 1.1


def test_timeouts_given_by_position_are_clipped_too(instrumented: None) -> None:
    """urlopen(method, url, body, headers, retries, redirect, assert_same_host, timeout)."""
    with RawServer(silent) as server, urllib3.HTTPConnectionPool("127.0.0.1", server.port) as pool:
        _, elapsed = _ends_by_deadline(
            lambda: pool.urlopen("GET", "/", None, None, False, True, True, 30.0), 0.5
        )
    assert elapsed < 1.1


def test_cancel_from_another_thread_stops_a_bare_request(instrumented: None) -> None:
    with RawServer(silent) as server, ws.deadline(30) as budget:
        canceller = ws.Budget(0.2)  # the shared watchdog thread cancels, no thread of our own
        canceller.on_done(lambda _: budget.cancel())
        started = time.monotonic()
        with pytest.raises(ws.Cancelled) as info:
            requests.get(server.url)
        assert info.value.reason == "cancelled"
        assert time.monotonic() - started < 1.0


def test_the_scope_converts_a_cancel_into_operation_cancelled(instrumented: None) -> None:
    canceller = ws.Budget(0.2)  # the shared watchdog thread cancels, no thread of our own
    with RawServer(silent) as server, pytest.raises(ws.OperationCancelled), ws.deadline(30) as b:
        canceller.on_done(lambda _: b.cancel())
        requests.get(server.url)


def test_tls_requests_are_shut_at_the_deadline(instrumented: None, tmp_path: Any) -> None:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    with RawServer(silent, tls=context) as server:
        _, elapsed = _ends_by_deadline(
            lambda: requests.get(server.url, timeout=30, verify=str(bundle)), 0.8
        )
    assert 0.7 <= elapsed < 1.4


def test_outside_a_scope_a_slow_request_still_completes(instrumented: None) -> None:
    with RawServer(answer_after_a_while) as server:
        response = requests.get(server.url, timeout=5)
    assert response.status_code == 200 and response.text == "ok"


def test_a_pooled_connection_is_not_shut_after_the_scope_ended(instrumented: None) -> None:
    """The connection went back to the pool: the budget's end leaves it, the next request reuses it."""
    ended = threading.Event()
    with RawServer(answer_ok_keepalive) as server, requests.Session() as session:
        with ws.deadline(0.3) as budget:
            assert session.get(server.url, timeout=5).text == "ok"
            budget.on_done(lambda _: ended.set())
        assert ended.wait(5)
        assert session.get(server.url, timeout=5).text == "ok"
        assert server.accepted == 1


def test_a_session_in_an_instrumented_process_is_bounded_as_before(instrumented: None) -> None:
    with RawServer(silent) as server, ws.Session() as session:
        _, elapsed = _ends_by_deadline(lambda: session.get(server.url, timeout=30), 0.5)
    assert elapsed < 1.1


def test_undo_restores_urllib3_exactly_and_unbinds_requests() -> None:
    """After undo, every patched class is as before and requests' own timeout rules again."""
    before = _snapshot()
    ws.instrument()()
    assert _snapshot() == before
    # Nothing bounds requests now: the scope can only fail late.
    with RawServer(silent) as server, pytest.raises(ws.DeadlineExceeded), ws.deadline(0.2):
        started = time.monotonic()
        with pytest.raises(requests.ReadTimeout):
            requests.get(server.url, timeout=0.8)
        assert time.monotonic() - started >= 0.7


def test_instrument_twice_patches_once_and_the_last_undo_restores() -> None:
    original = urllib3_pool.HTTPConnectionPool.urlopen
    first = ws.instrument()
    patched = urllib3_pool.HTTPConnectionPool.urlopen
    second = ws.instrument()
    assert urllib3_pool.HTTPConnectionPool.urlopen is patched
    assert patched.__wrapped__ is original  # type: ignore[attr-defined]
    first()
    first()  # an undo runs once: the second call does not take the other share
    assert urllib3_pool.HTTPConnectionPool.urlopen is patched
    second()
    assert urllib3_pool.HTTPConnectionPool.urlopen is original


def test_instrument_and_undo_from_many_threads_leave_the_originals() -> None:
    before = _snapshot()

    def churn() -> None:
        for _ in range(50):
            ws.instrument()()

    threads = [threading.Thread(target=churn) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert _snapshot() == before


def test_nothing_to_patch_is_a_valid_call() -> None:
    before = _snapshot()
    undo = ws.instrument(urllib3=False, httpx=False)
    assert _snapshot() == before
    undo()


@pytest.mark.parametrize("arguments", [{"urllib3": 1}, {"httpx": "yes"}])
def test_arguments_must_be_bools(arguments: Dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="True or False"):
        ws.instrument(**arguments)


# -- guard_stream over a body read through an instrumented connection ------------------


def one_line_then_silence(
    disconnected: threading.Event,
) -> Any:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, b"data: 1\n\n")
        if wait_for_disconnect(conn, stop):
            disconnected.set()

    return handler


def _readers() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READER_THREAD_NAME and t.is_alive()]


@pytest.mark.parametrize("in_scope", [False, True])
def test_guard_stream_over_iter_lines_shuts_the_socket_on_idle(
    instrumented: None, in_scope: bool
) -> None:
    """No on_timeout given: the idle timeout still wakes the reader blocked in recv."""
    disconnected = threading.Event()
    with RawServer(one_line_then_silence(disconnected)) as server:
        with ws.deadline(20 if in_scope else None):
            response = requests.get(server.url, stream=True, timeout=30)
            stream = ws.guard_stream(response.iter_lines(), idle_timeout=0.4)
            lines = []
            with pytest.raises(ws.StreamIdleTimeout), stream:
                for line in stream:
                    lines.append(line)
        assert lines[:1] == [b"data: 1"]
        assert disconnected.wait(1.0)
        give_up = time.monotonic() + 1.0
        while _readers() and time.monotonic() < give_up:
            time.sleep(0.01)
        assert not _readers()
        response.close()
