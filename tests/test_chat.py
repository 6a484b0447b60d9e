"""ChatClient against the FaultGateway and raw local servers: it ends in time, retries only
before the first chunk, and says what happened."""

from __future__ import annotations

import inspect
import json
import math
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

import watchdog_sync as ws
from watchdog_sync import ChatClient, ChatStream
from watchdog_sync.testing import READER_THREAD_NAME, FaultGateway, SeenRequest

from .rawserver import RawServer, end_body, send_body_piece, send_sse_head, wait_for_disconnect

pytestmark = pytest.mark.timeout(30)

MESSAGES = [{"role": "user", "content": "hi"}]
TEXT = "Hello from the watchdog_sync fault gateway."
KEY = "test-key-0123456789"
IDLE = 0.4
FAST = ws.RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)

MakeClient = Callable[..., ChatClient]


@pytest.fixture
def make_client() -> Iterator[MakeClient]:
    """Clients with short timings (idle 0.4 s, timeout 2 s, fast retries), closed after the test."""
    clients: List[ChatClient] = []

    def make(base_url: str, **options: Any) -> ChatClient:
        api_key = options.pop("api_key", KEY)
        settings: Dict[str, Any] = {
            "model": "m",
            "idle_timeout": IDLE,
            "timeout": 2.0,
            "retry": FAST,
            **options,
        }
        client = ChatClient(base_url, api_key, **settings)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def events() -> Iterator[List[ws.Event]]:
    seen: List[ws.Event] = []
    unregister = ws.add_listener(seen.append)
    yield seen
    unregister()


def kinds(events: List[ws.Event], kind: str) -> List[ws.Event]:
    return [e for e in events if e.event == kind]


def wait_for(predicate: Callable[[], bool], limit: float = 2.0) -> bool:
    """Poll until the server side observed what the test is about (bounded)."""
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def drain(stream: ChatStream, into: List[Dict[str, Any]]) -> None:
    with stream:
        for chunk in stream:
            into.append(chunk)


# -- the happy paths ------------------------------------------------------------------------


