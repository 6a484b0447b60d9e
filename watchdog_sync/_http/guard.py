"""The connection guard: urllib3 connections a request checked out, shut when its budget ends.

One guard serves every urllib3 connection the library bounds: those of
:class:`Session`'s own pools (its subclasses call the steps below) and, after
:func:`instrument`, those of every pool in the process (the patches call the
same steps around urllib3's own methods). The steps:

* :func:`checked_out` / :func:`checked_in`: a connection is registered with
  the guard of the current request (``ACTIVE_GUARD``) while it is checked out
  of its pool, and one that was shut is discarded, never pooled;
* :func:`open_socket`: the name is resolved within the connect timeout
  (``getaddrinfo`` has none), the new socket is told to the guard at once and
  its timeout clipped to the budget before a TLS handshake;
* :func:`tunnel`: a proxy's reply to ``CONNECT`` is read within the connect
  timeout as a whole;
* :func:`connected`: the socket that connect() left (TLS replaces the object)
  is told to the guard.

Each step also moves the request's :class:`RequestProgress` on (``resolve``,
``connect``, ``tls``, ``send``, ``head``, ``body``), so the ``Cancelled`` raised at
the budget's end says where the request was and how far it got.

A stream's first-event limit bounds the response head too: inside
:func:`head_until`, the guard shuts the request's sockets at that moment unless the
final response's head is in by then (every redirect hop and interim response
included), and the request raises ``requests.ReadTimeout``, as a silent head does.

When the budget ends, the shared watchdog thread shuts every registered socket
from outside (``shutdown(SHUT_RDWR)``, which wakes a blocked ``recv``;
``close()`` alone does not). The registration lives exactly as long as the
connection is checked out, so a shutdown never hits a connection that another
request reuses (urllib3 issue 3581).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import socket
import threading
from typing import Any, Callable, Iterator, List, NoReturn, Optional

from urllib3.connection import HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError
from urllib3.util import Timeout

from .._core.budget import Budget, _noop
from .._core.clock import MONOTONIC, Timer
from .._core.errors import Cancelled
from .._core.forks import process_local
from .._core.phase import mark
from .._core.scope import boundary
from .progress import RequestProgress
from .request_call import RequestCall
from .resolve import is_ip_literal, resolve_bounded
from .shutter import SocketSet
from .tunnel import TunnelView, timeout_of

__all__ = [
    "ACTIVE_GUARD",
    "FLOOR",
    "GUARD_ATTR",
    "HEAD_UNTIL",
    "ConnectionGuard",
    "awaiting_head",
    "checked_in",
    "checked_out",
    "clip_timeout",
    "connected",
    "head_received",
    "head_until",
    "open_socket",
    "raise_budget_end",
    "tunnel",
]

GUARD_ATTR = "_watchdog_sync_guard"
FLOOR = 0.001  # urllib3 and sockets treat 0 as non-blocking; keep a tiny positive wait


class ConnectionGuard:
    """Connections one request has checked out; shut them all when the budget ends.

    ``owner`` is the budget whose end the request converts into an error
    itself (``Session(budget=...)``); ``None`` when the enclosing ``deadline()``
    scope converts the ``Cancelled`` (:func:`instrument`).

    The socket of each connection is recorded when it is checked out or
    connected: http.client drops ``conn.sock`` as soon as a response says
    ``Connection: close`` while the response goes on reading from that same
    socket, so the connection object alone cannot find it later.
    """

    def __init__(
        self, budget: Budget, owner: Optional[Budget], release: Callable[[], None]
    ) -> None:
        self.budget = budget
        self.owner = owner
        self._release = release
        self._lock = threading.Lock()
        self._sockets = SocketSet()  # id(conn) -> its socket
        self._connections: List[Any] = []
        self._request_done = False
        self._unregister = budget.on_done(self._fire)
        self._head_timer: Optional[Timer] = None
        self._head_in = False
        self.head_timed_out = False  # the head was not in by its limit: its sockets were shut
        self.progress = RequestProgress(budget.clock.now)
        self.call: Optional[RequestCall] = None  # an instrumented request's, when observed

    def check(self) -> None:
        """``budget.check()``, the ``Cancelled`` saying where the request was and how far
        it got."""
        try:
            self.budget.check()
        except Cancelled as exc:
            self.stamp(exc)
            raise

    def stamp(self, exc: Cancelled) -> None:
        """Put the request's phase and progress on ``exc``, unless a part below already did."""
        phase = self.progress.phase
        if phase is not None:
            mark(exc, phase, self.progress.words())

    def bound_head(self, until: float) -> None:
        """Shut the request's sockets at ``until`` (monotonic seconds) unless :meth:`head_in`
        was called by then."""
        self._head_timer = MONOTONIC.call_at(until, self._head_due)

    def head_in(self) -> None:
        """The request returned (the final response's head is in) or failed: disarm."""
        with self._lock:
            self._head_in = True
            timer, self._head_timer = self._head_timer, None
        if timer is not None:
            timer.cancel()

    def _head_due(self) -> None:
        with self._lock:  # held while shutting: once head_in() returned, no shutdown comes
            if self._head_in:
                return
            self.head_timed_out = True
            self._sockets.shut()

    def attach(self, conn: Any) -> None:
        # A pooled connection with its socket sends at once; a new one connects first.
        self.progress.enter("connect" if getattr(conn, "sock", None) is None else "send")
        with self._lock:
            setattr(conn, GUARD_ATTR, self)
            if not any(known is conn for known in self._connections):
                self._connections.append(conn)
            self._remember(conn)

    def connected(self, conn: Any, sock: Any = None) -> None:
        """``conn`` has a new socket (``sock``, else ``conn.sock``): remember it, shut it if
        the budget ended. Told as soon as the socket exists, again before a proxy tunnel and
        once connected (a TLS wrap replaces the socket object), so every phase of the connect
        can be shut from outside."""
        with self._lock:
            self._remember(conn, sock)

    def _remember(self, conn: Any, sock: Any = None) -> None:
        if sock is None:
            sock = getattr(conn, "sock", None)
        if sock is not None:
            self._sockets.put(id(conn), sock)

    def detach(self, conn: Any) -> bool:
        """Forget ``conn`` (going back to the pool); True when it was shut and must be dropped."""
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
            self._sockets.drop(id(conn))
            setattr(conn, GUARD_ATTR, None)
            fired = self.fired
            finished = self._request_done and not self._connections
        if finished:
            self._finish()
        return fired

    def request_finished(self, *, answered: bool) -> None:
        """The request returned a response (which may still hold its connection until the
        body is read or closed), or it failed: then every connection it checked out is back
        in the pool or was dropped by urllib3, which puts back ``None`` for a connection it
        discards, so none is left to wait for."""
        with self._lock:
            self._request_done = True
            if not answered:
                self._forget_all()
            finished = not self._connections
        if finished:
            self._finish()

    def abandon(self) -> None:
        """Stop guarding at once (:func:`instrument`'s undo): nothing is shut from now on."""
        with self._lock:
            self._request_done = True
            self._forget_all()
        self._finish()

    def _forget_all(self) -> None:
        for conn in self._connections:
            setattr(conn, GUARD_ATTR, None)
        self._connections.clear()
        self._sockets.clear()

    def _finish(self) -> None:
        # Dropped once used: it refers to ``self._fire``, and through it to this guard.
        unregister, self._unregister = self._unregister, _noop
        unregister()
        release, self._release = self._release, _noop
        release()

    @property
    def fired(self) -> bool:
        """The budget ended and every socket of the request was shut."""
        return self._sockets.fired

    def _fire(self, budget: Budget) -> None:
        self._sockets.shut()


