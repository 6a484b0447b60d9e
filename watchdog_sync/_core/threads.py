"""When the package may start a thread of its own: not at interpreter exit.

Its threads (the watchdog, the shared stream reader) start on demand, and a stream left
open until the interpreter exits (partly read, in a module's globals or a reference cycle)
is finalized then. A thread started at that point never runs, and ``Thread.start`` waits
for it for ever (Python 3.11), so the process never ends: what the thread would have done
is done in the finalizing thread instead.
"""

from __future__ import annotations

import sys

__all__ = ["threads_can_start"]


def threads_can_start() -> bool:
    """False once the interpreter is exiting (``sys.is_finalizing()``)."""
    return not sys.is_finalizing()
