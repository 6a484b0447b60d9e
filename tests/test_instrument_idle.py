"""instrument(idle_timeout=..., first_event_timeout=...): the stream rules for every event stream.

The SDKs as they are (their 600 s read timeout, no client of ours) against the FaultGateway on
127.0.0.1: a stream silent before its first event is sent again, a stalled one ends, a cut one
is no_finish_reason, an oversized event is event_too_large.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Callable, Iterator, List

import anthropic
import openai
import pytest
import requests
import sseclient

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .rawserver import RawServer, end_body, read_request_head, send_body_piece, send_sse_head
from .sdkerrors import raises_from_body

pytestmark = pytest.mark.timeout(60)

IDLE = 0.5
SLACK = 1.0  # two noisy shared cores
MESSAGES = [{"role": "user", "content": "hi"}]
KEY = "sk-test-0123456789abcdef"
TEXT = "Hello from the watchdog_sync fault gateway."


@pytest.fixture
def idle() -> Iterator[None]:
    undo = ws.instrument(idle_timeout=IDLE)
    yield  # pytest runs the rest whatever the test did
    undo()


@pytest.fixture(scope="module")
def gateway() -> Iterator[FaultGateway]:
    with FaultGateway() as gw:
        yield gw


def openai_text(base: str, **options: Any) -> str:
    """The openai SDK with its defaults (but retries, off unless given): a stream read whole."""
    options.setdefault("max_retries", 0)
    with openai.OpenAI(base_url=base, api_key=KEY, **options) as client:
        chunks = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def anthropic_text(base: str) -> str:
    with (
        anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0) as client,
        client.messages.stream(model="m", max_tokens=8, messages=MESSAGES) as stream,
    ):
        return "".join(stream.text_stream)


def requests_text(base: str) -> str:
    """requests and sseclient-py, as a hand-written client has them."""
    payload = {"model": "m", "messages": MESSAGES, "stream": True}
    with requests.post(f"{base}/chat/completions", json=payload, stream=True, timeout=60) as r:
        text = ""
        for event in sseclient.SSEClient(r).events():
            if event.data == "[DONE]":
                break
            choices = json.loads(event.data).get("choices") or [{}]
            text += (choices[0].get("delta") or {}).get("content") or ""
        return text


READERS: List[Callable[[str], str]] = [openai_text, anthropic_text, requests_text]
API = {openai_text: "openai", anthropic_text: "anthropic", requests_text: "openai"}
IDS = ["openai", "anthropic", "requests"]


def _route(gateway: FaultGateway, scenario: str, read: Callable[[str], str]) -> str:
    return gateway.base_url(scenario, api=API[read])


@pytest.mark.parametrize("read", READERS, ids=IDS)
def test_a_stream_silent_before_its_first_event_is_sent_again(
    idle: None, gateway: FaultGateway, read: Callable[[str], str]
) -> None:
    """silent_then_ok, the SDK's retries off: one good stream, after one silent send."""
    base = _route(gateway, "silent_then_ok", read)
    started = time.monotonic()
    assert read(base) == TEXT
    assert time.monotonic() - started < IDLE + SLACK
    assert len(gateway.requests_seen(base)) == 2


@pytest.mark.parametrize("read", READERS, ids=IDS)
@pytest.mark.parametrize(
    "scenario, sends",
    [("pings_only", 3), ("stall_after_chunks", 1)],  # data delivered: never sent again
)
def test_a_silent_stream_ends_at_the_idle_limit(
    idle: None, gateway: FaultGateway, read: Callable[[str], str], scenario: str, sends: int
) -> None:
    """Pings only: sent three times, then StreamIdleTimeout; a stall after chunks: at once."""
    base = _route(gateway, scenario, read)
    started = time.monotonic()
    with raises_from_body(ws.StreamIdleTimeout, sdk=API[read]) as raised:
        read(base)
    assert time.monotonic() - started < sends * IDLE + SLACK
    assert (raised.value.chunks_received == 0) == (sends == 3)
    assert len(gateway.requests_seen(base)) == sends


@pytest.mark.parametrize("read", READERS, ids=IDS)
@pytest.mark.parametrize(
    "scenario, reason", [("no_finish_reason", "no_finish_reason"), ("huge_line", "event_too_large")]
)
def test_a_cut_or_oversized_stream_is_a_protocol_error(
    idle: None, gateway: FaultGateway, read: Callable[[str], str], scenario: str, reason: str
) -> None:
    with raises_from_body(ws.StreamProtocolError, sdk=API[read]) as raised:
        read(_route(gateway, scenario, read))
    assert raised.value.reason == reason


