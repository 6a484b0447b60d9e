"""HTTPXTransport's HTTP/1.1 event-stream bodies, read by their consumers.

When httpcore returns a response's head, the first bytes of its body sit in h11's receive
buffer and the rest in the socket. For a response of the shape this module knows, checked
at every step (httpx's ``ResponseStream`` over httpcore's pool stream over an
``HTTP11Connection`` reading httpcore's own ``SyncStream``, a plain or TLS socket; the
request sent whole, no byte of the body parsed yet), the consumer's thread reads the socket
itself through the one body reader (:class:`~.._stream.pipeline.BodyFeed`). Its framing
(:class:`_H11Framing`) gives each read's bytes to the connection's own h11 state (public
h11 API: ``receive_data``, ``next_event``), so h11 sees the whole body in order, and the
``Data`` bytes are framed into events byte for byte as the reader thread of :mod:`.sse`
hands them to httpx. Any other shape keeps that reader thread.

A body that ends cleanly (``EndOfMessage``) leaves h11 ``DONE`` and httpcore pools the
connection before the consumer sees the end. Any other end (stopped, shut from outside by
the budget's :class:`~.body.Shutter`, failed, cut) marks h11's side failed first
(``send_failed()``), and httpcore closes the connection. h11 is touched under one lock,
never after that mark. A ``makefile()`` reference keeps the socket's descriptor open until
the body lets it go, so a close from another thread (``client.close()``) never takes it
from under a read: that stream raises httpx's ``ReadError`` at its next read.

On timeout or cancel: the idle limit, the budget's end and ``close()`` shut the socket from
outside, which ends a read in progress; the body then lets the connection go.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import socket
import threading
from typing import Any, Callable, Iterator, List, Optional, Tuple

from .._stream.framing import EventFramer
from .._stream.limits import StreamLimits
from .._stream.pipeline import BodyFeed
from .._stream.socket_feed import socket_stream
from .._stream.stream import GuardedStream, budgets_to_watch
from .._stream.wire import EventWatch, is_activity
from .body import Shutter, socket_of
from .cores import ClassLookup, pooled_body

__all__ = ["fed_events"]

_log = logging.getLogger("watchdog_sync")


def fed_events(
    response: Any,
    method: str,
    lib: Any,
    framer: EventFramer,
    watch: EventWatch,
    shutter: Shutter,
    limits: StreamLimits,
) -> Optional[Tuple[GuardedStream[bytes], Callable[[], None]]]:
    """The guarded events of ``response``'s body, read by its consumer, and a function
    that closes the connection (idempotent); ``None`` when the response is of another shape.

    Call it inside ``using_budget(budget)``: the stream watches that budget. The
    request goes no further until the first ``next()``, which takes the bytes
    buffered with the headers.
    """
    shape = _shape(response, method, lib)
    if shape is None:
        return None
    framing = _H11Framing(response.stream, *shape, lib=lib, watch=watch, shutter=shutter)
    # httpx gets the event bytes as they are: the SDK parses them itself.
    body: BodyFeed[bytes] = BodyFeed(framing.sock, framing, framer, watch.note, list)

    guarded: GuardedStream[bytes] = socket_stream(
        lambda feed: body.start(feed, framing.buffered()),
        limits=limits,
        budgets=budgets_to_watch(None),
        explicit=None,
        on_timeout=framing.stop,  # shuts the socket from outside
        active=is_activity,
    )
    return guarded, framing.close_connection


def _shape(response: Any, method: str, lib: Any) -> Optional[Tuple[Any, Any, Any]]:
    """(the HTTP11Connection, its socket, the h11 module)."""
    if str(method).upper() == "HEAD" or response.status_code in (204, 304):
        return None  # no body, whatever the headers say
    sock = socket_of(response)  # HTTP/1.x
    classes = None if sock is None else _classes(lib)
    if classes is None:
        return None
    response_stream, pool_stream, http11_stream, http11, sync_stream, h11 = classes
    pooled, body, connection = pooled_body(response)
    if not (
        type(response.stream) is response_stream
        and type(pooled) is pool_stream
        and type(body) is http11_stream
        and type(connection) is http11
    ):
        return None
    network: Any = response.extensions.get("network_stream")
    state = getattr(connection, "_h11_state", None)
    if (
        type(network) is not sync_stream
        or getattr(connection, "_network_stream", None) is not network
        or not isinstance(state, h11.Connection)
        or state.our_state not in (h11.DONE, h11.MUST_CLOSE)  # the request went out whole
        or state.their_state is not h11.SEND_BODY  # and no byte of the body was parsed
    ):
        return None
    _, closed = state.trailing_data  # the bytes stay in h11's buffer; h11 reads them first
    return None if closed else (connection, sock, h11)


def _find_classes(name: str, core: str) -> Tuple[Any, ...]:
    """The classes of the shape we read, from ``name``'s httpcore ``core``."""
    http11 = importlib.import_module(f"{core}._sync.http11")
    return (
        importlib.import_module(f"{name}._transports.default").ResponseStream,
        importlib.import_module(f"{core}._sync.connection_pool").PoolByteStream,
        http11.HTTP11ConnectionByteStream,
        http11.HTTP11Connection,
        importlib.import_module(f"{core}._backends.sync").SyncStream,
        importlib.import_module("h11"),
    )


