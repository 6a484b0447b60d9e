"""DeadlineExceeded.phase: where a request was when its budget ended, and how far it got."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import requests

import watchdog_sync as ws
from watchdog_sync.testing import FakeClock, FaultGateway

from .rawserver import RawServer, mute, silent

pytestmark = pytest.mark.timeout(30)

LIMIT = 0.5
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def session() -> Iterator[ws.Session]:
    with ws.Session() as s:
        yield s


def post_in_scope(session: ws.Session, url: str, **kwargs: Any) -> ws.DeadlineExceeded:
    with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
        session.post(url, **kwargs)
    return info.value


@pytest.mark.parametrize(
    ("scenario", "phase", "words"),
    [
        ("no_headers", "head", "after sending the request, waiting"),
        ("silent_after_200", "body", "after the head, "),
    ],
)
def test_a_session_request_says_where_it_was(
    fault_gateway: FaultGateway, session: ws.Session, scenario: str, phase: str, words: str
) -> None:
    base = fault_gateway.base_url(scenario)
    error = post_in_scope(session, base + "/chat/completions", json=CHAT)
    assert error.phase == phase
    assert words in str(error)
    assert ws.classify(error).phase == phase


def test_a_session_with_its_own_budget_says_where_it_was(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("no_headers")
    with ws.Session(budget=ws.Budget(LIMIT)) as own, pytest.raises(ws.DeadlineExceeded) as info:
        own.post(base + "/chat/completions", json=CHAT)
    assert info.value.phase == "head"


def test_a_dripping_body_says_how_many_bytes_came_and_when_the_last(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("slow_drip", interval=0.05)
    policy = ws.RetryPolicy(max_attempts=1)
    client = ws.ChatClient(base, model="m", timeout=LIMIT, retry=policy)
    with client, pytest.raises(ws.DeadlineExceeded) as info:
        client.complete(CHAT["messages"])
    assert info.value.phase == "body"
    assert "after the head and " in str(info.value) and " body bytes, the last " in str(info.value)


def test_a_silent_tls_handshake_is_phase_tls(session: ws.Session) -> None:
    with RawServer(silent) as server:
        error = post_in_scope(session, server.url.replace("http://", "https://"))
    assert error.phase == "tls"
    assert "during the TLS handshake" in str(error)


def test_a_request_body_the_server_never_reads_is_phase_send(session: ws.Session) -> None:
    with RawServer(mute) as server:
        error = post_in_scope(session, server.url, data=b"x" * (64 << 20))
    assert error.phase == "send"
    assert "while sending the request" in str(error)


@pytest.mark.parametrize(("scenario", "phase"), [("no_headers", "head"), ("slow_drip", "body")])
def test_instrumented_requests_say_where_they_were(
    fault_gateway: FaultGateway, scenario: str, phase: str
) -> None:
    """Plain requests after instrument(): a server that never answers and one that drips
    its body are told apart (they raised the same error before)."""
    base = fault_gateway.base_url(scenario, **({"interval": 0.05} if phase == "body" else {}))
    undo = ws.instrument()
    try:
        with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
            requests.post(base + "/chat/completions", json=CHAT, headers={"Connection": "close"})
    finally:
        undo()
    assert info.value.phase == phase


def test_a_retry_whose_next_wait_would_pass_the_deadline_is_phase_backoff() -> None:
    clock = FakeClock()
    policy = ws.RetryPolicy(max_attempts=3, initial_backoff=5.0, jitter=0.0)

    def fails() -> None:
        raise ConnectionResetError(104, "reset")

    with pytest.raises(ws.DeadlineExceeded) as info:
        ws.retry_call(fails, policy=policy, budget=ws.Budget(2.0, clock=clock))
    assert info.value.phase == "backoff"
    assert ws.classify(info.value).phase == "backoff"


def test_classify_reads_the_phase_through_a_foreign_wrapper() -> None:
    ours = ws.DeadlineExceeded("d", phase="connect")
    try:
        raise RuntimeError("an SDK's wrapper") from ours
    except RuntimeError as wrapper:
        assert ws.classify(wrapper).phase == "connect"
    assert ws.classify(ConnectionResetError(104, "reset")).phase is None


def test_the_default_classification_has_no_phase() -> None:
    assert ws.Classification("http", "x", False).phase is None
