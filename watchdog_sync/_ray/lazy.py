"""The one place Ray is imported, when a function of ``watchdog_sync.ray`` first needs it."""

from __future__ import annotations

from typing import Any

__all__ = ["import_ray"]


def import_ray() -> Any:
    """The ``ray`` module, or an ``ImportError`` that says which extra installs it."""
    try:
        import ray
    except ImportError:
        raise ImportError("watchdog_sync.ray needs Ray: pip install 'watchdog-sync[ray]'") from None
    return ray
