"""What HTTPXTransport reads of a request and adds around it: its timeouts clipped to the time
left, deadline headers, each send of a streaming request, the call.

Deadline headers (``propagate=True``): each send (every attempt, every resend
of a silent stream, every redirect hop) carries the remaining budget, computed
then. httpx follows redirects in the Client, above the transport, so each hop
reaches the transport as a new request; but httpx builds a hop's request with
a copy of the previous request's ``extensions``. The first request of a call
records its origin there, and only a send to that origin carries the headers:
a hop to another origin has them stripped (httpx copies the previous hop's
headers onto it), and a hop back gets them again.

A streaming request silent before its first event is sent again (:class:`Send`), at most
twice and only outside a retry owner.

The call (when events are observed): a ``CallMark`` from the request to the
response's close, its operation and model read as ``_http/request_call.py`` says.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Dict, Iterator, NamedTuple, Optional

from .._core import events as _events
from .._core.budget import Budget
from .._core.calls import CallMark
from .._core.errors import StreamIdleTimeout
from .._http import propagation as _propagation
from .._http.redirect import same_origin
from .._http.request_call import STREAM_FLAG, model_of, operation_of
from .._retry.loop import in_retry_attempt
from .._stream.limits import StreamLimits, first_event_error

__all__ = [
    "MarkedBody",
    "Send",
    "asks_for_stream",
    "body_in_memory",
    "call_mark",
    "clipped",
    "mark_deadline",
    "request_model",
]

_ORIGIN_KEY = "watchdog_sync.origin"  # the extension naming the origin the call started at
_GEMINI_STREAM = ":streamGenerateContent"  # google-genai asks for a stream by its URL
_ALT_SSE = re.compile(rb"(?:^|&)alt=sse(?:&|$)")
_log = logging.getLogger("watchdog_sync")
_MAX_SENDS = 3  # a stream silent before its first event is sent at most twice more
_TIMEOUT_KEYS = ("connect", "read", "write", "pool")
_FLOOR = 0.001  # a timeout of 0 would mean non-blocking to the socket layer


def clipped(timeouts: Any, remaining: float) -> Dict[str, Optional[float]]:
    """httpx's timeout extension with every phase capped at ``remaining`` seconds."""
    given = timeouts if isinstance(timeouts, dict) else {}
    clipped: Dict[str, Optional[float]] = {}
    for key in _TIMEOUT_KEYS:
        value = given.get(key)
        if remaining != float("inf"):
            value = remaining if value is None else min(float(value), remaining)
            value = max(_FLOOR, value)
        clipped[key] = value
    return clipped


def mark_deadline(request: Any, budget: Budget) -> None:
    """Set (or strip) the deadline headers of ``request`` before it is sent."""
    url = request.url
    here = f"{url.scheme}://{url.netloc.decode('ascii', 'replace').rpartition('@')[2]}/"
    allowed = request.extensions.setdefault(_ORIGIN_KEY, here)
    if isinstance(allowed, str) and same_origin(allowed, here):
        _propagation.set_deadline_headers(request.headers, budget)
    else:
        _propagation.strip_deadline_headers(request.headers)


def call_mark(request: Any, budget: Budget, idle: Optional[float]) -> Optional[CallMark]:
    """The request's call for observers (``None`` when nobody observes events)."""
    streaming = asks_for_stream(request)
    url = request.url
    operation = operation_of(url.path, streaming)
    mark = CallMark(
        operation,
        budget=budget,
        stage="http",
        model=None if operation == "http" else request_model(request),
        server_address=url.host or None,
        server_port=url.port or {"https": 443, "http": 80}.get(url.scheme),
        idle_timeout_ms=None if idle is None or not streaming else idle * 1000.0,
    )
    return None if mark.call_id is None else mark


def request_model(request: Any) -> Optional[str]:
    """The top-level ``"model"`` of a JSON POST body in memory (at most 64 KiB), else ``None``."""
    if request.method != "POST" or "json" not in request.headers.get("content-type", ""):
        return None
    return model_of(body_in_memory(request))


