"""watchdog_sync.otel: spans, attributes, status and metrics per FaultGateway scenario.

The OpenTelemetry SDK's in-memory span exporter and metric reader record what
the instrumentor emits for real calls against the FaultGateway on 127.0.0.1.
"""

from __future__ import annotations

import gc
import json
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import watchdog_sync as ws
from watchdog_sync.otel import WatchdogSyncInstrumentor
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(60)

FAST = ws.RetryPolicy(max_attempts=3, initial_backoff=0.02, jitter=0.0)
HELLO = [{"role": "user", "content": "Hello"}]
BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]


class Otel:
    """The SDK's in-memory exporter and reader behind an instrumented watchdog_sync."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.instrumentor = WatchdogSyncInstrumentor()

    def spans(self, name_start: str = "") -> List[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(name_start)]

    def one(self, name_start: str = "chat") -> ReadableSpan:
        spans = self.spans(name_start)
        assert len(spans) == 1, [s.name for s in self.exporter.get_finished_spans()]
        return spans[0]

    def points(self, metric: str) -> List[Any]:
        data = self.reader.get_metrics_data()
        found: List[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found


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


@pytest.fixture(scope="module")
def gateway() -> Iterator[FaultGateway]:
    with FaultGateway() as gw:
        yield gw


def _client(gw: FaultGateway, scenario: str, **kwargs: Any) -> ws.ChatClient:
    options = kwargs.pop("options", {})
    kwargs.setdefault("retry", FAST)
    return ws.ChatClient(gw.base_url(scenario, **options), model="my-model", **kwargs)


def _drain(client: ws.ChatClient, **kwargs: Any) -> ws.ChatStream:
    with client, client.stream(HELLO, **kwargs) as stream:
        for _ in stream:
            pass
    return stream


def _events(span: ReadableSpan) -> List[str]:
    return [e.name for e in span.events]


def test_an_ok_stream_is_one_chat_span_with_the_genai_attributes(
    otel: Otel, gateway: FaultGateway
) -> None:
    _drain(_client(gateway, "ok"))
    span = otel.one()
    attrs = dict(span.attributes or {})
    assert span.name == "chat my-model" and span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "my-model"
    assert attrs["gen_ai.request.stream"] is True
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert 0 < attrs["gen_ai.response.time_to_first_chunk"] < 5
    assert attrs["server.address"] == "127.0.0.1" and attrs["server.port"] == gateway.port
    assert attrs["watchdog_sync.attempts"] == 1
    assert attrs["watchdog_sync.chunks_received"] >= 2
    assert attrs["watchdog_sync.ended_by"] == "completed"
    assert attrs["watchdog_sync.idle_timeout"] == 120.0
    assert 0 < attrs["watchdog_sync.budget.remaining"] <= 600
    assert "error.type" not in attrs
    assert _events(span) == ["watchdog_sync.attempt_start"]


# scenario, scenario options, client options, call options, error.type, chunks delivered
FAILURES: List[Tuple[str, Dict[str, Any], Dict[str, Any], Dict[str, Any], str, bool]] = [
    ("silent_after_200", {}, {"idle_timeout": 0.2}, {"timeout": 0.5}, "deadline_exceeded", False),
    ("stall_after_chunks", {}, {"idle_timeout": 0.2}, {}, "stream_idle_timeout", True),
    ("slow_drip", {"interval": 0.05}, {}, {"timeout": 0.4}, "deadline_exceeded", True),
    ("http401", {}, {}, {}, "auth", False),
    ("no_finish_reason", {}, {}, {}, "no_finish_reason", True),
]


@pytest.mark.parametrize(
    ("scenario", "options", "client_kw", "call_kw", "error_type", "delivered"),
    FAILURES,
    ids=[f[0] for f in FAILURES],
)
def test_a_failed_stream_ends_its_span_with_error_status_and_the_reason(
    otel: Otel,
    gateway: FaultGateway,
    scenario: str,
    options: Dict[str, Any],
    client_kw: Dict[str, Any],
    call_kw: Dict[str, Any],
    error_type: str,
    delivered: bool,
) -> None:
    with pytest.raises(ws.WatchdogError) as caught:
        _drain(_client(gateway, scenario, options=options, **client_kw), **call_kw)
    assert caught.value.reason == error_type
    span = otel.one()
    attrs = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == error_type
    assert attrs["error.type"] == error_type
    assert (attrs["watchdog_sync.chunks_received"] > 0) is delivered
    [point] = [
        p for p in otel.points("gen_ai.client.operation.duration") if p.attributes.get("error.type")
    ]
    assert point.attributes["error.type"] == error_type and point.count == 1
    if error_type in ("deadline_exceeded", "stream_idle_timeout"):
        assert "watchdog_sync.timeout" in _events(span)
        timeouts = {
            p.attributes["error.type"]: p.value for p in otel.points("watchdog_sync.timeouts")
        }
        assert timeouts.get(error_type, 0) >= 1
    if scenario == "http401":
        assert attrs["http.response.status_code"] == 401
        assert attrs["watchdog_sync.attempts"] == 1  # not retried


def test_a_retried_429_shows_each_attempt_and_the_backoff(
    otel: Otel, gateway: FaultGateway
) -> None:
    client = _client(gateway, "http429_then_ok", options={"retry_after": "0"})
    with client:
        client.complete(HELLO)
    span = otel.one()
    attrs = dict(span.attributes or {})
    assert _events(span) == [
        "watchdog_sync.attempt_start",
        "watchdog_sync.attempt_failed",
        "watchdog_sync.backoff",
        "watchdog_sync.attempt_start",
    ]
    failed = span.events[1].attributes or {}
    assert failed["status"] == 429 and failed["reason"] == "rate_limited"
    assert attrs["watchdog_sync.attempts"] == 2
    assert attrs["gen_ai.request.stream"] is False
    assert "gen_ai.response.time_to_first_chunk" not in attrs  # not a stream
    assert span.status.status_code is StatusCode.UNSET
    [retries] = otel.points("watchdog_sync.retries")
    assert retries.value == 1 and retries.attributes["error.type"] == "rate_limited"
    assert otel.points("gen_ai.client.operation.time_to_first_chunk") == []


def test_the_histograms_have_the_conventions_buckets_and_stream_timings(
    otel: Otel, gateway: FaultGateway
) -> None:
    """Duration and time to first chunk once per stream; time per output chunk once per chunk
    after the first (the conventions' definition), each the gap since the previous chunk."""
    stream = _drain(_client(gateway, "ok", options={"chunks": 5, "interval": 0.02}))
    chunks = dict(otel.one().attributes or {})["watchdog_sync.chunks_received"]
    assert chunks == 6  # five with content, 20 ms apart, then the one with the finish_reason
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "my-model",
        "server.address": "127.0.0.1",
        "server.port": gateway.port,
    }
    for metric in (
        "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
    ):
        [point] = otel.points(metric)
        assert dict(point.attributes) == expected, metric
        assert list(point.explicit_bounds) == BUCKETS, metric
        assert point.count == (chunks - 1 if metric.endswith("per_output_chunk") else 1), metric
    [per_chunk] = otel.points("gen_ai.client.operation.time_per_output_chunk")
    assert 0.05 <= per_chunk.sum < 2.0  # four gaps of 20 ms (the server waits), one of ~0
    assert per_chunk.min < 0.015 <= per_chunk.max < 1.0
    assert stream.finish_reason == "stop"
    [duration] = otel.points("gen_ai.client.operation.duration")
    [first] = otel.points("gen_ai.client.operation.time_to_first_chunk")
    assert 0 < first.sum < duration.sum


