"""Calls through HTTPXTransport get one span each: the openai SDK on httpx_client().

The OpenTelemetry SDK's in-memory exporter records the span of each SDK call
against the FaultGateway: a GenAI ``chat`` span for ``/chat/completions`` with
its status and ``error.type``, an ``HTTP`` span for any other path; the key and
the prompt appear in no attribute or event.
"""

from __future__ import annotations

from typing import Iterator

import openai
import pytest
from opentelemetry.trace import SpanKind, StatusCode

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .test_otel import Otel

pytestmark = pytest.mark.timeout(60)

KEY, PROMPT = "sk-PLANTEDKEY0123456789", "PLANTED-PROMPT-43"
MESSAGES = [{"role": "user", "content": PROMPT}]


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    o.instrumentor.instrument(tracer_provider=o.tracer_provider, meter_provider=o.meter_provider)
    try:
        yield o
    finally:
        o.instrumentor.uninstrument()
        o.meter_provider.shutdown()
        o.tracer_provider.shutdown()


def _sdk(base: str) -> openai.OpenAI:
    http = ws.httpx_client(idle_timeout=30)
    return openai.OpenAI(base_url=base, api_key=KEY, http_client=http, max_retries=0)


def _assert_no_secret(otel: Otel) -> None:
    for span in otel.exporter.get_finished_spans():
        text = span.to_json()
        for secret in (KEY, PROMPT, "Bearer", "Authorization", "/chat/completions"):
            assert secret not in text


def test_an_ok_stream_is_one_chat_span(otel: Otel, fault_gateway: FaultGateway) -> None:
    client = _sdk(fault_gateway.base_url("ok"))
    with client, ws.deadline(10):
        for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):  # type: ignore[arg-type]
            pass
    span = otel.one("chat")
    attributes = dict(span.attributes or {})
    assert span.kind == SpanKind.CLIENT and span.status.status_code == StatusCode.UNSET
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.stream"] is True
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == fault_gateway.port
    assert attributes["http.response.status_code"] == 200
    assert attributes["watchdog_sync.ended_by"] == "completed"
    assert attributes["watchdog_sync.chunks_received"] >= 5
    assert 0 < attributes["gen_ai.response.time_to_first_chunk"] < 10
    assert "error.type" not in attributes
    _assert_no_secret(otel)


def test_a_silent_stream_under_a_deadline_ends_its_span_with_the_reason(
    otel: Otel, fault_gateway: FaultGateway
) -> None:
    client = _sdk(fault_gateway.base_url("silent_after_200"))
    with client, pytest.raises(ws.DeadlineExceeded), ws.deadline(0.5):
        for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):  # type: ignore[arg-type]
            pass
    span = otel.one("chat")
    attributes = dict(span.attributes or {})
    assert span.status.status_code == StatusCode.ERROR
    assert attributes["error.type"] == "deadline_exceeded"
    assert attributes["gen_ai.operation.name"] == "chat"
    _assert_no_secret(otel)


def test_another_path_is_an_http_client_span(otel: Otel, fault_gateway: FaultGateway) -> None:
    """Not a chat path: an ``HTTP`` client span; a 404 answer is its error (as HTTP spans say)."""
    client = _sdk(fault_gateway.base_url("ok"))
    with client, pytest.raises(openai.NotFoundError), ws.deadline(10):
        client.models.list()  # the gateway knows no /models
    span = otel.one("HTTP")
    attributes = dict(span.attributes or {})
    assert span.kind == SpanKind.CLIENT and "gen_ai.operation.name" not in attributes
    assert span.status.status_code == StatusCode.ERROR
    assert attributes["error.type"] == "404"
    assert attributes["http.response.status_code"] == 404
    assert attributes["server.port"] == fault_gateway.port
    assert len(otel.exporter.get_finished_spans()) == 1
    _assert_no_secret(otel)
