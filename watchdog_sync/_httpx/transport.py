"""HTTPXTransport: an httpx2 (or httpx) transport whose every request is bounded by the budget.

Each request's timeouts are clipped to the time left; the connect and the response head
are bounded through httpcore's network calls (:mod:`.head`, hooked in by
:mod:`.httpcore_hooks`); an answer that comes past the deadline is closed and raises. An
HTTP/1.x response's socket is shut at the budget's end while the response is open (an
HTTP/2 event stream is reset instead, :mod:`.http2`). A ``text/event-stream`` body is
guarded by the stream rules: an HTTP/1.1 body on httpcore's own sockets is read by its
consumer (:mod:`.feed`), any other on a reader thread of its own (:mod:`.sse`). A
streaming request silent before its first event is sent again, only outside a retry owner.
"""

from __future__ import annotations

import contextvars
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from .._core.budget import Budget, _noop
from .._core.config import AS_IDLE, IDLE_TIMEOUT_UNSET
from .._core.durations import Duration
from .._core.errors import StreamIdleTimeout
from .._core.events import event_fields, observed
from .._core.redact import request_secrets
from .._core.scope import boundary, joined_budget, using_budget
from .._http import propagation as _propagation
from .._http.environment import proxy_urls
from .._stream.framing import EventFramer
from .._stream.limits import stream_limits
from .._stream.sse import DEFAULT_MAX_EVENT_BYTES
from .._stream.wire import EventWatch
from .body import BoundedBody, EventBody, Shutter, as_stream_of, is_event_stream, socket_of
from .call import (
    MarkedBody,
    Send,
    asks_for_stream,
    body_in_memory,
    call_mark,
    clipped,
    mark_deadline,
)
from .cores import PerLibrary, default_library, library_of
from .feed import fed_events
from .head import head_phase
from .http2 import h2_stream
from .httpcore_hooks import bound_pool
from .sse import decoded_here, first_events, threaded_events

if TYPE_CHECKING:
    import httpx2

    _Base = httpx2.BaseTransport
else:
    _Base = object

__all__ = ["BOUND", "HTTPXTransport"]

_log = logging.getLogger("watchdog_sync")
# True while an HTTPXTransport sends through the transport it wraps: instrument()'s patch of
# HTTPTransport.handle_request then leaves the request to it (bound once, not twice).
BOUND: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "watchdog_sync_httpx_bound", default=False
)