def test_a_normal_stream_yields_every_chunk_the_text_and_what_the_server_saw(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("ok")
    with make_client(base).stream(MESSAGES, temperature=0.5) as stream:
        chunks = list(stream)
    assert len(chunks) == 6
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert (stream.text, stream.finish_reason, stream.attempts) == (TEXT, "stop", 1)
    assert stream.usage is not None and stream.usage["total_tokens"] > 0
    assert stream.stats.first_item_after is not None
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.body == {"model": "m", "messages": MESSAGES, "temperature": 0.5, "stream": True}
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["authorization"] == "[REDACTED]"
    assert seen.request_id == stream.request_id and len(stream.request_id) == 32
    assert stream.server_request_id == stream.request_id  # the gateway echoes it


def test_complete_returns_the_parsed_completion_and_sends_stream_false(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("ok")
    result = make_client(base).complete(MESSAGES, model="other", max_tokens=5)
    assert result["choices"][0]["message"]["content"] == TEXT
    assert result["model"] == "other"
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.body["stream"] is False and seen.body["max_tokens"] == 5
    assert seen.request_id is not None and len(seen.request_id) == 32


def test_reasoning_deltas_count_as_activity(make_client: MakeClient) -> None:
    """Six reasoning chunks 0.15 s apart (longer than idle in total) never trip idle=0.4."""

    def thinking(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        send_sse_head(conn)
        for n in range(6):
            send_body_piece(conn, chunk_event({"reasoning_content": f"step {n} "}))
            if stop.wait(0.15):
                return
        send_body_piece(conn, chunk_event({"content": "42"}))
        send_body_piece(conn, chunk_event({}, finish="stop"))
        send_body_piece(conn, b"data: [DONE]\n\n")
        end_body(conn)

    with RawServer(thinking) as server:
        stream = make_client(server.url).stream(MESSAGES)
        got: List[Dict[str, Any]] = []
        drain(stream, got)
    assert len(got) == 8
    assert (stream.text, stream.finish_reason) == ("42", "stop")


# -- failures before the first chunk are retried -----------------------------------------------


def test_200_then_silence_is_retried_once_and_succeeds_in_idle_plus_stream_time(
    fault_gateway: FaultGateway, make_client: MakeClient, events: List[ws.Event]
) -> None:
    base = fault_gateway.base_url("silent_then_ok")
    started = time.monotonic()
    with make_client(base).stream(MESSAGES) as stream:
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in stream)
    elapsed = time.monotonic() - started
    assert text == TEXT == stream.text
    assert stream.attempts == 2
    assert IDLE <= elapsed < IDLE + 0.05 + 0.1 + 0.6  # idle + backoff + stream, with slack
    failed = kinds(events, "attempt_failed")
    assert [(e.reason, e.attempt) for e in failed] == [("stream_idle_timeout", 1)]
    assert len(kinds(events, "backoff")) == 1
    first, second = fault_gateway.requests_seen(base)
    assert first.request_id == second.request_id == stream.request_id  # one id per call
    assert wait_for(lambda: fault_gateway.requests_seen(base)[0].client_disconnected)


@pytest.mark.parametrize(
    ("attempts", "timeout", "error"),
    [(3, 1.6, ws.RetryExhausted), (10, 1.2, ws.DeadlineExceeded)],
    ids=["attempts-first", "deadline-first"],
)
def test_silence_forever_gives_up_by_attempts_or_deadline_and_never_late(
    fault_gateway: FaultGateway,
    make_client: MakeClient,
    events: List[ws.Event],
    attempts: int,
    timeout: float,
    error: type,
) -> None:
    base = fault_gateway.base_url("silent_after_200")
    policy = ws.RetryPolicy(max_attempts=attempts, initial_backoff=0.05, jitter=0.0)
    client = make_client(base, idle_timeout=0.3, timeout=timeout, retry=policy)
    started = time.monotonic()
    with pytest.raises(error) as info:
        client.stream(MESSAGES)
    assert time.monotonic() - started <= timeout + 0.1
    err = info.value
    assert isinstance(err.last_error, ws.StreamIdleTimeout)
    assert err.request_id is not None
    seen = fault_gateway.requests_seen(base)
    assert err.attempts == len(seen) == len(kinds(events, "attempt_start"))
    reasons = [e.reason for e in kinds(events, "attempt_failed")]
    assert reasons and set(reasons) == {"stream_idle_timeout"}
    (give_up,) = kinds(events, "give_up")
    assert give_up.reason == ("retry_exhausted" if attempts == 3 else "deadline_exceeded")
    assert len(reasons) in (len(seen), len(seen) - 1)  # the deadline may cut the last one


def test_a_429_is_retried_after_the_servers_retry_after(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("http429_then_ok", retry_after=0.3)
    with make_client(base).stream(MESSAGES) as stream:
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in stream) == TEXT
    first, second = fault_gateway.requests_seen(base)
    assert first.status == 429
    assert first.ended_at is not None and second.arrived_at - first.ended_at >= 0.3


@pytest.mark.parametrize("method", ["stream", "complete"])
@pytest.mark.parametrize("scenario", ["http500_then_ok", "reset_then_ok"])
def test_a_500_or_a_reset_before_headers_is_retried_and_succeeds(
    fault_gateway: FaultGateway, make_client: MakeClient, scenario: str, method: str
) -> None:
    base = fault_gateway.base_url(scenario)
    client = make_client(base)
    if method == "stream":
        with client.stream(MESSAGES) as stream:
            list(stream)
        text = stream.text
    else:
        text = client.complete(MESSAGES)["choices"][0]["message"]["content"]
    assert text == TEXT
    assert [r.attempt for r in fault_gateway.requests_seen(base)] == [1, 2]


def test_an_empty_stream_without_finish_reason_is_retried(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("no_finish_reason", chunks=0)
    with pytest.raises(ws.RetryExhausted) as info:
        make_client(base).stream(MESSAGES)
    last = info.value.last_error
    assert isinstance(last, ws.StreamProtocolError) and last.reason == "no_finish_reason"
    assert len(fault_gateway.requests_seen(base)) == 3


# -- permanent failures fail at once --------------------------------------------------------------


@pytest.mark.parametrize("method", ["stream", "complete"])
def test_a_401_fails_at_once_with_the_servers_message_and_the_request_id(
    fault_gateway: FaultGateway, make_client: MakeClient, method: str
) -> None:
    base = fault_gateway.base_url("http401")
    with pytest.raises(ws.HTTPStatusError) as info:
        getattr(make_client(base), method)(MESSAGES)
    err = info.value
    assert (err.status, err.reason, err.retryable) == (401, "auth", False)
    assert "Incorrect API key provided (FaultGateway http401)." in str(err)
    assert "invalid_api_key" in str(err) and "api_key=" in str(err)
    (seen,) = fault_gateway.requests_seen(base)
    assert err.request_id == seen.request_id is not None


@pytest.mark.parametrize("chunks", [0, 1])
def test_a_malformed_event_fails_without_retry(
    fault_gateway: FaultGateway, make_client: MakeClient, chunks: int
) -> None:
    base = fault_gateway.base_url("malformed_json", chunks=chunks)
    got: List[Dict[str, Any]] = []
    with pytest.raises(ws.StreamProtocolError) as info:
        drain(make_client(base).stream(MESSAGES), got)
    err = info.value
    assert (err.reason, err.retryable, err.chunks_received) == ("malformed_event", False, chunks)
    assert len(got) == chunks
    assert len(fault_gateway.requests_seen(base)) == 1


def test_complete_with_a_body_that_is_not_json_is_a_malformed_response(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("malformed_json")
    with pytest.raises(ws.StreamProtocolError) as info:
        make_client(base).complete(MESSAGES)
    assert (info.value.reason, info.value.retryable) == ("malformed_response", False)
    assert len(fault_gateway.requests_seen(base)) == 1


# -- failures after the first chunk are never retried -------------------------------------------


def test_a_stall_after_three_chunks_delivers_them_then_raises_idle_timeout_once(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("stall_after_chunks", chunks=3)
    got: List[Dict[str, Any]] = []
    started = time.monotonic()
    with pytest.raises(ws.StreamIdleTimeout) as info:
        drain(make_client(base).stream(MESSAGES), got)
    assert IDLE <= time.monotonic() - started < IDLE + 0.8
    err = info.value
    assert len(got) == 3
    assert (err.chunks_received, err.retryable, err.code) == (3, False, "ETIMEDOUT")
    (seen,) = fault_gateway.requests_seen(base)
    assert err.request_id == seen.request_id


def test_a_stream_without_finish_reason_fails_after_its_chunks(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("no_finish_reason", chunks=5)
    got: List[Dict[str, Any]] = []
    with pytest.raises(ws.StreamProtocolError) as info:
        drain(make_client(base).stream(MESSAGES), got)
    err = info.value
    assert (err.reason, err.chunks_received, err.retryable) == ("no_finish_reason", 5, False)
    assert len(got) == 5
    assert len(fault_gateway.requests_seen(base)) == 1


def test_a_reset_mid_stream_is_a_transport_error_marked_not_retryable(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("reset_mid_stream")
    got: List[Dict[str, Any]] = []
    with pytest.raises(ws.TransportError) as info:
        drain(make_client(base).stream(MESSAGES), got)
    assert (info.value.transport_code, info.value.retryable) == ("ECONNRESET", False)
    assert len(got) == 2
    assert len(fault_gateway.requests_seen(base)) == 1


def test_an_outer_retry_loop_does_not_replay_a_stream_that_failed_mid_way(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("stall_after_chunks")
    client = make_client(base)
    with pytest.raises(ws.StreamIdleTimeout):
        ws.retry_call(lambda: list(client.stream(MESSAGES)), policy=FAST)
    assert len(fault_gateway.requests_seen(base)) == 1


def test_inside_an_outer_retry_loop_the_client_makes_one_attempt_per_outer_attempt(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("http500")
    outer = ws.RetryPolicy(max_attempts=2, initial_backoff=0.05, jitter=0.0)
    with pytest.raises(ws.RetryExhausted):
        ws.retry_call(make_client(base).complete, MESSAGES, policy=outer)
    assert len(fault_gateway.requests_seen(base)) == 2  # not 2 x 3


# -- error objects and stream ends from a raw server -----------------------------------------


def chunk_event(delta: Dict[str, Any], finish: Optional[str] = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return (
        b"data: "
        + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode()
        + b"\n\n"
    )


def read_request(conn: socket.socket) -> None:
    """Read a whole request (head and Content-Length body), so closing never resets."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            return
        body += piece


def serving(
    *pieces: bytes, framing: str = "chunked"
) -> Callable[[socket.socket, threading.Event], None]:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        send_sse_head(conn, framing)
        for piece in pieces:
            send_body_piece(conn, piece, framing)
        end_body(conn, framing)

    return handler


HELLO = chunk_event({"role": "assistant", "content": "Hel"})
LO = chunk_event({"content": "lo"})
STOP = chunk_event({}, finish="stop")
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("pieces", "framing"),
    [
        ((HELLO, LO, STOP, DONE), "chunked"),  # a finish_reason, then [DONE]
        ((HELLO, LO, STOP), "chunked"),  # a finish_reason, then EOF without [DONE]
        ((HELLO, LO, STOP, DONE), "close"),
    ],
    ids=["finish-then-done", "finish-then-eof", "close-delimited"],
)
def test_a_stream_ends_normally_on_done_or_on_eof_after_a_finish_reason(
    make_client: MakeClient, pieces: tuple, framing: str
) -> None:
    with RawServer(serving(*pieces, framing=framing)) as server:
        stream = make_client(server.url).stream(MESSAGES)
        got: List[Dict[str, Any]] = []
        drain(stream, got)
    assert stream.text == "Hello"
    assert len(got) == len([p for p in pieces if p != DONE])
    assert stream.finish_reason == "stop"


def test_a_finished_stream_the_server_keeps_open_ends_normally_after_idle(
    make_client: MakeClient,
) -> None:
    def finish_then_hold(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        send_sse_head(conn)
        for piece in (HELLO, LO, STOP):
            send_body_piece(conn, piece)
        wait_for_disconnect(conn, stop)

    with RawServer(finish_then_hold) as server:
        started = time.monotonic()
        with make_client(server.url).stream(MESSAGES) as stream:
            chunks = list(stream)
    assert IDLE <= time.monotonic() - started < IDLE + 0.6
    assert (len(chunks), stream.text, stream.finish_reason) == (3, "Hello", "stop")
    assert stream.stats.ended_by == "idle_timeout"


def test_a_truncated_stream_without_finish_reason_is_no_finish_reason(
    make_client: MakeClient,
) -> None:
    with RawServer(serving(HELLO, LO, b'data: {"choices": [', framing="close")) as server:
        got: List[Dict[str, Any]] = []
        with pytest.raises(ws.StreamProtocolError) as info:
            drain(make_client(server.url).stream(MESSAGES), got)
    assert (info.value.reason, info.value.chunks_received) == ("no_finish_reason", 2)
    assert "in the middle of an event" in str(info.value)


@pytest.mark.parametrize(
    ("pieces", "error", "status", "connections"),
    [
        ((HELLO, b'data: {"error": {"message": "upstream overloaded", "code": 503}}\n\n'),
         ws.HTTPStatusError, 503, 1),
        ((b'data: {"error": {"message": "upstream overloaded", "code": 503}}\n\n',),
         ws.RetryExhausted, 503, 3),
        ((b'event: error\ndata: {"error": {"message": "model not loaded", "code": "oops"}}\n\n',),
         ws.StreamProtocolError, None, 1),
    ],
    ids=["status-mid-stream", "status-before-chunks-retried", "no-status"],
)  # fmt: skip
def test_an_error_object_in_the_stream_raises_the_servers_message(
    make_client: MakeClient, pieces: tuple, error: type, status: Optional[int], connections: int
) -> None:
    with RawServer(serving(*pieces)) as server:
        got: List[Dict[str, Any]] = []
        with pytest.raises(error) as info:
            drain(make_client(server.url).stream(MESSAGES), got)
        accepted = server.accepted
    err = info.value.last_error if error is ws.RetryExhausted else info.value
    assert getattr(err, "status", None) == status
    assert ("upstream overloaded" if status else "model not loaded") in str(err)
    assert err.reason == ("unavailable" if status else "stream_error")
    assert len(got) == (1 if HELLO in pieces else 0)
    assert err.retryable is False or error is ws.RetryExhausted
    assert accepted == connections


# -- the budget ----------------------------------------------------------------------------------


def test_a_drip_fed_stream_ends_with_deadline_exceeded_at_the_timeout(
    fault_gateway: FaultGateway, make_client: MakeClient, events: List[ws.Event]
) -> None:
    base = fault_gateway.base_url("slow_drip", interval=IDLE / 2)
    got: List[Dict[str, Any]] = []
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded) as info:
        drain(make_client(base, timeout=1.2).stream(MESSAGES), got)
    assert 1.2 <= time.monotonic() - started <= 1.3
    assert len(got) >= 3
    assert info.value.request_id is not None and info.value.retryable is False
    assert len(fault_gateway.requests_seen(base)) == 1
    assert kinds(events, "attempt_failed")[-1].reason == "deadline_exceeded"


@pytest.mark.parametrize("scenario", ["no_headers", "slow_drip"])
def test_complete_against_a_server_that_never_finishes_ends_at_the_timeout(
    fault_gateway: FaultGateway, make_client: MakeClient, scenario: str
) -> None:
    base = fault_gateway.base_url(
        scenario, **({"interval": 0.1} if scenario == "slow_drip" else {})
    )
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded) as info:
        make_client(base, timeout=1.0).complete(MESSAGES)
    assert 1.0 <= time.monotonic() - started <= 1.1
    assert info.value.request_id is not None
    assert len(fault_gateway.requests_seen(base)) == 1


def test_idle_timeout_zero_disables_the_watchdog_and_the_timeout_still_ends_the_stream(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("silent_after_200")
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded):
        make_client(base, idle_timeout=0, timeout=0.8).stream(MESSAGES)
    assert 0.8 <= time.monotonic() - started <= 0.9
    assert len(fault_gateway.requests_seen(base)) == 1


def test_a_deadline_scope_caps_the_call_and_raises_at_the_scope(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("stall_after_chunks")
    client = make_client(base, idle_timeout=5, timeout=10)
    got: List[Dict[str, Any]] = []
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(0.6, stage="sample"):
        drain(client.stream(MESSAGES), got)
    assert 0.6 <= time.monotonic() - started <= 0.7
    assert info.value.stage == "sample"  # the scope's own error, not the call's
    assert len(got) == 2


def test_a_per_call_timeout_is_counted_from_the_call_and_shared_by_attempts(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("silent_after_200")
    policy = ws.RetryPolicy(max_attempts=10, initial_backoff=0.01, jitter=0.0)
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded) as info:
        make_client(base, idle_timeout=0.2, retry=policy).stream(MESSAGES, timeout=0.7)
    assert time.monotonic() - started <= 0.8
    seen = len(fault_gateway.requests_seen(base))
    # The last attempt may start just before the deadline and end before reaching the gateway.
    assert info.value.attempts >= 2
    assert seen in (info.value.attempts, info.value.attempts - 1)


def test_cancelling_an_explicit_budget_raises_operation_cancelled(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("silent_after_200")
    budget = ws.Budget()
    started = time.monotonic()
    ws.Budget(0.3).on_done(lambda _: budget.cancel())  # on the shared watchdog thread
    with pytest.raises(ws.OperationCancelled) as info:
        make_client(base, idle_timeout=5).stream(MESSAGES, budget=budget)
    assert time.monotonic() - started < 0.6
    assert info.value.request_id is not None


# -- releasing, ids, events ----------------------------------------------------------------------


def reader_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READER_THREAD_NAME]


def test_a_consumer_break_releases_the_connection_and_the_reader_at_once(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("stall_after_chunks", chunks=3)
    with make_client(base, idle_timeout=5).stream(MESSAGES) as stream:
        for _ in stream:
            break
    closed = time.monotonic()
    assert not reader_threads()
    assert wait_for(lambda: fault_gateway.requests_seen(base)[0].client_disconnected, 0.5)
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.ended_at is not None and seen.ended_at - closed < 0.2
    assert list(stream) == []  # ended: iterating again yields nothing


def test_close_from_another_thread_ends_a_waiting_consumer_quietly(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("stall_after_chunks")
    stream = make_client(base, idle_timeout=5).stream(MESSAGES)
    started = time.monotonic()
    ws.Budget(0.3).on_done(lambda _: stream.close())  # from the shared watchdog thread
    chunks = list(stream)  # the two chunks, then StopIteration when closed
    assert len(chunks) == 2
    assert 0.3 <= time.monotonic() - started < 0.6
    assert stream.stats.ended_by == "closed"


def test_a_break_without_close_releases_the_connection_when_the_stream_is_dropped(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("stall_after_chunks", chunks=3)
    for _ in make_client(base, idle_timeout=5).stream(MESSAGES):
        break
    assert wait_for(lambda: fault_gateway.requests_seen(base)[0].client_disconnected, 0.5)
    assert wait_for(lambda: not reader_threads(), 0.5)


def test_a_caller_x_request_id_is_used_for_every_attempt_and_every_error(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    ok = fault_gateway.base_url("silent_then_ok")
    with make_client(ok, headers={"x-request-id": "trace-42"}).stream(MESSAGES) as stream:
        list(stream)
    assert stream.request_id == "trace-42"
    assert [r.request_id for r in fault_gateway.requests_seen(ok)] == ["trace-42", "trace-42"]
    bad = fault_gateway.base_url("http400")
    with pytest.raises(ws.HTTPStatusError) as info:
        make_client(bad, headers={"X-Request-ID": "trace-43"}).complete(MESSAGES)
    assert info.value.request_id == "trace-43"


def test_every_event_of_a_call_carries_its_request_id_and_model(
    fault_gateway: FaultGateway, make_client: MakeClient, events: List[ws.Event]
) -> None:
    base = fault_gateway.base_url("silent_then_ok")
    with make_client(base).stream(MESSAGES, model="m2") as stream:
        list(stream)
    names = {e.event for e in events}
    assert {"attempt_start", "attempt_failed", "backoff", "first_byte", "stream_end"} <= names
    assert {(e.request_id, e.model) for e in events} == {(stream.request_id, "m2")}


def test_a_given_session_is_used_and_left_open(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("ok")
    with ws.Session() as session:
        client = make_client(base, session=session)
        client.complete(MESSAGES)
        client.close()
        assert session.adapters  # still usable: the client did not close it
        assert ChatClient(base, model="m", session=session).complete(MESSAGES)["choices"]


# -- configuration ---------------------------------------------------------------------------------


ENV = {
    "WATCHDOG_SYNC_TIMEOUT": "30",
    "WATCHDOG_SYNC_IDLE_TIMEOUT": "7.5",
    "WATCHDOG_SYNC_CONNECT_TIMEOUT": "2",
    "WATCHDOG_SYNC_MAX_ATTEMPTS": "5",
}


def settings(client: ChatClient) -> tuple:
    s = client._settings
    return (
        s.timeout,
        s.idle_timeout,
        s.first_event_timeout,
        s.connect_timeout,
        s.retry.max_attempts,
    )


def test_defaults_apply_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    with ChatClient("http://127.0.0.1:1/v1") as client:
        assert settings(client) == (600.0, 120.0, 120.0, 10.0, 6)  # first event: as idle


def test_environment_overrides_defaults_and_arguments_override_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    with ChatClient("http://127.0.0.1:1/v1") as client:
        assert settings(client) == (30.0, 7.5, 7.5, 2.0, 5)
    explicit = ChatClient(
        "http://127.0.0.1:1/v1",
        timeout=3,
        idle_timeout=None,
        connect_timeout=1,
        first_event_timeout=4,
        retry=ws.RetryPolicy(max_attempts=2),
    )
    with explicit:
        assert settings(explicit) == (3.0, None, 4.0, 1.0, 2)
    monkeypatch.setenv("WATCHDOG_SYNC_IDLE_TIMEOUT", "0")
    with ChatClient("http://127.0.0.1:1/v1", timeout=None) as client:
        assert settings(client)[:2] == (None, None)  # 0 disables; None: no own limit


def test_the_signature_shows_each_environment_variable_and_its_default() -> None:
    shown = {
        name: repr(parameter.default)
        for name, parameter in inspect.signature(ChatClient).parameters.items()
    }
    assert shown["timeout"] == "$WATCHDOG_SYNC_TIMEOUT or 600"
    assert shown["idle_timeout"] == "$WATCHDOG_SYNC_IDLE_TIMEOUT or 120"
    assert shown["connect_timeout"] == "$WATCHDOG_SYNC_CONNECT_TIMEOUT or 10"


def test_the_environment_idle_timeout_ends_a_silent_stream(
    fault_gateway: FaultGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_SYNC_IDLE_TIMEOUT", "0.3")
    monkeypatch.setenv("WATCHDOG_SYNC_MAX_ATTEMPTS", "1")
    base = fault_gateway.base_url("silent_after_200")
    started = time.monotonic()
    with ChatClient(base, model="m") as client, pytest.raises(ws.RetryExhausted) as info:
        client.stream(MESSAGES)
    assert 0.3 <= time.monotonic() - started < 0.8
    assert isinstance(info.value.last_error, ws.StreamIdleTimeout)
    assert "idle_timeout=" in str(info.value.last_error)
    assert len(fault_gateway.requests_seen(base)) == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("WATCHDOG_SYNC_TIMEOUT", "ten"),
        ("WATCHDOG_SYNC_TIMEOUT", "0"),
        ("WATCHDOG_SYNC_IDLE_TIMEOUT", "-1"),
        ("WATCHDOG_SYNC_CONNECT_TIMEOUT", "0x10"),
        ("WATCHDOG_SYNC_MAX_ATTEMPTS", "0"),
        ("WATCHDOG_SYNC_MAX_ATTEMPTS", "2.5"),
    ],
)
def test_a_malformed_environment_value_raises_naming_the_variable_and_value(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as info:
        ChatClient("http://127.0.0.1:1/v1")
    assert name in str(info.value) and repr(value) in str(info.value)


URL = "http://127.0.0.1:1/v1"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"base_url": 5}, TypeError, "base_url must be a str"),
        ({"base_url": "ftp://host/v1"}, ValueError, "http:// or https://"),
        ({"base_url": "http:///v1"}, ValueError, "http:// or https://"),
        ({"base_url": "http://u:p@host/v1"}, ValueError, "credentials"),
        ({"base_url": "http://host/v1?api-key=x"}, ValueError, "query string"),
        ({"base_url": "http://host/v1/chat/completions"}, ValueError, "stop before"),
        ({"api_key": 5}, TypeError, "api_key must be a str"),
        ({"api_key": "two words"}, ValueError, "no spaces"),
        ({"model": ""}, TypeError, "model must be a non-empty str"),
        ({"timeout": 0}, ValueError, "timeout must be > 0"),
        ({"timeout": "5"}, TypeError, "timeout must be a number"),
        ({"idle_timeout": math.nan}, ValueError, "idle_timeout must be a number"),
        ({"connect_timeout": True}, TypeError, "connect_timeout must be a number"),
        ({"retry": 3}, TypeError, "retry must be a watchdog_sync.RetryPolicy"),
        ({"session": object()}, TypeError, "session must be a watchdog_sync.Session"),
        ({"headers": {"X-A": 1}}, TypeError, "headers must map str to str"),
    ],
)
def test_bad_client_arguments_raise_clear_errors(
    kwargs: Dict[str, Any], error: type, match: str
) -> None:
    options = {"base_url": URL, **kwargs}
    with pytest.raises(error, match=match):
        ChatClient(**options)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("hi",), {}, TypeError, "messages must be a list of dicts"),
        (([],), {}, ValueError, "messages must not be empty"),
        ((["hi"],), {}, TypeError, r"messages\[0\] must be a dict"),
        (([{"content": "hi"}],), {}, ValueError, r"messages\[0\] needs a 'role'"),
        ((MESSAGES,), {"stream": True}, TypeError, "stream= is not a request parameter"),
        ((MESSAGES,), {"temperature": math.nan}, TypeError, "JSON-serializable"),
        ((MESSAGES,), {"timeout": -1}, ValueError, "timeout must be > 0"),
        ((MESSAGES,), {"budget": 5}, TypeError, "budget must be a watchdog_sync.Budget"),
        ((MESSAGES,), {"model": 5}, TypeError, "model must be a non-empty str"),
    ],
)
@pytest.mark.parametrize("method", ["stream", "complete"])
def test_bad_call_arguments_raise_clear_errors_before_any_request(
    method: str, args: tuple, kwargs: Dict[str, Any], error: type, match: str
) -> None:
    with ChatClient(URL, model="m") as client, pytest.raises(error, match=match):
        getattr(client, method)(*args, **kwargs)


def test_a_model_is_required_from_the_client_or_the_call() -> None:
    with ChatClient(URL) as client, pytest.raises(ValueError, match="no model"):
        client.stream(MESSAGES)


def test_repr_shows_base_url_and_model_only_and_a_closed_client_refuses_calls() -> None:
    client = ChatClient(URL + "/", KEY, model="m")
    assert repr(client) == "ChatClient(base_url='http://127.0.0.1:1/v1', model='m')"
    client.close()
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.complete(MESSAGES)


def test_seen_requests_are_snapshots_with_secrets_redacted(
    fault_gateway: FaultGateway, make_client: MakeClient
) -> None:
    base = fault_gateway.base_url("ok")
    make_client(base).complete(MESSAGES)
    (seen,) = fault_gateway.requests_seen(base)
    assert isinstance(seen, SeenRequest)
    assert KEY not in repr(seen)
