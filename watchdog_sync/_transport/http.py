"""Session: a requests.Session whose every request is hard-bounded by the budget.

Three mechanisms bound every phase of a request:

* timeouts passed to urllib3 are clipped to the budget's remaining time
  (connect, and each socket read);
* name resolution of a host name runs in a short-lived helper thread whose
  wait is clipped the same way (``getaddrinfo`` has no timeout of its own);
* a proxy tunnel's reply to ``CONNECT`` is read within the connect timeout as
  a whole (http.client's own reads restart the timeout on every line);
* the live connection is registered with the budget for the lifetime of the
  request (until urllib3 returns it to the pool), its socket from the moment
  it exists (before any proxy tunnel or TLS handshake), and when the budget ends
  the shared watchdog thread shuts that socket down from outside
  (``shutdown(SHUT_RDWR)``, which wakes a blocked ``recv``; ``close()`` alone
  does not). A connection that was shut down is discarded, never pooled.

The registration lives exactly as long as the connection is checked out of
the pool, so a shutdown can never hit a connection that another request
reuses (urllib3 issue 3581).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import socket
import struct
import threading
from typing import Any, Callable, Dict, List, Optional

import requests
import requests.adapters
from urllib3 import connection as _connection
from urllib3 import connectionpool as _pool
from urllib3.exceptions import ConnectTimeoutError
from urllib3.util import Timeout

from .._core.budget import Budget, _noop
from .._core.scope import boundary, joined_budget
from . import propagation as _propagation
from .redirect import same_origin, strip_credentials
from .resolve import is_ip_literal, resolve_bounded
from .streamed import bound_body
from .tunnel import TunnelView

__all__ = ["Session", "shutdown_socket"]

_GUARD_ATTR = "_watchdog_sync_guard"
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST
_FLOOR = 0.001  # urllib3 and sockets treat 0 as non-blocking; keep a tiny positive wait


class _ConnectionGuard:
    """Connections one request has checked out; shut them all when the budget ends.

    The socket of each connection is recorded when it is checked out or
    connected: http.client drops ``conn.sock`` as soon as a response says
    ``Connection: close`` while the response goes on reading from that same
    socket, so the connection object alone cannot find it later.
    """

    def __init__(self, budget: Budget, owner: Budget, release: Callable[[], None]) -> None:
        self.budget = budget
        self.owner = owner
        self._release = release
        self.fired = False
        self._lock = threading.Lock()
        self._sockets: Dict[int, Any] = {}  # id(conn) -> its socket
        self._connections: List[Any] = []
        self._request_done = False
        self._unregister = budget.on_done(self._fire)

    def attach(self, conn: Any) -> None:
        with self._lock:
            setattr(conn, _GUARD_ATTR, self)
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
            self._sockets[id(conn)] = sock
            if self.fired:
                shutdown_socket(sock)

    def detach(self, conn: Any) -> bool:
        """Forget ``conn`` (going back to the pool); True when it was shut and must be dropped."""
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
            self._sockets.pop(id(conn), None)
            setattr(conn, _GUARD_ATTR, None)
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
                for conn in self._connections:
                    setattr(conn, _GUARD_ATTR, None)
                self._connections.clear()
                self._sockets.clear()
            finished = not self._connections
        if finished:
            self._finish()

    def _finish(self) -> None:
        # Dropped once used: it refers to ``self._fire``, and through it to this guard.
        unregister, self._unregister = self._unregister, _noop
        unregister()
        self._release()

    def _fire(self, budget: Budget) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets.values():
                shutdown_socket(sock)


def shutdown_socket(sock: Any) -> None:
    """Shut a (plain or TLS) socket down so a blocked read in another thread wakes.

    The connection is abandoned: its close() will also reset it (SO_LINGER 0), so a server
    blocked writing into a full window learns at once that nobody reads. A graceful close
    after the reader drained the socket leaves the server probing a zero window until the
    kernel drops the orphan (``tcp_fin_timeout``, 60 s).
    """
    if sock is None:
        return
    raw = sock if isinstance(sock, socket.socket) else getattr(sock, "socket", None)
    if not isinstance(raw, socket.socket):
        return
    with contextlib.suppress(OSError):
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    with contextlib.suppress(OSError):
        # The base method, so an SSLSocket is shut at the TCP level without TLS state changes.
        socket.socket.shutdown(raw, socket.SHUT_RDWR)


_ACTIVE_GUARD: contextvars.ContextVar[Optional[_ConnectionGuard]] = contextvars.ContextVar(
    "watchdog_sync_connection_guard", default=None
)


class _GuardedConnectionMixin:
    """Resolves names within the connect timeout, bounds a proxy tunnel's reply by it, and
    tells the guard about each socket as soon as it exists."""

    _dns_host: str
    port: int
    timeout: Any
    sock: Any

    def _new_conn(self) -> Any:
        sock = self._open_socket()
        self._tell_guard(sock)
        self._clip_to_budget(sock)
        return sock

    def _connect_timeout(self) -> Optional[float]:
        timeout = self.timeout
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            return float(timeout)
        return None  # no limit, or urllib3's "default" sentinel

    def _open_socket(self) -> Any:
        host = self._dns_host
        if is_ip_literal(host) or host == "localhost.":
            return super()._new_conn()  # type: ignore[misc]
        timeout = self._connect_timeout()
        try:
            address = resolve_bounded(host, self.port, timeout)
        except socket.timeout as exc:
            raise ConnectTimeoutError(self, f"Connection to {host} timed out: {exc}") from exc
        except socket.gaierror:
            return super()._new_conn()  # type: ignore[misc]  # urllib3 raises its own error
        # urllib3 connects to ``_dns_host``; point it at the resolved address for this call
        # only, so TLS still verifies and sends SNI for the real host name.
        self._dns_host = address
        try:
            return super()._new_conn()  # type: ignore[misc]
        finally:
            self._dns_host = host

    def _tunnel(self) -> None:
        """Send CONNECT to the proxy and read its reply, all of it within the connect timeout."""
        self._tell_guard(self.sock)  # a TLS connection to the proxy has a new socket object
        timeout = self._connect_timeout()
        if timeout is None:
            super()._tunnel()  # type: ignore[misc]
            return
        sock = self.sock
        view = TunnelView(sock, timeout)
        self.sock = view
        try:
            super()._tunnel()  # type: ignore[misc]
        finally:
            if self.sock is view:  # else the refused tunnel closed the connection
                self.sock = sock
            view.restore()
        self._clip_to_budget(sock)

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._tell_guard(self.sock)

    def _clip_to_budget(self, sock: Any) -> None:
        """Keep the socket's timeout within the budget before a TLS handshake.

        The handshake runs on a socket object that ssl creates (and urllib3 returns only
        afterwards), so the guard cannot shut it from outside; its timeout bounds the whole
        handshake, so it must not outlast the budget.
        """
        guard = getattr(self, _GUARD_ATTR, None)
        if guard is None:
            return
        left = guard.budget.remaining()
        if math.isinf(left):
            return
        with contextlib.suppress(OSError):
            current = sock.gettimeout()
            sock.settimeout(max(_FLOOR, left if current is None else min(current, left)))

    def _tell_guard(self, sock: Any) -> None:
        guard = getattr(self, _GUARD_ATTR, None)
        if guard is not None:
            guard.connected(self, sock)


class _HTTPConnection(_GuardedConnectionMixin, _connection.HTTPConnection):
    pass


class _HTTPSConnection(_GuardedConnectionMixin, _connection.HTTPSConnection):
    pass


class _GuardedPoolMixin:
    """Registers each checked-out connection with the request's guard; drops shut ones."""

    def _get_conn(self, timeout: Optional[float] = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        guard = _ACTIVE_GUARD.get()
        if guard is not None and conn is not None:
            guard.attach(conn)
        return conn

    def _put_conn(self, conn: Any) -> None:
        guard = getattr(conn, _GUARD_ATTR, None) if conn is not None else None
        if guard is not None and guard.detach(conn):
            conn.close()
            conn = None
        super()._put_conn(conn)  # type: ignore[misc]


class _HTTPPool(_GuardedPoolMixin, _pool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(_GuardedPoolMixin, _pool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_POOL_CLASSES = {"http": _HTTPPool, "https": _HTTPSPool}


class _GuardedAdapter(requests.adapters.HTTPAdapter):
    """An HTTPAdapter whose pools register connections with the request's budget."""

    def __init__(self) -> None:
        super().__init__(max_retries=0)  # retries belong to retry_call

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOL_CLASSES)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = dict(_POOL_CLASSES)
        return manager


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
        max(_FLOOR, remaining if connect is None else min(float(connect), remaining)),
        max(_FLOOR, remaining if read is None else min(float(read), remaining)),
    )


class Session(requests.Session):
    """A ``requests.Session`` whose every request is hard-bounded by a budget.

    Each request runs under the current ``deadline()`` scope's budget and, if
    given, ``budget`` (the tighter wins). Name resolution, connect, TLS,
    sending, waiting for headers and every body read are bounded: timeouts
    are clipped to the time left, and when the budget ends the socket is shut
    down from outside, so even a body that drips one byte a second stops at
    the deadline. urllib3-level retries are off (retries belong to
    :func:`retry_call`).

    On timeout or cancel: inside a ``deadline()`` scope the request raises
    :class:`Cancelled`, which the scope turns into :class:`DeadlineExceeded`
    (or :class:`OperationCancelled`); with ``Session(budget=...)`` and no
    scope, the request raises :class:`DeadlineExceeded` /
    :class:`OperationCancelled` itself. Transport failures keep requests' own
    exception types, so the session is a drop-in replacement.

    A streamed body (``stream=True``) stays bounded while it is read; the
    connection is released to the pool (or discarded, if it was shut) when
    the body is consumed or the response closed.

    Redirects are followed as requests follows them, except that a hop to
    another origin (scheme, host or port) strips every credential header
    (``Authorization``, ``Api-Key``, ``X-Api-Key``, ...), not only
    ``Authorization``.

    ``propagate=True``: every send (each retry and redirect hop) carries the
    time left as ``grpc-timeout`` and ``x-envoy-upstream-rq-timeout-ms`` (see
    :func:`deadline_headers`), computed then; none with no bounded budget, and
    none to another origin than the URL asked for. Off by default.
    """

    def __init__(self, budget: Optional[Budget] = None, *, propagate: bool = False) -> None:
        super().__init__()
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"budget must be a watchdog_sync.Budget, not {type(budget).__name__}")
        self.budget = budget
        self.propagate = _propagation.check_propagate(propagate)
        adapter = _GuardedAdapter()
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    def __repr__(self) -> str:
        shown = " propagate=True" if self.propagate else ""
        return f"<watchdog_sync.Session budget={self.budget!r}{shown}>"

    def should_strip_auth(self, old_url: str, new_url: str) -> bool:
        """True when a redirect changes the origin (scheme, host or port): credentials stay."""
        return not same_origin(old_url, new_url)

    def rebuild_auth(
        self, prepared_request: requests.PreparedRequest, response: requests.Response
    ) -> None:
        """On a cross-origin redirect, strip every credential header (not only Authorization)."""
        old_url, new_url = getattr(response.request, "url", None), prepared_request.url
        if not (isinstance(old_url, str) and isinstance(new_url, str)) or self.should_strip_auth(
            old_url, new_url
        ):
            strip_credentials(prepared_request.headers)
        super().rebuild_auth(prepared_request, response)  # type: ignore[no-untyped-call]  # netrc

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
        budget, owner, release = joined_budget(self.budget, stage="http")
        guard = _ConnectionGuard(budget, owner, release)
        answered = False
        try:
            with boundary(budget, owner):
                budget.check()
                kwargs["timeout"] = clip_timeout(kwargs.get("timeout"), budget.remaining())
                token = _ACTIVE_GUARD.set(guard)
                first_send = _propagation.begin_request()  # which origin its hops may tell
                try:
                    response = super().request(method, url, *args, **kwargs)
                    answered = True
                except requests.RequestException:
                    if guard.fired or budget.expired:
                        budget.check()  # the budget's end caused it: say so
                    raise
                finally:
                    _propagation.end_request(first_send)
                    _ACTIVE_GUARD.reset(token)
                if guard.fired:
                    response.close()
                    budget.check()
        finally:
            guard.request_finished(answered=answered)
        if kwargs.get("stream"):
            bound_body(response, guard)
        return response

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        """Send one prepared request (the first or a redirect hop), deadline headers set now."""
        with _propagation.allowed_origin(request.url) as allowed:
            if self.propagate or _propagation.forced():
                guard = _ACTIVE_GUARD.get()  # None: send() called directly, not by request()
                _propagation.mark_request(
                    request, allowed, None if guard is None else guard.budget, self.budget
                )
            return super().send(request, **kwargs)
