"""The deadline a Ray task carries: taken from the caller's scope, turned into a scope on the worker.

A task's arguments carry ``(at, left)``: the caller's deadline on the wall clock
and the seconds it had left when it sent the task (``_propagate/wallclock.py``,
the same rule as the Celery integration's message headers). The worker runs the
task inside a budget of ``min(at - now, left)`` seconds, so time spent queued
counts against the caller's budget, a worker whose clock runs behind never gets
more than the caller had, and no two machines' monotonic clocks are compared.
Plain functions, with no Ray in them: the wrappers in ``remote.py`` and the
sample runner in ``samples.py`` call them.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

from .._core.errors import DeadlineExceeded
from .._core.scope import boundary, current_child, scoped_budget
from .._propagate.wallclock import SentDeadline, parse_seconds, time_left

__all__ = ["Carried", "carried_now", "not_started", "run_carried", "seconds_left"]

T = TypeVar("T")

Carried = Optional[Tuple[float, float]]
"""What a task carries: ``(wall-clock deadline, seconds left at sending)``, or ``None``."""


def carried_now(wall_now: Optional[float] = None) -> Carried:
    """The current scope's deadline as a task sent now carries it; ``None`` outside a bounded scope.

    Raises :class:`~watchdog_sync.Cancelled` when the scope has already ended
    (a task sent then would only be refused by its worker), so its scope converts it.
    """
    budget = scoped_budget()
    if budget is None:
        return None
    budget.check()
    remaining = budget.remaining()
    if math.isinf(remaining):
        return None
    sent = SentDeadline.from_remaining(remaining, time.time() if wall_now is None else wall_now)
    return (sent.at, sent.left)


def seconds_left(carried: Any, wall_now: Optional[float] = None) -> Optional[float]:
    """Seconds the worker may spend on a task that carries ``carried``; ``None`` when unbounded.

    Negative once the caller's wall-clock deadline has passed. A malformed value
    (not a pair of finite numbers) is logged and read as no deadline, as a
    malformed Celery header is.
    """
    if carried is None:
        return None
    if not isinstance(carried, (tuple, list)) or len(carried) != 2:
        parse_seconds(repr(carried), "watchdog_sync ray deadline")  # logs it as malformed
        return None
    at = parse_seconds(carried[0], "watchdog_sync ray deadline")
    left = parse_seconds(carried[1], "watchdog_sync ray time left")
    return time_left(at, left, time.time() if wall_now is None else wall_now)


def not_started(stage: str, late: float) -> DeadlineExceeded:
    """The error of a task whose caller's deadline passed ``late`` seconds before it started."""
    return DeadlineExceeded(
        f"{stage} not started: its caller's deadline passed {late:.2f}s before a worker took "
        "it; time in the queue counts against the caller's budget",
        stage=stage,
        elapsed=0.0,
        remaining=0.0,
    )


def run_carried(
    carried: Any,
    stage: str,
    fn: Callable[..., T],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
) -> T:
    """Run ``fn(*args, **kwargs)`` on the worker inside the caller's carried deadline.

    Without a carried deadline ``fn`` runs as under plain Ray. Otherwise it runs
    inside a scope of the time left (stage ``stage``), whose end raises
    :class:`~watchdog_sync.DeadlineExceeded` out of the task; a task whose
    deadline passed while it was queued raises it without running ``fn``.
    """
    left = seconds_left(carried)
    if left is None:
        return fn(*args, **kwargs)
    if left <= 0:
        raise not_started(stage, -left)
    with boundary(current_child(left, stage=stage)):
        return fn(*args, **kwargs)
