"""The real openai SDK on httpx_client(), against the FaultGateway: every call ends in time,
silence before the first event is sent again, and what we raise reaches the caller as ours."""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Iterator, List

import httpcore2
import httpx2
import openai
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .httpxstream import DEADLINE, FAST, IDLE, KEY, MESSAGES, SLACK, sdk_clients

pytestmark = pytest.mark.timeout(60)

TEXT = "Hello from the watchdog_sync fault gateway."
MakeSDK = Callable[..., openai.OpenAI]


@pytest.fixture
def sdk() -> Iterator[MakeSDK]:
    """openai.OpenAI clients on httpx_client() (idle 0.5 s, no SDK retries), closed after."""
    with sdk_clients(openai.OpenAI, KEY) as make:
        yield make


def stream_text(client: openai.OpenAI, into: List[str]) -> str:
    for chunk in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            into.append(chunk.choices[0].delta.content)
    return "".join(into)


def wait_for(predicate: Callable[[], bool], limit: float = 2.0) -> bool:
    """Poll until the server side observed what the test is about (bounded)."""
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def all_disconnected(gateway: FaultGateway, base: str) -> bool:
    seen = gateway.requests_seen(base)
    return bool(seen) and all(r.ended_at is not None for r in seen)


def test_a_healthy_stream_arrives_whole(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("ok")
    with ws.deadline(5):
        assert stream_text(sdk(base), []) == TEXT
    seen = fault_gateway.requests_seen(base)
    assert len(seen) == 1 and not seen[0].client_disconnected


def test_a_plain_completion_works(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """A non-streaming call goes through the bounded body path unchanged."""
    base = fault_gateway.base_url("ok")
    with ws.deadline(5):
        answer = sdk(base).chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content == TEXT


@pytest.mark.parametrize(
    ("scenario", "options"),
    [
        ("slow_drip", {"interval": 0.2}),
        ("no_headers", {}),
        ("silent_after_200", {}),
        ("keepalive_only", {"interval": 0.2}),
        ("stall_after_chunks", {}),
    ],
)
def test_the_deadline_holds_when_the_server_hangs(
    fault_gateway: FaultGateway, sdk: MakeSDK, scenario: str, options: Any
) -> None:
    """With a long idle limit, the deadline ends the call: DeadlineExceeded within +0.3 s."""
    base = fault_gateway.base_url(scenario, **options)
    client = sdk(base, idle_timeout=30)
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
        stream_text(client, [])
    assert time.monotonic() - started <= DEADLINE + SLACK
    assert wait_for(lambda: all_disconnected(fault_gateway, base))


@pytest.mark.parametrize("scenario", ["silent_after_200", "no_headers", "keepalive_only"])
def test_silence_before_the_first_event_ends_at_its_limit(
    fault_gateway: FaultGateway, sdk: MakeSDK, scenario: str
) -> None:
    """Each send waits first_event_timeout; after the third the caller gets our error."""
    base = fault_gateway.base_url(scenario)
    started = time.monotonic()
    with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
        stream_text(sdk(base), [])
    assert time.monotonic() - started <= 3 * IDLE + SLACK
    assert info.value.chunks_received == 0
    assert len(fault_gateway.requests_seen(base)) == 3
    assert wait_for(lambda: all_disconnected(fault_gateway, base))


def test_a_stall_after_chunks_ends_at_the_idle_limit(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """Chunks were delivered: the stream is not sent again; StreamIdleTimeout after idle."""
    base = fault_gateway.base_url("stall_after_chunks")
    parts: List[str] = []
    started = time.monotonic()
    with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
        stream_text(sdk(base), parts)
    assert time.monotonic() - started <= IDLE + SLACK + 0.1  # + the 2 chunks' 20 ms
    assert parts and info.value.chunks_received >= 2
    assert len(fault_gateway.requests_seen(base)) == 1
    assert wait_for(lambda: all_disconnected(fault_gateway, base))


def test_silent_then_ok_recovers_in_one_sdk_call(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """The seed incident: the silent first stream is sent again; the caller sees one stream."""
    base = fault_gateway.base_url("silent_then_ok")
    with ws.deadline(5):
        assert stream_text(sdk(base), []) == TEXT
    seen = fault_gateway.requests_seen(base)
    assert [r.faulted for r in seen] == [True, False]
    assert wait_for(lambda: fault_gateway.requests_seen(base)[0].client_disconnected)


def test_a_huge_line_is_event_too_large(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """A 64 MiB line stops at the 8 MiB cap: StreamProtocolError('event_too_large')."""
    base = fault_gateway.base_url("huge_line")
    with pytest.raises(ws.StreamProtocolError) as info, ws.deadline(10):
        stream_text(sdk(base), [])
    assert info.value.reason == "event_too_large"
    assert wait_for(lambda: all_disconnected(fault_gateway, base))


def test_a_cut_stream_raises_no_finish_reason(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """Five chunks, then a clean end without finish_reason or [DONE]: not a whole answer."""
    base = fault_gateway.base_url("no_finish_reason")
    parts: List[str] = []
    with pytest.raises(ws.StreamProtocolError) as info, ws.deadline(5):
        stream_text(sdk(base), parts)
    assert info.value.reason == "no_finish_reason"
    assert info.value.chunks_received == 5 and not info.value.retryable
    assert "".join(parts) == TEXT


def test_budget_argument_is_the_boundary(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """httpx_client(budget=...) outside any scope: the caller gets DeadlineExceeded itself."""
    base = fault_gateway.base_url("slow_drip", interval=0.2)
    client = sdk(base, budget=ws.Budget(1.0), idle_timeout=30)
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded):
        stream_text(client, [])
    assert time.monotonic() - started <= 1.0 + SLACK


def test_a_4xx_is_not_retried(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """retry_call around the SDK (max_retries=0) sends a 400 once and raises the SDK's error."""
    base = fault_gateway.base_url("http400")
    client = sdk(base)
    with pytest.raises(openai.BadRequestError) as info, ws.deadline(5):
        ws.retry_call(stream_text, client, [], policy=FAST)
    assert ws.classify(info.value).reason == "invalid_request"
    assert len(fault_gateway.requests_seen(base)) == 1


@pytest.mark.parametrize("scenario", ["http500_then_ok", "reset_then_ok"])
def test_retry_call_is_the_one_retry_owner(
    fault_gateway: FaultGateway, sdk: MakeSDK, scenario: str
) -> None:
    """A 500 or a reset before headers: retry_call retries the SDK call, the SDK does not."""
    base = fault_gateway.base_url(scenario)
    client = sdk(base)
    with ws.deadline(5):
        text = ws.retry_call(lambda: stream_text(client, []), policy=FAST)
    assert text == TEXT
    assert len(fault_gateway.requests_seen(base)) == 2


def test_budget_argument_before_headers_reaches_the_caller_as_ours(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """openai wraps only httpx's own errors: our DeadlineExceeded reaches its caller as is."""
    base = fault_gateway.base_url("no_headers")
    client = sdk(base, budget=ws.Budget(0.5), idle_timeout=30, max_retries=2)
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded):
        stream_text(client, [])
    assert time.monotonic() - started <= 0.5 + SLACK
    assert len(fault_gateway.requests_seen(base)) == 1


def _chain(exc: BaseException) -> List[BaseException]:
    nodes: List[BaseException] = []
    pending: List[Any] = [exc]
    while pending and len(nodes) < 32:
        node = pending.pop()
        if isinstance(node, BaseException) and all(node is not seen for seen in nodes):
            nodes.append(node)
            pending.extend((node.__cause__, node.__context__))
    return nodes


@pytest.mark.parametrize(
    ("scenario", "options"),
    [("no_headers", {}), ("no_headers", {"budget": "0.5"}), ("slow_drip", {"budget": "0.5"})],
)
def test_our_errors_chain_no_request_that_holds_the_key(
    fault_gateway: FaultGateway, sdk: MakeSDK, scenario: str, options: Any
) -> None:
    """A first-event timeout or a budget= end is raised outside httpx's error: no key in it."""
    base = fault_gateway.base_url(scenario)
    budget = ws.Budget(float(options["budget"])) if "budget" in options else None
    client = sdk(base, budget=budget, idle_timeout=30 if budget else IDLE)
    with pytest.raises(ws.WatchdogError) as info:
        stream_text(client, [])
    text = "".join(traceback.format_exception(info.type, info.value, info.tb))
    assert KEY not in text
    foreign = (httpx2.HTTPError, httpcore2.TimeoutException, httpcore2.NetworkError)
    for node in _chain(info.value):  # an httpx error's .request would hold the headers
        assert not isinstance(node, foreign), f"{type(node).__name__} is chained to ours"


def test_inside_a_retry_owner_a_silent_stream_is_not_sent_again_by_the_transport(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """One retry owner: inside retry_call(max_attempts=2) a silent stream costs exactly two
    requests (the transport raises, the owner retries once), never three per attempt."""
    base = fault_gateway.base_url("silent_after_200")
    policy = ws.RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=0.0)
    client = sdk(base)
    with pytest.raises(ws.RetryExhausted) as info, ws.deadline(8):
        ws.retry_call(stream_text, client, [], policy=policy)
    assert isinstance(info.value.last_error, ws.StreamIdleTimeout)
    assert info.value.attempts == 2
    assert len(fault_gateway.requests_seen(base)) == 2
    assert wait_for(lambda: all_disconnected(fault_gateway, base))


def test_inside_a_retry_owner_silent_then_ok_is_recovered_by_the_owner(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """The owner's second attempt gets the whole answer: two requests, one stream seen."""
    base = fault_gateway.base_url("silent_then_ok")
    policy = ws.RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=0.0)
    with ws.deadline(8):
        assert ws.retry_call(stream_text, sdk(base), [], policy=policy) == TEXT
    assert [r.faulted for r in fault_gateway.requests_seen(base)] == [True, False]
