"""WSGI integration: ``DeadlineMiddleware`` runs each request inside its caller's deadline.

``import watchdog_sync`` does not import this module; import it where the WSGI
application is built::

    from watchdog_sync.wsgi import DeadlineMiddleware

    application = DeadlineMiddleware(app, max_timeout=25, default_timeout=10)
"""

from ._propagate.wsgi import DeadlineMiddleware

__all__ = ["DeadlineMiddleware"]
