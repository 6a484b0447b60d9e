"""instrument(request_timeout=...): each request has a limit of its own, on real sockets."""

from __future__ import annotations

import pickle
import socket
import threading
import time
from typing import Any, Iterator, List

import httpx2
import openai
import pytest
import requests
import urllib3

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .rawserver import RawServer, read_request_head, send_body_piece, send_sse_head, silent

pytestmark = pytest.mark.timeout(60)

LIMIT = 0.6
SLACK = 0.8  # two noisy shared cores
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def limited() -> Iterator[None]:
    undo = ws.instrument(request_timeout=LIMIT)
    try:
        yield
    finally:
        undo()


def drip_body(conn: socket.socket, stop: threading.Event) -> None:
    """A 100-byte body, one byte every 0.1 s: each read is quick, the whole is not."""
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
    for _ in range(100):
        if stop.wait(0.1):
            return
        conn.sendall(b"x")


def silent_once_then_ok() -> Any:
    """The first connection gets no answer; every later one gets ``ok`` at once."""
    seen: List[int] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        seen.append(1)
        if len(seen) == 1:
            silent(conn, stop)
            return
        while read_request_head(conn):
            conn.sendall(OK)

    return handler


def slow_event_stream(conn: socket.socket, stop: threading.Event) -> None:
    """An event stream that takes 1.5 s in all (an event every 0.25 s), then ends."""
    read_request_head(conn)
    send_sse_head(conn)
    for n in range(6):
        if stop.wait(0.25):
            return
        send_body_piece(conn, b"data: %d\n\n" % n)
    send_body_piece(conn, b"")


def _assert_ours(exc: BaseException) -> None:
    assert isinstance(exc, ws.WatchdogError) and exc.reason == "request_timeout"
    verdict = ws.classify(exc)
    assert (verdict.kind, verdict.reason, verdict.retryable) == ("timeout", "request_timeout", True)
    assert "request timeout" in str(exc)


@pytest.mark.parametrize("handler", [silent, drip_body], ids=["silent", "drip"])
def test_a_requests_call_outside_any_scope_ends_at_its_request_timeout(
    limited: None, handler: Any
) -> None:
    """requests' per-read timeout of 30 s, a silent or dripping server: requests.Timeout at ~LIMIT."""
    with RawServer(handler) as server:
        started = time.monotonic()
        with pytest.raises(requests.exceptions.Timeout) as info:
            requests.get(server.url, timeout=30)
        elapsed = time.monotonic() - started
    assert LIMIT - 0.05 <= elapsed < LIMIT + SLACK
    _assert_ours(info.value)


def test_a_requests_retry_loop_recovers_a_silent_first_attempt(limited: None) -> None:
    """The caller's own `except requests.Timeout` retry sends again and gets the answer."""
    attempts = []

    def call(url: str) -> str:
        for _ in range(3):
            attempts.append(1)
            try:
                return requests.get(url, timeout=30).text
            except requests.exceptions.Timeout:
                continue
        raise AssertionError("no attempt succeeded")

    with RawServer(silent_once_then_ok()) as server, ws.deadline(10):
        assert call(server.url) == "ok"
    assert len(attempts) == 2


def test_the_enclosing_scope_wins_when_it_is_tighter() -> None:
    """request_timeout=5 inside deadline(0.5): DeadlineExceeded at ~0.5 s, the scope's."""
    undo = ws.instrument(request_timeout=5)
    try:
        with RawServer(silent) as server:
            started = time.monotonic()
            with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.5):
                requests.get(server.url, timeout=30)
            assert time.monotonic() - started < 0.5 + SLACK
    finally:
        undo()


def test_a_request_timeout_inside_a_scope_leaves_the_scope_going(limited: None) -> None:
    """The request's end is the request's: the scope's budget is still live afterwards."""
    with RawServer(silent) as server, ws.deadline(10) as budget:
        with pytest.raises(requests.exceptions.Timeout):
            requests.get(server.url, timeout=30)
        assert not budget.ended and budget.remaining() > 8


def test_urllib3_alone_raises_its_own_read_timeout(limited: None) -> None:
    """A PoolManager (3 read retries) gets urllib3's ReadTimeoutError, once, at ~LIMIT."""
    with RawServer(silent) as server, urllib3.PoolManager() as manager:
        started = time.monotonic()
        with pytest.raises(urllib3.exceptions.ReadTimeoutError) as info:
            manager.request("GET", server.url, timeout=30)
        assert time.monotonic() - started < LIMIT + SLACK
    _assert_ours(info.value)


def test_an_event_stream_is_bound_only_up_to_its_head(limited: None) -> None:
    """A 1.5 s event stream read through requests outlives a 0.6 s request timeout."""
    with (
        RawServer(slow_event_stream) as server,
        requests.get(server.url, stream=True, timeout=30) as response,
    ):
        lines = [line for line in response.iter_lines() if line]
    assert len(lines) == 6


