"""stream_sse: Server-Sent Events over a hard-bounded Session, guarded by the idle watchdog.

The request runs in the consumer's thread at its first ``next()``; then that thread reads
the socket itself for the stream's whole life (``sse_feed.py``, ``pipeline.py``) and gets
finished ``sseclient.Event`` objects, read by the stream rules (``wire.py``).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from typing import Any, Dict, Iterator, Mapping, Optional

from .._core.budget import Budget
from .._core.calls import CallMark, server_of
from .._core.config import (
    AS_IDLE,
    CONNECT_TIMEOUT_UNSET,
    IDLE_TIMEOUT_UNSET,
    budget_limit,
    deprecated,
)
from .._core.durations import Duration
from .._core.events import event_fields, observed
from .._core.redact import clean_headers, request_secrets
from .._core.scope import current_budget
from .._http.environment import proxy_urls
from .._http.http import Session
from .._http.translate import Translator
from . import sse_feed
from .framing import EventFramer
from .limits import StreamLimits, stream_limits
from .socket_feed import socket_stream
from .stream import GuardedStream, StreamStats, budgets_to_watch
from .wire import is_parsed_activity

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SSEStream", "open_sse", "stream_sse"]

DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024


class SSEStream:
    """The events of one SSE response, guarded by the idle watchdog and the budget.

    Iterate it (or call ``next``) for ``sseclient.Event`` objects; use it as a
    context manager or call :meth:`close` to stop early (the connection is shut
    and let go). ``status`` and ``headers`` are set once the
    response headers arrived; ``truncated`` is true when the stream ended in the
    middle of an event (that half event is not delivered); ``headers_at`` is the
    ``time.monotonic()`` at which the response headers arrived.
    """

    def __init__(self) -> None:
        self.status: Optional[int] = None
        self.headers: Mapping[str, str] = {}
        self.headers_at: Optional[float] = None
        self.truncated = False
        self._guarded: Optional[GuardedStream[Any]] = None
        self._mark: Optional[CallMark] = None

    @property
    def stats(self) -> StreamStats:
        """Items delivered, time to the first one, lifetime and how the stream ended."""
        assert self._guarded is not None
        return self._guarded.stats

    def __iter__(self) -> Iterator[Any]:
        assert self._guarded is not None
        return iter(self._guarded) if self._mark is None else self

    def __next__(self) -> Any:
        assert self._guarded is not None
        try:
            return next(self._guarded)
        except StopIteration:
            self._end(None, "completed")
            raise
        except BaseException as exc:
            self._end(exc, None)
            raise

    def close(self) -> None:
        """Stop the stream: shut the connection and let it go."""
        if self._guarded is not None:
            self._guarded.close()
        self._end(None, "closed")

    def _end(self, error: Optional[BaseException], how: Optional[str]) -> None:
        mark, guarded = self._mark, self._guarded
        if mark is None or guarded is None:
            return
        fields: Dict[str, Any] = {"status": self.status, "chunks_received": guarded.stats.items}
        if how is not None:
            fields["reason"] = how
        mark.end(error, **fields)

    def __enter__(self) -> SSEStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SSEStream status={self.status} truncated={self.truncated}>"


def stream_sse(
    url: str,
    *,
    method: str = "POST",
    json: Any = None,
    headers: Optional[Mapping[str, str]] = None,
    session: Optional[Session] = None,
    idle_timeout: Optional[Duration] = IDLE_TIMEOUT_UNSET,
    first_event_timeout: Optional[Duration] = AS_IDLE,
    connect_timeout: Optional[Duration] = CONNECT_TIMEOUT_UNSET,
    budget: Optional[Budget] = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> SSEStream:
    """Send a request and stream the Server-Sent Events of its response.

    Args:
        url: the endpoint.
        method: HTTP method (``POST`` by default, as chat APIs use).
        json: the request body, sent as JSON.
        headers: extra request headers (credentials never appear in errors; a
            credential header's value is stripped of surrounding whitespace and
            invisible characters, and one left inside is a ``ValueError`` that
            does not show the value).
        session: a :class:`Session` to send with. By default the calling thread's
            private one, held by one open stream at a time (a stream opened while
            another holds it gets a new one), its cookies cleared before each
            request: as if each call made its own, as ``requests.post`` does.
        idle_timeout: the longest gap allowed between data events. Default:
            ``WATCHDOG_SYNC_IDLE_TIMEOUT`` or 120 s, read at each call. An idle
            limit: ``None``, ``inf`` or any value ``<= 0`` turns the idle
            watchdog off (the budget still applies).
        first_event_timeout: the longest wait from sending the request to the
            first data event, response headers included (default: ``idle_timeout``).
            An idle limit: ``<= 0`` or ``inf`` turns it off. ``None`` still means
            "as ``idle_timeout``" (deprecated: leave it out).
        connect_timeout: cap on establishing the connection (default:
            ``WATCHDOG_SYNC_CONNECT_TIMEOUT`` or 10 s, read at each call). ``inf``:
            off; ``0`` or less: ``ValueError``. ``None`` still means the default
            (deprecated: leave it out; ``None`` will mean off). The connect runs
            in the consumer's thread at the first ``next()`` and cannot be shut
            from outside, so it is also cut to the first-event limit and the budget.
        budget: the budget the stream runs under (with the current scope's: the
            tighter wins).
        max_event_bytes: the largest event accepted (default 8 MiB).

    Returns:
        An :class:`SSEStream` of ``sseclient.Event`` objects.

    Every event with data is yielded as soon as it is parsed, in order; Anthropic's
    keep-alive (``event: ping``, data ``{"type": "ping"}``) is yielded too but is no
    activity: it never restarts the idle limit.

    Errors (all :class:`WatchdogError`): :class:`StreamIdleTimeout` when no data
    event arrives in time (the connection is shut from outside first);
    :class:`HTTPStatusError` for a non-2xx answer (a redirect of a POST, or of any
    method but GET, HEAD and OPTIONS, is not followed: ``reason='redirect'``, not
    retryable, naming the Location); :class:`TransportError` for a
    refused or reset connection; :class:`StreamProtocolError` for a non-SSE
    answer (``unexpected_content_type``), invalid UTF-8 (``malformed_event``) or
    an event past ``max_event_bytes`` (``event_too_large``). When the budget
    ends, a scope's ``Cancelled`` propagates to that scope; with ``budget=``
    the stream raises :class:`DeadlineExceeded` / :class:`OperationCancelled`.
    """
    limits = stream_limits(idle_timeout, first_event_timeout, "first_event_timeout")
    if connect_timeout is None:
        deprecated(
            "stream_sse(connect_timeout=None) means 'the default' and will mean 'off', as "
            "None does for every other limit: leave connect_timeout out for the default, "
            "pass math.inf for no connect limit"
        )
        connect_timeout = CONNECT_TIMEOUT_UNSET
    return open_sse(
        url,
        method=method,
        json=json,
        headers=headers,
        session=session,
        limits=limits,
        connect=budget_limit(connect_timeout, "connect_timeout"),
        budget=budget,
        max_event_bytes=max_event_bytes,
        observe=True,
    )


def open_sse(
    url: str,
    *,
    method: str = "POST",
    json: Any = None,
    headers: Optional[Mapping[str, str]] = None,
    session: Optional[Session] = None,
    limits: StreamLimits,
    connect: Optional[float],
    budget: Optional[Budget] = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    translator: Optional[Translator] = None,
    observe: bool = False,
) -> SSEStream:
    """:func:`stream_sse` below the public edge: its limits resolved (``connect``: seconds,
    ``None`` for none).

    ``translator`` (default: one that redacts the credential headers) lets a layer
    above word its status errors and fill its fields into every error built here.
    ``observe``: the stream is a call of its own for observers (``call_start`` /
    ``call_end``), as ``stream_sse``'s are.
    """
    if session is not None and not isinstance(session, Session):
        raise TypeError(
            "session must be a watchdog_sync.Session (a plain requests.Session cannot be "
            f"shut from outside), not {type(session).__name__}"
        )
    framer = EventFramer(max_event_bytes)
    stream = SSEStream()
    base = budget if budget is not None else current_budget()
    abort = base.child(stage=base.stage or "stream")
    request_headers: Dict[str, str] = {
        "Accept": "text/event-stream",
        "Accept-Encoding": "identity",
        "Cache-Control": "no-cache",
    }
    request_headers.update(clean_headers(headers or {}))
    errors = translator or Translator(
        tuple(request_secrets(request_headers, url, proxy_urls(session)))
    )

    mark = None
    if observe and observed():  # an unobserved call would be inert: none is made
        address, port = server_of(url)  # the server's host and port, never the path
        mark = CallMark(
            "sse",
            budget=base,
            stage=base.stage or "stream",
            server_address=address,
            server_port=port,
            idle_timeout_ms=None if limits.idle is None else limits.idle * 1000.0,
        )
    context = contextlib.nullcontext() if mark is None else event_fields(**mark.fields())
    try:
        with context:  # the stream's: its first_byte event carries the call's id
            guarded: GuardedStream[Any] = socket_stream(
                sse_feed.Opener(
                    session=session,
                    method=method,
                    url=url,
                    body=json,
                    headers=request_headers,
                    connect=connect,
                    errors=errors,
                    framer=framer,
                    # Weakly: a stream its consumer dropped (``break`` without close())
                    # is collected, and the guard then shuts the connection.
                    stream_ref=weakref.ref(stream),
                    abort=abort,
                ),
                limits=limits,
                budgets=budgets_to_watch(budget),
                explicit=budget,
                on_timeout=functools.partial(abort.cancel, "stream_stopped"),  # shuts the socket
                active=is_parsed_activity,
            )
    except BaseException as exc:
        if mark is not None:
            mark.end(exc)
        raise
    stream._guarded = guarded
    if mark is not None and mark.call_id is not None:  # its end is reported to the observers
        stream._mark = mark
        mark.end_when_collected(stream)
    return stream