def raise_budget_end(guard: ConnectionGuard) -> NoReturn:
    """Raise what the budget's end means for ``guard``'s request.

    ``Cancelled`` for the enclosing scope to convert, or, when the request owns
    its budget (``guard.owner``), the :class:`DeadlineExceeded` /
    :class:`OperationCancelled` it converts into.
    """
    if guard.owner is None:
        guard.check()
    else:
        with boundary(guard.budget, guard.owner):
            guard.check()
    raise AssertionError("raise_budget_end() called before the budget ended")  # pragma: no cover


def clip_timeout(timeout: Any, remaining: float) -> Any:
    """``timeout`` (requests' forms) with connect and read capped at ``remaining`` seconds."""
    if math.isinf(remaining):
        return timeout
    connect: Any
    read: Any
    if isinstance(timeout, Timeout):
        connect, read = timeout.connect_timeout, timeout.read_timeout
        connect = None if connect is Timeout.DEFAULT_TIMEOUT else connect
        read = None if read is Timeout.DEFAULT_TIMEOUT else read
    elif isinstance(timeout, tuple):
        connect, read = timeout
    else:
        connect = read = timeout
    return (
        max(FLOOR, remaining if connect is None else min(float(connect), remaining)),
        max(FLOOR, remaining if read is None else min(float(read), remaining)),
    )


# A child forked while a request is sent sends its own requests under guards of its own.
ACTIVE_GUARD: contextvars.ContextVar[Optional[ConnectionGuard]] = process_local(
    contextvars.ContextVar("watchdog_sync_connection_guard", default=None)
)
HEAD_UNTIL: contextvars.ContextVar[Optional[float]] = process_local(
    contextvars.ContextVar("watchdog_sync_head_until", default=None)
)


@contextlib.contextmanager
def head_until(until: Optional[float]) -> Iterator[None]:
    """Requests sent inside must have their final response's head by ``until`` (monotonic
    seconds; ``None``: no such limit): a stream's first-event limit."""
    token = HEAD_UNTIL.set(until)
    try:
        yield
    finally:
        HEAD_UNTIL.reset(token)


