"""The one event-stream body reader: bytes -> payload -> whole events -> the rules -> the channel.

Every socket-backed event stream (``stream_sse`` and ``ChatClient`` over
http.client, the httpx transport's HTTP/1.1 streams over h11) is read by one
:class:`BodyFeed`. Each read goes the same way: the body's :class:`Framing`
turns it into payload bytes, the :class:`~.framing.EventFramer` splits and
bounds the events, the stream rules' :class:`~.wire.Gate` reads each of them,
``parse`` makes the items the stream hands on, and the channel
gets them. What differs between the two HTTP stacks is only the
:class:`Framing`: how bytes become payload, how the body may end, and how its
connection is let go.

Who reads: the consumer's own thread takes the bytes that came with the
headers, and then, unless the process is busy, goes on reading its socket
itself: each time it finds its buffer empty, one read whose wait is what its
own wait may last (``min(idle limit left, budget left)``), so an event reaches
it as soon as the plain loop's would, with no second thread woken. Once the
process is busy during a burst of opens, each body moves (at its next read) to
the shared reader (:mod:`.engine`), whose one thread batches the reads of many
sockets: cheaper than that many threads each woken per event while the threads
still opening need the GIL's turns. Busy means: more than :data:`SHARED_FROM`
bodies open, or :data:`BUSY_FROM` open while one consumer in :data:`BEHIND_SHARE`
falls behind, its reads finding more than one event waiting (counted by
consumers, so one fast stream does not make a process busy). A burst is
:data:`BURST_OPENS` bodies started within :data:`CALM` seconds (opens that come
slower, one every fraction of a second beside many open streams, are none: there
the shared reader's second thread per event would cost more than it saves); it is
over :data:`CALM` seconds after its last such open. The shared reader then hands
each body back to its consumer (:meth:`BodyFeed.give_back`), whose own reads
bring each event as soon as the plain loop's would; the next burst moves them
again.

Isolation: read by its consumer, a stream's bytes cost only that consumer; on
the shared reader, each stream's turn is bounded (:data:`~.engine.TURN_BYTES`).
A flood of comments or pings gives its consumer nothing, and the first-event
and idle limits end it.

On timeout or cancel: the stream's ``on_timeout`` shuts the socket from
outside, which ends a read in progress at once (:meth:`BodyFeed.kick` makes a
socket the shared reader paused watched again, so the shutdown is seen); the
body is then ended by that read or, when no read is in progress, on the shared
reader's thread.
"""

from __future__ import annotations

import collections
import functools
import math
import os
import threading
import time
from typing import Any, Callable, Deque, Generic, Iterable, List, Optional, Protocol, TypeVar

from .._core.errors import Cancelled
from . import engine
from .fed import FedChannel
from .framing import EventFramer
from .socket_read import SocketRead
from .wire import Gate

__all__ = ["BodyFeed", "Framing"]

T = TypeVar("T")

# Who reads: with more bodies open than SHARED_FROM, or with BUSY_FROM open while consumers fall
# behind their streams, the shared reader reads them all: one thread batching many sockets'
# reads costs less than that many threads woken per event, once the process is busy.
SHARED_FROM = 128
BUSY_FROM = 32
BURST_OPENS = 16  # bodies started within CALM seconds of each other: a burst of opens
CALM = 0.25  # a burst of opens is over this long after its last open
BUSY_WINDOW = 512  # consumers' reads judged at a time
BEHIND_SHARE = 8  # busy: at least one in this many of the consumers that read fell behind
_open_lock = threading.Lock()
_open = 0  # bodies open now (started, not ended)
# The current window (numbered): its consumer reads, the consumers that read, and those of
# them that found more than one item waiting at least once. A heuristic, counted without a
# lock (a lost count on a free-threaded build only delays a judgement).
_window = 0
_window_reads = 0
_window_readers = 0
_window_behind = 0
_busy = False  # consumers fell behind in the last window; until fewer than BUSY_FROM are open
_starts: Deque[float] = collections.deque()  # the last BURST_OPENS starts' times
_burst_until = -math.inf  # time.monotonic() when the last burst of opens is over