@pytest.mark.parametrize("read", [openai_text, requests_text], ids=["openai", "requests"])
def test_inside_a_retry_owner_a_silent_stream_raises_for_the_owner(
    idle: None, gateway: FaultGateway, read: Callable[[str], str]
) -> None:
    """retry_call owns the retries: its attempt sees StreamIdleTimeout, and sends again itself."""
    base = gateway.base_url("silent_then_ok")
    failures: List[BaseException] = []

    def classify(error: BaseException) -> ws.Classification:
        failures.append(error)
        return ws.classify(error)

    policy = ws.RetryPolicy(max_attempts=3, initial_backoff=0.01, classify=classify)
    assert ws.retry_call(lambda: read(base), policy=policy) == TEXT
    assert [type(error) for error in failures] == [ws.StreamIdleTimeout]
    assert len(gateway.requests_seen(base)) == 2


def test_inside_a_scope_the_stream_rules_apply_too(idle: None, gateway: FaultGateway) -> None:
    base = gateway.base_url("silent_then_ok")
    with ws.deadline(10):
        assert openai_text(base) == TEXT
    assert len(gateway.requests_seen(base)) == 2


def test_a_first_event_limit_of_its_own(gateway: FaultGateway) -> None:
    """first_event_timeout alone: the silent send is given up on at it, the idle limit off."""
    undo = ws.instrument(first_event_timeout=IDLE)
    try:
        base = gateway.base_url("silent_then_ok")
        assert openai_text(base) == TEXT
        assert len(gateway.requests_seen(base)) == 2
    finally:
        undo()


@pytest.mark.parametrize("off", [0, -1, None, float("inf")])
def test_an_idle_limit_turned_off_leaves_streams_alone(gateway: FaultGateway, off: Any) -> None:
    """Off (None, inf, <= 0): the SDK's own read timeout rules, as without the option."""
    undo = ws.instrument(idle_timeout=off)
    try:
        base = gateway.base_url("silent_then_ok")
        with pytest.raises(openai.APITimeoutError):
            openai_text(base, timeout=IDLE)
        assert len(gateway.requests_seen(base)) == 1
    finally:
        undo()


def test_undo_restores_the_sdks_own_timeouts(gateway: FaultGateway) -> None:
    ws.instrument(idle_timeout=IDLE)()
    base = gateway.base_url("stall_after_chunks")
    with pytest.raises(openai.APITimeoutError):
        openai_text(base, timeout=IDLE)


def test_the_limits_can_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, gateway: FaultGateway
) -> None:
    monkeypatch.setenv("WATCHDOG_SYNC_INSTRUMENT_IDLE_TIMEOUT", "30")
    monkeypatch.setenv("WATCHDOG_SYNC_INSTRUMENT_FIRST_EVENT_TIMEOUT", str(IDLE))
    undo = ws.instrument()
    try:
        base = gateway.base_url("silent_then_ok")
        started = time.monotonic()
        assert openai_text(base) == TEXT
        assert time.monotonic() - started < IDLE + SLACK
    finally:
        undo()


def test_the_tightest_live_limit_applies(gateway: FaultGateway) -> None:
    first = ws.instrument(idle_timeout=30)
    second = ws.instrument(idle_timeout=IDLE)
    try:
        base = gateway.base_url("stall_after_chunks")
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout):
            openai_text(base)
        assert time.monotonic() - started < IDLE + SLACK
    finally:
        second()
        first()


@pytest.mark.parametrize(
    "options, error",
    [
        ({"idle_timeout": "5"}, TypeError),
        ({"idle_timeout": float("nan")}, ValueError),
        ({"first_event_timeout": True}, TypeError),
    ],
)
def test_a_bad_limit_is_refused(options: Any, error: type) -> None:
    name = next(iter(options))
    with pytest.raises(error, match=name):
        ws.instrument(**options)


def test_a_malformed_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_SYNC_INSTRUMENT_IDLE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="WATCHDOG_SYNC_INSTRUMENT_IDLE_TIMEOUT"):
        ws.instrument()


def test_a_reset_requests_stream_keeps_requests_error(idle: None, gateway: FaultGateway) -> None:
    """A body read that fails below the stream rules is requests' ChunkedEncodingError, as before."""
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        requests_text(gateway.base_url("reset_mid_stream"))


def test_a_requests_completion_that_is_no_stream_is_left_alone(
    idle: None, gateway: FaultGateway
) -> None:
    base = gateway.base_url("ok")
    payload = {"model": "m", "messages": MESSAGES}
    answer = requests.post(f"{base}/chat/completions", json=payload, timeout=30).json()
    assert answer["choices"][0]["message"]["content"] == TEXT


def _error_event_echoing_the_key(conn: socket.socket, stop: threading.Event) -> None:
    read_request_head(conn)
    send_sse_head(conn)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": f"bad {KEY}"}}
    send_body_piece(conn, b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n")
    end_body(conn)


def test_an_error_event_through_requests_never_shows_the_key(idle: None) -> None:
    """An Anthropic error event that echoes the request's key: the error masks it."""
    with RawServer(_error_event_echoing_the_key) as server:
        response = requests.get(server.url, headers={"x-api-key": KEY}, stream=True, timeout=30)
        with pytest.raises(Exception) as info:
            b"".join(response.iter_content(None))
        response.close()
    assert ws.classify(info.value).reason == "overloaded"
    assert KEY not in str(info.value) and KEY not in repr(info.value)
