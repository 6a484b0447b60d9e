"""The one event-stream body reader: bytes -> payload -> whole events -> the rules -> the channel.

Every socket-backed event stream (``stream_sse`` and ``ChatClient`` over
http.client, the httpx transport's HTTP/1.1 streams over h11) is read by one
:class:`BodyFeed`: the consumer's thread takes the bytes that came with the
headers, then the shared reader (:mod:`.engine`) takes every later read. Each
read goes the same way: the body's :class:`Framing` turns it into payload
bytes, the :class:`~.framing.EventFramer` splits and bounds the events, the
stream rules' :class:`~.wire.Gate` holds back what is not activity, ``parse``
makes the items the stream hands on, and the channel gets them. What differs
between the two HTTP stacks is only the :class:`Framing`: how bytes become
payload, how the body may end, and how its connection is let go.

On timeout or cancel: the stream's ``on_timeout`` shuts the socket from
outside (and :meth:`BodyFeed.kick` makes a paused socket watched again, so the
shutdown is seen); the reader then ends the body through :meth:`BodyFeed.end`.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterable, List, Optional, Protocol, TypeVar

from .._core.errors import Cancelled
from . import engine
from .fed import FedChannel
from .framing import EventFramer
from .wire import Gate

__all__ = ["BodyFeed", "Framing"]

T = TypeVar("T")


class Framing(Protocol):
    """How one HTTP stack frames a body: what differs between http.client and h11."""

    @property
    def done(self) -> bool:
        """The body's last byte was parsed: it ended cleanly."""

    def check(self) -> None:
        """Raise if the stream was stopped from outside (nothing queued is parsed then)."""

    def payload(self, data: Optional[bytes]) -> bytes:
        """The body bytes in ``data`` (``None``: what the stack buffered already).

        Raises the stack's error for broken framing.
        """

    def outcome(self, error: Optional[BaseException], eof: bool) -> Optional[BaseException]:
        """The error the consumer sees for the socket's end (``None``: a clean end).

        ``error`` is the read's or the parse's; ``eof``: the connection ended there. May
        raise instead (``Cancelled`` when the stream was stopped).
        """

    def release(self, clean: bool) -> None:
        """Let the connection go: pooled after a clean end where the stack pools, else closed."""


class BodyFeed(Generic[T]):
    """One event-stream body: read in the consumer's thread first, then on the shared reader.

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
        self._framer = framer
        self._gate = Gate(framer.limit, active)
        self._parse = parse
        self._channel: Optional[FedChannel[T]] = None
        self._feed: Optional[engine.Feed] = None
        self._ended = False

    def start(self, channel: FedChannel[T], buffered: Iterable[Optional[bytes]]) -> None:
        """In the consumer's thread: take the ``buffered`` bytes (those that came with the
        headers, a turn's worth at most), then hand the socket (already non-blocking) to the
        shared reader."""
        self._channel = channel
        if self._sock is None:  # the stack had let the connection go: the body is all read
            self.end(None, True)
            return
        feed = self._feed = engine.Feed(self._sock, self.take, self.end, channel.flush)
        try:
            for data in buffered:
                if not self.take(data) or feed.finished:  # full: the reader goes on later
                    break
        except (Exception, Cancelled) as exc:
            self.end(exc, False)
            return
        if feed.finished:
            self.end(None, False)
            return
        channel.set_resume(lambda: engine.kick(feed))
        engine.add(feed)

    def take(self, data: Optional[bytes]) -> bool:
        """One read's bytes: framed, gated, parsed, offered. False: the channel is full."""
        framing = self._framing
        framing.check()
        payload = framing.payload(data)
        room = True
        if payload:
            items, failure = self._gate.pass_on(self._framer.feed(payload))
            if items:
                parsed = self._parse(items)
                if parsed:
                    assert self._channel is not None
                    room = self._channel.offer(parsed)
            if failure is not None:
                raise failure  # an error event, after the events before it
            self._framer.check()
        feed = self._feed
        if feed is not None:
            feed.finished = framing.done
        return room

    def end(self, error: Optional[BaseException], eof: bool) -> None:
        """The socket is done (on the reader, or in :meth:`start`): say how, let it all go."""
        if self._ended:
            return
        self._ended = True
        try:
            error = self._framing.outcome(error, eof)
        except (Exception, Cancelled) as exc:  # delivered to the consumer below, never dropped
            error = exc
        finally:
            self._framing.release(clean=error is None)
            channel, self._channel = self._channel, None
            self._feed = None  # no cycle stays behind (feed -> take -> self -> feed)
            if channel is not None:
                channel.set_resume(None)
                channel.fed_end(error, completed=error is None)
            error = None

    def kick(self) -> None:
        """After a stop: a paused socket is watched again, so its shutdown is seen."""
        feed = self._feed
        if feed is not None:
            engine.kick(feed)
