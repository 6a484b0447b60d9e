"""An HTTP/2 event stream's end, made from outside: the h2 stream reset, its reader woken.

httpcore reads an HTTP/2 connection for all its streams: whichever stream's reader needs
an event reads the socket (under the connection's read lock) and files what it read under
each stream's id, so a guarded stream's reader thread wakes only when something arrives
on the connection. When the stream ends early (idle or first-event limit, the budget's
end, ``close()``), :meth:`H2Stream.shut` resets it (``RST_STREAM``, ``CANCEL``), files a
``StreamReset`` under its id (its reader raises httpcore's ``RemoteProtocolError`` as soon
as it looks), and wakes the reader: when no other stream is open, the connection takes no
new request and its socket is shut from outside (the reader closes it on its way out, so
the pool drops it); else a ``PING``, whose answer wakes whichever reader holds the read
lock, repeated from the watchdog thread every ``NUDGE_EVERY`` s at most ``NUDGES`` times
(the lock is not fair), the socket shut as soon as no other stream is open. The other
streams never see a difference. A stream whose body ended any other way before its end is
reset by :meth:`H2Stream.release`; one read to its end stays in the pool.

The one module that reads httpcore's private HTTP/2 state (httpcore2 and httpcore 1.x):
``_httpcore_stream._stream`` under httpx's response stream, the byte stream's
``_connection`` and ``_stream_id``, and the connection's ``_h2_state`` (h2's
``H2Connection``, through its public API), ``_events``, ``_state``, ``_state_lock``,
``_write_lock`` and ``_network_stream``. :func:`h2_stream` checks each and returns
``None`` for any other shape; ``shape_problems`` lists what a version lacks.

Locks: the h2 state and the stream's events are changed under the connection's
``_state_lock``, inside its ``_write_lock`` when that can be had within ``WRITE_WAIT`` (the
order httpcore's own writes use), so our frames go out whole and in order. A request past
the connection's state check but not yet on its stream when the last stream is stopped
fails as it would if the server had closed the connection.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import socket
import threading
import time
from typing import Any, List, Optional, Tuple

from .._core import watchdog
from .._http.shutter import shutdown_socket
from .body import socket_of
from .cores import ClassLookup, pooled_body

__all__ = ["H2Stream", "h2_stream", "shape_problems"]

_log = logging.getLogger("watchdog_sync")
_HTTP2 = b"HTTP/2"
WRITE_WAIT = 0.1  # the longest wait for the connection's write lock, and for our frames' write
NUDGE_EVERY = 0.05  # while our reader is still in: another PING this often ...
NUDGES = 20  # ... this many times at most (1 s)
NUDGE_WRITE = 0.01  # a nudge's write, on the watchdog thread
_PING = b"wdsync\x00\x01"  # 8 bytes of PING opaque data: only its answer matters
_CONNECTION_ATTRIBUTES = (
    "_h2_state",
    "_events",
    "_state",
    "_state_lock",
    "_write_lock",
    "_network_stream",
)


def h2_stream(response: Any, lib: Any) -> Optional[H2Stream]:
    """The :class:`H2Stream` under an httpx response, ``None`` unless it is an HTTP/2
    response of httpcore's own connection, of the shape this module knows."""
    sock = socket_of(response, (_HTTP2,))
    classes = None if sock is None else _classes(lib)
    if sock is None or classes is None:
        return None
    response_stream, byte_stream, connection_class, *h2 = classes
    if type(response.stream) is not response_stream:
        return None
    _, body, connection = pooled_body(response)
    if type(body) is not byte_stream:
        return None
    stream_id = getattr(body, "_stream_id", None)
    if type(connection) is not connection_class or not isinstance(stream_id, int):
        return None
    # Its attributes are those shape_problems found on the class's instances.
    if not isinstance(connection._events, dict) or stream_id not in connection._events:
        return None
    if not isinstance(connection._network_stream, _Turns):
        connection._network_stream = _Turns(connection._network_stream)
    return H2Stream(connection, stream_id, sock, *h2)