def body_in_memory(request: Any) -> Optional[bytes]:
    """The request body when httpx holds it in memory (a streamed upload stays unread)."""
    try:
        body = request.content
    except Exception:  # httpx's RequestNotRead: the body is a stream
        return None
    return body if isinstance(body, bytes) else None


def asks_for_stream(request: Any) -> bool:
    """True for a request that asks for an event stream: by its ``Accept``, by its URL (the
    Gemini API: ``...:streamGenerateContent``, ``alt=sse``), or by ``"stream": true``."""
    if "text/event-stream" in request.headers.get("accept", ""):
        return True
    url = request.url
    if url.path.endswith(_GEMINI_STREAM) or _ALT_SSE.search(url.query or b"") is not None:
        return True
    body = body_in_memory(request)
    return body is not None and STREAM_FLAG.search(body) is not None


class Send(NamedTuple):
    """One send of a streaming request under the request's ``limits``: the ``number``-th,
    sent at ``started`` (``time.monotonic()``)."""

    limits: StreamLimits
    number: int
    started: float

    def left(self) -> StreamLimits:
        """The limits of this send's stream: the first-event limit less the time it has had."""
        first = self.limits.first
        if first is not None:
            first = max(_FLOOR, first - (time.monotonic() - self.started))
        return StreamLimits(self.limits.idle, first, first_named=True)

    def silent(self, phase: Optional[str] = None) -> StreamIdleTimeout:
        """What this send raises when nothing came within the first-event limit (``phase``:
        where the request was, when known)."""
        assert self.limits.first is not None
        lifetime = time.monotonic() - self.started
        return first_event_error(self.limits.first, self.number, lifetime, phase=phase)

    def may_repeat(self, budget: Budget) -> bool:
        """Whether a silent send may be sent again: only outside a retry owner (inside a
        ``retry_call`` attempt the owner decides)."""
        return self.number < _MAX_SENDS and budget.remaining() > 0 and not in_retry_attempt()

    def report_repeat(self, why: str, budget: Budget) -> None:
        """Log and emit (``attempt_failed``) that this send is sent again, and ``why``."""
        _log.info("watchdog_sync: %s before the first event; sending the request again", why)
        _events.emit(
            _events.Event(
                "attempt_failed",
                stage="http",
                reason="first_event_timeout",
                attempt=self.number,
                remaining_ms=None if budget.deadline is None else budget.remaining() * 1000.0,
            )
        )


class MarkedBody:
    """A response body that ends its call: at its end, its failure, its close or collection."""

    def __init__(self, inner: Any, mark: CallMark, status: int) -> None:
        self._inner = inner
        self._mark = mark
        self._status = status
        self._pieces = 0
        self._first: Optional[float] = None
        self._last: Optional[float] = None
        mark.end_when_collected(self)

    def __iter__(self) -> Iterator[bytes]:
        try:
            for piece in self._inner:
                now = time.monotonic()
                last, self._last = self._last, now
                if last is None:
                    self._first = now
                else:
                    sink = self._mark.on_chunk
                    if sink is not None:
                        sink(now - last)
                self._pieces += 1
                yield piece
        except BaseException as exc:
            self._end(exc, None)
            raise
        self._end(None, "completed")

    def close(self) -> None:
        # An event stream closed after its terminal event (as the SDKs do) completed.
        watch = getattr(self._inner, "watch", None)
        try:
            self._inner.close()
        finally:
            self._end(None, "completed" if watch is not None and watch.finished else "closed")

    def _end(self, error: Optional[BaseException], how: Optional[str]) -> None:
        if isinstance(error, GeneratorExit):
            error, how = None, "closed"
        started = self._mark.started
        self._mark.end(
            error,
            status=self._status,
            chunks_received=self._pieces,
            first_byte_ms=None if self._first is None else (self._first - started) * 1000.0,
            last_chunk_ms=None if self._last is None else (self._last - started) * 1000.0,
            **({} if how is None else {"reason": how}),
        )
