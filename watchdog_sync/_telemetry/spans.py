"""Spans from the structured events: one per call, an event per attempt, backoff and timeout.

An event listener (see :func:`watchdog_sync.add_listener`). ``call_start``
opens a span under the caller's current span (the listener runs in the
caller's thread) or under the span of the call it is nested in;
``call_end`` ends it, wherever it is emitted (the consumer's thread, the
stream's reader, a garbage collection). Events in between carry the call's
``call_id`` and become span events. The ``retry_call`` that a ``ChatClient``
call runs inside is folded into the chat span: its attempts are the call's.

Attributes come from event fields only: ids, names, numbers, reason codes.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from .._core.events import Event
from . import names
from .metrics import Instruments

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
)
# The events that become span events: each attempt, its failure, each backoff, the give-up
# (``success``, ``first_byte`` and ``stream_end`` say nothing the span's end does not).
_SPAN_EVENTS = frozenset({"attempt_start", "attempt_failed", "backoff", "give_up"})
_MAX_OPEN = 100_000  # open calls remembered at most (bounded memory, whatever happens)


class _Call:
    """An open call: its span (``None`` when folded into ``owner``'s) and what metrics need."""

    __slots__ = ("attempts", "attributes", "operation", "owner", "span", "status")

    def __init__(
        self, span: Any, operation: str, attributes: Dict[str, Any], owner: Optional[_Call]
    ) -> None:
        self.span = span
        self.operation = operation
        self.attributes = attributes  # the metrics' attributes (GenAI calls)
        self.owner = owner
        self.status: Optional[int] = None
        self.attempts: Optional[int] = None


class SpanListener:
    """Turns the events of each observed call into its span and the GenAI metrics."""

    def __init__(self, tracer: Tracer, instruments: Instruments) -> None:
        self._tracer = tracer
        self._instruments = instruments
        self._calls: Dict[int, _Call] = {}
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        kind = event.event
        if kind == "call_start":
            self._start(event)
        elif kind == "call_end":
            self._end(event)
        elif event.call_id is not None and kind in _SPAN_EVENTS:
            self._during(event)

    # -- call_start ----------------------------------------------------------------------

    def _start(self, event: Event) -> None:
        call_id, operation = event.call_id, event.operation or "call"
        if call_id is None:
            return
        with self._lock:
            parent = None if event.parent_id is None else self._calls.get(event.parent_id)
            if len(self._calls) >= _MAX_OPEN:
                return
        if (
            parent is not None
            and operation == "retry"
            and parent.operation in names.CHAT_OPERATIONS
        ):
            folded = _Call(None, operation, {}, parent.owner or parent)
            with self._lock:
                self._calls[call_id] = folded
            return
        attributes = _start_attributes(event, operation)
        metric_attributes = {
            k: v for k, v in attributes.items() if k in _METRIC_KEYS and v is not None
        }
        owner = None if parent is None else parent.owner or parent
        context = None if owner is None else trace.set_span_in_context(owner.span)
        span = self._tracer.start_span(
            _span_name(event, operation),
            context=context,
            kind=SpanKind.INTERNAL if operation == "retry" else SpanKind.CLIENT,
            attributes={k: v for k, v in attributes.items() if v is not None},
        )
        with self._lock:
            self._calls[call_id] = _Call(span, operation, metric_attributes, None)

    # -- events in between ---------------------------------------------------------------

    def _during(self, event: Event) -> None:
        with self._lock:
            call = self._calls.get(event.call_id)  # type: ignore[arg-type]
        if call is None:
            return
        owner = call.owner or call
        kind, reason = event.event, event.reason
        if event.status is not None:
            owner.status = event.status
        attributes = {
            name: value for name in _EVENT_FIELDS if (value := getattr(event, name)) is not None
        }
        owner.span.add_event(f"watchdog_sync.{kind}", attributes)
        if reason is None:
            return
        if (kind == "attempt_failed" and reason in names.TIMEOUT_REASONS) or (
            kind == "give_up" and reason == "deadline_exceeded"
        ):
            owner.span.add_event("watchdog_sync.timeout", attributes)
            self._instruments.timeout(reason, owner.operation)
        elif kind == "backoff":
            self._instruments.retry(reason, owner.operation)

    # -- call_end ------------------------------------------------------------------------

    def _end(self, event: Event) -> None:
        if event.call_id is None:
            return
        with self._lock:
            call = self._calls.pop(event.call_id, None)
        if call is None:
            return  # started before instrument(), or more open calls than remembered
        if call.owner is not None:  # folded into its owner's span: its attempts are the owner's
            call.owner.attempts = event.attempt
            return
        span, error = call.span, event.error_type
        if call.operation in names.UNATTEMPTED and call.operation != "sse":
            error = error or _http_error(event.status)  # an HTTPXTransport call: as HTTP spans
        seconds = (event.elapsed_ms or 0.0) / 1000.0
        first = None if event.first_byte_ms is None else event.first_byte_ms / 1000.0
        ended: Dict[str, Any] = {
            names.ATTEMPTS: event.attempt if event.attempt is not None else call.attempts,
            names.CHUNKS: event.chunks_received,
            names.REMAINING: None if event.remaining_ms is None else event.remaining_ms / 1000.0,
            names.ENDED_BY: None if error is not None else event.reason or "completed",
            names.HTTP_STATUS: event.status,
        }
        if event.finish_reason is not None:
            ended[names.FINISH_REASONS] = (event.finish_reason,)
        if names.CHAT_OPERATIONS.get(call.operation):
            ended[names.TIME_TO_FIRST_CHUNK] = first
        if error is not None:
            ended[names.ERROR_TYPE] = error
            ended[names.HTTP_STATUS] = event.status if event.status is not None else call.status
            span.set_status(Status(StatusCode.ERROR, error))
            if call.operation in names.UNATTEMPTED and error in names.TIMEOUT_REASONS:
                self._instruments.timeout(error, call.operation)  # no attempts to count it
        span.set_attributes({k: v for k, v in ended.items() if v is not None})
        span.end()
        if call.operation in names.CHAT_OPERATIONS:
            attributes = dict(call.attributes)
            if error is not None:
                attributes[names.ERROR_TYPE] = error
            streaming = names.CHAT_OPERATIONS[call.operation]
            self._instruments.chat_ended(
                attributes,
                seconds,
                first_chunk=first if streaming else None,
                per_chunk=_per_chunk(event, first) if streaming else None,
            )

    def close(self) -> None:
        """Forget every open call (after the listener was unregistered); their spans end."""
        with self._lock:
            calls, self._calls = list(self._calls.values()), {}
        for call in calls:
            if call.span is not None:
                call.span.set_attribute(names.ENDED_BY, "uninstrumented")
                call.span.end()


_METRIC_KEYS = frozenset(
    {names.OPERATION, names.PROVIDER, names.REQUEST_MODEL, names.SERVER_ADDRESS, names.SERVER_PORT}
)


def _start_attributes(event: Event, operation: str) -> Dict[str, Any]:
    attributes: Dict[str, Any] = {
        names.SERVER_ADDRESS: event.server_address,
        names.SERVER_PORT: event.server_port,
        names.STAGE: event.stage,
        names.REQUEST_ID: event.request_id,
        names.IDLE_TIMEOUT: None if event.idle_timeout_ms is None else event.idle_timeout_ms / 1000,
    }
    if operation in names.CHAT_OPERATIONS:
        attributes[names.OPERATION] = "chat"
        attributes[names.PROVIDER] = names.PROVIDERS.get(operation, names.PROVIDER_NAME)
        attributes[names.REQUEST_MODEL] = event.model
        attributes[names.REQUEST_STREAM] = names.CHAT_OPERATIONS[operation]
    return attributes


def _span_name(event: Event, operation: str) -> str:
    """``chat {model}`` as the conventions say; ``retry_call [stage]``; ``stream_sse``."""
    if operation in names.CHAT_OPERATIONS:
        return f"chat {event.model}" if event.model else "chat"
    name = names.SPAN_NAMES.get(operation, operation)
    return f"{name} {event.stage}" if operation == "retry" and event.stage else name


def _per_chunk(event: Event, first: Optional[float]) -> Optional[float]:
    """The mean time per chunk after the first (seconds), when there was more than one."""
    chunks, last = event.chunks_received, event.last_chunk_ms
    if first is None or last is None or chunks is None or chunks < 2:
        return None
    return max(0.0, last / 1000.0 - first) / (chunks - 1)


def _http_error(status: Optional[int]) -> Optional[str]:
    """The conventions' ``error.type`` of an HTTP client call answered ``status`` (4xx, 5xx)."""
    return None if status is None or status < 400 else str(status)
