"""Why an abandoned sample worker is stuck, read from its frame: a socket read, or other code.

A worker that did not stop at its deadline is stuck where the library cannot
reach it. When its innermost Python frame is a blocking read of the standard
library's network modules (``socket``, ``ssl``, ``selectors``, ``http.client``),
it is a client the library does not bound (``requests`` without a
``watchdog_sync.Session``, urllib, a raw socket), and ``instrument()`` would have
ended it at the deadline; otherwise (pure CPU, a C call, ``time.sleep``) only a
process can be stopped: ``isolate='process'``.
"""

from __future__ import annotations

import http.client
import os
import selectors
import socket
import ssl
import sys
import threading
from typing import Optional

__all__ = ["advice", "socket_read_of"]

_MODULES = {
    os.path.normcase(os.path.abspath(module.__file__)): module.__name__
    for module in (socket, ssl, selectors, http.client)
    if module.__file__
}
_READS = frozenset(
    {"recv", "recv_into", "readinto", "read", "readline", "select", "poll", "_safe_read"}
)


def socket_read_of(thread: threading.Thread) -> Optional[str]:
    """``module.function`` of the blocking socket read ``thread`` is in, or None."""
    ident = thread.ident
    if ident is None:
        return None
    frame = sys._current_frames().get(ident)
    try:
        if frame is None:
            return None
        code = frame.f_code
        module = _MODULES.get(os.path.normcase(os.path.abspath(code.co_filename)))
        if module is None or code.co_name not in _READS:
            return None
        return f"{module}.{code.co_name}"
    finally:
        del frame  # a frame held here would keep the worker's locals alive


def advice(thread: threading.Thread) -> str:
    """What to do about ``thread`` being stuck, in one sentence for a warning or an error."""
    read = socket_read_of(thread)
    if read is not None:
        return (
            f"it is blocked reading a socket the library does not bound ({read}: requests "
            "without a watchdog_sync.Session, urllib, a client with its own sockets); call "
            "watchdog_sync.instrument() (instrument(sockets=True) for clients with their own "
            "HTTP code) before the samples run, so such reads end at the deadline"
        )
    return (
        "it is stuck in code the library cannot interrupt (pure CPU, a C call, time.sleep); "
        "use run_sample(..., isolate='process') to have such samples killed"
    )
