"""instrument(sockets=True): a socket connected inside a scope is bound by the scope's budget.

For clients with HTTP code of their own (http.client, urllib.request, dspy's
default engine, ...), which neither urllib3's nor httpx's patches reach. The
patches, all on the ``socket`` and ``ssl`` modules' classes:

* ``socket.socket.connect`` / ``connect_ex``: inside a ``deadline()`` scope, a
  blocking socket's timeout is clipped to the time left before it connects,
  and the socket is registered with the budget (``on_done``), which shuts it
  from outside at its end (:func:`~.shutter.shutdown_socket`: a ``recv``
  blocked in any thread wakes). Sockets that a request guard of urllib3's
  or httpx's already bounds (:data:`GUARDED`) are left to it: they go back to
  a pool, where nothing may shut them;
* ``ssl.SSLContext.wrap_socket``: a registered socket wrapped in TLS hands its
  registration to the TLS socket (the plain one is detached);
* the reads and writes (``recv``, ``recv_into``, ``recvfrom``,
  ``recvfrom_into``, ``send``, ``sendall`` and TLS's ``read`` / ``write``): one
  that ends with nothing or an error once the socket's budget has ended (the
  shutdown, or the clipped timeout of the same moment) raises ``Cancelled``,
  so the scope says :class:`DeadlineExceeded` rather than the program seeing
  an early end of its data or a plain ``TimeoutError``;
* ``socket.socket._real_close`` (the one place the descriptor is closed, also
  for a close deferred by ``makefile``): the registration is dropped.

The ``Cancelled`` says as much of where the socket was as a socket can know:
``connect``, ``tls`` (the handshake of ``wrap_socket``), ``send`` (a write),
``head`` (a read before any byte came back) or ``body`` (a read after some did),
with how many bytes came and when the last did.

A socket belongs to the scope it was connected in: the end of that scope shuts
it, even when it is used afterwards. Non-blocking sockets (event loops) are
left alone. Outside any scope each read costs one Python call more, and a
lookup only when it returns nothing or fails.
"""

from __future__ import annotations

import contextvars
import functools
import math
import socket
import ssl
import threading
import weakref
from typing import Any, Callable, Dict, Optional

from .._core.budget import Budget
from .._core.errors import Cancelled
from .._core.phase import mark
from .._core.scope import scoped_budget
from .guard import ACTIVE_GUARD, FLOOR
from .patches import PatchSet
from .shutter import shutdown_socket

__all__ = ["GUARDED", "sockets_patches"]

_Fn = Callable[..., Any]
_READS = ("recv", "recv_into", "recvfrom", "recvfrom_into")
_WRITES = ("send", "sendall")
_TLS_READS = ("recv", "recv_into", "read")
_TLS_WRITES = ("send", "sendall", "write")

# True while a request guard of httpx's bounds the sockets being connected (urllib3's: ACTIVE_GUARD).
GUARDED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "watchdog_sync_sockets_guarded", default=False
)


class _Binding:
    """One socket's registration with a budget: shut at its end, and whether it was; the
    bytes read from it since it was bound, and when the last came."""

    __slots__ = ("__weakref__", "budget", "fired", "last_read_at", "read", "since", "unregister")

    def __init__(self, budget: Budget, sock: socket.socket) -> None:
        self.budget = budget
        self.fired = False
        self.since = budget.clock.now()
        self.read = 0
        self.last_read_at = self.since
        target = weakref.ref(sock)  # the budget must not keep the socket alive
        self.unregister = budget.on_done(functools.partial(_shut, weakref.ref(self), target))

    def got(self, result: Any) -> None:
        """A read returned ``result`` (bytes, a count, or recvfrom's pair)."""
        if isinstance(result, tuple):
            result = result[0]
        self.read += result if isinstance(result, int) else len(result)
        self.last_read_at = self.budget.clock.now()

    def check(self, phase: str) -> None:
        """``budget.check()``, the ``Cancelled`` saying where the socket was: ``phase``, or
        for a read ``head`` / ``body`` by whether any byte came back."""
        try:
            self.budget.check()
        except Cancelled as exc:
            now = self.budget.clock.now()
            if phase != "read":
                words = _WORDS[phase]
                mark(exc, phase, f"{words}, for {now - self.since:.1f} s")
            elif self.read:
                ago = now - self.last_read_at
                mark(exc, "body", f"after {self.read} bytes read, the last {ago:.1f} s ago")
            else:
                mark(exc, "head", f"connected, no byte read back in {now - self.since:.1f} s")
            raise


_WORDS = {
    "connect": "while connecting",
    "tls": "during the TLS handshake",
    "send": "while sending",
}


def _shut(binding: weakref.ref[_Binding], target: weakref.ref[socket.socket], _: Budget) -> None:
    bound = binding()
    sock = target()
    if bound is None or sock is None:
        return
    bound.fired = True
    shutdown_socket(sock)


