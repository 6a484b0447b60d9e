"""Imported only by the fork server, after this package: preload ``__main__`` there.

See ``_sample_server``: it lists this module in the fork server's preload
list, after ``_sample_process``, so the harness script (which may import
watchdog_sync itself) is run in the server once, not in every sample process.
"""

from __future__ import annotations

from ._sample_server import preload_in_server

preload_in_server()
