"""The response bodies HTTPXTransport hands to httpx: bounded by the budget, or guarded events.

Both hold the request's budget registration until httpx (or the SDK) closes
the response, and let it go then, before the connection can go back to the
pool: a socket that is back in the pool is never shut.
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Iterator, Optional, Tuple

from .._core.budget import Budget, _noop
from .._core.errors import Cancelled
from .._core.phase import mark
from .._core.scope import boundary, error_for, owns
from .._http.progress import RequestProgress
from .._http.shutter import SocketSet
from .._stream.stream import GuardedStream

__all__ = ["BoundedBody", "EventBody", "Shutter", "as_stream_of", "is_event_stream", "socket_of"]

_HTTP1 = (b"HTTP/1.1", b"HTTP/1.0")


def socket_of(response: Any, versions: Tuple[bytes, ...] = _HTTP1) -> Optional[socket.socket]:
    """The socket under a response of one of ``versions`` (``None`` for another or an
    unknown stream). One HTTP/2 socket carries many streams, and shutting it would end
    every one of them: only :mod:`.http2` asks for it.
    """
    extensions = getattr(response, "extensions", None) or {}
    if extensions.get("http_version") not in versions:
        return None
    get_extra_info = getattr(extensions.get("network_stream"), "get_extra_info", None)
    sock = get_extra_info("socket") if callable(get_extra_info) else None
    return sock if isinstance(sock, socket.socket) else None


def is_event_stream(status: int, headers: Any) -> bool:
    """A ``2xx`` answer whose Content-Type is ``text/event-stream`` (httpx's or urllib3's)."""
    content_type: str = headers.get("content-type", "")
    return 200 <= status < 300 and content_type.lower().startswith("text/event-stream")


def as_stream_of(body: type, lib: Any) -> type:
    """``body`` (a body class of this package) as a ``lib.SyncByteStream``."""
    return type(body.__name__, (body, lib.SyncByteStream), {})


class Shutter:
    """One response's socket, shut from outside when the budget ends or the stream stops.

    ``release()`` (the response is closed) forgets the socket first, so a
    shutdown can never reach it once its connection may be back in the pool.
    """

    __slots__ = ("_sockets", "_unregister")

    def __init__(self, budget: Budget, sock: Optional[socket.socket]) -> None:
        self._sockets = SocketSet()
        self._unregister: Callable[[], None] = _noop
        if sock is None:
            self._sockets.release()  # nothing to shut: shut() is a no-op, fired stays False
        else:
            self._sockets.put(0, sock)
            self._unregister = budget.on_done(self._on_end)

    @property
    def fired(self) -> bool:
        """The socket was shut from outside."""
        return self._sockets.fired

    def _on_end(self, budget: Budget) -> None:
        self.shut()

    def shut(self) -> None:
        """Shut the socket now (``SHUT_RDWR`` wakes a read blocked in another thread)."""
        self._sockets.shut()

    def release(self) -> None:
        self._sockets.release()
        unregister, self._unregister = self._unregister, _noop
        unregister()


class BoundedBody:
    """A body read in the caller's thread; an error caused by the budget's end says so.

    Its socket (``sock``) is shut when the budget ends. With none (HTTP/2: nothing to shut)
    the budget is checked before each piece, so a body that keeps dripping ends at its first
    piece past the deadline. The ``Cancelled`` of the budget's end says ``'body'`` and how
    many bytes came.
    """

    def __init__(
        self,
        inner: Any,
        sock: Optional[socket.socket],
        budget: Budget,
        owner: Budget,
        release: Callable[[], None],
    ) -> None:
        self._inner = inner
        self._shutter = Shutter(budget, sock)
        self._budget = budget
        self._owner = owner
        self._release = release
        self._check_each = sock is None
        self._progress = progress = RequestProgress(budget.clock.now)
        progress.head_in()

    def __iter__(self) -> Iterator[bytes]:
        budget = self._budget
        check_each = self._check_each
        read = self._progress.read
        ended = False
        try:
            for piece in self._inner:
                if check_each and budget.ended:
                    break
                read(len(piece))
                yield piece
        except Exception:
            if not (self._shutter.fired or budget.ended):
                raise
            ended = True  # said below, outside the handler: nothing of httpx's is chained
        if ended or self._shutter.fired or budget.ended:
            # An EOF that our own shutdown caused is no clean end; a body that came whole
            # past the deadline (from buffers nothing had to wait for) is no success.
            with boundary(budget, self._owner):
                try:
                    budget.check()
                except Cancelled as exc:
                    mark(exc, "body", self._progress.words())
                    raise

    def close(self) -> None:
        self._shutter.release()
        release, self._release = self._release, _noop
        try:
            self._inner.close()
        finally:
            release()


class EventBody:
    """A guarded event stream's body: the first event (already read), then the rest.

    The budget's end raises ``Cancelled`` for an enclosing scope, or the public error when
    the transport's own ``budget=`` owns it, saying ``'body'`` and how far the body got.
    ``failure`` (what ended the stream before its first event) is raised by the first read.
    """

    watch: Any = None  # the EventWatch that read its events (set by the transport)

    def __init__(
        self,
        head: Optional[bytes],
        items: Iterator[bytes],
        guarded: GuardedStream[bytes],
        owner: Budget,
        release: Callable[[], None],
        failure: Optional[Exception] = None,
    ) -> None:
        self._failure = failure
        self._head = head
        self._items = items
        self._guarded = guarded
        self._owner = owner
        self._release = release
        self._progress = progress = RequestProgress()
        progress.head_in()

    def __iter__(self) -> Iterator[bytes]:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
        head, self._head = self._head, None
        read = self._progress.read
        if head is not None:
            read(len(head))
            yield head
        try:
            for item in self._items:
                read(len(item))
                yield item
        except Cancelled as exc:
            mark(exc, "body", self._progress.words())  # unless the stream below said it
            if owns(self._owner, exc):
                raise error_for(exc) from None
            raise

    def close(self) -> None:
        """Stop the stream: the reader thread ends and lets the connection go."""
        self._guarded.close()
        release, self._release = self._release, _noop
        release()