def test_an_httpx_request_ends_with_httpx_timeout_family(limited: None) -> None:
    """httpx2 with no timeout of its own, a silent server: httpx2.TimeoutException at ~LIMIT."""
    with RawServer(silent) as server, httpx2.Client(timeout=None) as client:
        started = time.monotonic()
        with pytest.raises(httpx2.TimeoutException) as info:
            client.get(server.url)
        assert time.monotonic() - started < LIMIT + SLACK
    _assert_ours(info.value)
    assert isinstance(info.value, ws.OperationTimeout)
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is type(info.value) and copy.reason == "request_timeout"


def test_an_httpx_body_that_drips_ends_at_the_request_timeout(limited: None) -> None:
    with RawServer(drip_body) as server, httpx2.Client(timeout=30) as client:
        started = time.monotonic()
        with pytest.raises(httpx2.TimeoutException):
            client.get(server.url)
        assert time.monotonic() - started < LIMIT + SLACK


def test_an_httpx_event_stream_outlives_the_request_timeout(limited: None) -> None:
    with (
        RawServer(slow_event_stream) as server,
        httpx2.Client(timeout=30) as client,
        client.stream("GET", server.url) as response,
    ):
        lines = [line for line in response.iter_lines() if line]
    assert len(lines) == 6


def test_the_openai_sdk_retries_a_silent_first_attempt_as_its_own_timeout(limited: None) -> None:
    """silent_then_ok, openai with max_retries=2 and its 600 s timeout: the answer, soon."""
    with FaultGateway() as gateway:
        base = gateway.base_url("silent_then_ok")
        with openai.OpenAI(base_url=base, api_key="sk-test", max_retries=2) as client:
            started = time.monotonic()
            answer = client.chat.completions.create(model="m", messages=MESSAGES)
            elapsed = time.monotonic() - started
        assert answer.choices[0].message.content
        assert len(gateway.requests_seen(base)) == 2
    assert elapsed < LIMIT + 3.0  # the SDK's own backoff (<= 1 s here) included


def test_the_openai_sdk_without_retries_raises_its_timeout_error(limited: None) -> None:
    with (
        FaultGateway() as gateway,
        openai.OpenAI(
            base_url=gateway.base_url("no_headers"), api_key="sk-test", max_retries=0
        ) as client,
        pytest.raises(openai.APITimeoutError) as info,
    ):
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert ws.classify(info.value).reason == "request_timeout"


def test_undo_takes_the_limit_away() -> None:
    """After undo, requests' own per-read timeout rules again."""
    ws.instrument(request_timeout=0.2)()
    with RawServer(silent) as server:
        started = time.monotonic()
        with pytest.raises(requests.exceptions.ReadTimeout) as info:
            requests.get(server.url, timeout=0.8)
        assert time.monotonic() - started >= 0.75
    assert not isinstance(info.value, ws.WatchdogError)


def test_the_tightest_live_limit_applies() -> None:
    first = ws.instrument(request_timeout=30)
    second = ws.instrument(request_timeout=LIMIT)
    try:
        with RawServer(silent) as server:
            started = time.monotonic()
            with pytest.raises(requests.exceptions.Timeout):
                requests.get(server.url, timeout=60)
            assert time.monotonic() - started < LIMIT + SLACK
    finally:
        second()
        first()


@pytest.mark.parametrize(
    "value, error",
    [(0, ValueError), (-1, ValueError), (float("nan"), ValueError), ("5", TypeError)],
)
def test_a_bad_request_timeout_is_refused(value: Any, error: type) -> None:
    with pytest.raises(error, match="request_timeout"):
        ws.instrument(request_timeout=value)


def test_the_requests_error_pickles_with_its_reason_and_no_request(limited: None) -> None:
    with RawServer(silent) as server, pytest.raises(requests.exceptions.Timeout) as info:
        requests.get(server.url, timeout=30, headers={"Authorization": "Bearer sk-secret"})
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is type(info.value) and copy.reason == "request_timeout"
    assert copy.request is None and copy.retryable


def test_the_urllib3_error_pickles_without_its_pool(limited: None) -> None:
    with (
        RawServer(silent) as server,
        urllib3.PoolManager() as manager,
        pytest.raises(urllib3.exceptions.ReadTimeoutError) as info,
    ):
        manager.request("GET", server.url, timeout=30)
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is type(info.value) and copy.reason == "request_timeout"
    assert copy.pool is None and copy.url == info.value.url


def test_the_request_timeout_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_SYNC_INSTRUMENT_REQUEST_TIMEOUT", str(LIMIT))
    undo = ws.instrument()
    try:
        with RawServer(silent) as server:
            started = time.monotonic()
            with pytest.raises(requests.exceptions.Timeout) as info:
                requests.get(server.url, timeout=30)
            assert time.monotonic() - started < LIMIT + SLACK
        _assert_ours(info.value)
    finally:
        undo()
