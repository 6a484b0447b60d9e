"""Imported only by the fork server, after this package: preload ``__main__`` there.

``run_sample`` lists this module in the fork server's preload list, after
the process module, so the harness script (which may import
watchdog_sync itself) is run in the server once, not in every sample process.
"""

from __future__ import annotations

from .server import preload_in_server

preload_in_server()  # a no-op outside the fork server
