"""The response head on the requests path: interim (1xx) responses read past, and a stream's
first-event limit bounding the whole head, as on the httpx path (``test_httpx_head.py``).

Before: a ``103 Early Hints`` in front of the answer was taken for the answer itself
(``HTTPStatusError: HTTP 103``), and a head that dripped a line at a time, or 103s that kept
coming, ran past ``stream_sse``'s first-event limit to the deadline, since each read
restarted the read timeout.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from types import SimpleNamespace
from typing import Iterator, List

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .internals import MONOTONIC, _ConnectionGuard
from .rawserver import RawServer, read_request_head
from .waiting import wait_for

pytestmark = pytest.mark.timeout(30)

LIMIT = 0.3  # the first-event limit of the streams below
SLACK = 1.0  # generous for 2 noisy cores
INTERIM = (
    b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    b"HTTP/1.1 102 Processing\r\n\r\n"
    b"HTTP/1.1 100 Continue\r\n\r\n"
)
CHUNK = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
SSE = b"data: " + json.dumps(CHUNK).encode() + b"\n\ndata: [DONE]\n\n"
COMPLETION = json.dumps(
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                  "finish_reason": "stop"}]}
).encode()  # fmt: skip
BODY = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}


def after_interim_responses(body: bytes, content_type: bytes, heads: List[bytes]) -> object:
    """A server that sends three interim responses, waits a little, then answers ``body``."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        heads.append(read_request_head(conn))
        conn.sendall(INTERIM)
        if stop.wait(0.05):
            return
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (content_type, len(body), body)
        )

    return handler


@pytest.mark.parametrize(
    "caller", ["Session", "stream_sse", "ChatClient.stream", "ChatClient.complete"]
)
def test_interim_responses_before_the_answer_are_read_past(caller: str) -> None:
    heads: List[bytes] = []
    sse = caller in ("stream_sse", "ChatClient.stream")
    body, kind = (SSE, b"text/event-stream") if sse else (COMPLETION, b"application/json")
    with RawServer(after_interim_responses(body, kind, heads)) as server:  # type: ignore[arg-type]
        if caller == "Session":
            with ws.Session() as session:
                response = session.post(server.url + "/v1/chat/completions", json={}, timeout=5)
            assert (response.status_code, response.json()) == (200, json.loads(COMPLETION))
        elif caller == "stream_sse":
            events = ws.stream_sse(server.url + "/v1/chat/completions", idle_timeout=5)
            assert [e.data for e in events] == [json.dumps(CHUNK), "[DONE]"]
            assert events.status == 200
        else:
            client = ws.ChatClient(server.url + "/v1", "sk-test", model="m", idle_timeout=5)
            if caller == "ChatClient.stream":
                with client.stream([{"role": "user", "content": "x"}]) as stream:
                    assert list(stream) == [CHUNK]
                assert (stream.text, stream.finish_reason) == ("hi", "stop")
            else:
                assert (
                    client.complete([{"role": "user", "content": "x"}])["choices"][0]["message"][
                        "content"
                    ]
                    == "hi"
                )
    assert len(heads) == 1  # one request, answered: nothing was retried


@pytest.fixture(scope="module")
def gateway() -> Iterator[FaultGateway]:
    with FaultGateway() as gw:
        yield gw


def hung_up(gateway: FaultGateway, base: str) -> bool:
    """Every request the route saw ended: the client's socket was shut, not left open."""
    return all(r.ended_at is not None for r in gateway.requests_seen(base))


@pytest.mark.parametrize("scenario", ["header_drip", "early_hints_flood"])
def test_a_head_that_never_ends_counts_against_stream_sses_first_event_limit(
    gateway: FaultGateway, scenario: str
) -> None:
    """A header line (or a 103) every 0.03 s, for 3 s: no deadline is set, so only the
    first-event limit can end it, and it covers the whole head, not each read."""
    base = gateway.base_url(scenario, interval=0.03, duration=3)
    started = time.monotonic()
    with pytest.raises(ws.StreamIdleTimeout, match="no first item") as caught:
        list(ws.stream_sse(base + "/chat/completions", json=BODY, idle_timeout=LIMIT))
    elapsed = time.monotonic() - started
    assert LIMIT - 0.05 <= elapsed < LIMIT + SLACK
    assert (caught.value.chunks_received, caught.value.retryable) == (0, True)
    assert wait_for(lambda: len(gateway.requests_seen(base)) == 1 and hung_up(gateway, base))


@pytest.mark.parametrize("scenario", ["header_drip", "early_hints_flood"])
def test_chat_client_retries_a_head_that_never_ends_at_its_first_event_limit(
    gateway: FaultGateway, scenario: str
) -> None:
    """Each attempt ends at the first-event limit and the retry owner sends the next one."""
    base = gateway.base_url(scenario, interval=0.03, duration=3)
    policy = ws.RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=0.0)
    client = ws.ChatClient(base, "sk-test", model="m", idle_timeout=LIMIT, timeout=10, retry=policy)
    started = time.monotonic()
    with pytest.raises(ws.RetryExhausted, match="after 2 attempts") as caught:
        client.stream([{"role": "user", "content": "x"}]).close()
    elapsed = time.monotonic() - started
    assert 2 * LIMIT - 0.05 <= elapsed < 2 * LIMIT + SLACK
    assert isinstance(caught.value.__cause__, ws.StreamIdleTimeout)
    assert "no first item" in str(caught.value.__cause__)
    assert wait_for(lambda: len(gateway.requests_seen(base)) == 2 and hung_up(gateway, base))


def test_a_head_in_by_the_limit_leaves_the_stream_to_run_past_it() -> None:
    """The head's limit is disarmed once the head is in: a stream whose events keep coming
    runs past the first-event limit (an armed limit would shut its socket mid-stream)."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        for n in range(8):
            conn.sendall(b"data: %d\n\n" % n)
            if stop.wait(LIMIT / 3):
                return

    with RawServer(handler) as server:
        started = time.monotonic()
        events = [e.data for e in ws.stream_sse(server.url, idle_timeout=LIMIT)]
    assert events == [str(n) for n in range(8)]
    assert time.monotonic() - started > 2 * LIMIT


@pytest.mark.parametrize("head_came", [False, True])
def test_the_head_limit_shuts_the_requests_socket_only_while_the_head_is_awaited(
    head_came: bool,
) -> None:
    """Due with the head still awaited, the limit shuts the request's socket; once the head
    is in (``head_in``), the same limit falling due leaves the socket, now the body's, alone.
    A marker scheduled just after the limit on the watchdog thread, which runs its callbacks
    in deadline order, says when the limit has been handled."""
    mine, theirs = socket.socketpair()
    try:
        guard = _ConnectionGuard(ws.Budget(), None, lambda: None)
        guard.attach(SimpleNamespace(sock=mine))
        due = time.monotonic() + 0.05
        guard.bound_head(due)
        if head_came:
            guard.head_in()
        handled = threading.Event()
        MONOTONIC.call_at(due + 0.01, handled.set)
        assert handled.wait(5)
        assert (guard.head_timed_out, guard.fired) == (not head_came, not head_came)
        theirs.settimeout(5)
        if head_came:
            mine.sendall(b"x")
            assert theirs.recv(1) == b"x"  # still connected both ways
        else:
            assert theirs.recv(1) == b""  # shut: the peer reads the end
        guard.head_in()
        guard.request_finished(answered=False)
    finally:
        mine.close()
        theirs.close()
