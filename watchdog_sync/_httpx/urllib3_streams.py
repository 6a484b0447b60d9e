"""instrument(idle_timeout=..., first_event_timeout=...) for urllib3: its event streams guarded.

urllib3's ``urlopen`` patch (``_http/instrument_urllib3.py``) hands each top-level request
of a streamed response (``preload_content=False``, as requests asks) to
:func:`watch_stream`. While stream limits are in force, a ``text/event-stream`` answer's
http.client body is read by the stream rules on a reader thread of its own, as
:class:`HTTPXTransport` reads one (:func:`~.sse.threaded_events`), its socket shut from
outside on idle, at the budget's end or on ``close()``; a stream silent before its first
event is sent again as that transport's is. The response's ``read`` / ``read1`` /
``stream`` / ``close`` then serve the guarded, decoded events, so requests'
``iter_content`` (``iter_lines``, sseclient-py) sees the stream rules' errors as they are.
"""

from __future__ import annotations

import functools
import socket
import time
from http.client import HTTPException, HTTPResponse
from typing import Any, Callable, Iterator, Optional

from urllib3.exceptions import ProtocolError, ReadTimeoutError

from .._core.budget import Budget
from .._core.errors import StreamIdleTimeout
from .._core.redact import request_secrets
from .._core.scope import boundary, current_child, using_budget
from .._http.environment import proxy_urls
from .._stream.framing import EventFramer
from .._stream.instrument_limits import limits_in_force
from .._stream.socket_read import READ_SIZE
from .._stream.sse import DEFAULT_MAX_EVENT_BYTES
from .._stream.wire import EventWatch
from .body import EventBody, Shutter, is_event_stream
from .call import Send
from .sse import first_events, threaded_events

__all__ = ["watch_stream"]


def watch_stream(send: Callable[[], Any], body: Any, headers: Any, url: str) -> Any:
    """``send()`` (one top-level urllib3 request), its event stream guarded when stream
    limits are in force; ``body``: the request's body (in memory: it may be sent again);
    ``headers`` and ``url``: the credentials an error event's message must not show."""
    limits = limits_in_force()
    if limits is None:
        return send()
    budget = current_child(stage="http")
    replayable = body is None or isinstance(body, (bytes, str))
    secrets = request_secrets(headers, url, proxy_urls())
    number = 0
    with boundary(budget, budget):
        while True:
            number += 1
            this = Send(limits, number, time.monotonic())
            response = send()
            raw = _RawBody.of(response)
            if raw is None:
                return response
            may_resend = replayable and this.may_repeat(budget)
            try:
                return _guarded(response, raw, EventWatch(secrets), budget, this, may_resend)
            except StreamIdleTimeout:  # raised only when it may be sent again
                this.report_repeat("no first event", budget)


def _guarded(
    response: Any, raw: _RawBody, watch: EventWatch, budget: Budget, send: Send, may_resend: bool
) -> Any:
    shutter = Shutter(budget, raw.sock)
    encoding = response.headers.get("content-encoding", "identity")
    framer = EventFramer(DEFAULT_MAX_EVENT_BYTES)
    with using_budget(budget):  # the stream watches it
        guarded = threaded_events(raw, framer, watch, shutter, send.left(), encoding)
    let_go = functools.partial(_close, response)
    head, items, failure = first_events(guarded, DEFAULT_MAX_EVENT_BYTES, let_go, send, may_resend)
    _Reads(response, EventBody(head, items, guarded, budget, let_go, failure))
    return response


def _close(response: Any) -> None:
    """Close the connection under ``response``: urllib3 saw none of the body we read."""
    type(response).close(response)
    response.release_conn()


class _RawBody:
    """The body of the http.client response under urllib3's, each piece as soon as it is in.

    :meth:`of` is the one place this module reads private names: urllib3's ``_fp`` and
    http.client's ``fp.raw._sock``.
    """

    def __init__(self, raw: HTTPResponse) -> None:
        self._raw = raw
        self.sock: Optional[socket.socket] = getattr(getattr(raw.fp, "raw", None), "_sock", None)

    @staticmethod
    def of(response: Any) -> Optional[_RawBody]:
        """The event stream under urllib3's ``response``, not read yet (``None``: another)."""
        raw = getattr(response, "_fp", None)
        if is_event_stream(response.status, response.headers) and isinstance(raw, HTTPResponse):
            return _RawBody(raw)
        return None

    def __iter__(self) -> Iterator[bytes]:
        """Read errors as urllib3's ``_error_catcher`` has them (requests maps those)."""
        while True:
            try:
                data: bytes = self._raw.read1(READ_SIZE)
            except TimeoutError as exc:
                raise ReadTimeoutError(None, None, "Read timed out.") from exc  # type: ignore[arg-type]
            except (HTTPException, OSError) as exc:
                raise ProtocolError(f"Connection broken: {exc!r}", exc) from exc
            if not data:
                return
            yield data

    def close(self) -> None:
        self._raw.close()


class _Reads:
    """A urllib3 response's reads, served from its guarded events (set on the response)."""

    def __init__(self, response: Any, events: EventBody) -> None:
        self._events = events
        self._pieces = self._all()
        self._buffer = b""
        response.read = self.read
        response.read1 = self.read
        response.stream = self.stream
        response.close = self.close

    def _all(self) -> Iterator[bytes]:
        try:
            yield from self._events
        finally:  # the end, a failure or the consumer gone: the connection is let go
            self._events.close()

    def read(self, amt: Optional[int] = None, *args: Any, **kwargs: Any) -> bytes:
        """Up to ``amt`` bytes (``None``: to the end), at least one event's unless at the end."""
        if amt is None:
            data = self._buffer + b"".join(self._pieces)
            self._buffer = b""
            return data
        if not self._buffer:
            self._buffer = next(self._pieces, b"")
        data, self._buffer = self._buffer[:amt], self._buffer[amt:]
        return data

    def stream(self, amt: Optional[int] = None, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        """Each event as soon as it is in (``amt`` is a hint only)."""
        if self._buffer:
            data, self._buffer = self._buffer, b""
            yield data
        yield from self._pieces

    def close(self) -> None:
        self._events.close()
