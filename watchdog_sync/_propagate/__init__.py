"""propagate: deadline headers in and out, and the WSGI middleware.

Above the transport part: imports the core and transport (whose ``Session``
sends the headers); only the public door and ``watchdog_sync.wsgi`` import it.
"""
