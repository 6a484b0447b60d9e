"""HTTPXTransport's HTTP/1.1 event-stream bodies on the shared reader (``engine``).

When httpcore returns a response's headers, the first bytes of its body sit in
h11's receive buffer (``h11.Connection.trailing_data``, public h11 API) and the
rest is still in the socket. For a response of the shape this module knows,
checked at every step (httpx's ``ResponseStream`` over httpcore's pool stream
over an ``HTTP11Connection`` reading httpcore's own ``SyncStream``, a plain
socket or an ``ssl.SSLSocket``; the request sent whole, the body not touched
yet), it takes those bytes and the socket, made non-blocking, and hands the
socket to the shared reader, which decodes the framing (:class:`~.body.FramingDecoder`),
frames the events (:class:`~.framing.EventFramer`) and offers each data event
with the held-back comments and pings before it: byte for byte what the reader
thread of :func:`~.httpx_sse.event_source` hands httpx. Any other shape (HTTP/2,
TLS inside TLS, a custom transport or network backend, a compressed body) keeps
the reader thread per stream.

The connection never goes back to the pool: h11 never sees the body, so its
state stays ``SEND_BODY`` and httpcore closes the connection when the response
is closed (a kept-alive connection is not reused after an event stream). A
``makefile()`` reference keeps the socket's descriptor open until the shared
reader has let it go, so that a close from another thread (the caller's, or
``client.close()``) never takes the descriptor from under the selector; a
stream whose client was closed raises httpx's ``ReadError`` at its next read.

The connection is closed by the caller's ``close()`` or, when the body ends or
fails first, by the shared reader (httpcore's ``response_closed`` trace then runs
on that thread, as it ran on the stream's reader thread before).

On timeout or cancel: the stream's idle limit, the budget's end and ``close()``
shut the socket from outside; the shared reader sees the end and lets it go.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib
import logging
import socket
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._core.clock import MONOTONIC
from .._core.errors import Cancelled
from . import engine
from .body import FramingDecoder
from .channel import DEFAULT_MAX_BUFFERED
from .fed import FedChannel, fed_stream
from .framing import EventFramer
from .httpx_body import Shutter
from .httpx_sse import EventWatch
from .stream import GuardedStream, _budgets_to_watch

__all__ = ["fed_events"]

_log = logging.getLogger("watchdog_sync")
_CORES = {"httpx2": "httpcore2", "httpx": "httpcore"}
_HTTP1 = (b"HTTP/1.1", b"HTTP/1.0")
_CLASSES: Dict[str, Optional[Tuple[Any, ...]]] = {}
_CLASSES_LOCK = threading.Lock()


def fed_events(
    response: Any,
    method: str,
    lib: Any,
    framer: Optional[EventFramer],
    watch: EventWatch,
    shutter: Shutter,
    idle: Optional[float],
    first: Optional[float],
) -> Optional[Tuple[GuardedStream[bytes], Callable[[], None]]]:
    """The guarded events of ``response``'s body read by the shared reader, and a function
    that closes the connection (idempotent); ``None`` when the response is of another shape
    or its body is compressed (no ``framer``: it cannot be framed before httpx decodes it).

    Call it inside ``using_budget(budget)``: the stream watches that budget. The
    request goes no further until the first ``next()``, which takes the bytes
    buffered with the headers.
    """
    shape = None if framer is None else _shape(response, method, lib)
    if shape is None or framer is None:
        return None
    body = _FedBody(response.stream, *shape, lib=lib, framer=framer, watch=watch, shutter=shutter)
    guarded: GuardedStream[bytes] = fed_stream(
        body.open,
        idle=idle,
        first=first,
        first_named=True,
        budgets=_budgets_to_watch(None),
        explicit=None,
        on_timeout=body.stop,
        max_buffered=DEFAULT_MAX_BUFFERED,
        clock=MONOTONIC,
    )
    return guarded, body.close_connection


def _shape(response: Any, method: str, lib: Any) -> Optional[Tuple[Any, Any, bytes, Any]]:
    """(the HTTP11Connection, its socket, the body bytes h11 holds, the body's decoder)."""
    if str(method).upper() == "HEAD" or response.status_code in (204, 304):
        return None  # no body, whatever the headers say
    extensions = response.extensions
    if extensions.get("http_version") not in _HTTP1:
        return None
    classes = _classes(lib)
    if classes is None:
        return None
    response_stream, pool_stream, http11_stream, http11, sync_stream, h11 = classes
    pooled = getattr(response.stream, "_httpcore_stream", None)
    body = getattr(pooled, "_stream", None)
    connection = getattr(body, "_connection", None)
    if not (
        type(response.stream) is response_stream
        and type(pooled) is pool_stream
        and type(body) is http11_stream
        and type(connection) is http11
    ):
        return None
    network: Any = extensions.get("network_stream")
    state = getattr(connection, "_h11_state", None)
    if (
        type(network) is not sync_stream
        or getattr(connection, "_network_stream", None) is not network
        or not isinstance(state, h11.Connection)
        or state.our_state not in (h11.DONE, h11.MUST_CLOSE)  # the request went out whole
        or state.their_state is not h11.SEND_BODY  # and no byte of the body was parsed
    ):
        return None
    data, closed = state.trailing_data
    sock = sync_stream.get_extra_info(network, "socket")
    decoder = _decoder(response.headers)
    if closed or not isinstance(sock, socket.socket) or decoder is None:
        return None
    return connection, sock, data, decoder


def _classes(lib: Any) -> Optional[Tuple[Any, ...]]:
    """The classes of the shape we read, from ``lib``'s httpcore; ``None`` if they moved."""
    name = getattr(lib, "__name__", "")
    with _CLASSES_LOCK:
        if name in _CLASSES:
            return _CLASSES[name]
        found: Optional[Tuple[Any, ...]] = None
        core = _CORES.get(name)
        try:
            if core is not None:
                found = (
                    importlib.import_module(f"{name}._transports.default").ResponseStream,
                    importlib.import_module(f"{core}._sync.connection_pool").PoolByteStream,
                    importlib.import_module(f"{core}._sync.http11").HTTP11ConnectionByteStream,
                    importlib.import_module(f"{core}._sync.http11").HTTP11Connection,
                    importlib.import_module(f"{core}._backends.sync").SyncStream,
                    importlib.import_module("h11"),
                )
        except (ImportError, AttributeError):
            _log.debug("watchdog_sync: %s's httpcore has moved; event streams keep a thread", name)
        _CLASSES[name] = found
        return found


def _decoder(headers: Any) -> Optional[FramingDecoder]:
    """The body's framing as h11 decided it (h11 accepted only ``chunked`` and one length)."""
    if headers.get("transfer-encoding") is not None:
        return FramingDecoder(chunked=True, length=None)
    length = headers.get("content-length")
    if length is None:
        return FramingDecoder(chunked=False, length=None)  # delimited by the close
    try:
        return FramingDecoder(chunked=False, length=int(length))
    except ValueError:
        return None


class _FedBody:
    """One body on the shared reader: ``open`` (the consumer's first ``next()``), ``take``
    and ``end`` (the reader), ``stop`` (``on_timeout``), ``close_connection`` (either)."""

    def __init__(
        self,
        inner: Any,
        connection: Any,
        sock: socket.socket,
        head: bytes,
        decoder: FramingDecoder,
        *,
        lib: Any,
        framer: EventFramer,
        watch: EventWatch,
        shutter: Shutter,
    ) -> None:
        self._inner = inner
        self._connection = connection
        self._sock = sock
        self._head = head
        self._decoder = decoder
        self._lib = lib
        self._framer = framer
        self._watch = watch
        self._shutter = shutter
        self._held = bytearray()  # comments and pings, handed on before the next data event
        self._channel: Optional[FedChannel[bytes]] = None
        self._feed: Optional[engine.Feed] = None
        self._keep: Optional[Any] = None  # a makefile() reference: the descriptor stays open
        self._lock = threading.Lock()
        self._closed = False
        self._ended = False
        self.stopped = False

    def open(self, channel: FedChannel[bytes]) -> None:
        self._channel = channel
        sock = self._sock
        try:
            self._keep = sock.makefile("rb", buffering=0)
            sock.settimeout(0)
            feed = self._feed = engine.Feed(sock, self.take, self.end, channel.flush)
            head, self._head = self._head, b""
            if head:
                self.take(head)
        except (Exception, Cancelled) as exc:
            self.end(exc, False)
            return
        if feed.finished:
            self.end(None, False)
            return
        channel.set_resume(lambda: engine.kick(feed))
        engine.add(feed)

    def take(self, data: bytes) -> bool:
        """One read's bytes: decode, frame, offer the data events. False: full or ended."""
        if self.stopped:
            raise self._lib.ReadError("the event stream was stopped")
        if self._connection.is_closed() and not self._closed:
            raise self._lib.ReadError(
                "the connection was closed while its event stream was being read "
                "(was the client closed?)"
            )
        decoder = self._decoder
        try:
            payload = decoder.feed(data)
        except http.client.HTTPException as exc:
            raise self._lib.RemoteProtocolError(str(exc)) from None
        room = True
        if payload:
            items, failure = self._activity(self._framer.feed(payload))
            assert self._channel is not None
            if items:
                room = self._channel.offer(items)
            if failure is not None:
                raise failure
            self._framer.check()
        assert self._feed is not None
        self._feed.finished = decoder.done
        return room

    def _activity(self, events: List[bytes]) -> Tuple[List[bytes], Optional[Exception]]:
        """The data events, each with the held-back events before it; an error event's error
        comes after the events before it."""
        items: List[bytes] = []
        held, limit, note = self._held, self._framer.limit, self._watch.note
        for event in events:
            try:
                active = note(event)
            except Exception as exc:  # an error event: ours, raised after the events before it
                return items, exc
            if active:
                if held:
                    event = bytes(held) + event
                    held.clear()
                items.append(event)
            elif len(held) + len(event) <= limit:
                held += event  # bounded: past the cap, older held events are dropped
            else:
                held[:] = event
        return items, None

    def end(self, error: Optional[BaseException], eof: bool) -> None:
        """The socket is done (on the reader, or in ``open``): say how, let everything go."""
        if self._ended:
            return
        self._ended = True
        lib = self._lib
        try:
            if self.stopped or self._shutter.fired:  # our own shutdown: no clean end
                if error is None:
                    error = lib.ReadError("the event stream was stopped")
            elif isinstance(error, OSError):
                cause, error = error, lib.ReadError(str(error) or type(error).__name__)
                error.__cause__ = cause
            elif error is None:
                if eof:
                    self._check_eof()
                self._watch.end()
        except Exception as exc:
            error = exc
        finally:
            self._release()
            channel, self._channel = self._channel, None
            self._feed = None  # no cycle stays behind (feed -> take -> self -> feed)
            if channel is not None:
                channel.set_resume(None)
                channel.fed_end(error, completed=error is None)
            error = None

    def _check_eof(self) -> None:
        try:
            self._decoder.eof()
        except http.client.IncompleteRead as exc:
            raise self._lib.RemoteProtocolError(
                "peer closed connection without sending complete message body "
                f"({exc.expected} bytes missing)"
            ) from None

    def stop(self) -> None:
        """``on_timeout``: shut the socket from outside; the reader sees it and ends."""
        self.stopped = True
        self._shutter.shut()
        feed = self._feed
        if feed is not None:
            engine.kick(feed)  # a paused socket is watched again, so its shutdown is seen

    def close_connection(self) -> None:
        """Close the response: httpcore closes the connection (h11 is not DONE), once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._inner.close()
        except Exception:
            _log.exception("watchdog_sync: closing an event stream's response raised; ignored")

    def _release(self) -> None:
        """The reader is done with the socket: forget it, close the connection and our
        reference (the descriptor closes with the last of the two)."""
        self._shutter.release()
        self.close_connection()
        keep, self._keep = self._keep, None
        if keep is not None:
            with contextlib.suppress(OSError):
                keep.close()
