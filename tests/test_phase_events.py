"""Instrumented requests are calls for observers: call_start / call_end with the timeout's
phase reach add_listener and the OpenTelemetry spans; no credential is in any event."""

from __future__ import annotations

import gc
import json
from typing import Any, Dict, Iterator, List

import httpx
import pytest
import requests
import urllib3
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import watchdog_sync as ws
from watchdog_sync.otel import WatchdogSyncInstrumentor
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(30)

LIMIT = 0.6
KEY = "sk-phase-events-0123456789abcdef"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {"Authorization": f"Bearer {KEY}", "Connection": "close"}
# urllib3 1.26 has no json= argument: the body and its type spelled out for urllib3 alone.
BODY = json.dumps(CHAT).encode()
JSON_HEADERS = {**HEADERS, "Content-Type": "application/json"}


@pytest.fixture
def events() -> Iterator[List[ws.Event]]:
    seen: List[ws.Event] = []
    unregister = ws.add_listener(seen.append)
    undo = ws.instrument()
    try:
        yield seen
    finally:
        undo()
        unregister()


def calls(seen: List[ws.Event]) -> Dict[str, ws.Event]:
    return {e.event: e for e in seen if e.event in ("call_start", "call_end")}


def no_secret_in(seen: List[ws.Event]) -> bool:
    return all(KEY not in repr(e.as_dict()) for e in seen)


@pytest.mark.parametrize(("scenario", "phase"), [("no_headers", "head"), ("slow_drip", "body")])
def test_an_instrumented_requests_call_that_hit_its_deadline_is_observed(
    fault_gateway: FaultGateway, events: List[ws.Event], scenario: str, phase: str
) -> None:
    base = fault_gateway.base_url(scenario, **({"interval": 0.05} if phase == "body" else {}))
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(LIMIT):
        requests.post(base + "/chat/completions", json=CHAT, headers=HEADERS)
    found = calls(events)
    start, end = found["call_start"], found["call_end"]
    assert start.operation == "http_chat" and start.model == "m" and start.stage == "http"
    assert start.server_address == "127.0.0.1"
    assert end.call_id == start.call_id
    assert end.error_type == "deadline_exceeded" and end.phase == phase
    assert no_secret_in(events)


def test_an_instrumented_urllib3_request_that_succeeds_ends_its_call_when_read(
    fault_gateway: FaultGateway, events: List[ws.Event]
) -> None:
    base = fault_gateway.base_url("ok")
    with urllib3.PoolManager() as pool, ws.deadline(10):
        response = pool.request("POST", base + "/chat/completions", body=BODY, headers=JSON_HEADERS)
    ends = [e for e in events if e.event == "call_end"]
    assert response.status == 200
    assert len(ends) == 1 and ends[0].status == 200 and ends[0].error_type is None
    assert ends[0].phase is None
    assert no_secret_in(events)


def test_a_request_timeout_error_is_observed_with_its_phase(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("no_headers")
    seen: List[ws.Event] = []
    unregister = ws.add_listener(seen.append)
    undo = ws.instrument(request_timeout=LIMIT)
    try:
        with pytest.raises(requests.ReadTimeout):
            requests.post(base + "/chat/completions", json=CHAT, headers=HEADERS)
    finally:
        undo()
        unregister()
    end = calls(seen)["call_end"]
    assert end.error_type == "request_timeout" and end.phase == "head"


def test_an_instrumented_httpx_call_end_carries_the_phase(
    fault_gateway: FaultGateway, events: List[ws.Event]
) -> None:
    base = fault_gateway.base_url("silent_after_200")
    client = httpx.Client()
    with client, pytest.raises(ws.DeadlineExceeded), ws.deadline(LIMIT):
        client.post(base + "/chat/completions", json=CHAT, headers=HEADERS).read()
    assert calls(events)["call_end"].phase == "body"
    assert no_secret_in(events)


def test_a_retry_attempt_that_timed_out_says_its_phase(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("no_headers")
    seen: List[ws.Event] = []
    unregister = ws.add_listener(seen.append)
    policy = ws.RetryPolicy(max_attempts=2, attempt_timeout=0.3, initial_backoff=0.01)
    client = ws.ChatClient(base, model="m", timeout=5, retry=policy)
    try:
        with client, pytest.raises(ws.RetryExhausted):
            client.complete(CHAT["messages"])
    finally:
        unregister()
    failed = [e for e in seen if e.event == "attempt_failed"]
    assert [e.phase for e in failed] == ["head", "head"]


def test_an_instrumented_request_is_a_span_with_its_phase(fault_gateway: FaultGateway) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = WatchdogSyncInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    undo = ws.instrument()
    base = fault_gateway.base_url("no_headers")
    try:
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(LIMIT):
            requests.post(base + "/chat/completions", json=CHAT, headers=HEADERS)
    finally:
        undo()
        instrumentor.uninstrument()
        provider.shutdown()
    spans = exporter.get_finished_spans()
    assert len(spans) == 1
    attributes: Dict[str, Any] = dict(spans[0].attributes or {})
    assert attributes["watchdog_sync.phase"] == "head"
    assert attributes["error.type"] == "deadline_exceeded"
    assert spans[0].status.status_code is StatusCode.ERROR
    assert KEY not in repr(attributes)


def test_an_instrumented_response_dropped_unread_ends_its_call_as_abandoned(
    fault_gateway: FaultGateway, events: List[ws.Event]
) -> None:
    base = fault_gateway.base_url("ok")
    with urllib3.PoolManager() as pool, ws.deadline(10):
        url = base + "/chat/completions"
        response = pool.request("POST", url, body=BODY, headers=JSON_HEADERS, preload_content=False)
        assert response.status == 200
        del response
        gc.collect()
    ends = [e for e in events if e.event == "call_end"]
    assert [e.reason for e in ends] == ["abandoned"]