_BINDINGS: weakref.WeakKeyDictionary[socket.socket, _Binding] = weakref.WeakKeyDictionary()
# Its own dict, empty when no socket is bound: a read tests it without a Python call.
_BOUND: Dict[Any, _Binding] = _BINDINGS.data  # type: ignore[attr-defined]  # (stubs miss it)
_LOCK = threading.Lock()


def _bind(sock: socket.socket, budget: Budget) -> None:
    binding = _Binding(budget, sock)
    with _LOCK:
        old = _BINDINGS.get(sock)
        _BINDINGS[sock] = binding
    if old is not None:
        old.unregister()


def _binding_of(sock: Any) -> Optional[_Binding]:
    with _LOCK:
        return _BINDINGS.get(sock)


def _unbind(sock: Any) -> Optional[_Binding]:
    with _LOCK:
        binding = _BINDINGS.pop(sock, None)
    if binding is not None:
        binding.unregister()
    return binding


def sockets_patches() -> PatchSet:
    """The patches of ``socket`` and ``ssl``, planned (not yet installed)."""
    patches = PatchSet("sockets")
    for name in _READS:
        patches.wrap(socket.socket, name, functools.partial(_io, patches, empty_is_end=True))
    for name in _WRITES:
        patches.wrap(socket.socket, name, functools.partial(_io, patches, empty_is_end=False))
    for name in _TLS_READS:
        patches.wrap(ssl.SSLSocket, name, functools.partial(_io, patches, empty_is_end=True))
    for name in _TLS_WRITES:
        patches.wrap(ssl.SSLSocket, name, functools.partial(_io, patches, empty_is_end=False))
    patches.wrap(socket.socket, "_real_close", functools.partial(_real_close, patches))
    patches.wrap(ssl.SSLContext, "wrap_socket", functools.partial(_wrap_socket, patches))
    for name in ("connect", "connect_ex"):
        patches.wrap(socket.socket, name, functools.partial(_connect, patches))
    return patches


def _scope_for(sock: socket.socket) -> Optional[Budget]:
    """The budget ``sock`` is to be bound by, or ``None`` when it is not ours to bind."""
    budget = scoped_budget()
    if budget is None or GUARDED.get() or ACTIVE_GUARD.get() is not None:
        return None
    if sock.gettimeout() == 0.0:  # non-blocking: an event loop polls it
        return None
    return budget


def _connect(patches: PatchSet, original: _Fn) -> _Fn:
    def connect(self: socket.socket, address: Any) -> Any:
        budget = _scope_for(self) if patches.active else None
        if budget is None:
            return original(self, address)
        budget.check()
        left = budget.remaining()
        if not math.isinf(left):
            current = self.gettimeout()
            if current is None or current > left:
                self.settimeout(max(FLOOR, left))
        _bind(self, budget)
        try:
            return original(self, address)
        except Exception:
            binding = _binding_of(self)
            if binding is not None:
                binding.check("connect")  # the budget's end cut the connect: say so
            budget.check()
            raise

    return connect


def _wrap_socket(patches: PatchSet, original: _Fn) -> _Fn:
    def wrap_socket(self: ssl.SSLContext, sock: Any, *args: Any, **kwargs: Any) -> Any:
        binding = _binding_of(sock) if patches.active else None
        if binding is None:
            return original(self, sock, *args, **kwargs)
        budget = binding.budget
        binding.since = budget.clock.now()
        try:
            wrapped = original(self, sock, *args, **kwargs)
        except Exception:
            binding.check("tls")
            raise
        _unbind(sock)
        _bind(wrapped, budget)
        return wrapped

    return wrap_socket


def _real_close(patches: PatchSet, original: _Fn) -> _Fn:
    def real_close(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        _unbind(self)
        return original(self, *args, **kwargs)

    return real_close


def _io(patches: PatchSet, original: _Fn, *, empty_is_end: bool) -> _Fn:
    op = "read" if empty_is_end else "send"

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = original(self, *args, **kwargs)
        except Exception:
            _raise_if_shut(self, op)
            raise
        if empty_is_end:
            if not result:
                _raise_if_shut(self, op)  # an EOF our own shutdown caused is no end of the data
            elif _BOUND:  # a bound socket counts what it read (no lookup when none is)
                binding = _BINDINGS.get(self)
                if binding is not None:
                    binding.got(result)
        return result

    return method


def _raise_if_shut(sock: Any, op: str) -> None:
    """``Cancelled`` when ``sock``'s budget has ended: it shut the socket, or a timeout clipped
    to the same moment came first. ``op``: ``'read'`` or ``'send'``."""
    binding = _binding_of(sock)
    if binding is not None and (binding.fired or binding.budget.ended):
        binding.check(op)