class HTTPXTransport(_Base):
    """An httpx2 (or httpx) transport whose every request is bounded by a budget.

    Args:
        transport: the transport to wrap (an ``httpx2`` or ``httpx`` ``BaseTransport``); by
            default ``httpx2.HTTPTransport()`` (or ``httpx.HTTPTransport()`` when only httpx is
            installed). The instance is a ``BaseTransport`` of the same library.
        idle_timeout: the longest gap between data events of a ``text/event-stream`` body.
            Default: ``WATCHDOG_SYNC_IDLE_TIMEOUT`` or 120 s, read when the transport is made.
            An idle limit: ``None``, ``inf`` or any value ``<= 0`` turns it off (the budget
            still applies).
        first_event_timeout: the longest wait from sending a streaming request to its first data
            event, response headers included (default: ``idle_timeout``; ``<= 0`` or ``inf``:
            off; ``None`` means "as ``idle_timeout``", deprecated as for :func:`stream_sse`). A
            stream silent that long is sent again (at most twice, within the budget) when
            nothing was delivered yet (a streaming request: ``Accept: text/event-stream``,
            ``"stream": true`` or a Gemini ``:streamGenerateContent`` / ``alt=sse`` URL), unless
            the request runs inside a ``retry_call`` attempt: then it raises
            ``StreamIdleTimeout`` (retryable) and the retry owner decides.
        budget: a budget every request runs under, with the current ``deadline()`` scope's (the
            tighter wins).
        max_event_bytes: the largest event accepted (default 8 MiB).
        propagate: ``True``: every send (each attempt, each resend of a silent stream, each
            redirect hop httpx makes) carries the remaining budget as ``grpc-timeout`` and
            ``x-envoy-upstream-rq-timeout-ms``, computed when it is sent; none when no budget is
            bounded, and none to another origin than the one the call's first request went to.
            Off by default. (An addition to the contract's signature.)

    On timeout or cancel: inside a ``deadline()`` scope a request (or a body read) raises
    ``Cancelled`` when the budget ends, and the scope turns it into :class:`DeadlineExceeded` /
    :class:`OperationCancelled`; with ``budget=`` and no scope the request raises those itself.
    Every phase ends at the budget's end: name resolution, connect, TLS, sending, the response
    head (``1xx`` interim responses included: each read waits at most the time left, and the
    socket is shut from outside), the body; what runs below a wrapped transport that is not
    httpx's own is checked when it returns (an answer past the deadline raises). A silent event
    stream raises :class:`StreamIdleTimeout`; an event over the cap
    ``StreamProtocolError('event_too_large')``; a stream cut before its terminal event
    ``StreamProtocolError('no_finish_reason')`` (a Gemini stream's terminal event is a candidate
    with ``finishReason``); an Anthropic ``error`` event or a Gemini error payload an
    :class:`HTTPStatusError` (``overloaded_error``: 529; Gemini: its ``code``). Transport
    failures keep httpx's own exception types. Over HTTP/2 (``http2=True``) an event stream that
    stops before its end is reset (``RST_STREAM``) and its reader thread ends at once; the
    connection's socket is shut only when no other stream is open on it.

    Example::

        client = httpx2.Client(transport=watchdog_sync.HTTPXTransport(idle_timeout=30))
        with watchdog_sync.deadline(60):
            client.get("https://example.org/")
    """

    _lib: Any = None
    _event_body: type = EventBody
    _bounded_body: type = BoundedBody
    _marked_body: type = MarkedBody

    def __new__(
        cls,
        transport: Any = None,
        *,
        idle_timeout: Optional[Duration] = IDLE_TIMEOUT_UNSET,
        first_event_timeout: Optional[Duration] = AS_IDLE,
        budget: Optional[Budget] = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        propagate: bool = False,
    ) -> HTTPXTransport:
        # The class a caller names is the library-neutral one; the instance is of its
        # subclass with the wrapped library's BaseTransport as a base (__init__ checks the rest).
        if cls is HTTPXTransport:
            lib = default_library() if transport is None else library_of(transport)
            cls = _concrete(lib)
        return object.__new__(cls)

    def __init__(
        self,
        transport: Any = None,
        *,
        idle_timeout: Optional[Duration] = IDLE_TIMEOUT_UNSET,
        first_event_timeout: Optional[Duration] = AS_IDLE,
        budget: Optional[Budget] = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        propagate: bool = False,
    ) -> None:
        lib = self._lib
        if transport is None:
            transport = lib.HTTPTransport()
        elif not isinstance(transport, lib.BaseTransport):
            raise TypeError(
                f"transport must be a {lib.__name__}.BaseTransport, not {type(transport).__name__}"
            )
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(
                f"budget must be a watchdog_sync.Budget or None, not {type(budget).__name__}"
            )
        EventFramer(max_event_bytes)  # the framer checks the value and names the parameter
        bound_pool(transport, lib)  # its connect and response head: bounded like the body
        self._transport = transport
        self._limits = stream_limits(idle_timeout, first_event_timeout, "first_event_timeout")
        self._budget = budget
        self._max_event_bytes = max_event_bytes
        self._propagate = _propagation.check_propagate(propagate)

    def __repr__(self) -> str:
        return (
            f"<watchdog_sync.HTTPXTransport around {self._transport!r} idle_timeout={self._limits.idle} "
            f"first_event_timeout={self._limits.first} budget={self._budget!r}"
            f"{' propagate=True' if self._propagate else ''}>"
        )

    @property
    def transport(self) -> Any:
        """The wrapped transport."""
        return self._transport

    def __enter__(self) -> HTTPXTransport:
        self._transport.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._transport.__exit__(*exc_info)

    def close(self) -> None:
        """Close the wrapped transport (its connection pool)."""
        self._transport.close()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` through the wrapped transport, bounded by the budget.

        Raises ``Cancelled`` (in a scope) or :class:`DeadlineExceeded` /
        :class:`OperationCancelled` (``budget=``) when the budget ends; the
        wrapped transport's own errors otherwise.
        """
        budget, owner, release = joined_budget(self._budget, stage="http")
        mark = call_mark(request, budget, self._limits.idle) if observed() else None
        try:
            with boundary(budget, owner), event_fields(**({} if mark is None else mark.fields())):
                budget.check()
                response: httpx2.Response = self._send(request, budget, owner, release)
        except BaseException as exc:
            release()
            if mark is not None:
                mark.end(exc)
            raise
        if mark is not None:
            response.stream = self._marked_body(response.stream, mark, response.status_code)
        return response

    def _send(
        self, request: Any, budget: Budget, owner: Budget, release: Callable[[], None]
    ) -> Any:
        timeouts = clipped(request.extensions.get("timeout"), budget.remaining())
        # A stream silent before its first event is sent again: only with a body in memory.
        streaming = self._limits.first is not None and asks_for_stream(request)
        replayable = streaming and body_in_memory(request) is not None
        number = 0
        while True:
            number += 1
            send = Send(self._limits, number, time.monotonic())
            live = dict(timeouts)
            first, read = self._limits.first, live.get("read")
            head_until = None  # the headers are part of the first-event wait, as a whole
            if streaming and first is not None and (read is None or first < read):
                live["read"] = first
                head_until = send.started + first
            request.extensions["timeout"] = live  # httpcore reads this dict at each phase
            if self._propagate or _propagation.forced():
                mark_deadline(request, budget)  # computed now, for this send
            try:
                token = BOUND.set(True)
                try:
                    with head_phase(budget, head_until) as head:  # connect .. last header byte
                        response = self._transport.handle_request(request)
                finally:
                    BOUND.reset(token)
            except Exception as exc:
                if not (budget.ended or (head_until is not None and _is_read_timeout(exc))):
                    raise
                response = None  # raised below, outside the handler: the httpx error (and
                # the request it holds, credentials included) is not chained to ours
            if response is not None and budget.ended:
                # A part below nothing could interrupt returned past the deadline: no success.
                try:
                    response.close()
                except Exception:
                    _log.debug("watchdog_sync: closing a late response raised", exc_info=True)
                budget.check()
            if response is None:
                head.check()  # the budget's end caused it: say so, and where
                if replayable and send.may_repeat(budget):
                    send.report_repeat("no response headers", budget)
                    continue
                raise send.silent(head.progress.phase)
            live["read"] = timeouts.get("read")  # body reads: the caller's read timeout
            if not is_event_stream(response.status_code, response.headers):
                sock = socket_of(response)
                response.stream = self._bounded_body(response.stream, sock, budget, owner, release)
                return response
            may_resend = replayable and send.may_repeat(budget)
            try:
                return self._guarded(response, request, budget, owner, release, send, may_resend)
            except StreamIdleTimeout:  # raised only when it may be sent again
                send.report_repeat("no first event", budget)

    def _guarded(
        self,
        response: Any,
        request: Any,
        budget: Budget,
        owner: Budget,
        release: Callable[[], None],
        send: Send,
        may_resend: bool,
    ) -> Any:
        """Guard the event stream and wait for its first event (:func:`~.sse.first_events`):
        an error before it is raised by the body's first read, where both SDKs hand it to
        their caller unchanged."""
        shutter = Shutter(budget, socket_of(response))
        h2 = h2_stream(response, self._lib)  # HTTP/2: the stream is reset, its reader woken
        encoding = decoded_here(response)  # a compressed body: decoded by the reader thread
        framer = EventFramer(self._max_event_bytes)
        # An error event's error masks every credential the request carried.
        watch = EventWatch(request_secrets(request.headers, str(request.url), proxy_urls()))
        limits = send.left()
        with using_budget(budget):  # HTTP/1.1 on httpcore's own sockets: the one body reader
            fed = None
            if not encoding:  # a compressed body cannot be framed before it is decoded
                fed = fed_events(
                    response, request.method, self._lib, framer, watch, shutter, limits
                )
            if fed is None:
                threaded = threaded_events(
                    response.stream, framer, watch, h2 or shutter, limits, encoding
                )
                fed = threaded, _noop
        guarded, close_connection = fed
        cap = self._max_event_bytes
        head, items, failure = first_events(
            guarded, cap, close_connection, send, may_resend, "body"
        )

        def let_go() -> None:
            try:
                close_connection()
            finally:
                release()

        response.stream = self._event_body(head, items, guarded, owner, let_go, failure)
        response.stream.watch = watch  # did the terminal event come (the call's end says so)
        return response


def _make_concrete(lib: Any) -> type:
    """HTTPXTransport with ``lib.BaseTransport`` as a base (and bodies that are its streams)."""
    namespace = {
        "__module__": HTTPXTransport.__module__,
        "__qualname__": HTTPXTransport.__qualname__,
        "__doc__": HTTPXTransport.__doc__,
        "_lib": lib,
        "_event_body": as_stream_of(EventBody, lib),
        "_bounded_body": as_stream_of(BoundedBody, lib),
        "_marked_body": as_stream_of(MarkedBody, lib),
    }
    return type("HTTPXTransport", (HTTPXTransport, lib.BaseTransport), namespace)


_concrete: PerLibrary[type] = PerLibrary(_make_concrete)


def _is_read_timeout(exc: BaseException) -> bool:
    return any(klass.__name__ == "ReadTimeout" for klass in type(exc).__mro__)