def test_nothing_recorded_holds_the_key_the_prompt_or_the_completion(
    otel: Otel, gateway: FaultGateway
) -> None:
    key, prompt, answer = "sk-PLANTEDKEY0123456789", "PLANTED-PROMPT-41", "PLANTED-ANSWER-42"
    messages = [{"role": "user", "content": prompt}]
    for scenario in ("ok", "http401", "http429_then_ok"):
        options: Dict[str, Any] = {"text": answer} if scenario == "ok" else {"retry_after": "0"}
        if scenario == "http401":
            options = {}
        client = ws.ChatClient(
            gateway.base_url(scenario, **options), api_key=key, model="my-model", retry=FAST
        )
        with client:
            for stream in (True, False):
                try:
                    if stream:
                        with client.stream(messages) as s:
                            text = "".join(
                                c["choices"][0]["delta"].get("content", "")
                                for c in s
                                if c.get("choices")
                            )
                            assert answer in text or scenario != "ok"
                    else:
                        client.complete(messages)
                except ws.HTTPStatusError:
                    pass
    spans = otel.exporter.get_finished_spans()
    assert len(spans) == 6
    dumped = [s.to_json() for s in spans]
    data = otel.reader.get_metrics_data()
    assert data is not None
    dumped.append(data.to_json())
    for text in dumped:
        for secret in (key, prompt, answer, "Bearer", "Authorization"):
            assert secret not in text


def test_uninstrument_stops_spans_and_metrics(gateway: FaultGateway) -> None:
    o = Otel()
    o.instrumentor.instrument(tracer_provider=o.tracer_provider, meter_provider=o.meter_provider)
    _drain(_client(gateway, "ok"))
    o.instrumentor.uninstrument()
    before = len(o.exporter.get_finished_spans())
    counts = [p.count for p in o.points("gen_ai.client.operation.duration")]
    _drain(_client(gateway, "ok"))
    with pytest.raises(ws.HTTPStatusError):
        _drain(_client(gateway, "http401"))
    assert before == 1 and len(o.exporter.get_finished_spans()) == 1
    assert [p.count for p in o.points("gen_ai.client.operation.duration")] == counts == [1]
    assert o.points("watchdog_sync.retries") == []
    o.meter_provider.shutdown()
    o.tracer_provider.shutdown()


