"""instrument()'s patch of httpx2 and httpx: ``HTTPTransport.handle_request``, every request.

Inside a ``deadline()`` scope, or with a request timeout or stream limits in force, the
request goes through :class:`HTTPXTransport` (with the stream limits, if any: without
them it never sends again); otherwise, or when it is already inside an
:class:`HTTPXTransport` (bound once), through the original. httpcore's connect, TLS,
reads and writes are hooked too (``httpcore_hooks.py``), so the head is bounded. In and
out of a scope, an HTTP/1.x body registers its socket while it reads, so a
:func:`guard_stream` over an SDK stream that goes quiet shuts it and its reader exits.

A request timeout (``_http/request_timeout.py``) clips the request's timeouts; its end
raises httpx's ``TimeoutException`` family (``request_timeout.py``) from the request or a
body read, and it stops at the body's end (an event stream's: at its head). Async
transports are not patched.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Iterator, Optional

from .._core.durations import off
from .._core.scope import scoped_budget, using_budget
from .._http.patches import PatchSet
from .._http.reads import reading
from .._http.request_timeout import RequestTimer, is_request_timeout, request_limit
from .._stream.instrument_limits import limits_in_force
from .._stream.limits import StreamLimits
from .body import as_stream_of, is_event_stream, socket_of
from .call import clipped
from .cores import CORES
from .httpcore_hooks import class_patches
from .request_timeout import request_timeout_error
from .transport import BOUND, HTTPXTransport

__all__ = ["httpx_patches"]

_Fn = Callable[..., Any]


def httpx_patches() -> Optional[PatchSet]:
    """The patches for httpx2 and httpx, whichever are installed; ``None`` for neither."""
    libraries = []
    for name in CORES:
        try:
            libraries.append(importlib.import_module(name))
        except Exception:  # not installed, or not importable on this Python (httpx2 < 3.10)
            continue
    if not libraries:
        return None
    patches = PatchSet("httpx")
    for lib in libraries:
        class_patches(patches, lib)  # httpcore's connect, reads and writes: the head bounded
    for lib in libraries:  # the entry points last
        patches.wrap(lib.HTTPTransport, "handle_request", functools.partial(_wrap, patches, lib))
    return patches


def _wrap(patches: PatchSet, lib: Any, original: _Fn) -> _Fn:
    direct = _unpatched(lib, original)
    reading_body = as_stream_of(_ReadingBody, lib)
    timed_body = as_stream_of(_TimedBody, lib)

    def handle_request(self: Any, request: Any) -> Any:
        if not patches.active or BOUND.get():
            return original(self, request)
        scope = scoped_budget()
        limit = request_limit()
        streams = limits_in_force()
        if limit is not None:
            timer = RequestTimer(limit, scope)
            response = _timed(lib, direct(self), request, timer, streams)
            response.stream = timed_body(response.stream, lib, timer)
        elif scope is None and streams is None:
            response = original(self, request)
        else:
            response = _bound(direct(self), request, streams)
        sock = socket_of(response)
        if sock is not None:
            response.stream = reading_body(response.stream, sock)
        return response

    return handle_request


def _bound(transport: Any, request: Any, streams: Optional[StreamLimits]) -> Any:
    """``request`` through :class:`HTTPXTransport`, bounded by the current scope's budget, an
    event stream watched by ``streams`` (``None``: no idle or first-event limit, never resent)."""
    idle, first = (None, None) if streams is None else (streams.idle, streams.first)
    guarded = HTTPXTransport(transport, idle_timeout=off(idle), first_event_timeout=off(first))
    return guarded.handle_request(request)


def _timed(
    lib: Any, transport: Any, request: Any, timer: RequestTimer, streams: Optional[StreamLimits]
) -> Any:
    """``request`` under its own timeout (``timer``) and the enclosing scope's."""
    extensions = request.extensions
    extensions["timeout"] = clipped(extensions.get("timeout"), timer.remaining())
    try:
        with using_budget(timer.budget):
            response = _bound(transport, request, streams)
    except BaseException as exc:
        timer.stop()
        if not _timed_out(exc, timer):
            raise
        error = request_timeout_error(lib, timer.budget, exc)
    else:
        if is_event_stream(response.status_code, response.headers):
            timer.stop()  # the stream is left to the scope (and its own idle rules)
        return response
    raise error from None


def _timed_out(exc: BaseException, timer: RequestTimer) -> bool:
    """The request's own limit ended it: its cancel, or an httpx timeout of the same moment."""
    return is_request_timeout(exc) or (isinstance(exc, Exception) and timer.due)


def _unpatched(lib: Any, original: _Fn) -> type:
    """A ``lib.BaseTransport`` around an ``HTTPTransport`` that sends through ``original``,
    the unpatched method (the transport's own pool is left as it is)."""

    def __init__(self: Any, transport: Any) -> None:
        self._transport = transport

    def handle_request(self: Any, request: Any) -> Any:
        return original(self._transport, request)

    namespace = {"__init__": __init__, "handle_request": handle_request}
    return type("UnpatchedTransport", (lib.BaseTransport,), namespace)


class _TimedBody:
    """A response body read under its request's own timeout: the timeout's end raises httpx's
    timeout error (and ours); the timer stops when the body is read to its end or closed."""

    def __init__(self, inner: Any, lib: Any, timer: RequestTimer) -> None:
        self._inner = inner
        self._lib = lib
        self._timer = timer

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._inner
        except BaseException as exc:
            if not _timed_out(exc, self._timer):
                raise
            error = request_timeout_error(self._lib, self._timer.budget, exc, "body")
        else:
            self._timer.stop()
            return
        raise error from None

    def close(self) -> None:
        self._timer.stop()
        self._inner.close()


class _ReadingBody:
    """A response body whose reads register their socket with a guard_stream reader."""

    def __init__(self, inner: Any, sock: Any) -> None:
        self._inner = inner
        self._sock = sock

    def __iter__(self) -> Iterator[bytes]:
        pieces = iter(self._inner)
        while True:
            remove = reading(self._sock)
            try:
                piece = next(pieces, None)
            finally:
                remove()
            if piece is None:
                return
            yield piece

    def close(self) -> None:
        self._sock = None
        self._inner.close()