# -- the steps, called by Session's subclasses and by instrument()'s patches -------------


def checked_out(conn: Any) -> None:
    """``conn`` left its pool for the current request: register it with the request's guard."""
    guard = ACTIVE_GUARD.get()
    if guard is not None and conn is not None:
        guard.attach(conn)


def checked_in(conn: Any) -> Any:
    """``conn`` goes back to its pool: forget it; a shut one is closed and ``None`` returned."""
    guard = getattr(conn, GUARD_ATTR, None) if conn is not None else None
    if guard is not None and guard.detach(conn):
        conn.close()
        return None
    return conn


def open_socket(conn: Any, new_conn: Callable[[], Any]) -> Any:
    """Open ``conn``'s socket with ``new_conn`` (urllib3's ``_new_conn``), the name resolved
    within the connect timeout; tell the guard at once and clip the socket's timeout."""
    sock = _resolved_new_conn(conn, new_conn)
    _tell_guard(conn, sock)
    _clip_to_budget(conn, sock)
    _enter(conn, "tls" if _is_tls(conn) else "send")
    return sock


def tunnel(conn: Any, send_connect: Callable[[], None]) -> None:
    """Run ``send_connect`` (http.client's ``_tunnel``) with the proxy's whole reply to
    ``CONNECT`` read within the connect timeout."""
    _tell_guard(conn, conn.sock)  # a TLS connection to the proxy has a new socket object
    _enter(conn, "connect")  # through the proxy
    timeout = _connect_timeout(conn)
    if timeout is None:
        send_connect()
        return
    sock = conn.sock
    view = TunnelView(sock, timeout)
    conn.sock = view
    try:
        send_connect()
    finally:
        if conn.sock is view:  # else the refused tunnel closed the connection
            conn.sock = sock
        view.restore()
    _clip_to_budget(conn, sock)
    _enter(conn, "tls" if _is_tls(conn) else "send")


def connected(conn: Any) -> None:
    """``conn.connect()`` returned: tell the guard its (possibly TLS-wrapped) socket."""
    _tell_guard(conn, conn.sock)
    _enter(conn, "send")


def awaiting_head(conn: Any) -> None:
    """The request was sent whole; ``conn`` now waits for the response head."""
    _enter(conn, "head")


def head_received(conn: Any) -> None:
    """``conn``'s final response head is in: the body comes next."""
    guard = getattr(conn, GUARD_ATTR, None)
    if guard is not None:
        guard.progress.head_in()


def _connect_timeout(conn: Any) -> Optional[float]:
    timeout = conn.timeout
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return float(timeout)
    return None  # no limit, or urllib3's "default" sentinel


def _resolved_new_conn(conn: Any, new_conn: Callable[[], Any]) -> Any:
    host = conn._dns_host
    if is_ip_literal(host) or host == "localhost.":
        _enter(conn, "connect")
        return new_conn()
    _enter(conn, "resolve")
    timeout = _connect_timeout(conn)
    try:
        address = resolve_bounded(host, conn.port, timeout)
    except socket.timeout as exc:
        raise ConnectTimeoutError(conn, f"Connection to {host} timed out: {exc}") from exc
    except socket.gaierror:
        return new_conn()  # urllib3 raises its own error
    # urllib3 connects to ``_dns_host``; point it at the resolved address for this call
    # only, so TLS still verifies and sends SNI for the real host name.
    conn._dns_host = address
    _enter(conn, "connect")
    try:
        return new_conn()
    finally:
        conn._dns_host = host


def _clip_to_budget(conn: Any, sock: Any) -> None:
    """Keep the socket's timeout within the budget before a TLS handshake.

    The handshake runs on a socket object that ssl creates (and urllib3 returns only
    afterwards), so the guard cannot shut it from outside; its timeout bounds the whole
    handshake, so it must not outlast the budget.
    """
    guard = getattr(conn, GUARD_ATTR, None)
    if guard is None:
        return
    left = guard.budget.remaining()
    if math.isinf(left):
        return
    with contextlib.suppress(OSError):
        _, current = timeout_of(sock)  # unknown (no gettimeout): clipped to the budget alone
        clipped = max(FLOOR, left if current is None else min(current, left))
        if clipped != current:  # settimeout() lets the GIL go: not for nothing
            sock.settimeout(clipped)


def _enter(conn: Any, phase: str) -> None:
    guard = getattr(conn, GUARD_ATTR, None)
    if guard is not None:
        guard.progress.enter(phase)


def _is_tls(conn: Any) -> bool:
    return isinstance(conn, HTTPSConnection)


def _tell_guard(conn: Any, sock: Any) -> None:
    guard = getattr(conn, GUARD_ATTR, None)
    if guard is not None:
        guard.connected(conn, sock)
