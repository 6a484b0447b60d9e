"""RetryPolicy(attempt_timeout=...): each attempt bounded inside one budget, on real sockets."""

from __future__ import annotations

import datetime
import math
import time
from typing import Any, Iterator, List

import openai
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FakeClock, FaultGateway

from .httpxstream import KEY, MESSAGES

pytestmark = pytest.mark.timeout(60)

LIMIT = 0.5  # each attempt's own limit
BUDGET = 4.0  # the whole call's
SLACK = 1.0  # how far past a limit a call may end on a loaded 2-core machine
POLICY = ws.RetryPolicy(max_attempts=6, initial_backoff=0.05, jitter=0.0, attempt_timeout=LIMIT)
TEXT = "Hello from the watchdog_sync fault gateway."


@pytest.fixture
def openai_sdk() -> Iterator[Any]:
    """A maker of openai.OpenAI clients on httpx_client() with no SDK retries, closed after."""
    made: List[Any] = []

    def make(base_url: str) -> Any:
        client = openai.OpenAI(
            base_url=base_url, api_key=KEY, http_client=ws.httpx_client(), max_retries=0
        )
        made.append(client)
        return client

    try:
        yield make
    finally:
        for client in made:
            client.close()


# -- the option ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0, ValueError),
        (-1.0, ValueError),
        (math.nan, ValueError),
        (True, TypeError),
        ("1", TypeError),
    ],
)
def test_a_bad_attempt_timeout_is_rejected_by_name(value: Any, error: type) -> None:
    with pytest.raises(error, match="attempt_timeout"):
        ws.RetryPolicy(attempt_timeout=value)


def test_attempt_timeout_takes_seconds_or_a_timedelta_and_inf_is_off() -> None:
    assert ws.RetryPolicy(attempt_timeout=datetime.timedelta(seconds=2)).attempt_timeout == 2.0
    assert ws.RetryPolicy(attempt_timeout=math.inf).attempt_timeout is None
    assert ws.RetryPolicy().attempt_timeout is None
    assert "attempt_timeout=1.5" in repr(ws.RetryPolicy(attempt_timeout=1.5))


def test_an_attempt_timeout_is_a_retryable_operation_timeout() -> None:
    policy = ws.RetryPolicy(max_attempts=2, initial_backoff=0.0, attempt_timeout=1.0)
    clock = FakeClock()
    with pytest.raises(ws.RetryExhausted) as info:
        ws.retry_call(clock.advance, 2.0, policy=policy, budget=ws.Budget(10, clock=clock))
    error = info.value.last_error
    assert isinstance(error, ws.OperationTimeout) and error.reason == "attempt_timeout"
    assert error.attempt == 2 and error.retryable
    verdict = ws.classify(error)
    assert (verdict.kind, verdict.reason, verdict.retryable) == ("timeout", "attempt_timeout", True)


def test_work_that_returns_after_its_attempt_timeout_is_no_success() -> None:
    """Nothing interrupts the work (the clock moves inside it): late, so the attempt failed."""
    policy = ws.RetryPolicy(max_attempts=3, initial_backoff=0.0, attempt_timeout=1.0)
    clock = FakeClock()
    durations = [5.0, 5.0, 0.5]
    taken: List[float] = []

    def work() -> str:
        taken.append(durations[len(taken)])
        clock.advance(taken[-1])
        return "done"

    assert ws.retry_call(work, policy=policy, budget=ws.Budget(60, clock=clock)) == "done"
    assert taken == durations  # the two late returns were failures, the third in time


