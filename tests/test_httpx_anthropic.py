"""The real anthropic SDK on httpx_client(), against the FaultGateway's Anthropic Messages API:
pings keep no stream alive, the deadline holds, and errors reach the caller as ours."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, List

import anthropic
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .httpxstream import DEADLINE, FAST, IDLE, SLACK, sdk_clients
from .sdkerrors import raises_from_body

pytestmark = pytest.mark.timeout(60)

TEXT = "Hello from the watchdog_sync fault gateway."
KEY = "sk-ant-test-0123456789abcdef"
MakeSDK = Callable[..., anthropic.Anthropic]


@pytest.fixture
def sdk() -> Iterator[MakeSDK]:
    """anthropic.Anthropic clients on httpx_client() (idle 0.5 s), closed after the test."""
    with sdk_clients(anthropic.Anthropic, KEY) as make:
        yield make


def stream_text(client: anthropic.Anthropic, into: List[str]) -> str:
    events = client.messages.create(
        model="claude-test",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
    )
    for event in events:
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            into.append(event.delta.text)
    return "".join(into)


def wait_for(predicate: Callable[[], bool], limit: float = 2.0) -> bool:
    """Poll until the server side observed what the test is about (bounded)."""
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def all_ended(gateway: FaultGateway, base: str) -> bool:
    seen = gateway.requests_seen(base)
    return bool(seen) and all(r.ended_at is not None for r in seen)


def test_a_healthy_stream_arrives_whole(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("ok", api="anthropic")
    with ws.deadline(5):
        assert stream_text(sdk(base), []) == TEXT
    assert len(fault_gateway.requests_seen(base)) == 1


def test_the_stream_helper_works_too(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """messages.stream(): text_stream and the final message, through the guarded body."""
    base = fault_gateway.base_url("ok", api="anthropic")
    params: Any = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    with ws.deadline(5), sdk(base).messages.stream(**params) as stream:
        assert "".join(stream.text_stream) == TEXT
        assert stream.get_final_message().stop_reason == "end_turn"


def test_pings_do_not_keep_a_stream_alive(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """A ping every 0.1 s, never content: each send ends at 0.5 s; ours after the third."""
    base = fault_gateway.base_url("pings_only", api="anthropic", interval=0.1)
    started = time.monotonic()
    with raises_from_body(ws.StreamIdleTimeout) as info, ws.deadline(10):
        stream_text(sdk(base), [])
    assert time.monotonic() - started <= 3 * IDLE + SLACK
    assert info.value.chunks_received == 0
    verdict = ws.classify(info.seen)
    assert (verdict.reason, verdict.retryable) == ("stream_idle_timeout", True)
    assert len(fault_gateway.requests_seen(base)) == 3
    assert wait_for(lambda: all_ended(fault_gateway, base))


@pytest.mark.parametrize(
    ("scenario", "options"),
    [
        ("slow_drip", {"interval": 0.2}),
        ("pings_only", {"interval": 0.1}),
        ("no_headers", {}),
        ("silent_after_200", {}),
        ("stall_after_chunks", {}),
    ],
)
def test_the_deadline_holds_when_the_server_hangs(
    fault_gateway: FaultGateway, sdk: MakeSDK, scenario: str, options: Any
) -> None:
    """With a long idle limit, the deadline ends the call: DeadlineExceeded within +0.3 s."""
    base = fault_gateway.base_url(scenario, api="anthropic", **options)
    client = sdk(base, idle_timeout=30, max_retries=2)  # the SDK cannot swallow Cancelled
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
        stream_text(client, [])
    assert time.monotonic() - started <= DEADLINE + SLACK
    assert len(fault_gateway.requests_seen(base)) == 1
    assert wait_for(lambda: all_ended(fault_gateway, base))


def test_silent_then_ok_recovers_in_one_sdk_call(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("silent_then_ok", api="anthropic")
    with ws.deadline(5):
        assert stream_text(sdk(base), []) == TEXT
    assert [r.faulted for r in fault_gateway.requests_seen(base)] == [True, False]


def test_an_overloaded_error_mid_stream_is_a_classified_529(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """The error event reaches the caller as our HTTPStatusError, after the text before it."""
    base = fault_gateway.base_url("error_mid_stream", api="anthropic")
    parts: List[str] = []
    with raises_from_body(ws.HTTPStatusError) as info, ws.deadline(5):
        stream_text(sdk(base), parts)
    verdict = ws.classify(info.seen)  # what the SDK's caller caught, read through its wrapper
    assert (info.value.status, verdict.reason, verdict.retryable) == (529, "overloaded", False)
    assert parts  # chunks came first: a replay would duplicate them
    assert "sk-ant" not in str(info.value) and "sk-ant" not in repr(info.seen)


def test_a_huge_line_is_event_too_large(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("huge_line", api="anthropic")
    with raises_from_body(ws.StreamProtocolError) as info, ws.deadline(10):
        stream_text(sdk(base), [])
    assert info.value.reason == "event_too_large"
    assert ws.classify(info.seen) == ws.classify(info.value)
    assert wait_for(lambda: all_ended(fault_gateway, base))


def test_a_stream_without_message_stop_is_no_finish_reason(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    base = fault_gateway.base_url("no_finish_reason", api="anthropic")
    with raises_from_body(ws.StreamProtocolError) as info, ws.deadline(5):
        stream_text(sdk(base), [])
    assert info.value.reason == "no_finish_reason"
    assert ws.classify(info.seen).reason == "no_finish_reason"


def test_a_stall_after_chunks_ends_at_the_idle_limit(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    base = fault_gateway.base_url("stall_after_chunks", api="anthropic")
    with raises_from_body(ws.StreamIdleTimeout) as info, ws.deadline(10):
        stream_text(sdk(base), [])
    assert info.value.chunks_received >= 2
    verdict = ws.classify(info.seen)
    assert (verdict.reason, verdict.retryable) == ("stream_idle_timeout", False)
    assert len(fault_gateway.requests_seen(base)) == 1


def test_a_4xx_is_not_retried(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("http400", api="anthropic")
    client = sdk(base)
    with pytest.raises(anthropic.BadRequestError), ws.deadline(5):
        ws.retry_call(stream_text, client, [], policy=FAST)
    assert len(fault_gateway.requests_seen(base)) == 1


def test_retry_call_retries_an_overloaded_529(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """max_retries=0 and retry_call: the one retry owner retries OverloadedError."""
    base = fault_gateway.base_url("http529", api="anthropic", fail_first=1)
    client = sdk(base)
    with ws.deadline(5):
        assert ws.retry_call(stream_text, client, [], policy=FAST) == TEXT
    assert len(fault_gateway.requests_seen(base)) == 2


def test_budget_argument_before_headers_reaches_the_caller_as_the_sdks_cause(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """Without a scope, an end before the response is wrapped by the SDK: ours is __cause__."""
    base = fault_gateway.base_url("no_headers", api="anthropic")
    client = sdk(base, budget=ws.Budget(0.5), idle_timeout=30)
    with pytest.raises(anthropic.APIConnectionError) as info:
        stream_text(client, [])
    assert isinstance(info.value.__cause__, ws.DeadlineExceeded)
    assert ws.classify(info.value).kind == "deadline"


def test_no_headers_before_the_first_event_limit_is_wrapped_by_the_sdk(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """Raised before the response exists: anthropic's APIConnectionError, ours as __cause__."""
    base = fault_gateway.base_url("no_headers", api="anthropic")
    with pytest.raises(anthropic.APIConnectionError) as info, ws.deadline(10):
        stream_text(sdk(base), [])
    assert isinstance(info.value.__cause__, ws.StreamIdleTimeout)
    assert ws.classify(info.value).retryable  # nothing was delivered
    assert len(fault_gateway.requests_seen(base)) == 3
