"""propagate: deadline headers in and out, the WSGI middleware, the Celery integration.

Above the transport part: imports the core and transport (whose ``Session``
sends the headers); only the public door, ``watchdog_sync.wsgi`` and
``watchdog_sync.celery`` import it.
"""
