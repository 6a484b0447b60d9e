"""The multiprocessing context behind process isolation, and what its fork server preloads.

The fork server is a small single-threaded process that forks every sample
process. What it has imported, children get for free; what it has not, each
child imports again, on the sample's clock. So the first process-mode call
has it preload ``__main__`` (the harness script, Python's default), this
package, and the first sample's module (a user's own preload list is kept).

Python before 3.13.8 never actually preloads ``__main__`` and ignores the
parent's ``sys.path`` in the server (CPython gh-126631, gh-117378), so each
child re-ran the harness script's imports (about 100 ms per sample under
pytest, more for a harness that imports heavy libraries). In the server,
:func:`preload_in_server` does that preloading itself, as the fixed Python
does, from a one-shot environment variable that the parent sets only while it
starts the server (the ``preload`` module calls it there, once the package is
fully imported, so a script that imports watchdog_sync works). A harness
started with ``python -m package`` is not preloaded (each child imports it);
one started as a script path is.

Where there is no fork server (Windows), ``spawn`` is used.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
from typing import Any, List, Optional, Sequence

__all__ = ["get_context", "preload_in_server"]

_ENV = "WATCHDOG_SYNC_FORKSERVER_MAIN"

_READY_LIMIT = 60.0  # seconds the warm-up child may take to exit (it exits at once)

_lock = threading.Lock()
_context: Any = None  # a ForkServerContext or SpawnContext (typeshed has no common type)


def get_context(first_module: Optional[str], preload: Sequence[str]) -> Any:
    """The context samples start in; ``preload`` names the modules the fork server imports first.

    The first call starts the fork server and waits until it has preloaded
    (one no-op child, bounded by :data:`_READY_LIMIT`), so that no sample's
    clock pays for it.
    """
    global _context
    with _lock:
        if _context is None:
            if "forkserver" in multiprocessing.get_all_start_methods():
                _context = _start_fork_server(first_module, preload)
            else:
                _context = multiprocessing.get_context("spawn")
        return _context


def _start_fork_server(first_module: Optional[str], preload: Sequence[str]) -> Any:
    from multiprocessing import forkserver, spawn

    context = multiprocessing.get_context("forkserver")
    server = getattr(forkserver, "_forkserver", None)
    wanted: List[str] = list(getattr(server, "_preload_modules", None) or ["__main__"])
    for name in (*preload, first_module):
        if name and name not in wanted:
            wanted.append(name)
    context.set_forkserver_preload(wanted)
    data = spawn.get_preparation_data("ignore")
    setup = {
        "main_path": data.get("init_main_from_path"),
        "sys_path": data.get("sys_path"),
        "sys_argv": data.get("sys_argv"),
    }
    os.environ[_ENV] = json.dumps(setup)
    try:
        forkserver.ensure_running()  # a no-op if it runs already
    finally:
        os.environ.pop(_ENV, None)
    ready = context.Process(target=_ready, name="watchdog_sync-sample-warmup")
    ready.start()  # returns once the server has preloaded and forked it
    ready.join(_READY_LIMIT)
    if ready.exitcode is not None:
        ready.close()
    return context


def _ready() -> None:
    """The warm-up child: exits at once."""


def preload_in_server() -> None:
    """In the fork server only: the parent's ``sys.path`` and ``sys.argv``, then its script."""
    raw = os.environ.pop(_ENV, None)  # popped: the server's children do not inherit it
    if raw is None:
        return
    setup = json.loads(raw)
    if setup.get("sys_path"):
        sys.path[:] = setup["sys_path"]
    if setup.get("sys_argv"):
        sys.argv[:] = setup["sys_argv"]
    main_path = setup.get("main_path")
    if not main_path or getattr(sys.modules.get("__main__"), "__file__", None) == main_path:
        return  # no script, or a fixed Python preloaded it already
    from multiprocessing import process, spawn

    current = process.current_process()
    setattr(current, "_inheriting", True)  # noqa: B010 - as multiprocessing does for main
    try:
        spawn.import_main_path(main_path)
    except Exception:  # each child then imports it as usual and reports what goes wrong
        sys.modules.pop("__mp_main__", None)
    finally:
        delattr(current, "_inheriting")
