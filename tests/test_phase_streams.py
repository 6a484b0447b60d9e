"""DeadlineExceeded.phase on event streams: stream_sse and ChatClient.stream() say whether
the head or the body was awaited, and how many events came."""

from __future__ import annotations

from typing import Any, Dict

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .rawserver import RawServer, mute

pytestmark = pytest.mark.timeout(30)

LIMIT = 0.6
MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": MESSAGES, "stream": True}
DRIP: Dict[str, Any] = {"interval": 0.05}


def sse_deadline(base: str) -> ws.DeadlineExceeded:
    with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
        for _ in ws.stream_sse(base + "/chat/completions", json=CHAT, idle_timeout=None):
            pass
    return info.value


@pytest.mark.parametrize(
    ("scenario", "options", "phase", "words"),
    [
        ("no_headers", {}, "head", "after sending the request, waiting"),
        ("silent_after_200", {}, "body", "after the head, "),
        ("slow_drip", DRIP, "body", " events, the last "),
        ("stall_after_chunks", {}, "body", "after the head and 2 events, the last "),
    ],
)
def test_stream_sse_says_where_its_deadline_found_it(
    fault_gateway: FaultGateway, scenario: str, options: Dict[str, Any], phase: str, words: str
) -> None:
    error = sse_deadline(fault_gateway.base_url(scenario, **options))
    assert error.phase == phase
    assert words in str(error)
    assert ws.classify(error).phase == phase


def test_stream_sse_with_its_own_budget_says_where_it_was(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("stall_after_chunks")
    stream = ws.stream_sse(
        base + "/chat/completions", json=CHAT, idle_timeout=None, budget=ws.Budget(LIMIT)
    )
    with stream, pytest.raises(ws.DeadlineExceeded) as info:
        for _ in stream:
            pass
    assert info.value.phase == "body"


@pytest.mark.parametrize(
    ("scenario", "options", "phase"),
    [("no_headers", {}, "head"), ("silent_after_200", {}, "body"), ("slow_drip", DRIP, "body")],
)
def test_chat_client_stream_says_where_its_deadline_found_it(
    fault_gateway: FaultGateway, scenario: str, options: Dict[str, Any], phase: str
) -> None:
    base = fault_gateway.base_url(scenario, **options)
    policy = ws.RetryPolicy(max_attempts=1)
    client = ws.ChatClient(base, model="m", timeout=LIMIT, retry=policy, idle_timeout=None)
    with client, pytest.raises(ws.DeadlineExceeded) as info:
        for _ in client.stream(MESSAGES):
            pass
    assert info.value.phase == phase
    assert ("body bytes" not in str(info.value)) and ("after " in str(info.value))


@pytest.mark.parametrize(
    ("scenario", "limits", "phase"),
    [
        ("no_headers", {"first_event_timeout": 0.3, "idle_timeout": None}, "head"),
        ("silent_after_200", {"first_event_timeout": 0.3, "idle_timeout": None}, "body"),
        ("stall_after_chunks", {"idle_timeout": 0.3}, "body"),
    ],
)
def test_a_stream_idle_timeout_says_head_or_body(
    fault_gateway: FaultGateway, scenario: str, limits: Dict[str, Any], phase: str
) -> None:
    base = fault_gateway.base_url(scenario)
    with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
        for _ in ws.stream_sse(base + "/chat/completions", json=CHAT, **limits):
            pass
    assert info.value.phase == phase
    assert ws.classify(info.value).phase == phase


def test_a_stream_whose_tls_handshake_is_never_answered_is_phase_tls() -> None:
    with RawServer(mute) as server:
        url = f"https://127.0.0.1:{server.port}/chat/completions"
        with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
            for _ in ws.stream_sse(url, json=CHAT, idle_timeout=None):
                pass
    assert info.value.phase == "tls"
    assert "during the TLS handshake" in str(info.value)
