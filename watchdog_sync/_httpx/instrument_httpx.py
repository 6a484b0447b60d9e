"""instrument()'s patch of httpx2 and httpx: ``HTTPTransport.handle_request``, every request.

The openai and anthropic SDKs (and most other httpx code) send through an
``HTTPTransport``, the library's default. Its ``handle_request`` is wrapped:

* inside a ``deadline()`` scope, the request goes through
  :class:`HTTPXTransport` with no idle or first-event limit (so never sent
  again): every timeout clipped to the time left, the response's socket shut
  from outside at the budget's end, ``Cancelled`` raised, which the SDKs'
  ``except Exception`` retry loops cannot swallow; an event stream is checked
  as that transport checks one (terminal event, event size cap);
* inside a scope, httpcore's connect, TLS handshake, reads and writes (the
  classes ``SyncBackend`` and ``SyncStream``, see ``httpcore_hooks.py``) are
  bounded from the connect to the response's last header byte: the name
  resolved within the time left, each read's timeout the time left, the socket
  shut from outside at the budget's end (``head.py``); outside a scope they
  pass straight through;
* in and out of a scope, the body of an HTTP/1.1 response registers its socket
  with a :func:`guard_stream` reader thread while it reads, so a guarded SDK
  stream that goes quiet is shut and its reader exits.

A request already inside an :class:`HTTPXTransport` (``httpx_client()``) is
bound once, by that transport. Async transports are not patched.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Dict, Iterator, List, Optional

from .._core.scope import scoped_budget
from .._http.patches import PatchSet
from .._http.reads import reading
from .body import socket_of
from .httpcore_hooks import class_patches

__all__ = ["httpx_patches"]

_LIBRARIES = ("httpx2", "httpx")
_Fn = Callable[..., Any]


def _installed() -> List[Any]:
    libraries = []
    for name in _LIBRARIES:
        try:
            libraries.append(importlib.import_module(name))
        except Exception:  # not installed, or not importable on this Python (httpx2 < 3.10)
            continue
    return libraries


def httpx_patches() -> Optional[PatchSet]:
    """The patches for httpx2 and httpx, whichever are installed; ``None`` for neither."""
    libraries = _installed()
    if not libraries:
        return None
    patches = PatchSet("httpx")
    for lib in libraries:
        class_patches(patches, lib)  # httpcore's connect, reads and writes: the head bounded
    for lib in libraries:  # the entry points last
        patches.wrap(lib.HTTPTransport, "handle_request", functools.partial(_wrap, patches, lib))
    return patches


def _wrap(patches: PatchSet, lib: Any, original: _Fn) -> _Fn:
    from .transport import BOUND, HTTPXTransport

    direct = _direct_class(lib)
    reading_body = type("ReadingBody", (_ReadingBody, lib.SyncByteStream), {})

    def handle_request(self: Any, request: Any) -> Any:
        if not patches.active or BOUND.get():
            return original(self, request)
        if scoped_budget() is None:
            response = original(self, request)
        else:
            bound = HTTPXTransport(direct(self, original), idle_timeout=None)
            response = bound.handle_request(request)
        sock = socket_of(response)
        if sock is not None:
            response.stream = reading_body(response.stream, sock)
        return response

    return handle_request


_DIRECT: Dict[str, type] = {}


def _direct_class(lib: Any) -> type:
    """A ``lib.BaseTransport`` that sends through the original, unpatched method."""
    cls = _DIRECT.get(lib.__name__)
    if cls is None:

        def __init__(self: Any, transport: Any, original: _Fn) -> None:
            self._transport = transport
            self._original = original

        def handle_request(self: Any, request: Any) -> Any:
            return self._original(self._transport, request)

        namespace = {"__init__": __init__, "handle_request": handle_request}
        cls = type("UnpatchedTransport", (lib.BaseTransport,), namespace)
        _DIRECT[lib.__name__] = cls
    return cls


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
