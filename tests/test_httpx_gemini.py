"""The real google-genai SDK on httpx_client(), against the FaultGateway's Gemini API: a
silent start is sent again, a cut stream is no_finish_reason, the deadline holds, and its
errors are classified (RetryInfo's delay, used-up quotas, too-long prompts)."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterator, List, Optional

import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .httpxstream import FAST, SLACK

# Shorter than the other SDK tests' (0.5 s, 1.5 s): the unit suite is near its 5 minutes.
IDLE = 0.3
DEADLINE = 0.8

pytestmark = pytest.mark.timeout(60)

TEXT = "Hello from the watchdog_sync fault gateway."
KEY = "AIzaSyTest-0123456789abcdefghijklmnopqrs"
MODEL = "gemini-test"
MakeSDK = Callable[..., genai.Client]


@pytest.fixture
def sdk() -> Iterator[MakeSDK]:
    """genai.Client makers: on httpx_client() (idle 0.3 s) with the SDK's retries off."""
    made: List[Any] = []

    def make(base_url: str, **options: Any) -> genai.Client:
        http = ws.httpx_client(**{"idle_timeout": IDLE, **options})
        made.append(http)
        return genai.Client(
            api_key=KEY,
            http_options=types.HttpOptions(
                base_url=base_url,
                httpx_client=http,
                retry_options=types.HttpRetryOptions(attempts=1),  # retry_call owns retries
            ),
        )

    try:
        yield make
    finally:
        for http in made:
            http.close()


def stream_text(client: genai.Client, into: Optional[List[str]] = None) -> str:
    parts = [] if into is None else into
    for chunk in client.models.generate_content_stream(model=MODEL, contents="hi"):
        parts.append(chunk.text or "")
    return "".join(parts)


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