_classes = ClassLookup(_find_classes, "its event streams keep a thread")


class _H11Framing:
    """A body under httpcore's h11 state: the :class:`~.._stream.pipeline.Framing` of httpx's
    HTTP/1.1 event streams, and the connection's pooling or closing at the end."""

    def __init__(
        self,
        inner: Any,
        connection: Any,
        sock: socket.socket,
        h11: Any,
        *,
        lib: Any,
        watch: EventWatch,
        shutter: Shutter,
    ) -> None:
        self._inner = inner
        self._connection = connection
        self._state = connection._h11_state  # checked by _shape: an h11.Connection
        self._h11 = h11
        self.sock = sock
        self._timeout: Optional[float] = None  # httpcore's, given back before pooling
        self._lib = lib
        self._watch = watch
        self._shutter = shutter
        self._keep: Optional[Any] = None  # a makefile() reference: the descriptor stays open
        self._lock = threading.Lock()  # h11's state, ``_closed``
        self._closed = False
        self.done = False  # h11 gave EndOfMessage: the body ended cleanly
        self.stopped = False

    def buffered(self) -> Iterator[Optional[bytes]]:
        """In the consumer's thread: make the socket ours (non-blocking, its descriptor kept
        open), then the bytes that came with the headers, which are in h11's buffer."""
        sock = self.sock
        self._keep = sock.makefile("rb", buffering=0)
        self._timeout = sock.gettimeout()
        sock.settimeout(0)
        yield None

    def payload(self, data: Optional[bytes]) -> bytes:
        """The body bytes h11 gives for ``data`` (``b""``: the end of the connection)."""
        h11 = self._h11
        state = self._state
        out: List[bytes] = []
        with self._lock:
            if self._closed or self._connection.is_closed():
                raise self._lib.ReadError(
                    "the connection was closed while its event stream was being read "
                    "(was the client closed?)"
                )
            try:
                if data is not None:
                    state.receive_data(data)
                event = state.next_event()
                while type(event) is h11.Data:
                    out.append(event.data)
                    event = state.next_event()
                if type(event) is h11.EndOfMessage:  # else NEED_DATA (or nothing more of it)
                    self.done = True
            except h11.RemoteProtocolError as exc:
                raise self._lib.RemoteProtocolError(str(exc)) from None
        return b"".join(out)  # h11 hands out bytearrays: httpx gets bytes

    def outcome(self, error: Optional[BaseException], eof: bool) -> Optional[BaseException]:
        lib = self._lib
        if self.stopped or self._shutter.fired:  # our own shutdown: no clean end
            if error is None:
                error = lib.ReadError("the event stream was stopped")
        elif isinstance(error, OSError):
            cause, error = error, lib.ReadError(str(error) or type(error).__name__)
            error.__cause__ = cause
        elif error is None:
            if eof and not self.done:  # h11 says whether the body may end here
                self.payload(b"")
                if not self.done:
                    raise lib.RemoteProtocolError(
                        "peer closed connection without sending complete message body"
                    )
            self._watch.end()
        return error

    def stop(self) -> None:
        """Shut the socket from outside; the reader sees it and ends the body."""
        self.stopped = True
        self._shutter.shut()

    def close_connection(self, reuse: bool = False) -> None:
        """Close the response, once: httpcore pools the connection only with ``reuse`` (h11
        DONE); otherwise h11's side is marked failed first and httpcore closes it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not reuse:
                self._state.send_failed()
        try:
            self._inner.close()
        except Exception:
            _log.exception("watchdog_sync: closing an event stream's response raised; ignored")

    def release(self, clean: bool) -> None:
        """The reader is done with the socket: forget it, then pool the connection (a clean
        end, no shutdown) or close it, and drop our reference (the descriptor closes with
        the last of the two)."""
        self._shutter.release()  # from here on no shutdown reaches the socket
        keep, self._keep = self._keep, None
        reuse = (
            clean
            and self.done
            and not self.stopped
            and not self._shutter.fired
            and not self._connection.is_closed()
        )
        if reuse:
            try:
                self.sock.settimeout(self._timeout)  # blocking again, as httpcore left it
            except OSError:
                reuse = False
        if reuse and keep is not None:
            with contextlib.suppress(OSError):
                keep.close()  # the socket stays open: the pool holds it now
            keep = None
        self.close_connection(reuse)
        if keep is not None:
            with contextlib.suppress(OSError):
                keep.close()
