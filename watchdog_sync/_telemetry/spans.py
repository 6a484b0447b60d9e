"""Spans from the structured events: one per call, an event per attempt, backoff and timeout.

An event listener (see :func:`watchdog_sync.add_listener`). ``call_start``
opens a span under the caller's current span (the listener runs in the
caller's thread) or under the span of the call it is nested in;
``call_end`` ends it, wherever it is emitted (the consumer's thread, the
stream's reader, a garbage collection). Events in between carry the call's
``call_id`` and become span events. (The ``retry_call`` that a ``ChatClient``
call runs inside is part of that call: it has no call, nor span, of its own.)
A streaming chat call also gets a chunk sink (:meth:`SpanListener.chunk_sink`)
that records each gap between chunks.

Attributes come from event fields only: ids, names, numbers, reason codes.
What is the same for every call of one operation, model and server (the span's
name and kind, the GenAI attributes, the metrics' attribute set) is built once,
in a :class:`~.shapes.Shape`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode, Tracer

from .._core.calls import ChunkSink
from .._core.events import Event
from . import names
from .metrics import Instruments
from .shapes import Shape, Shapes

__all__ = ["SpanListener"]

# Event fields copied onto span events, under the same names.
_EVENT_FIELDS = (
    "attempt",
    "reason",
    "status",
    "transport_code",
    "delay_ms",
    "elapsed_ms",
    "remaining_ms",
    "chunks_received",
    "first_byte_ms",
    "phase",
)
# The events that become span events: each attempt, its failure, each backoff, the give-up
# (``success``, ``first_byte`` and ``stream_end`` say nothing the span's end does not).
_SPAN_EVENTS = frozenset({"attempt_start", "attempt_failed", "backoff", "give_up"})
_MAX_OPEN = 100_000  # open calls remembered at most (bounded memory, whatever happens)


class _Call:
    """An open call: its span, its shape and what its events told so far."""

    __slots__ = ("attempts", "recording", "shape", "span", "status")

    def __init__(self, span: Any, shape: Shape) -> None:
        self.span = span
        self.shape = shape
        self.recording: bool = span.is_recording()
        self.status: Optional[int] = None
        self.attempts: Optional[int] = None


class SpanListener:
    """Turns the events of each observed call into its span and the GenAI metrics."""

    def __init__(self, tracer: Tracer, instruments: Instruments) -> None:
        self._tracer = tracer
        self._instruments = instruments
        self._shapes = Shapes()
        # Plain dict operations (atomic): no lock on the path of every call.
        self._calls: Dict[int, _Call] = {}
        self._live = True

    def __call__(self, event: Event) -> None:
        kind = event.event
        if kind == "call_start":
            self._start(event)
        elif kind == "call_end":
            self._end(event)
        elif kind in _SPAN_EVENTS and event.call_id is not None:
            self._during(event)

    def chunk_sink(self, call_id: int) -> Optional[ChunkSink]:
        """Records each chunk gap of a streaming chat call (``None`` for any other call)."""
        call = self._calls.get(call_id)
        if call is None or not call.shape.streaming:
            return None
        record, attributes = self._instruments.per_chunk.record, call.shape.metric_attributes

        def sink(gap: float) -> None:
            if self._live:
                record(gap, attributes)

        return sink

    # -- call_start ----------------------------------------------------------------------

    def _start(self, event: Event) -> None:
        call_id = event.call_id
        if call_id is None or len(self._calls) >= _MAX_OPEN:
            return
        shape = self._shapes.get(event)
        parent = None if event.parent_id is None else self._calls.get(event.parent_id)
        attributes = dict(shape.span_attributes)
        if event.stage is not None:
            attributes[names.STAGE] = event.stage
        if event.request_id is not None:
            attributes[names.REQUEST_ID] = event.request_id
        if event.idle_timeout_ms is not None:
            attributes[names.IDLE_TIMEOUT] = event.idle_timeout_ms / 1000
        span = self._tracer.start_span(
            shape.name_with(event.stage),
            context=None if parent is None else trace.set_span_in_context(parent.span),
            kind=shape.kind,
            attributes=attributes,
        )
        self._calls[call_id] = _Call(span, shape)

    # -- events in between ---------------------------------------------------------------

    def _during(self, event: Event) -> None:
        call = self._calls.get(event.call_id)  # type: ignore[arg-type]
        if call is None:
            return
        kind, reason = event.event, event.reason
        if event.status is not None:
            call.status = event.status
        if kind == "attempt_start":
            call.attempts = event.attempt
        if call.recording:
            fields = event.__dict__
            attributes = {n: v for n in _EVENT_FIELDS if (v := fields[n]) is not None}
            call.span.add_event(f"watchdog_sync.{kind}", attributes)
        else:
            attributes = {}
        if reason is None:
            return
        if (kind == "attempt_failed" and reason in names.TIMEOUT_REASONS) or (
            kind == "give_up" and reason == "deadline_exceeded"
        ):
            if call.recording:
                call.span.add_event("watchdog_sync.timeout", attributes)
            self._instruments.timeout(reason, call.shape.operation)
        elif kind == "backoff":
            self._instruments.retry(reason, call.shape.operation)

    # -- call_end ------------------------------------------------------------------------

    def _end(self, event: Event) -> None:
        call = self._calls.pop(event.call_id, None)  # type: ignore[arg-type]
        if call is None:
            return  # started before instrument(), or more open calls than remembered
        span, shape, error = call.span, call.shape, event.error_type
        if error is None and shape.http:
            error = _http_error(event.status)  # an HTTPXTransport call: as HTTP spans
        first = None if event.first_byte_ms is None else event.first_byte_ms / 1000.0
        if call.recording:
            span.set_attributes(_end_attributes(event, call, error, first))
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
        span.end()
        if error is not None and shape.unattempted and error in names.TIMEOUT_REASONS:
            self._instruments.timeout(error, shape.operation)  # no attempts to count it
        if shape.chat:
            attributes = shape.metric_attributes if error is None else shape.failed(error)
            self._instruments.duration.record((event.elapsed_ms or 0.0) / 1000.0, attributes)
            if shape.streaming and first is not None:
                self._instruments.first_chunk.record(first, shape.metric_attributes)

    def close(self) -> None:
        """Forget every open call (after the listener was unregistered); their spans end.

        Chunk sinks handed out before record nothing more.
        """
        self._live = False
        calls, self._calls = self._calls, {}
        for call in calls.values():
            call.span.set_attribute(names.ENDED_BY, "uninstrumented")
            call.span.end()


def _end_attributes(
    event: Event, call: _Call, error: Optional[str], first: Optional[float]
) -> Dict[str, Any]:
    """What the span learns at its end (attributes whose value is ``None`` left out)."""
    ended: Dict[str, Any] = {}
    attempts = event.attempt if event.attempt is not None else call.attempts
    if attempts is not None:
        ended[names.ATTEMPTS] = attempts
    if event.chunks_received is not None:
        ended[names.CHUNKS] = event.chunks_received
    if event.remaining_ms is not None:
        ended[names.REMAINING] = event.remaining_ms / 1000.0
    status = event.status
    if error is not None:
        ended[names.ERROR_TYPE] = error
        if event.phase is not None:
            ended[names.PHASE] = event.phase
        if status is None:
            status = call.status
    else:
        ended[names.ENDED_BY] = event.reason or "completed"
    if status is not None:
        ended[names.HTTP_STATUS] = status
    if event.finish_reason is not None:
        ended[names.FINISH_REASONS] = (event.finish_reason,)
    if first is not None and call.shape.streaming:
        ended[names.TIME_TO_FIRST_CHUNK] = first
    return ended


def _http_error(status: Optional[int]) -> Optional[str]:
    """The conventions' ``error.type`` of an HTTP client call answered ``status`` (4xx, 5xx)."""
    return None if status is None or status < 400 else str(status)
