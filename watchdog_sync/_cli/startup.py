"""What ``watchdog-sync run`` does in every Python process it starts, at interpreter start-up.

``run`` puts the ``boot`` directory first on ``PYTHONPATH``; its
``sitecustomize`` calls :func:`start` (then chains to any other
``sitecustomize`` on the path). :func:`start` acts only under ``run``
(``WATCHDOG_SYNC_RUN=1``), which sets, from its options:

* ``WATCHDOG_SYNC_INSTRUMENT_REQUEST_TIMEOUT`` / ``_IDLE_TIMEOUT`` /
  ``_FIRST_EVENT_TIMEOUT`` / ``_SOCKETS`` / ``_THREADS``,
  which :func:`instrument` reads for the options it is not given;
* ``WATCHDOG_SYNC_RUN_DEADLINE`` (``--deadline``): the run's end, in wall-clock
  seconds since the epoch, so that every process, started early or late, ends
  at the same moment. The process's main thread runs inside a scope ending
  then; a ``Cancelled`` that reaches the top of the main thread is reported as
  the :class:`DeadlineExceeded` it stands for.
"""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import Callable, Optional, Type

from .._core.budget import Budget
from .._core.errors import Cancelled
from .._core.scope import error_for, owns, set_current
from .._httpx.instrument import instrument

__all__ = ["ENV_RUN", "ENV_RUN_DEADLINE", "start"]

ENV_RUN = "WATCHDOG_SYNC_RUN"
ENV_RUN_DEADLINE = "WATCHDOG_SYNC_RUN_DEADLINE"
STAGE = "watchdog-sync run"

_Hook = Callable[[Type[BaseException], BaseException, Optional[TracebackType]], object]


def start() -> None:
    """Instrument this process as ``run``'s options say; nothing outside ``run``."""
    if os.environ.get(ENV_RUN) != "1":
        return
    try:
        instrument()
        budget = _run_budget()
    except ValueError as exc:  # a malformed variable: ``run`` never sets one
        print(f"watchdog-sync run: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if budget is not None:
        set_current(budget)  # the main thread's context, for the whole program
        sys.excepthook = _reporting(sys.excepthook, budget)


def _run_budget() -> Optional[Budget]:
    raw = os.environ.get(ENV_RUN_DEADLINE, "").strip()
    if not raw:
        return None
    try:
        at = float(raw)
    except ValueError:
        raise ValueError(
            f"environment variable {ENV_RUN_DEADLINE}={raw!r} is not a time in seconds since "
            "the epoch"
        ) from None
    return Budget(max(0.0, at - time.time()), stage=STAGE)


def _reporting(previous: _Hook, budget: Budget) -> _Hook:
    """An excepthook that shows the run's end as DeadlineExceeded, not as a bare Cancelled."""

    def hook(
        kind: Type[BaseException], value: BaseException, tb: Optional[TracebackType]
    ) -> object:
        if isinstance(value, Cancelled) and owns(budget, value):
            error = error_for(value)
            return previous(type(error), error, tb)
        return previous(kind, value, tb)

    return hook