def shape_problems(core_name: str) -> List[str]:
    """What the installed ``core_name`` (``httpcore2``, ``httpcore``) lacks of the shape
    :func:`h2_stream` relies on; empty when it has all of it."""
    try:
        http2 = importlib.import_module(f"{core_name}._sync.http2")
        pool = importlib.import_module(f"{core_name}._sync.connection_pool")
        core = importlib.import_module(core_name)
    except ImportError as exc:
        return [f"{core_name}: {exc}"]
    problems = []
    for module, name in (
        (http2, "HTTP2Connection"),
        (http2, "HTTP2ConnectionByteStream"),
        (http2, "HTTPConnectionState"),
        (pool, "PoolByteStream"),
    ):
        if not hasattr(module, name):
            problems.append(f"{module.__name__}.{name}")
    if problems:
        return problems
    state = getattr(http2.HTTPConnectionState, "CLOSED", None)
    if state is None:
        problems.append("HTTPConnectionState.CLOSED")
    origin = core.Origin(b"https", b"127.0.0.1", 443)
    connection = http2.HTTP2Connection(origin=origin, stream=_NoNetwork())
    for name in _CONNECTION_ATTRIBUTES:
        if not hasattr(connection, name):
            problems.append(f"HTTP2Connection.{name}")
    body = http2.HTTP2ConnectionByteStream(connection, None, stream_id=1)
    for name in ("_connection", "_stream_id"):
        if not hasattr(body, name):
            problems.append(f"HTTP2ConnectionByteStream.{name}")
    for name in ("_state_lock", "_write_lock"):
        if not isinstance(getattr(getattr(connection, name, None), "_lock", None), _LOCK_TYPE):
            problems.append(f"HTTP2Connection.{name}._lock (a threading.Lock)")
    return problems


_LOCK_TYPE = type(threading.Lock())


class _NoNetwork:
    """A network stream that is never used (``shape_problems`` only builds a connection)."""

    def close(self) -> None:
        pass


