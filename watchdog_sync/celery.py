"""Celery integration: deadlines that travel with tasks (``install(app)``).

Importing this module does not import Celery; :func:`install` does.
"""

from __future__ import annotations

from watchdog_sync._propagate.celery import install

__all__ = ["install"]
