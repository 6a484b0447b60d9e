"""An event stream's wait for its first event, and its reader thread when it has one.

:func:`first_events` serves every stream HTTPXTransport guards and urllib3's
(``urllib3_streams.py``). The reader thread of :func:`threaded_events` decodes a compressed
body (:mod:`~.._stream.coding`), frames it and hands on every whole event as soon as it is
framed, by the stream rules of :mod:`~.._stream.wire` (an event that is not activity is
handed on but never restarts the idle clock).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Tuple, Union

from .._core.errors import StreamIdleTimeout
from .._stream.coding import StreamDecoder, is_identity
from .._stream.framing import EventFramer
from .._stream.limits import StreamLimits
from .._stream.stream import GuardedStream, guard_source
from .._stream.wire import EventWatch, Gate, is_activity
from .body import Shutter
from .call import Send
from .http2 import H2Stream

__all__ = ["decoded_here", "first_events", "threaded_events"]


def threaded_events(
    inner: Any,
    framer: EventFramer,
    watch: EventWatch,
    shutter: Union[Shutter, H2Stream],
    limits: StreamLimits,
    content_encoding: str = "identity",
) -> GuardedStream[bytes]:
    """The guarded events of the body ``inner`` (httpx's stream), read by a thread of their own.

    Call it inside ``using_budget(budget)``. A body sent with a ``content_encoding`` is
    decoded first (the caller tells httpx it is not encoded any more); one this cannot
    decode raises at the first read. The reader thread closes ``inner`` when the source
    ends, whichever way; an idle timeout, the budget's end or ``close()`` end the body from
    outside first (``shutter``: the socket shut, or over HTTP/2 the stream reset and its
    reader woken).
    """
    pieces = iter(inner)

    def source() -> Iterator[bytes]:  # iterated by the reader thread
        try:
            decoder = None if is_identity(content_encoding) else StreamDecoder(content_encoding)
            pass_on = Gate(framer, watch.note).pass_on
            for piece in pieces:
                for payload in (piece,) if decoder is None else decoder.pieces(piece):
                    items, failure = pass_on(payload)
                    yield from items
                    if failure is not None:
                        raise failure
            watch.end()
            if decoder is not None:
                decoder.finish()
        finally:
            shutter.release()
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
            inner.close()

    events = source()
    return guard_source(events, events, limits, on_timeout=shutter.shut, active=is_activity)


def decoded_here(response: Any) -> str:
    """``response``'s Content-Encoding when its event stream is compressed (else ``""``),
    taken off its headers: the reader thread decodes the body, httpx must not again."""
    encoding: str = response.headers.get("content-encoding", "")
    if is_identity(encoding):
        return ""
    del response.headers["content-encoding"]
    response.headers.pop("content-length", None)
    return encoding


def first_events(
    guarded: GuardedStream[bytes],
    cap: int,
    close: Callable[[], None],
    send: Send,
    may_resend: bool,
    phase: Optional[str] = None,
) -> Tuple[Optional[bytes], Iterator[bytes], Optional[Exception]]:
    """Wait for ``guarded``'s first event that is activity: the events up to and including it,
    joined (``None``: the stream ended first), the rest, and the error that ended the stream
    before it (for the body's first read to raise).

    Until then the transport holds the response (a stream silent before its first
    event may be sent again), so the events before it reach the SDK with it, at the
    first moment the SDK can read anything. Past ``cap`` bytes of them, they are
    returned as they are: that stream is not sent again.

    An error stops the stream and closes its connection (``close``) first. A stream silent
    before its first event raises StreamIdleTimeout here when it ``may_resend``; otherwise
    its error is ``send.silent(phase)``. What is not an ``Exception`` is raised.
    """
    items = iter(guarded)
    head = bytearray()
    try:
        for item in items:
            head += item
            if is_activity(item) or len(head) > cap:
                break
    except BaseException as exc:
        guarded.close()
        close()
        if not isinstance(exc, Exception):
            raise
        if isinstance(exc, StreamIdleTimeout) and exc.chunks_received == 0:
            if may_resend:
                raise
            return None, items, send.silent(phase)
        return None, items, exc
    return bytes(head) if head else None, items, None
