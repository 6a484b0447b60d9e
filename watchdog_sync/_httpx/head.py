"""The connect and the response head on httpcore, bounded by the budget like the body.

While :class:`HTTPXTransport` hands a request to httpcore, a :class:`HeadGuard` is
current (``HEAD``), and httpcore's network calls, reached through the hooks of
:mod:`.httpcore_hooks`, ask it first: ``connect_tcp`` resolves the name in a helper thread
within the time left (as ``_http/resolve.py`` does for urllib3) and connects to each
address within the time left; ``start_tls``, every ``read`` and ``write`` (the request,
each ``1xx`` interim response, the final head) and ``sleep`` (httpcore's back-off between
connect retries) are clipped to the time left, recomputed at each call. A streaming
request's first-event limit is an absolute end for the head too (``until``): a head that
drips past it raises httpcore's ``ReadTimeout``, as a silent one does. Each hook moves the
request's :class:`RequestProgress` on, so the ``Cancelled`` of the budget's end
(:meth:`HeadGuard.check`) says where the request was.

Each socket is registered with the guard as soon as it is connected (a pooled one at its
first write), and shut from outside when the budget ends (``shutdown(SHUT_RDWR)`` wakes a
blocked ``recv``); a call that starts after the end raises httpcore's own timeout error,
and the transport raises ``Cancelled`` (or the owner's error). The TLS handshake runs on a
socket object ssl makes of the registered one: it is bounded by its clipped timeout. The
guard lets its sockets go when httpcore returns or fails (from there the body's
:class:`~.body.Shutter` guards the socket; one back in the pool is never shut). HTTP/2
sockets (ALPN ``h2``, or the preface written on them) carry many streams and are never
registered, only clipped. Outside a guarded request the hooks pass straight through.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import socket
import time
import weakref
from typing import Any, Callable, Iterator, Optional

from .._core.budget import Budget, _noop
from .._core.errors import Cancelled
from .._core.forks import process_local
from .._core.phase import mark
from .._http.instrument_sockets import GUARDED
from .._http.progress import RequestProgress
from .._http.resolve import addresses_bounded, is_ip_literal
from .._http.shutter import SocketSet

__all__ = [
    "connect_tcp",
    "connect_unix_socket",
    "head_phase",
    "read",
    "sleep",
    "start_tls",
    "write",
]

_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Streams that wrote the HTTP/2 preface without TLS (h2c, prior knowledge): never shut.
_CLEARTEXT_H2: weakref.WeakSet[Any] = weakref.WeakSet()
_Fn = Callable[..., Any]


class HeadGuard:
    """One request's sockets, from the connect to the last header byte; shut at the budget's end.

    ``until``: an absolute ``time.monotonic()`` by which the head must be in (a
    streaming request's first-event limit), or ``None``.
    """

    __slots__ = ("_sockets", "_unregister", "_until", "budget", "progress")

    def __init__(self, budget: Budget, until: Optional[float] = None) -> None:
        self.budget = budget
        self._until = until
        self.progress = RequestProgress(budget.clock.now)
        self._sockets = SocketSet()
        self._unregister: Callable[[], None] = budget.on_done(self._fire)

    def check(self) -> None:
        """``budget.check()``, the ``Cancelled`` saying where the request was."""
        try:
            self.budget.check()
        except Cancelled as exc:
            if self.progress.phase is not None:
                mark(exc, self.progress.phase, self.progress.words())
            raise

    def timeout(
        self, timeout: Optional[float], error: Any, *, head: bool = True
    ) -> Optional[float]:
        """``timeout`` capped at the time left (and at ``until`` for a ``head`` read);
        ``error`` (httpcore's timeout class) raised when no time is left."""
        left = self.budget.remaining()
        if head and self._until is not None:
            left = min(left, self._until - time.monotonic())
        if left <= 0:
            raise error(
                "the budget ended before the response headers arrived"
                if self.budget.ended
                else "no response headers within the first-event limit"
            )
        if math.isinf(left):
            return timeout
        return left if timeout is None else min(float(timeout), left)

    def watch(self, stream: Any) -> None:
        """Register ``stream``'s socket (not an HTTP/2 one); shut it now if the budget ended."""
        sock = stream.get_extra_info("socket")
        if isinstance(sock, socket.socket) and not _multiplexed(stream):
            self._sockets.put(id(sock), sock)

    def forget(self, stream: Any) -> None:
        """Stop guarding ``stream``'s socket (it turned out to be HTTP/2, or TLS replaced it)."""
        self._sockets.drop(id(stream.get_extra_info("socket")))

    def _fire(self, budget: Budget) -> None:
        self._sockets.shut()

    def release(self) -> None:
        """httpcore returned (or failed): no socket is shut from here on."""
        self._sockets.release()
        unregister, self._unregister = self._unregister, _noop
        unregister()


HEAD: contextvars.ContextVar[Optional[HeadGuard]] = process_local(
    contextvars.ContextVar("watchdog_sync_httpx_head", default=None)
)  # a child forked while a head is read is not that request's (:mod:`.._core.forks`)


@contextlib.contextmanager
def head_phase(budget: Budget, until: Optional[float] = None) -> Iterator[HeadGuard]:
    """Make a :class:`HeadGuard` current while httpcore sends the request and reads the head
    (the guard stays usable afterwards: its :meth:`~HeadGuard.check` says where it was)."""
    guard = HeadGuard(budget, until)
    token = HEAD.set(guard)
    guarded = GUARDED.set(True)  # instrument(sockets=True) leaves these sockets to the guard
    try:
        yield guard
    finally:
        GUARDED.reset(guarded)
        HEAD.reset(token)
        guard.release()


def _multiplexed(stream: Any) -> bool:
    if stream in _CLEARTEXT_H2:
        return True
    ssl_object = stream.get_extra_info("ssl_object")
    return ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2"


# -- the hooks: each takes httpcore's classes (``core``) and the method it stands for ----------


def read(core: Any, original: _Fn, stream: Any, max_bytes: int, timeout: Any = None) -> Any:
    guard = HEAD.get()
    if guard is None:
        return original(stream, max_bytes, timeout)
    guard.watch(stream)
    guard.progress.enter("head")
    return original(stream, max_bytes, guard.timeout(timeout, core.ReadTimeout))


def write(core: Any, original: _Fn, stream: Any, buffer: bytes, timeout: Any = None) -> Any:
    guard = HEAD.get()
    if guard is None:
        return original(stream, buffer, timeout)
    if buffer[: len(_H2_PREFACE)] == _H2_PREFACE:
        _CLEARTEXT_H2.add(stream)
        guard.forget(stream)
    guard.watch(stream)
    guard.progress.enter("send")
    return original(stream, buffer, guard.timeout(timeout, core.WriteTimeout, head=False))


def start_tls(
    core: Any,
    original: _Fn,
    stream: Any,
    ssl_context: Any,
    server_hostname: Optional[str] = None,
    timeout: Any = None,
) -> Any:
    guard = HEAD.get()
    if guard is None:
        return original(stream, ssl_context, server_hostname, timeout)
    guard.watch(stream)
    guard.progress.enter("tls")
    clipped = guard.timeout(timeout, core.ConnectTimeout, head=False)
    secured = original(stream, ssl_context, server_hostname, clipped)
    guard.forget(stream)  # ssl made a new socket object of it (the old one is detached)
    guard.watch(secured)
    return secured


def connect_tcp(
    core: Any,
    original: _Fn,
    backend: Any,
    host: str,
    port: int,
    timeout: Any = None,
    local_address: Optional[str] = None,
    socket_options: Any = None,
) -> Any:
    guard = HEAD.get()
    if guard is None:
        return original(backend, host, port, timeout, local_address, socket_options)
    addresses = [host]
    if not is_ip_literal(host):
        guard.progress.enter("resolve")
        left = guard.timeout(timeout, core.ConnectTimeout, head=False)
        try:
            addresses = addresses_bounded(host, port, left)
        except socket.timeout as exc:
            raise core.ConnectTimeout(str(exc)) from exc
        except OSError as exc:  # socket.gaierror: as httpcore maps it
            raise core.ConnectError(exc) from exc
    failure: Optional[Exception] = None
    guard.progress.enter("connect")
    for address in addresses:
        left = guard.timeout(timeout, core.ConnectTimeout, head=False)
        try:
            stream = original(backend, address, port, left, local_address, socket_options)
        except core.ConnectError as exc:  # the next address, as socket.create_connection does
            failure = exc
            continue
        guard.watch(stream)
        return stream
    assert failure is not None
    raise failure


def connect_unix_socket(
    core: Any,
    original: _Fn,
    backend: Any,
    path: str,
    timeout: Any = None,
    socket_options: Any = None,
) -> Any:
    guard = HEAD.get()
    if guard is None:
        return original(backend, path, timeout, socket_options)
    guard.progress.enter("connect")
    left = guard.timeout(timeout, core.ConnectTimeout, head=False)
    stream = original(backend, path, left, socket_options)
    guard.watch(stream)
    return stream


def sleep(core: Any, original: _Fn, backend: Any, seconds: float) -> Any:
    """httpcore's back-off between connect retries: never past the budget's end."""
    guard = HEAD.get()
    if guard is not None and seconds >= guard.budget.remaining():
        raise core.ConnectTimeout("the budget ends before the next connect retry")
    return original(backend, seconds)
