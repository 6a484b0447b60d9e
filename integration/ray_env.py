"""Imported before ``ray``: the tests' throwaway local cluster runs on loopback only, without auth.

Ray reads both settings when it is imported and its processes inherit them. On Linux Ray
takes the machine's own address as the node's, so its processes would listen and connect
on it; ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes it use 127.0.0.1, as it does on macOS
and Windows. Token auth (on by default) is not needed for a cluster nobody else can reach.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
