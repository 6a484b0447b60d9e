"""Which httpx a transport is of: ``httpx2`` (the SDKs' since 2026-08) or ``httpx``, imported lazily."""

from __future__ import annotations

import importlib
import sys
from typing import Any

__all__ = ["default_library", "library_of"]


def default_library() -> Any:
    """``httpx2`` if it is installed, else ``httpx``; ImportError naming the extra otherwise."""
    for name in ("httpx2", "httpx"):
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
    for name in ("httpx2", "httpx"):
        lib = sys.modules.get(name)
        if lib is not None and isinstance(transport, lib.BaseTransport):
            return lib
    raise TypeError(
        "transport must be an httpx2 or httpx transport (a BaseTransport such as "
        f"HTTPTransport()), not {type(transport).__name__}"
    )
