"""instrument(threads=True): work handed to threads inside a scope runs inside the scope's budget.

The scope is carried as OpenTelemetry's threading instrumentation carries its
context, by patching where work crosses into a thread:

* ``threading.Thread.start``: a thread started inside a scope runs its
  ``run()`` (its own or a subclass's) with the scope's budget current. When
  that budget ends, library waits in the thread raise ``Cancelled`` as in the
  scope itself; one that leaves ``run()`` ends the thread quietly (logged at
  debug level, never through ``threading.excepthook``): the scope, in the
  thread that opened it, raises :class:`DeadlineExceeded` at its exit;
* ``concurrent.futures.ThreadPoolExecutor.submit`` (so ``map``): the task runs
  with the submitter's budget current, and its ``Cancelled`` reaches the
  submitter through ``future.result()``, where the scope converts it; a task
  still queued when the budget ends does not start (its future holds the
  ``Cancelled``), so a pool that a harness shuts down without waiting drains at
  once. The pool's worker threads, which outlive the scope, carry nothing of
  their own.

Only the budget is carried, not the rest of the caller's ``contextvars``
context. The package's own threads (named ``watchdog_sync-...``) carry nothing.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from .._core.budget import Budget
from .._core.errors import Cancelled
from .._core.scope import scoped_budget, using_budget
from .patches import PatchSet

__all__ = ["threads_patches"]

_log = logging.getLogger("watchdog_sync")
_OWN_PREFIXES = ("watchdog_sync-", "watchdog-sync-")
_Fn = Callable[..., Any]
T = TypeVar("T")

# True while ThreadPoolExecutor.submit runs: a worker thread it starts carries no scope.
_SUBMITTING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "watchdog_sync_submitting", default=False
)


def threads_patches() -> PatchSet:
    """The patches of ``threading`` and ``concurrent.futures``, planned (not yet installed)."""
    patches = PatchSet("threads")
    patches.wrap(threading.Thread, "start", functools.partial(_start, patches))
    patches.wrap(ThreadPoolExecutor, "submit", functools.partial(_submit, patches))
    return patches


def _start(patches: PatchSet, original: _Fn) -> _Fn:
    def start(self: threading.Thread) -> None:
        budget = scoped_budget() if patches.active and not _SUBMITTING.get() else None
        if budget is not None and not self.name.startswith(_OWN_PREFIXES):
            # On the instance: a subclass's own run() is carried too.
            self.run = functools.partial(_run_in, self, self.run, budget)  # type: ignore[method-assign]
        original(self)

    return start


def _run_in(thread: threading.Thread, run: Callable[[], None], budget: Budget) -> None:
    try:
        with using_budget(budget):
            run()
    except Cancelled as exc:
        _log.debug("watchdog_sync: thread %r stopped: %s", thread.name, exc)
    finally:
        thread.__dict__.pop("run", None)


def _submit(patches: PatchSet, original: _Fn) -> _Fn:
    def submit(self: Any, fn: _Fn, /, *args: Any, **kwargs: Any) -> Any:
        budget = scoped_budget() if patches.active else None
        if budget is None:
            return original(self, fn, *args, **kwargs)
        token = _SUBMITTING.set(True)
        try:
            return original(self, functools.partial(_call_in, budget, fn), *args, **kwargs)
        finally:
            _SUBMITTING.reset(token)

    return submit


def _call_in(budget: Budget, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    budget.check()  # queued past the budget's end: it does not start (the pool can drain)
    with using_budget(budget):
        return fn(*args, **kwargs)
