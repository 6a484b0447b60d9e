"""Where :mod:`.head`'s hooks reach into httpcore: the one module that touches its private names.

httpcore (httpcore2, and httpcore 1.x under httpx 0.28) has one public way in to its network
calls: the network backend a ``ConnectionPool`` is built with, a ``SyncBackend`` in httpx's
``HTTPTransport``. :class:`HTTPXTransport` puts a bounded backend in front of it
(:func:`bound_pool`, through ``transport._pool`` and ``pool._network_backend``); the streams
it opens carry the hooks as instance attributes, so they stay httpcore's own ``SyncStream``,
the shape :mod:`.feed` reads. A pool with another backend is left alone. :func:`instrument`
patches the classes instead (:func:`class_patches`, ``SyncStream`` from httpcore's private
``_backends.sync``), so connections opened before it ran are bounded too.

:func:`shapes` says, for each installed httpx, whether these names are where this module
expects them (a test checks it). Where they moved nothing is hooked, and the transport's
check when httpcore returns still holds.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from .._http.patches import PatchSet
from . import head
from .cores import CORES, ClassLookup

__all__ = ["bound_pool", "class_patches", "shapes"]

_log = logging.getLogger("watchdog_sync")
_Fn = Callable[..., Any]


class _Core(NamedTuple):
    """One httpcore: the module (its public errors and classes), its ``SyncStream`` and our
    bounded backend class over its ``NetworkBackend``."""

    module: Any
    stream_class: Any
    backend_class: Any


def _find_core(name: str, core_name: str) -> _Core:
    module = importlib.import_module(core_name)
    stream_class = importlib.import_module(f"{core_name}._backends.sync").SyncStream
    for attr in ("ReadTimeout", "WriteTimeout", "ConnectTimeout", "ConnectError"):
        getattr(module, attr)
    backend_class = type("BoundedBackend", (_BoundedBackend, module.NetworkBackend), {})
    return _Core(module, stream_class, backend_class)


# The httpcore under a library (httpx2 or httpx); None if its names moved.
_core = ClassLookup(_find_core, "its head is checked after")


# The methods the hooks stand for, with the parameters they pass on (by position and by name).
_SIGNATURES = {
    "backend": {
        "connect_tcp": ["host", "port", "timeout", "local_address", "socket_options"],
        "connect_unix_socket": ["path", "timeout", "socket_options"],
        "sleep": ["seconds"],
    },
    "stream": {
        "read": ["max_bytes", "timeout"],
        "write": ["buffer", "timeout"],
        "start_tls": ["ssl_context", "server_hostname", "timeout"],
        "get_extra_info": ["info"],
    },
}


def shapes() -> Dict[str, bool]:
    """For each installed httpx (``httpx2``, ``httpx``): are httpcore's names where we reach,
    and do its network methods take the parameters the hooks pass on?"""
    result: Dict[str, bool] = {}
    for lib_name in CORES:
        try:
            lib = importlib.import_module(lib_name)
        except Exception:  # not installed (or not importable on this Python)
            continue
        core = _core(lib)
        if core is None:
            result[lib_name] = False
            continue
        transport = lib.HTTPTransport()
        try:
            pool = getattr(transport, "_pool", None)
            owners = {"backend": core.module.SyncBackend, "stream": core.stream_class}
            result[lib_name] = (
                isinstance(pool, core.module.ConnectionPool)
                and type(getattr(pool, "_network_backend", None)) is core.module.SyncBackend
                and all(
                    _parameters(getattr(owners[owner], method, None)) == expected
                    for owner, methods in _SIGNATURES.items()
                    for method, expected in methods.items()
                )
            )
        finally:
            transport.close()
    return result


def _parameters(method: Any) -> List[str]:
    if not callable(method):
        return []
    return [name for name in inspect.signature(method).parameters if name != "self"]


def bound_pool(transport: Any, lib: Any) -> bool:
    """Put the bounded backend in front of ``transport``'s pool (idempotent).

    False (nothing done) for a transport that is not ``lib.HTTPTransport`` with
    httpcore's own ``SyncBackend``: a custom transport or network backend.
    """
    if not isinstance(transport, lib.HTTPTransport):
        return False  # a transport of its own (or instrument()'s, on the patched classes)
    core = _core(lib)
    if core is None:
        return False
    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, core.module.ConnectionPool):
        return False
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, _BoundedBackend):
        return True
    if type(backend) is not core.module.SyncBackend:
        return False
    pool._network_backend = core.backend_class(core, backend)
    return True


class _BoundedBackend:
    """httpcore's ``SyncBackend`` with the head hooks; the streams it opens carry them too."""

    def __init__(self, core: _Core, inner: Any) -> None:
        self._core = core
        self._inner = inner

    def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
        return self._connected(head.connect_tcp, "connect_tcp", args, kwargs)

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        return self._connected(head.connect_unix_socket, "connect_unix_socket", args, kwargs)

    def _connected(self, hook: _Fn, name: str, args: Any, kwargs: Any) -> Any:
        inner = self._inner
        stream = hook(self._core.module, getattr(type(inner), name), inner, *args, **kwargs)
        return hook_stream(self._core, stream)

    def sleep(self, seconds: float) -> None:
        head.sleep(self._core.module, type(self._inner).sleep, self._inner, seconds)


def hook_stream(core: _Core, stream: Any) -> Any:
    """``stream`` with the head hooks as instance attributes (only httpcore's ``SyncStream``).

    The hooks hold the stream weakly: no reference cycle keeps a socket alive.
    """
    cls = core.stream_class
    if type(stream) is not cls or "read" in vars(stream):
        return stream
    module = core.module
    ref = weakref.ref(stream)
    read, write, start_tls = cls.read, cls.write, cls.start_tls

    def hooked_read(max_bytes: int, timeout: Any = None) -> Any:
        return head.read(module, read, ref(), max_bytes, timeout)

    def hooked_write(buffer: bytes, timeout: Any = None) -> Any:
        return head.write(module, write, ref(), buffer, timeout)

    def hooked_start_tls(
        ssl_context: Any, server_hostname: Optional[str] = None, timeout: Any = None
    ) -> Any:
        secured = head.start_tls(module, start_tls, ref(), ssl_context, server_hostname, timeout)
        return hook_stream(core, secured)

    stream.read = hooked_read
    stream.write = hooked_write
    stream.start_tls = hooked_start_tls
    return stream


def class_patches(patches: PatchSet, lib: Any) -> None:
    """Plan instrument()'s class-level patches of ``lib``'s httpcore into ``patches``."""
    core = _core(lib)
    if core is None:
        return
    backend, stream = core.module.SyncBackend, core.stream_class
    planned: List[Any] = [
        (backend, "connect_tcp", head.connect_tcp),
        (backend, "connect_unix_socket", head.connect_unix_socket),
        (backend, "sleep", head.sleep),
        (stream, "read", head.read),
        (stream, "write", head.write),
        (stream, "start_tls", head.start_tls),
    ]
    for owner, name, hook in planned:
        patches.wrap(owner, name, functools.partial(_patched, patches, core.module, hook))


def _patched(patches: PatchSet, module: Any, hook: _Fn, original: _Fn) -> _Fn:
    def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not patches.active:
            return original(self, *args, **kwargs)
        return hook(module, original, self, *args, **kwargs)

    return patched
