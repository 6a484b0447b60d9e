"""What an event stream read through HTTPXTransport says: activity, its end, errors inside it.

The reader thread of a guarded SDK stream frames the raw body with
:class:`~.framing.EventFramer` and hands on whole events only. An event is
*activity* when it carries data and is not an Anthropic ``ping``; SSE comments
(``: keep-alive``), data-less events and pings are held back and handed on in
front of the next data event (so the SDK still sees every byte that matters),
which is what lets the idle watchdog end a stream that only pings.

The terminal event tells a whole stream from a cut one: OpenAI chat
completions end with ``[DONE]`` or a chunk with a ``finish_reason``; Anthropic
Messages with ``message_stop``; the OpenAI Responses API with
``response.completed`` (or ``.incomplete`` / ``.failed``). A stream in one of
these formats that ends without it raises ``StreamProtocolError('no_finish_reason')``;
a stream in a format we do not know ends as the server ended it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterator, Optional

from .._core.durations import off
from .._core.errors import HTTPStatusError, StreamProtocolError, WatchdogError
from .._core.redact import excerpt
from .._core.status import status_verdict
from .._retry.foreign import provider_error_status
from .._stream.framing import EventFramer
from .._stream.stream import GuardedStream, guard_stream
from .body import Shutter

__all__ = ["EventWatch", "event_source", "threaded_events"]

_FINISH = re.compile(rb'"finish_reason"\s*:\s*"')
_ANTHROPIC_EVENTS = frozenset(
    {
        b"message_start",
        b"message_delta",
        b"content_block_start",
        b"content_block_delta",
        b"content_block_stop",
    }
)
_RESPONSES_END = frozenset({b"response.completed", b"response.incomplete", b"response.failed"})


def _field(event: bytes, name: bytes) -> Optional[bytes]:
    """The value of the first ``name`` line (``name`` ends with the colon), or ``None``."""
    if event.startswith(name):
        start = 0
    else:
        start = event.find(b"\n" + name)
        if start < 0:
            return None
        start += 1
    end = event.find(b"\n", start)
    value = event[start + len(name) : end]
    return value[1:] if value.startswith(b" ") else value


class EventWatch:
    """Reads each whole event as it passes: is it activity, has the stream finished?"""

    __slots__ = ("delivered", "finished", "known")

    def __init__(self) -> None:
        self.delivered = 0  # data events handed on
        self.finished = False  # the terminal event was seen
        self.known = False  # the format is one whose terminal event we know

    def note(self, event: bytes) -> bool:
        """True when ``event`` is activity. Raises the error an ``error`` event carries."""
        if event.startswith(b"data:"):
            name = _field(event, b"event:") if b"\nevent:" in event else None
        else:
            if not (b"\ndata:" in event or b"\ndata\n" in event):
                return False  # a comment, or an event without data
            name = _field(event, b"event:")
        if name is not None:
            if name == b"ping":
                return False
            if name == b"error":
                raise stream_error(_field(event, b"data:") or b"", self.delivered)
            if name == b"message_stop" or name in _RESPONSES_END:
                self.known = self.finished = True
            elif name in _ANTHROPIC_EVENTS or name.startswith(b"response."):
                self.known = True
        elif not self.finished:
            if event.startswith((b"data: [DONE]", b"data:[DONE]")) or _FINISH.search(event):
                self.known = self.finished = True
            elif not self.known and b'"choices"' in event:
                self.known = True
        self.delivered += 1
        return True

    def end(self) -> None:
        """At a clean end of the body: raise if a known format ended without finishing."""
        if self.finished or not self.known:
            return
        count = self.delivered
        if count:
            outcome = "the answer is incomplete (chunks were already delivered)"
        else:
            outcome = "nothing was generated"
        raise StreamProtocolError(
            f"the event stream ended after {count} events without its terminal event "
            f"([DONE], a finish_reason or message_stop): {outcome}",
            reason="no_finish_reason",
            chunks_received=count,
            retryable=count == 0,
        )


def stream_error(data: bytes, delivered: int) -> WatchdogError:
    """The error for an ``event: error`` (Anthropic: ``{"type": "error", "error": {...}}``).

    A known error type becomes an :class:`HTTPStatusError` with the status the
    provider uses for it (``overloaded_error`` -> 529, ``rate_limit_error`` ->
    429, ...), retryable by the status table only while no event was delivered;
    anything else is ``StreamProtocolError(reason='stream_error')``.
    """
    text = data.decode("utf-8", "replace")
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    shown = excerpt(f"{kind}: {message}" if kind else text, 300, ())
    status = provider_error_status(kind)
    where = f"inside the stream after {delivered} events"
    if status is not None:
        reason, retryable = status_verdict(status, text)
        return HTTPStatusError(
            f"the server sent an error event {where}: {shown}",
            status=status,
            body=excerpt(text, 1000, ()),
            reason=reason,
            retryable=retryable and delivered == 0,
        )
    return StreamProtocolError(
        f"the server sent an error event {where}: {shown}",
        reason="stream_error",
        chunks_received=delivered,
    )


def event_source(
    pieces: Iterator[bytes],
    framer: Optional[EventFramer],
    watch: EventWatch,
    release: Callable[[], None],
) -> Iterator[bytes]:
    """The body as whole events, each data event carrying the held-back events before it.

    Without a framer (a compressed body, which cannot be framed before httpx
    decodes it) every raw piece is activity. ``release`` runs when the
    generator ends, whichever way (in the reader thread that iterates it).
    """
    try:
        if framer is None:
            yield from pieces
            return
        held = bytearray()
        limit = framer.limit
        feed, check, note = framer.feed, framer.check, watch.note
        for piece in pieces:
            for event in feed(piece):
                if note(event):
                    if held:
                        event = bytes(held) + event
                        held.clear()
                    yield event
                elif len(held) + len(event) <= limit:
                    held += event  # bounded: past the cap, older held events are dropped
                else:
                    held[:] = event
            check()
        watch.end()
    finally:
        release()


def threaded_events(
    inner: Any,
    framer: Optional[EventFramer],
    watch: EventWatch,
    shutter: Shutter,
    idle: Optional[float],
    first: Optional[float],
) -> GuardedStream[bytes]:
    """The guarded events of the body ``inner`` (httpx's stream), read by a thread of their own.

    Call it inside ``using_budget(budget)``. The reader thread closes ``inner``
    when the source ends, whichever way; an idle timeout, the budget's end or
    ``close()`` shut the socket from outside first (``shutter``).
    """
    pieces = iter(inner)

    def let_go() -> None:  # in the reader thread, when the source ends
        shutter.release()
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
        inner.close()

    return guard_stream(
        event_source(pieces, framer, watch, let_go),
        idle_timeout=off(idle),
        first_item_timeout=off(first),
        on_timeout=shutter.shut,
    )
