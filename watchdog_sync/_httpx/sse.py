"""An event stream read through HTTPXTransport on a reader thread of its own.

The reader thread of a guarded SDK stream frames the raw body with
:class:`~.framing.EventFramer` and hands on whole events only, read by the one
set of stream rules (:mod:`~.._stream.wire`): events that are not activity
(comments, data-less events, pings) are held back and handed on in front of
the next data event (so the SDK still sees every byte that matters), which is
what lets the idle watchdog end a stream that only pings; a known format cut
before its terminal event raises ``StreamProtocolError('no_finish_reason')``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Protocol

from .._stream.framing import EventFramer
from .._stream.limits import StreamLimits
from .._stream.stream import GuardedStream, guard_source
from .._stream.wire import EventWatch, Gate

__all__ = ["Stopper", "event_source", "threaded_events"]


class Stopper(Protocol):
    """What ends a response's body from outside: ``body.Shutter`` (an HTTP/1.x socket) or
    ``http2.H2Stream`` (one stream of an HTTP/2 connection)."""

    def shut(self) -> None:
        """End the body from outside (any thread): its reader wakes and lets go."""

    def release(self) -> None:
        """In the reader thread, when the body ends: nothing may reach it from outside now."""


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
        pass_on = Gate(framer, watch.note).pass_on
        for piece in pieces:
            items, failure = pass_on(piece)
            yield from items
            if failure is not None:
                raise failure
        watch.end()
    finally:
        release()


def threaded_events(
    inner: Any,
    framer: Optional[EventFramer],
    watch: EventWatch,
    shutter: Stopper,
    limits: StreamLimits,
) -> GuardedStream[bytes]:
    """The guarded events of the body ``inner`` (httpx's stream), read by a thread of their own.

    Call it inside ``using_budget(budget)``. The reader thread closes ``inner``
    when the source ends, whichever way; an idle timeout, the budget's end or
    ``close()`` end the body from outside first (``shutter``: the socket shut, or
    over HTTP/2 the stream reset and its reader woken).
    """
    pieces = iter(inner)

    def let_go() -> None:  # in the reader thread, when the source ends
        shutter.release()
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
        inner.close()

    source = event_source(pieces, framer, watch, let_go)
    return guard_source(source, source, limits, on_timeout=shutter.shut)
