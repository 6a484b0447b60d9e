"""httpx2 and httpx, imported lazily, and the httpcore under each (:data:`CORES`).

Which httpx a transport is of (:func:`library_of`), or the one to use by default
(:func:`default_library`); what is made once for each library (:class:`PerLibrary`: the
transport's and the request timeout's classes). :mod:`.httpcore_hooks`, :mod:`.feed` and
:mod:`.http2` each look their httpcore classes up through a :class:`ClassLookup`: ``None``
when httpcore's names have moved (logged at debug level), and that module then leaves the
request to httpx's own code.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from typing import Any, Callable, Dict, Generic, Optional, Tuple, TypeVar

__all__ = ["CORES", "ClassLookup", "PerLibrary", "default_library", "library_of", "pooled_body"]

T = TypeVar("T")

CORES = {"httpx2": "httpcore2", "httpx": "httpcore"}
_log = logging.getLogger("watchdog_sync")
_UNKNOWN: Any = object()


def default_library() -> Any:
    """``httpx2`` if it is installed, else ``httpx``; ImportError naming the extra otherwise."""
    for name in CORES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        "watchdog_sync's HTTPXTransport and httpx_client() need httpx2 (or httpx): "
        "pip install 'watchdog-sync[httpx]'"
    )


def library_of(transport: object) -> Any:
    """The library (``httpx2`` or ``httpx``) whose ``BaseTransport`` ``transport`` is.

    Only libraries already imported are looked at: a transport's library is.
    """
    for name in CORES:
        lib = sys.modules.get(name)
        if lib is not None and isinstance(transport, lib.BaseTransport):
            return lib
    raise TypeError(
        "transport must be an httpx2 or httpx transport (a BaseTransport such as "
        f"HTTPTransport()), not {type(transport).__name__}"
    )


class PerLibrary(Generic[T]):
    """``make(lib)`` for each library (the httpx2 or httpx module), made at its first call
    and kept."""

    __slots__ = ("_lock", "_made", "_make")

    def __init__(self, make: Callable[[Any], T]) -> None:
        self._make = make
        self._made: Dict[str, T] = {}
        self._lock = threading.Lock()

    def __call__(self, lib: Any) -> T:
        made = self._made.get(lib.__name__)  # set once per library, never changed
        if made is None:
            with self._lock:
                made = self._made.get(lib.__name__)
                if made is None:
                    made = self._made[lib.__name__] = self._make(lib)
        return made


class ClassLookup(Generic[T]):
    """``find(lib_name, core_name)``'s result for each library, found at its first call.

    ``without`` says, for the log, what a library whose httpcore moved goes without.
    """

    __slots__ = ("_find", "_found", "_lock", "_without")

    def __init__(self, find: Callable[[str, str], Optional[T]], without: str) -> None:
        self._find = find
        self._without = without
        self._found: Dict[str, Optional[T]] = {}
        self._lock = threading.Lock()

    def __call__(self, lib: Any) -> Optional[T]:
        """The classes of ``lib``'s httpcore (``lib``: the httpx2 or httpx module)."""
        name = getattr(lib, "__name__", "")
        # Set once per library, never changed: one dict read (atomic under the GIL, or the
        # dict's own lock on a free-threaded build) serves every later call without the lock.
        known = self._found.get(name, _UNKNOWN)
        if known is not _UNKNOWN:
            return known
        with self._lock:
            if name in self._found:
                return self._found[name]
            found: Optional[T] = None
            core = CORES.get(name)
            try:
                if core is not None:
                    found = self._find(name, core)
            except (ImportError, AttributeError) as exc:
                _log.debug(
                    "watchdog_sync: %s's httpcore has moved (%r): %s", name, exc, self._without
                )
            self._found[name] = found
            return found


def pooled_body(response: Any) -> Tuple[Any, Any, Any]:
    """httpx's response stream down to httpcore's: (the pool's byte stream, the connection's
    byte stream, the connection), ``None`` for each part that is not there."""
    pooled = getattr(response.stream, "_httpcore_stream", None)
    body = getattr(pooled, "_stream", None)
    return pooled, body, getattr(body, "_connection", None)
