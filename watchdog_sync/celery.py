"""Celery integration: deadlines that travel with tasks.

``import watchdog_sync`` does not import this module, and importing it does not import
Celery (:func:`install` does). Call it in the module that creates the app, so that both
the senders and the workers run it::

    from watchdog_sync.celery import install

    app = Celery("jobs", broker=..., backend=...)
    install(app)
"""

from __future__ import annotations

from ._propagate.celery import install

__all__ = ["install"]
