"""Calls through HTTPXTransport get one span each: the openai and anthropic SDKs on
httpx_client().

The OpenTelemetry SDK's in-memory exporter records the span of each SDK call
against the FaultGateway: a GenAI ``chat {model}`` span for ``/chat/completions``
and ``/v1/messages`` (the model read from the request's JSON body) with its
status and ``error.type``, an ``HTTP`` span for any other path; the key and the
prompt appear in no attribute, event or data point.
"""

from __future__ import annotations

from typing import Any, Iterator

import anthropic
import httpx2
import openai
import pytest
from opentelemetry.trace import SpanKind, StatusCode

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .internals import request_model
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


def _assert_no_secret(otel: Otel, *planted: str) -> None:
    """No key, prompt or planted text in any span (attributes, events) or metric data point."""
    texts = [span.to_json() for span in otel.exporter.get_finished_spans()]
    data = otel.reader.get_metrics_data()
    texts.append("" if data is None else data.to_json())
    for text in texts:
        for secret in (KEY, PROMPT, "Bearer", "Authorization", "/chat/completions", *planted):
            assert secret not in text


def test_an_ok_stream_is_one_chat_span(otel: Otel, fault_gateway: FaultGateway) -> None:
    client = _sdk(fault_gateway.base_url("ok"))
    with client, ws.deadline(10):
        for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):  # type: ignore[arg-type]
            pass
    span = otel.one("chat")
    attributes = dict(span.attributes or {})
    assert span.name == "chat m"  # {gen_ai.operation.name} {gen_ai.request.model}
    assert span.kind == SpanKind.CLIENT and span.status.status_code == StatusCode.UNSET
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "m"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.stream"] is True
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == fault_gateway.port
    assert attributes["http.response.status_code"] == 200
    assert attributes["watchdog_sync.ended_by"] == "completed"
    assert attributes["watchdog_sync.chunks_received"] >= 5
    assert 0 < attributes["gen_ai.response.time_to_first_chunk"] < 10
    assert "error.type" not in attributes
    [duration] = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["gen_ai.request.model"] == "m"
    [per_chunk] = otel.points("gen_ai.client.operation.time_per_output_chunk")
    assert per_chunk.count == attributes["watchdog_sync.chunks_received"] - 1  # one per gap
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


def test_the_model_is_the_bodys_top_level_one_and_no_other_text_is_read(
    otel: Otel, fault_gateway: FaultGateway
) -> None:
    """A "model" nested in the body (or quoted in the prompt) is neither the model nor kept."""
    nested, quoted = "PLANTED-NESTED-MODEL-44", "PLANTED-QUOTED-MODEL-45"
    messages = [{"role": "user", "content": f'{PROMPT} "model": "{quoted}"'}]
    client = _sdk(fault_gateway.base_url("ok"))
    with client, ws.deadline(10):
        client.chat.completions.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            extra_body={"metadata": {"model": nested}},
        )
    span = otel.one("chat")
    assert span.name == "chat m"
    assert dict(span.attributes or {})["gen_ai.request.stream"] is False
    _assert_no_secret(otel, nested, quoted)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (
            b'{"model": "PLANTED-BIG-MODEL-46", "messages": [], "pad": "' + b"x" * 70_000 + b'"}',
            "over 64 KiB",
        ),
        (b'{"model": "PLANTED-BROKEN-MODEL-47", "messages": [', "not JSON"),
        (b'{"messages": [], "metadata": {"model": "PLANTED-NESTED-MODEL-48"}}', "nested only"),
        (b'{"model": ["PLANTED-LIST-MODEL-49"], "messages": []}', "not a string"),
    ],
    ids=["huge", "not-json", "nested-only", "not-a-string"],
)
def test_a_body_the_model_cannot_be_read_from_leaves_it_out(
    otel: Otel, fault_gateway: FaultGateway, body: bytes, why: str
) -> None:
    """A huge, broken or model-less body: a ``chat`` span without the model (never a guess)."""
    url = fault_gateway.base_url("ok") + "/chat/completions"
    with ws.httpx_client(idle_timeout=30) as http, ws.deadline(10):
        http.post(url, content=body, headers={"content-type": "application/json"})
    span = otel.one("chat")
    attributes = dict(span.attributes or {})
    assert span.name == "chat", why
    assert "gen_ai.request.model" not in attributes, why
    assert attributes["gen_ai.operation.name"] == "chat"
    planted = body.split(b"PLANTED-")[1].split(b'"')[0].decode()
    _assert_no_secret(otel, "PLANTED-" + planted)


def test_the_model_is_read_only_from_a_bounded_json_body_in_memory() -> None:
    """The request's own parse (no server needed): what gives a model, what leaves it out."""
    url = "http://127.0.0.1:9/v1/chat/completions"
    json_type = {"content-type": "application/json"}

    def model_of(body: Any, method: str = "POST", headers: Any = json_type) -> Any:
        return request_model(httpx2.Request(method, url, content=body, headers=headers))

    assert model_of(b'{"messages": [], "model": "gpt-x"}') == "gpt-x"
    assert model_of(b'{"model": "' + b"m" * 256 + b'"}') == "m" * 256
    assert model_of(b'{"model": "' + b"m" * 257 + b'"}') is None  # not a model's name
    deep = b'{"model": "m", "x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    assert len(deep) < 64 * 1024 and model_of(deep) is None  # too deep for json: no guess
    assert model_of(b'{"model": "m"}', headers={"content-type": "text/plain"}) is None
    assert model_of(b'{"model": "m"}', method="PUT") is None
    assert model_of(iter([b'{"model": "m"}'])) is None  # a streamed body is never read
    assert model_of(b"[1, 2]") is None and model_of(b'"model"') is None


def test_an_anthropic_messages_stream_is_a_chat_span_named_with_its_model(
    otel: Otel, fault_gateway: FaultGateway
) -> None:
    http = ws.httpx_client(idle_timeout=30)
    client = anthropic.Anthropic(
        base_url=fault_gateway.base_url("ok", api="anthropic"),
        api_key=KEY,
        http_client=http,
        max_retries=0,
    )
    with client, ws.deadline(10):
        events = client.messages.create(
            model="claude-test",
            max_tokens=64,
            messages=MESSAGES,
            stream=True,  # type: ignore[arg-type]
        )
        for _ in events:
            pass
    span = otel.one("chat")
    attributes = dict(span.attributes or {})
    assert span.name == "chat claude-test"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-test"
    assert attributes["gen_ai.request.stream"] is True
    _assert_no_secret(otel, "/v1/messages")