def test_the_calls_own_end_is_deadline_exceeded_not_an_attempt_timeout(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("no_headers")
    policy = ws.RetryPolicy(max_attempts=3, attempt_timeout=5.0)
    started = time.monotonic()
    client = ws.ChatClient(base, model="m", retry=policy, timeout=0.5)
    with client, pytest.raises(ws.DeadlineExceeded) as info:
        client.complete(MESSAGES)
    assert time.monotonic() - started < 0.5 + SLACK
    assert info.value.attempts == 1


# -- ChatClient ----------------------------------------------------------------------------


def test_chat_stream_silent_then_ok_succeeds_on_the_second_request(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("silent_then_ok")
    started = time.monotonic()
    with ws.ChatClient(base, model="m", retry=POLICY, timeout=BUDGET, idle_timeout=30) as client:
        stream = client.stream(MESSAGES)
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in stream) == TEXT
    assert stream.attempts == 2
    assert time.monotonic() - started < LIMIT + SLACK
    assert [r.faulted for r in fault_gateway.requests_seen(base)] == [True, False]


def test_chat_complete_silent_then_ok_succeeds_on_the_second_request(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("silent_then_ok")
    started = time.monotonic()
    with ws.ChatClient(base, model="m", retry=POLICY, timeout=BUDGET) as client:
        answer = client.complete(MESSAGES)
    assert answer["choices"][0]["message"]["content"] == TEXT
    assert time.monotonic() - started < LIMIT + SLACK
    assert len(fault_gateway.requests_seen(base)) == 2


def test_chat_complete_slow_drip_is_retried_and_ends_within_the_budget(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("slow_drip", interval=0.2)
    started = time.monotonic()
    client = ws.ChatClient(base, model="m", retry=POLICY, timeout=2.0)
    with client, pytest.raises(ws.DeadlineExceeded) as info:
        client.complete(MESSAGES)
    assert time.monotonic() - started < 2.0 + SLACK
    assert info.value.attempts >= 3
    last = info.value.last_error
    assert isinstance(last, ws.OperationTimeout) and last.reason == "attempt_timeout"
    assert last.phase == "body" and "after the head" in str(last)  # where the attempt was
    assert len(fault_gateway.requests_seen(base)) == info.value.attempts


def test_a_stream_that_committed_outlives_the_attempt_timeout(
    fault_gateway: FaultGateway,
) -> None:
    """The attempt ends with the first chunk; the rest (1.5 s) is the call's, not the attempt's."""
    base = fault_gateway.base_url("ok", chunks=5, interval=0.3)
    with ws.ChatClient(base, model="m", retry=POLICY, timeout=BUDGET) as client:
        stream = client.stream(MESSAGES)
        chunks = list(stream)
    assert stream.finish_reason == "stop" and stream.text == TEXT
    assert stream.attempts == 1 and len(chunks) == 6


# -- retry_call around the openai SDK (max_retries=0) on httpx_client() --------------------


def test_retry_call_around_the_openai_sdk_silent_then_ok_succeeds_on_the_second_request(
    fault_gateway: FaultGateway, openai_sdk: Any
) -> None:
    base = fault_gateway.base_url("silent_then_ok")
    client = openai_sdk(base)
    started = time.monotonic()
    with ws.deadline(BUDGET):
        answer = ws.retry_call(
            client.chat.completions.create, model="m", messages=MESSAGES, policy=POLICY
        )
    assert answer.choices[0].message.content == TEXT
    assert time.monotonic() - started < LIMIT + SLACK
    assert [r.faulted for r in fault_gateway.requests_seen(base)] == [True, False]


def test_retry_call_around_the_openai_sdk_slow_drip_ends_within_the_budget(
    fault_gateway: FaultGateway, openai_sdk: Any
) -> None:
    base = fault_gateway.base_url("slow_drip", interval=0.2)
    client = openai_sdk(base)
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(2.0):
        ws.retry_call(client.chat.completions.create, model="m", messages=MESSAGES, policy=POLICY)
    assert time.monotonic() - started < 2.0 + SLACK
    assert len(fault_gateway.requests_seen(base)) >= 3  # retried at each attempt_timeout


def test_retry_call_around_requests_on_a_session_is_bounded_per_attempt(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("silent_then_ok")
    events: List[Any] = []
    undo = ws.add_listener(events.append)
    try:
        with ws.Session() as session, ws.deadline(BUDGET):
            response = ws.retry_call(
                session.post, base + "/chat/completions", json={"messages": MESSAGES}, policy=POLICY
            )
            body = response.json()
    finally:
        undo()
    assert body["object"] == "chat.completion"
    failed = [e for e in events if e.event == "attempt_failed"]
    assert [e.reason for e in failed] == ["attempt_timeout"]


def test_an_attempt_timeout_says_where_its_request_was(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("no_headers")
    policy = ws.RetryPolicy(max_attempts=2, initial_backoff=0.0, attempt_timeout=0.3)
    with ws.Session() as session, pytest.raises(ws.RetryExhausted) as info, ws.deadline(BUDGET):
        ws.retry_call(session.post, base + "/chat/completions", json={}, policy=policy)
    last = info.value.last_error
    assert isinstance(last, ws.OperationTimeout) and last.phase == "head"
    assert "waiting" in str(last) and "for the head" in str(last)
    assert ws.classify(last).phase == "head"