def _after_fork_in_child() -> None:
    global _open_lock, _open, _window_reads, _window_readers, _window_behind, _busy, _burst_until
    _open_lock = threading.Lock()
    _open = _window_reads = _window_readers = _window_behind = 0  # the parent's are not ours
    _busy = False
    _starts.clear()
    _burst_until = -math.inf


def _crowded() -> bool:
    """The shared reader reads the bodies: the process is busy during a burst of opens (see
    the module's docstring)."""
    return (_busy or _open > SHARED_FROM) and time.monotonic() <= _burst_until


def _count_start() -> None:
    """A body starts (every open, its body short or not): part of a burst of opens when the
    last BURST_OPENS came within CALM seconds."""
    global _burst_until
    now = time.monotonic()
    with _open_lock:
        _starts.append(now)
        while len(_starts) > BURST_OPENS:
            _starts.popleft()
        if len(_starts) >= BURST_OPENS and now - _starts[0] <= CALM:
            _burst_until = now + CALM


def _judge_window() -> None:
    global _window, _window_reads, _window_readers, _window_behind, _busy
    _busy = _open >= BUSY_FROM and _window_behind * BEHIND_SHARE >= _window_readers
    _window += 1
    _window_reads = _window_readers = _window_behind = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Framing(Protocol):
    """How one HTTP stack frames a body: what differs between http.client and h11."""

    @property
    def done(self) -> bool:
        """The body's last byte was parsed: it ended cleanly."""

    def check(self) -> None:
        """Raise if the stream was stopped from outside: nothing more is parsed, and a body
        the shared reader paused ends when it is served again."""

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
    """One event-stream body: read in its consumer's thread, or on the shared reader.

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
        # Bound once: each read calls them in turn.
        self._payload = framing.payload
        self._pass_on = Gate(framer, active).pass_on
        self._parse = parse
        self._socket_read = SocketRead(sock)
        self._channel: Optional[FedChannel[T]] = None
        self._feed: Optional[engine.Feed] = None
        self._counted = False  # in _open
        self._ended = False
        self._read_in = self._behind_in = -1  # the last windows it read in, and fell behind in

    def start(self, channel: FedChannel[T], buffered: Iterable[Optional[bytes]]) -> None:
        """Take the ``buffered`` bytes (those that came with the headers, one read's worth
        at most), then give the channel this body to read from."""
        _count_start()
        self._channel = channel
        if self._sock is None:  # the stack had let the connection go: the body is all read
            self.end(None, True)
            return
        try:
            for data in buffered:
                self.take(data)
                if self._framing.done:
                    self.end(None, False)
                    return
        except (Exception, Cancelled) as exc:
            self.end(exc, False)
            return
        global _open
        with _open_lock:
            _open += 1
            self._counted = True
            crowded = _crowded()
        if crowded:
            self._to_reader()
        else:
            self._socket_read.own()
            channel.attach(self)

    def pull(self, timeout: Optional[float]) -> List[T]:
        """In the consumer's thread: one read of the socket (:mod:`.socket_read`), waiting
        at most ``timeout`` seconds (``None``: no limit); returns its items. The body ends
        here when the socket does. Once the process is busy, the shared reader reads this
        one from then on."""
        try:
            data = self._socket_read.read(timeout)
            if data is None:
                return []
        except OSError as exc:
            self._socket_ended(exc, False)
            return []
        if not data:
            self._socket_ended(None, True)
            return []
        try:
            # Not checked for a stop first: the channel looks at that before it delivers.
            items = self._items(data)
        except (Exception, Cancelled) as exc:  # decoding, framing: its error
            self.end(exc, False)
            return []
        global _window_reads, _window_readers, _window_behind
        _window_reads += 1
        if self._read_in != _window:
            self._read_in = _window
            _window_readers += 1
        if len(items) > 1 and self._behind_in != _window:
            self._behind_in = _window
            _window_behind += 1
        if _window_reads >= BUSY_WINDOW:
            _judge_window()
        if self._framing.done or _crowded():
            if items:  # before the end, or before the shared reader's first items
                assert self._channel is not None
                self._channel.offer(items)
            if self._framing.done:
                self.end(None, False)
            else:
                self._to_reader()
            return []
        return items

    def _socket_ended(self, error: Optional[BaseException], eof: bool) -> None:
        """In the consumer's read: the socket ended. Shut by a stop or the budget's end, the
        body is ended on the shared reader's thread (the consumer raises at once); else
        here, so that the consumer sees how it ended."""
        channel = self._channel
        if channel is not None and channel.stopped_while_read():
            engine.call_soon(functools.partial(self.end, error, eof))
        else:
            self.end(error, eof)

    def _to_reader(self) -> None:
        channel = self._channel
        if channel is None or not channel.detach():
            return
        self._socket_read.let_go()
        feed = self._feed = engine.Feed(
            self._sock, self.take, self.end, channel.flush, self.give_back
        )
        channel.set_resume(lambda: engine.kick(feed))
        engine.add(feed)

    def give_back(self) -> bool:
        """On the shared reader, every so often: once the process is neither busy nor in a
        burst of opens, the consumer reads the socket again (blocking, its kernel timeout).
        True: it does, and the shared reader lets the socket go."""
        channel, feed = self._channel, self._feed
        if channel is None or feed is None or _crowded():
            return False
        # Undone before the consumer can read: once it does, it may move the body again.
        self._feed = None
        channel.set_resume(None)
        self._socket_read.own()
        if not channel.reattach(self):  # stopped: the shared reader ends it, as before
            self._socket_read.let_go()
            self._feed = feed
            channel.set_resume(lambda: engine.kick(feed))
            return False
        return True

    def take(self, data: Optional[bytes]) -> bool:
        """One read's bytes (on the shared reader, or those that came with the headers):
        framed, gated, parsed, offered. False: the channel is full."""
        self._framing.check()
        items = self._items(data)
        room = True
        if items:
            assert self._channel is not None
            room = self._channel.offer(items)
        feed = self._feed
        if feed is not None:
            feed.finished = self._framing.done
        return room

    def _items(self, data: Optional[bytes]) -> List[T]:
        """The items of one read's bytes. An error event or an event past the size limit
        raises, after the items before it were offered."""
        payload = self._payload(data)
        if not payload:
            return []
        events, failure = self._pass_on(payload)
        items = self._parse(events) if events else []
        if failure is not None:
            if items:  # the events before it go first
                assert self._channel is not None
                self._channel.offer(items)
            raise failure
        return items

    def end(self, error: Optional[BaseException], eof: bool) -> None:
        """The socket is done (in the consumer's read, or on the shared reader): say how,
        let it all go (once)."""
        if self._ended:
            return
        self._ended = True
        self._uncount()
        try:
            error = self._framing.outcome(error, eof)
        except (Exception, Cancelled) as exc:  # delivered to the consumer below, never dropped
            error = exc
        finally:
            self._socket_read.forget()
            self._framing.release(clean=error is None)
            channel, self._channel = self._channel, None
            self._feed = None  # no cycle stays behind (feed -> take -> self -> feed)
            if channel is not None:
                channel.set_resume(None)
                channel.fed_end(error, completed=error is None)
            error = None

    def _uncount(self) -> None:
        global _open, _busy
        if self._counted:
            self._counted = False
            with _open_lock:
                _open -= 1
                if _open < BUSY_FROM:
                    _busy = False

    def kick(self) -> None:
        """After a stop: a socket the shared reader paused is watched again, so its shutdown
        is seen."""
        feed = self._feed
        if feed is not None:
            engine.kick(feed)
