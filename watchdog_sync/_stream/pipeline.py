"""The one body reader of socket-backed event streams, asked to read by :mod:`.socket_feed`.

Each read: the HTTP stack's :class:`Framing` (http.client's or h11's: all that differs
between the stacks) makes payload bytes, the stream rules' :class:`~.wire.Gate` frames,
bounds and reads the events, ``parse`` makes the items.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterable, List, Optional, Protocol, TypeVar

from .._core.errors import Cancelled
from .framing import EventFramer
from .socket_feed import SocketFeed
from .socket_read import SocketRead
from .wire import Gate

__all__ = ["BodyFeed", "Framing"]

T = TypeVar("T")


class Framing(Protocol):
    """How one HTTP stack frames a body: what differs between http.client and h11."""

    @property
    def done(self) -> bool:
        """The body's last byte was parsed: it ended cleanly."""

    def payload(self, data: Optional[bytes]) -> bytes:
        """The body bytes in ``data`` (``None``: what the stack buffered already); raises the
        stack's error for broken framing."""

    def outcome(self, error: Optional[BaseException], eof: bool) -> Optional[BaseException]:
        """The error the consumer sees for the socket's end (``None``: a clean end), given the
        read's or the parse's ``error``; ``eof``: the connection ended there. May raise
        instead (``Cancelled`` when the stream was stopped)."""

    def release(self, clean: bool) -> None:
        """Let the connection go: pooled after a clean end where the stack pools, else closed."""


class BodyFeed(Generic[T]):
    """One event-stream body, read in its consumer's thread.

    ``parse`` makes the items handed on from the gated events (``stream_sse``:
    ``sseclient.Event`` objects; httpx: the event bytes themselves).
    """

    def __init__(
        self,
        sock: Any,
        framing: Framing,
        framer: EventFramer,
        active: Callable[[bytes], bool],
        parse: Callable[[List[bytes]], List[T]],
    ) -> None:
        self._sock = sock
        self._framing = framing
        self._payload = framing.payload
        self._pass_on = Gate(framer, active).pass_on
        self._parse = parse
        self._socket_read = SocketRead(sock)
        self._feed: Optional[SocketFeed[T]] = None
        self._ended = False

    def start(self, feed: SocketFeed[T], buffered: Iterable[Optional[bytes]]) -> None:
        """Take the ``buffered`` bytes (those that came with the headers, one read's worth
        at most), then give the feed this body to read from."""
        self._feed = feed
        if self._sock is None:  # the stack had let the connection go: the body is all read
            self.end(None, True)
            return
        try:
            for data in buffered:
                feed.offer(self._items(data))
                if self._framing.done:
                    self.end(None, False)
                    return
        except (Exception, Cancelled) as exc:
            self.end(exc, False)
            return
        self._socket_read.own()
        feed.attach(self)

    def pull(self, timeout: Optional[float]) -> List[T]:
        """In the consumer's thread: one read of the socket (:mod:`.socket_read`), waiting
        at most ``timeout`` seconds (``None``: no limit); returns its items. The body ends
        here when the socket does (its items offered first)."""
        try:
            data = self._socket_read.read(timeout)
        except OSError as exc:
            self.end(exc, False)
            return []
        if not data:
            if data is not None:  # b"": the socket's end
                self.end(None, True)
            return []
        try:
            items = self._items(data)  # a stop is the feed's to check, before it delivers
        except (Exception, Cancelled) as exc:  # decoding, framing: its error
            self.end(exc, False)
            return []
        if self._framing.done:
            assert self._feed is not None
            self._feed.offer(items)  # before the end
            self.end(None, False)
            return []
        return items

    def _items(self, data: Optional[bytes]) -> List[T]:
        """The items of one read's bytes. An error event or an event past the size limit
        raises, after the items before it were offered."""
        payload = self._payload(data)
        if not payload:
            return []
        events, failure = self._pass_on(payload)
        items = self._parse(events) if events else []
        if failure is not None:
            assert self._feed is not None
            self._feed.offer(items)  # the events before it go first
            raise failure
        return items

    def end(self, error: Optional[BaseException], eof: bool) -> None:
        """The socket is done (in the consumer's read, or by whoever stopped the stream):
        say how, let it all go (once)."""
        if self._ended:
            return
        self._ended = True
        try:
            error = self._framing.outcome(error, eof)
        except (Exception, Cancelled) as exc:  # delivered to the consumer below, never dropped
            error = exc
        finally:
            self._socket_read.forget()
            self._framing.release(clean=error is None)
            feed, self._feed = self._feed, None
            if feed is not None:
                feed.body_ended(error)
            error = None
