"""``get``: ``ray.get`` bounded by the current scope, cancelling what nobody waits for any more.

The wait is ``ray.wait`` in slices of at most :data:`WAIT_SLICE` seconds, so a
``cancel()`` of the scope's budget from another thread is seen within one
slice, and the deadline itself is never overslept (each slice is clipped to it).
At the scope's end the unfinished tasks are cancelled: ``ray.cancel(ref)``
(Ray raises ``KeyboardInterrupt`` in a running task, or drops a queued one),
then, after :data:`CANCEL_GRACE` seconds, ``ray.cancel(ref, force=True)`` for
those still running (Ray kills their worker process and starts a new one;
actor tasks cannot be forced, Ray refuses it, so they get the cooperative
cancel only). Then the scope's :class:`~watchdog_sync.Cancelled` is raised,
which the scope turns into ``DeadlineExceeded`` or ``OperationCancelled``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, List

from .._core.errors import WatchdogError
from .._core.phase import in_phase
from .._core.scope import scoped_budget
from .lazy import import_ray

__all__ = ["CANCEL_GRACE", "WAIT_SLICE", "cancel_unfinished", "get", "unwrapped"]

WAIT_SLICE = 0.1
"""Longest single ``ray.wait``: how late a ``cancel()`` from another thread may be seen."""

CANCEL_GRACE = 0.2
"""Seconds a cooperatively cancelled task gets to end before it is force-cancelled."""

_log = logging.getLogger("watchdog_sync")


def get(refs: Any, *, cancel: bool = True) -> Any:
    """See ``watchdog_sync.ray.get``."""
    ray = import_ray()
    budget = scoped_budget()
    single = not isinstance(refs, (list, tuple))
    wanted: List[Any] = [refs] if single else list(refs)
    if budget is not None:
        pending = list(dict.fromkeys(wanted))  # ray.wait takes each ref once
        while pending:
            remaining = budget.remaining()
            if remaining <= 0:
                break
            _, pending = ray.wait(
                pending, num_returns=len(pending), timeout=min(remaining, WAIT_SLICE)
            )
        if pending:
            if cancel:
                cancel_unfinished(pending)
            with in_phase("wait"):
                budget.check()
    try:
        values = ray.get(wanted)
    except ray.exceptions.RayTaskError as exc:
        raise unwrapped(exc) from exc
    if budget is not None:
        with in_phase("wait"):  # fetching the values cannot be cut: ended late is no success
            budget.check()
    return values[0] if single else values


def unwrapped(exc: BaseException) -> BaseException:
    """The task's own error when it is a ``WatchdogError``: same class, reason and fields.

    Ray raises a task's exception as a ``RayTaskError`` (a class made on the fly
    from both ``RayTaskError`` and the error's class); its ``cause`` is the
    error the task raised, unpickled with its fields. Any other error is left
    as Ray raised it.
    """
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, WatchdogError) else exc


def cancel_unfinished(refs: List[Any], grace: float = CANCEL_GRACE) -> None:
    """Cancel the tasks behind ``refs`` that have not finished: cooperatively, then by force."""
    ray = import_ray()
    _, running = ray.wait(refs, num_returns=len(refs), timeout=0)
    if not running:
        return
    for ref in running:
        _cancel(ray, ref, force=False)
    give_up = time.monotonic() + grace
    while running:
        left = give_up - time.monotonic()
        if left <= 0:
            break
        _, running = ray.wait(running, num_returns=len(running), timeout=left)
    forced = sum(_cancel(ray, ref, force=True) for ref in running)
    if running:
        _log.debug(
            "watchdog_sync.ray: %d task(s) ignored the cooperative cancel; %d force-cancelled",
            len(running),
            forced,
        )


def _cancel(ray: Any, ref: Any, *, force: bool) -> bool:
    try:
        ray.cancel(ref, force=force)
    except (ValueError, TypeError) as exc:  # an actor task (force refused), a ray.put object
        _log.debug("watchdog_sync.ray: ray.cancel(force=%s) refused: %s", force, exc)
        return False
    return True
