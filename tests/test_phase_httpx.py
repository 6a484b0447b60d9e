"""DeadlineExceeded.phase on the httpx paths: httpx_client(), HTTPXTransport(budget=...) and
instrumented httpx say where the request was (resolve .. head, body) and how far it got."""

from __future__ import annotations

from typing import Any, Dict

import httpx
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .rawserver import RawServer, full_accept_queue, mute

pytestmark = pytest.mark.timeout(30)

LIMIT = 0.6
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
DRIP: Dict[str, Any] = {"interval": 0.05}
CASES = [
    ("no_headers", {}, "head", "after sending the request, waiting"),
    ("silent_after_200", {}, "body", "after the head, "),
    ("slow_drip", DRIP, "body", " body bytes, the last "),
    ("stall_after_chunks", {}, "body", " body bytes, the last "),
]


@pytest.mark.parametrize(("scenario", "options", "phase", "words"), CASES)
def test_httpx_client_says_where_its_deadline_found_it(
    fault_gateway: FaultGateway, scenario: str, options: Dict[str, Any], phase: str, words: str
) -> None:
    base = fault_gateway.base_url(scenario, **options)
    client = ws.httpx_client(idle_timeout=None)
    with client, pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
        client.post(base + "/chat/completions", json=CHAT).read()
    assert info.value.phase == phase
    assert words in str(info.value)
    assert ws.classify(info.value).phase == phase


@pytest.mark.parametrize(
    ("scenario", "options", "phase", "words"),
    [
        ("no_headers", {}, "head", "after sending the request, waiting"),
        ("stall_after_chunks", {}, "body", "after the head and 2 events, the last "),
    ],
)
def test_an_httpx_client_event_stream_says_where_it_was(
    fault_gateway: FaultGateway, scenario: str, options: Dict[str, Any], phase: str, words: str
) -> None:
    base = fault_gateway.base_url(scenario, **options)
    body = {**CHAT, "stream": True}
    client = ws.httpx_client(idle_timeout=None)
    url = base + "/chat/completions"
    with (
        client,
        pytest.raises(ws.DeadlineExceeded) as info,
        ws.deadline(LIMIT),
        client.stream("POST", url, json=body) as response,
    ):
        for _ in response.iter_lines():
            pass
    assert info.value.phase == phase
    assert words in str(info.value)


def test_a_transport_with_its_own_budget_says_where_it_was(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("silent_after_200")
    transport = ws.HTTPXTransport(budget=ws.Budget(LIMIT), idle_timeout=None)
    with ws.httpx_client(transport=transport) as client, pytest.raises(ws.DeadlineExceeded) as info:
        client.post(base + "/chat/completions", json=CHAT).read()
    assert info.value.phase == "body"


def test_a_silent_tls_handshake_through_httpx_is_phase_tls() -> None:
    with RawServer(mute) as server, ws.httpx_client() as client:
        url = server.url.replace("http://", "https://")
        with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
            client.get(url)
    assert info.value.phase == "tls"
    assert "during the TLS handshake" in str(info.value)


@pytest.mark.parametrize(("scenario", "options", "phase", "words"), CASES)
def test_instrumented_httpx_says_where_its_deadline_found_it(
    fault_gateway: FaultGateway, scenario: str, options: Dict[str, Any], phase: str, words: str
) -> None:
    base = fault_gateway.base_url(scenario, **options)
    undo = ws.instrument(urllib3=False)
    try:
        client = httpx.Client()
        with client, pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
            client.post(base + "/chat/completions", json=CHAT).read()
    finally:
        undo()
    assert info.value.phase == phase
    assert words in str(info.value)


def test_a_connect_nobody_answers_through_httpx_is_phase_connect() -> None:
    with (
        full_accept_queue() as port,
        ws.httpx_client() as client,
        pytest.raises(ws.DeadlineExceeded) as info,
        ws.deadline(LIMIT),
    ):
        client.get(f"http://127.0.0.1:{port}/")
    assert info.value.phase == "connect"
    assert "while connecting" in str(info.value)


@pytest.mark.parametrize(
    ("scenario", "phase"), [("no_headers", "head"), ("silent_after_200", "body")]
)
def test_an_httpx_stream_with_no_first_event_says_head_or_body(
    fault_gateway: FaultGateway, scenario: str, phase: str
) -> None:
    base = fault_gateway.base_url(scenario)
    body = {**CHAT, "stream": True}
    client = ws.httpx_client(first_event_timeout=0.3, idle_timeout=None)
    url = base + "/chat/completions"
    with (
        client,
        pytest.raises(ws.StreamIdleTimeout) as info,
        ws.deadline(10),
        client.stream("POST", url, json=body) as response,
    ):
        for _ in response.iter_lines():
            pass
    assert info.value.phase == phase