def test_a_whole_stream_arrives(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("ok", api="gemini")
    with ws.deadline(5):
        assert stream_text(sdk(base)) == TEXT
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.stream and ":streamGenerateContent" in seen.path
    assert seen.headers["x-goog-api-key"] == "[REDACTED]"


def test_one_answer_arrives_whole(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("ok", api="gemini")
    with ws.deadline(5):
        response = sdk(base).models.generate_content(model=MODEL, contents="hi there")
    assert response.text == TEXT
    assert response.candidates and response.candidates[0].finish_reason == "STOP"
    assert response.usage_metadata and response.usage_metadata.prompt_token_count == 2


def test_a_stall_ends_at_the_idle_limit(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("stall_after_chunks", api="gemini")
    parts: List[str] = []
    started = time.monotonic()
    with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
        stream_text(sdk(base), parts)
    assert time.monotonic() - started <= IDLE + 0.5 + SLACK
    assert info.value.chunks_received >= 2 and "".join(parts)
    assert len(fault_gateway.requests_seen(base)) == 1
    assert wait_for(lambda: all_ended(fault_gateway, base))


def test_a_silent_start_is_sent_again_and_the_whole_answer_arrives(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """A Gemini request asks for its stream by its URL: the transport knows it is one."""
    base = fault_gateway.base_url("silent_then_ok", api="gemini")
    with ws.deadline(5):
        assert stream_text(sdk(base)) == TEXT
    assert [r.faulted for r in fault_gateway.requests_seen(base)] == [True, False]


def test_inside_retry_call_a_silent_start_is_left_to_the_owner(
    fault_gateway: FaultGateway, sdk: MakeSDK
) -> None:
    """One retry owner: inside retry_call the transport raises instead of sending again."""
    base = fault_gateway.base_url("silent_after_200", api="gemini")
    one = ws.RetryPolicy(max_attempts=1)
    with pytest.raises(ws.RetryExhausted) as info, ws.deadline(5):
        ws.retry_call(stream_text, sdk(base), policy=one)
    assert isinstance(info.value.last_error, ws.StreamIdleTimeout)
    assert len(fault_gateway.requests_seen(base)) == 1


def test_a_cut_stream_is_no_finish_reason(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("no_finish_reason", api="gemini")
    parts: List[str] = []
    with pytest.raises(ws.StreamProtocolError) as info, ws.deadline(5):
        stream_text(sdk(base), parts)
    assert info.value.reason == "no_finish_reason"
    assert "".join(parts) == TEXT  # every chunk came; only the finishReason is missing
    assert not ws.classify(info.value).retryable


def test_the_deadline_ends_a_dripping_stream(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("slow_drip", api="gemini", interval=0.2)
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
        stream_text(sdk(base, idle_timeout=30))
    assert time.monotonic() - started <= DEADLINE + SLACK
    assert len(fault_gateway.requests_seen(base)) == 1
    assert wait_for(lambda: all_ended(fault_gateway, base))


def test_an_error_mid_stream_is_a_classified_503(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """Gemini's error payload inside the stream, after chunks: ours, and not retried."""
    base = fault_gateway.base_url("error_mid_stream", api="gemini")
    parts: List[str] = []
    with pytest.raises(ws.HTTPStatusError) as info, ws.deadline(5):
        stream_text(sdk(base), parts)
    verdict = ws.classify(info.value)
    assert (info.value.status, verdict.reason, verdict.retryable) == (503, "unavailable", False)
    assert "".join(parts) and KEY not in str(info.value)


def test_retry_call_is_the_one_owner_of_a_503(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    base = fault_gateway.base_url("http503", api="gemini", fail_first=1)
    with ws.deadline(5):
        assert ws.retry_call(stream_text, sdk(base), policy=FAST) == TEXT
    assert len(fault_gateway.requests_seen(base)) == 2


def test_instrument_binds_the_sdk_as_it_is(fault_gateway: FaultGateway) -> None:
    """No httpx_client(): after instrument(), deadline() ends the SDK's own client's drip."""
    base = fault_gateway.base_url("slow_drip", api="gemini", interval=0.2)
    client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=base))
    undo = ws.instrument()
    started = time.monotonic()
    try:
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
            stream_text(client)
    finally:
        undo()
        client.close()
    assert time.monotonic() - started <= DEADLINE + SLACK
    assert len(fault_gateway.requests_seen(base)) == 1
    assert wait_for(lambda: all_ended(fault_gateway, base))


@pytest.mark.parametrize(
    ("scenario", "error", "reason", "retryable", "retry_after"),
    [
        ("http429", genai_errors.ClientError, "rate_limited", True, 1.0),  # RetryInfo's "1s"
        ("http503", genai_errors.ServerError, "unavailable", True, None),
        ("http400", genai_errors.ClientError, "invalid_request", False, None),
        ("http401", genai_errors.ClientError, "auth", False, None),
    ],
)
def test_classify_reads_the_sdks_errors(
    fault_gateway: FaultGateway,
    sdk: MakeSDK,
    scenario: str,
    error: type,
    reason: str,
    retryable: bool,
    retry_after: Optional[float],
) -> None:
    base = fault_gateway.base_url(scenario, api="gemini")
    with pytest.raises(genai_errors.APIError) as info, ws.deadline(5):
        stream_text(sdk(base))
    assert type(info.value) is error
    verdict = ws.classify(info.value)
    assert (verdict.kind, verdict.reason, verdict.retryable) == ("http", reason, retryable)
    assert verdict.retry_after == retry_after
    assert len(fault_gateway.requests_seen(base)) == 1


def _google_error(code: int, status: str, message: str, *details: Any) -> genai_errors.APIError:
    body = {"error": {"code": code, "message": message, "status": status, "details": [*details]}}
    genai_errors.APIError.raise_error(code, json.loads(json.dumps(body)), None)
    raise AssertionError("raise_error returned")


def _raised(code: int, status: str, message: str, *details: Any) -> BaseException:
    try:
        _google_error(code, status, message, *details)
    except genai_errors.APIError as exc:
        return exc
    raise AssertionError("nothing raised")


RETRY_IN_36S = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "36s"}
QUOTA = "You exceeded your current quota, please check your plan and billing details."


def _quota(quota_id: str) -> Any:
    return {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [{"quotaMetric": "generativelanguage.googleapis.com/x", "quotaId": quota_id}],
    }


def test_a_per_minute_quota_is_a_rate_limit_retried_after_its_retry_delay() -> None:
    exc = _raised(429, "RESOURCE_EXHAUSTED", QUOTA, _quota("PerMinute-FreeTier"), RETRY_IN_36S)
    verdict = ws.classify(exc)
    assert (verdict.reason, verdict.retryable, verdict.retry_after) == ("rate_limited", True, 36.0)


def test_a_used_up_daily_quota_is_not_retried() -> None:
    daily = _quota("GenerateRequestsPerDayPerProjectPerModel-FreeTier")
    verdict = ws.classify(_raised(429, "RESOURCE_EXHAUSTED", QUOTA, daily, RETRY_IN_36S))
    assert (verdict.reason, verdict.retryable) == ("quota_exceeded", False)
    no_quota = _raised(429, "RESOURCE_EXHAUSTED", "Quota exceeded for metric: x, limit: 0")
    assert ws.classify(no_quota).reason == "quota_exceeded"


def test_a_too_long_prompt_is_context_length() -> None:
    message = (
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
    )
    verdict = ws.classify(_raised(400, "INVALID_ARGUMENT", message))
    assert (verdict.reason, verdict.retryable) == ("context_length", False)


def test_invalid_utf8_is_a_malformed_event(fault_gateway: FaultGateway, sdk: MakeSDK) -> None:
    """google-genai would decode it with replacement characters: ours says it is malformed."""
    base = fault_gateway.base_url("invalid_utf8", api="gemini")
    with pytest.raises(ws.StreamProtocolError) as info, ws.deadline(5):
        stream_text(sdk(base))
    assert info.value.reason == "malformed_event"