class _Turns:
    """httpcore's network stream of an HTTP/2 connection, whose writes let another thread
    have its turn at the connection's read lock first.

    After each read, httpcore's reader lets the read lock go, writes what h2 has to send
    (often nothing) and takes the lock again for a read that lasts until the next frame.
    The lock is not fair, and a guarded stream always has a reader in that read, so each
    ``write`` first yields the CPU (``time.sleep(0)``): a thread waiting for the lock gets it.
    """

    __slots__ = ("_inner",)

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        data: bytes = self._inner.read(max_bytes, timeout)
        return data

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        time.sleep(0)
        self._inner.write(buffer, timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class H2Stream:
    """One HTTP/2 stream of httpcore's ``HTTP2Connection``, ended from outside."""

    __slots__ = (
        "_cancel",
        "_closed_state",
        "_connection",
        "_lock",
        "_protocol_error",
        "_released",
        "_shut_socket",
        "_sock",
        "_stopped",
        "_stream_id",
        "_stream_reset",
    )

    def __init__(
        self,
        connection: Any,
        stream_id: int,
        sock: socket.socket,
        closed_state: Any,
        stream_reset: Any,
        protocol_error: Any,
        cancel: Any,
    ) -> None:
        self._connection = connection
        self._stream_id = stream_id
        self._sock = sock
        self._closed_state = closed_state
        self._stream_reset = stream_reset  # h2's events.StreamReset
        self._protocol_error = protocol_error  # h2's exceptions.ProtocolError
        self._cancel = cancel  # h2's ErrorCodes.CANCEL
        self._lock = threading.Lock()  # shut() and release() one at a time
        self._stopped = False
        self._released = False
        self._shut_socket = False

    def shut(self) -> None:
        """End the stream from outside (the guarded stream's ``on_timeout``: idle or
        first-event limit, the budget's end, ``close()``; any thread, at most once): reset
        it, and wake its reader (shut the socket when no other stream is open on the
        connection, else a PING)."""
        with self._lock:  # held throughout, so release() sees what this decided
            if self._stopped:
                return
            self._stopped = True
            connection = self._connection
            with _held(connection._write_lock, WRITE_WAIT) as writable:
                with connection._state_lock:
                    events = connection._events.get(self._stream_id)
                    if events is None or not self._reset():
                        return  # the reader has closed it, or it was read to its end
                    events.append(self._reset_event())
                    alone = self._ping_unless_alone()
                    data = connection._h2_state.data_to_send() if writable else b""
                if data and not self._write(data, WRITE_WAIT):
                    alone = True  # a frame cut short: the connection is no use to anyone
            if alone:
                self._abandon()
                return
        self._nudge_later(NUDGES)

    def _nudge(self, left: int) -> None:
        """On the watchdog thread, while our reader waits for the read lock that another
        stream's reader holds across its read: one more PING (each answer lets that
        reader go round once more, and ours may take the lock), or, once no other stream
        is open, the socket shut. Never blocks on a lock httpcore holds across I/O."""
        if not self._lock.acquire(blocking=False):
            return  # release() runs: the reader is on its way out
        try:
            connection = self._connection
            if self._released or self._stream_id not in connection._events:
                return  # the reader let go
            write_lock = connection._write_lock._lock
            if write_lock.acquire(blocking=False):
                try:
                    with connection._state_lock:
                        alone = self._ping_unless_alone()
                        data = connection._h2_state.data_to_send()
                    if data and not self._write(data, NUDGE_WRITE):
                        alone = True
                finally:
                    write_lock.release()
                if alone:
                    self._abandon()
                    return
        finally:
            self._lock.release()
        if left > 1:
            self._nudge_later(left - 1)

    def _nudge_later(self, left: int) -> None:
        watchdog.call_at(time.monotonic() + NUDGE_EVERY, functools.partial(self._nudge, left))

    def release(self) -> None:
        """In the reader thread, when the body ends (before httpx closes it): reset the
        stream if it is still open, close the connection's socket if ``shut()`` shut it."""
        with self._lock:
            self._stopped = self._released = True  # a later shut() has nothing to do
            connection = self._connection
            if self._shut_socket:
                connection._network_stream.close()  # its one reader is out of its read: us
                return
            with _held(connection._write_lock, WRITE_WAIT) as writable:
                with connection._state_lock:
                    if self._stream_id not in connection._events or not self._reset():
                        return
                    data = connection._h2_state.data_to_send() if writable else b""
                if data and not self._write(data, WRITE_WAIT):
                    self._abandon()
                    connection._network_stream.close()

    def _ping_unless_alone(self) -> bool:
        """With ``_state_lock`` held: True when no other stream is open (the connection
        then takes no new request), else a PING is queued (False)."""
        connection = self._connection
        if connection._h2_state.open_outbound_streams == 0:  # ours is reset by now
            connection._state = self._closed_state  # new requests go to a new connection
            return True
        with contextlib.suppress(self._protocol_error):
            connection._h2_state.ping(_PING)
        return False

    def _abandon(self) -> None:
        """With ``_lock`` held: no new request on the connection (httpcore's pool sends
        them on a new one), and its socket shut from outside."""
        with self._connection._state_lock:
            self._connection._state = self._closed_state
        self._shut_socket = True
        shutdown_socket(self._sock)

    def _reset(self) -> bool:
        """With ``_state_lock`` held: RST_STREAM (CANCEL) if h2 has the stream open."""
        h2_state = self._connection._h2_state
        stream = h2_state.streams.get(self._stream_id)
        if stream is None or stream.closed:
            return False
        try:
            h2_state.reset_stream(self._stream_id, error_code=self._cancel)
        except self._protocol_error:
            return False  # closed under us (a GOAWAY, the server's own reset)
        return True

    def _reset_event(self) -> Any:
        """A ``StreamReset`` for our stream, as h2 makes one when it resets a stream."""
        make, code = self._stream_reset, self._cancel
        try:
            return make(stream_id=self._stream_id, error_code=code, remote_reset=False)
        except TypeError:  # h2 before 4.2: the fields are set after construction
            event = make()
            event.stream_id, event.error_code, event.remote_reset = self._stream_id, code, False
            return event

    def _write(self, data: bytes, timeout: float) -> bool:
        """Write our frames (with the write lock held); False if they did not all go."""
        try:
            self._connection._network_stream.write(data, timeout)
        except Exception as exc:  # httpcore's WriteError / WriteTimeout
            _log.debug("watchdog_sync: an HTTP/2 stream's reset could not be sent: %r", exc)
            return False
        return True


@contextlib.contextmanager
def _held(lock: Any, timeout: float) -> Any:
    """httpcore's lock held (True), or not had within ``timeout`` (False)."""
    inner = lock._lock
    got = inner.acquire(timeout=timeout)
    try:
        yield got
    finally:
        if got:
            inner.release()


def _find_classes(name: str, core: str) -> Optional[Tuple[Any, ...]]:
    """(httpx's ResponseStream, HTTP2ConnectionByteStream, HTTP2Connection, then
    :class:`H2Stream`'s: the CLOSED state, h2's StreamReset, ProtocolError, CANCEL)."""
    if shape_problems(core):
        return None
    http2 = importlib.import_module(f"{core}._sync.http2")
    return (
        importlib.import_module(f"{name}._transports.default").ResponseStream,
        http2.HTTP2ConnectionByteStream,
        http2.HTTP2Connection,
        http2.HTTPConnectionState.CLOSED,
        importlib.import_module("h2.events").StreamReset,
        importlib.import_module("h2.exceptions").ProtocolError,
        importlib.import_module("h2.errors").ErrorCodes.CANCEL,
    )


_classes = ClassLookup(_find_classes, "no HTTP/2 stream control")
