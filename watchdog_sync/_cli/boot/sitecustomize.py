"""Imported by Python at start-up in every process under ``watchdog-sync run``.

It applies ``run``'s options (``watchdog_sync._cli.startup.start``), then runs the
next ``sitecustomize`` on ``sys.path``, if there is one, as Python would have.
Imported any other way (outside ``run``), it does nothing. A Python without
``watchdog_sync`` says so on stderr and runs unbound.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _chain() -> None:
    """Run the ``sitecustomize`` this one hides: the next one on ``sys.path``."""
    here = os.path.dirname(os.path.abspath(__file__))
    for index, entry in enumerate(sys.path):
        if os.path.abspath(entry or os.curdir) == here:
            rest = sys.path[index + 1 :]
            break
    else:
        return
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("WATCHDOG_SYNC_RUN") == "1":
    try:
        from watchdog_sync._cli.startup import start
    except ImportError as exc:
        print(
            f"watchdog-sync run: {sys.executable} cannot import watchdog_sync ({exc}); "
            "this process runs unbound",
            file=sys.stderr,
        )
    else:
        start()
    _chain()