def test_uninstrument_in_the_middle_of_a_stream_stops_its_chunk_records(
    gateway: FaultGateway,
) -> None:
    o = Otel()
    o.instrumentor.instrument(tracer_provider=o.tracer_provider, meter_provider=o.meter_provider)
    per_chunk = "gen_ai.client.operation.time_per_output_chunk"
    client = _client(gateway, "ok", options={"chunks": 20, "interval": 0.005})
    try:
        with client, client.stream(HELLO) as stream:
            for _ in range(3):
                next(stream)
            before = [p.count for p in o.points(per_chunk)]
            o.instrumentor.uninstrument()
            assert sum(1 for _ in stream) == 18
    finally:
        o.instrumentor.uninstrument()  # (again: a no-op) whatever failed, for the next tests
        o.meter_provider.shutdown()
        o.tracer_provider.shutdown()
    assert before == [2]  # the gaps before the 2nd and the 3rd chunk
    assert [p.count for p in o.points(per_chunk)] == before
    assert dict(o.one().attributes or {})["watchdog_sync.ended_by"] == "uninstrumented"


def test_spans_nest_under_the_callers_span_and_calls_nest_in_calls(
    otel: Otel, gateway: FaultGateway
) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    client = _client(gateway, "ok")
    with client, tracer.start_as_current_span("request") as parent:
        with client.stream(HELLO) as stream:
            for _ in stream:
                assert trace.get_current_span() is parent  # the chat span is not made current
        ws.retry_call(client.complete, HELLO, stage="outer", policy=FAST)
    request = otel.one("request")
    chats = otel.spans("chat")
    retry = otel.one("retry_call")
    assert retry.name == "retry_call outer" and retry.kind is SpanKind.INTERNAL
    assert len(chats) == 2
    assert chats[0].parent is not None and chats[0].parent.span_id == request.context.span_id
    assert chats[1].parent is not None and chats[1].parent.span_id == retry.context.span_id
    assert retry.parent is not None and retry.parent.span_id == request.context.span_id
    assert {s.context.trace_id for s in otel.exporter.get_finished_spans()} == {
        request.context.trace_id
    }
    # The retry loop inside a ChatClient call is folded into the chat span, not a span of its own.
    assert len(otel.spans("retry_call")) == 1


def test_an_enclosing_scopes_cancelled_still_ends_the_span_with_error(
    otel: Otel, gateway: FaultGateway
) -> None:
    client = _client(gateway, "silent_after_200", idle_timeout=5.0)
    with client, pytest.raises(ws.DeadlineExceeded), ws.deadline(0.3):
        client.stream(HELLO)  # the scope's Cancelled passes through the client
    span = otel.one()
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "deadline_exceeded"


def test_a_stream_dropped_unclosed_ends_its_span_when_collected(
    otel: Otel, gateway: FaultGateway
) -> None:
    client = _client(gateway, "ok", options={"chunks": 50, "interval": 0.01})
    with client:
        stream = client.stream(HELLO)
        next(stream)
        assert otel.spans("chat") == []  # still open
        del stream
        gc.collect()
    span = otel.one()
    assert dict(span.attributes or {})["watchdog_sync.ended_by"] == "abandoned"
    assert span.status.status_code is StatusCode.UNSET


def test_a_closed_stream_ends_its_span_as_closed(otel: Otel, gateway: FaultGateway) -> None:
    client = _client(gateway, "ok", options={"chunks": 50, "interval": 0.01})
    with client, client.stream(HELLO) as stream:
        next(stream)
    assert dict(otel.one().attributes or {})["watchdog_sync.ended_by"] == "closed"


def test_stream_sse_and_retry_call_have_spans_of_their_own(
    otel: Otel, gateway: FaultGateway
) -> None:
    url = gateway.base_url("ok") + "/chat/completions"
    with ws.stream_sse(url, json={"model": "m", "messages": HELLO, "stream": True}) as events:
        assert sum(1 for _ in events) >= 2
    sse = otel.one("stream_sse")
    attrs = dict(sse.attributes or {})
    assert sse.kind is SpanKind.CLIENT and attrs["watchdog_sync.ended_by"] == "completed"
    assert attrs["server.port"] == gateway.port and attrs["watchdog_sync.chunks_received"] >= 2
    assert "gen_ai.operation.name" not in attrs  # not a GenAI call of ours
    with (
        pytest.raises(ws.DeadlineExceeded),
        ws.stream_sse(
            gateway.base_url("silent_after_200") + "/chat/completions",
            json={"stream": True},
            idle_timeout=5,
            budget=ws.Budget(0.3),
        ) as silent,
    ):
        list(silent)
    failed = [s for s in otel.spans("stream_sse") if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1 and dict(failed[0].attributes or {})["error.type"] == (
        "deadline_exceeded"
    )
    calls = iter([ValueError("boom"), "ok"])

    def flaky() -> str:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    with pytest.raises(ValueError):
        ws.retry_call(flaky, stage="s1", policy=FAST)
    span = otel.one("retry_call")
    assert span.name == "retry_call s1"
    assert dict(span.attributes or {})["error.type"] == "ValueError"
    assert json.loads(span.to_json())["status"]["status_code"] == "ERROR"
