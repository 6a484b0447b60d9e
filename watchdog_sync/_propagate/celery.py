"""Celery: a task sent inside a deadline scope carries the deadline; the worker runs it inside one.

Sending side: a ``before_task_publish`` receiver writes the current scope's
deadline into the message headers as wall-clock epoch seconds
(``watchdog_sync_deadline``), with the seconds the caller had left
(``watchdog_sync_timeout``), and sets the message's ``expires`` to that
deadline (an earlier ``expires`` of the caller's wins), so no worker starts a
task whose caller already gave up. Outside any scope nothing is added.

Worker side: every task of the app (Celery's own ``celery.*`` tasks aside)
runs its body inside a budget ending at the earliest of the caller's deadline
and the task's ``soft_time_limit`` (or ``time_limit``) less ``margin``. Library
I/O inside it raises :class:`~watchdog_sync.Cancelled` (``except Exception``
cannot swallow it) before Celery's own limit fires, and the task fails with
:class:`~watchdog_sync.DeadlineExceeded`, which the result backend carries back
to the caller. A task whose caller's deadline passed before a worker took it
fails at once, without running its body. The body is reached through the
task's ``run`` (Celery's tracer calls ``task.run``, or ``__call__`` which calls
it), wrapped on each task when the app is finalized.

Celery is imported inside the functions here, never when ``watchdog_sync`` is.
"""

from __future__ import annotations

import contextvars
import datetime
import functools
import math
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._core.budget import Budget
from .._core.durations import validate_duration
from .._core.errors import Cancelled, DeadlineExceeded, WatchdogError
from .._core.scope import current_child, error_for, owns, scoped_budget, using_budget
from .celery_wait import enable as bound_waits
from .celery_wait import record_sent
from .wallclock import SentDeadline, parse_seconds, time_left

__all__ = ["HEADER_DEADLINE", "HEADER_TIMEOUT", "install", "task_window"]

HEADER_DEADLINE = "watchdog_sync_deadline"
HEADER_TIMEOUT = "watchdog_sync_timeout"

_MISSING = object()
_LOCK = threading.Lock()
_INSTALLED: Dict[int, _Installation] = {}

# The id of the task whose body runs in this context, so that a retry it publishes keeps its
# caller's deadline (carried in its headers) instead of this run's soft-limit window.
_RUNNING: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "watchdog_sync_celery_task", default=None
)


def install(app: Any, *, margin: float = 0.5) -> Callable[[], None]:
    """Propagate deadlines through ``app``'s tasks; returns a function that undoes it.

    Call it where both the senders and the workers import the app (the module
    that creates it). A task sent inside a :func:`~watchdog_sync.deadline`
    scope carries the scope's deadline; the worker runs the task's body inside
    a scope ending at ``min(that deadline, soft_time_limit - margin)``. The
    caller's deadline counts from sending, so time in the queue is spent from
    it; a task whose caller's deadline passed before a worker took it is not
    started (Celery's ``expires`` revokes it, or the body is skipped).

    On timeout, library I/O in the task raises
    :class:`~watchdog_sync.Cancelled`, which ``except Exception`` cannot
    swallow, and the task fails with :class:`~watchdog_sync.DeadlineExceeded`
    (reason ``'deadline_exceeded'``), stored by the result backend, so the
    caller's ``AsyncResult.get()`` raises it. Celery's own time limits still
    apply after the scope.

    Waiting for a result: inside a scope, ``AsyncResult.get()``,
    ``ResultSet.get()`` / ``join()`` / ``join_native()`` and
    ``GroupResult.get()`` of this app's results wait at most the time left
    (an explicit smaller ``timeout=`` still wins, with Celery's own
    ``TimeoutError``). At the scope's deadline they raise
    :class:`~watchdog_sync.Cancelled`, so the scope raises
    :class:`~watchdog_sync.DeadlineExceeded`; a ``cancel()`` of the budget is
    seen within about a second (``OperationCancelled``). The tasks waited for
    that were sent carrying a deadline that has passed (sent inside that scope)
    are revoked without ``terminate``, so no worker starts them; a running one
    is not killed (its own scope ends at the same deadline), and tasks sent
    outside a scope or with a later deadline are left alone, as is every task
    after a ``cancel()``. Outside a scope the waits are Celery's own.

    The deadline crosses machines as wall-clock time: sender and worker
    clocks are assumed to agree (NTP) to well within ``margin``. A worker
    whose clock runs behind never gets more time than the caller had left
    when it sent the task; one that runs ahead ends tasks early by the skew.

    Args:
        app: the ``celery.Celery`` application.
        margin: seconds the scope ends before the task's soft (or hard) time
            limit, so the library stops the I/O before Celery's signal fires;
            at most half the limit is taken.

    Returns:
        A function that disconnects the signals, unwraps the tasks and ends the
        bounded result waits for this app; idempotent. Installing on the same app again returns the same function
        (a different ``margin`` is a ``ValueError``: undo first).
    """
    seconds = validate_duration(margin, "margin", allow_none=False)
    assert seconds is not None
    try:
        from celery import signals
    except ImportError:
        raise ImportError(
            "watchdog_sync.celery needs Celery: pip install 'watchdog-sync[celery]'"
        ) from None
    with _LOCK:
        existing = _INSTALLED.get(id(app))
        if existing is not None:
            if existing.margin != seconds:
                raise ValueError(
                    f"watchdog_sync.celery is already installed on this app with "
                    f"margin={existing.margin!r}; call the function install() returned to undo "
                    f"it before installing with margin={seconds!r}"
                )
            return existing.undo
        installation = _Installation(app, seconds)
        _INSTALLED[id(app)] = installation
    installation.connect(signals)
    return installation.undo


class _Installation:
    """The signals and wrapped tasks of one ``install(app)``."""

    def __init__(self, app: Any, margin: float) -> None:
        self.app = app
        self.margin = margin
        self._lock = threading.Lock()
        # task name -> (the task, its own ``run`` attribute before wrapping, or _MISSING)
        self._wrapped: Dict[str, Tuple[Any, Any]] = {}
        self._disconnect: List[Callable[[], None]] = []
        self._done = False
        self.undo: Callable[[], None] = self._undo  # one object: install() returns it each time

    def _uid(self, what: str) -> str:
        return f"watchdog_sync.celery.{what}.{id(self.app)}"

    def connect(self, signals: Any) -> None:
        hooks = [
            (signals.before_task_publish, self._on_publish, "publish"),
            (signals.worker_init, self._on_worker_init, "worker_init"),
            (self.app.on_after_finalize, self._on_finalize, "finalize"),
        ]
        for signal, receiver, what in hooks:
            uid = self._uid(what)
            signal.connect(receiver, weak=False, dispatch_uid=uid)
            self._disconnect.append(functools.partial(signal.disconnect, dispatch_uid=uid))
        self._disconnect.append(bound_waits(self.app))
        if self.app.finalized:
            self.wrap_tasks()

    def _undo(self) -> None:
        with _LOCK:
            if _INSTALLED.get(id(self.app)) is self:
                del _INSTALLED[id(self.app)]
        with self._lock:
            if self._done:
                return
            self._done = True
            disconnect, self._disconnect = self._disconnect, []
            wrapped, self._wrapped = self._wrapped, {}
        for step in disconnect:
            step()
        for task, own in wrapped.values():
            if own is _MISSING:
                task.__dict__.pop("run", None)
            else:
                task.run = own

    # -- sending --------------------------------------------------------------

    def _on_publish(self, sender: Any = None, headers: Any = None, **_: Any) -> None:
        """Write the current scope's deadline into a protocol-2 message's headers."""
        if not isinstance(headers, dict) or "id" not in headers:
            return  # task protocol 1 (Celery 3's) carries no headers of ours
        running = _RUNNING.get()
        if running is not None and headers.get("id") == running:
            return  # a retry of the running task: its headers still carry its caller's deadline
        budget = scoped_budget()
        if budget is None:
            return
        remaining = budget.remaining()
        if math.isinf(remaining):
            return
        sent = SentDeadline.from_remaining(remaining, time.time())
        at = parse_seconds(headers.get(HEADER_DEADLINE), HEADER_DEADLINE)
        left = parse_seconds(headers.get(HEADER_TIMEOUT), HEADER_TIMEOUT)
        headers[HEADER_DEADLINE] = sent.at if at is None else min(at, sent.at)
        headers[HEADER_TIMEOUT] = sent.left if left is None else min(left, sent.left)
        headers["expires"] = _earlier_expires(headers.get("expires"), headers[HEADER_DEADLINE])
        record_sent(str(headers["id"]), headers[HEADER_DEADLINE])  # revoked if its caller gives up

    # -- the worker -----------------------------------------------------------

    def _on_worker_init(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is self.app:
            self.wrap_tasks()

    def _on_finalize(self, sender: Any = None, **_: Any) -> None:
        self.wrap_tasks()

    def wrap_tasks(self) -> None:
        """Wrap ``run`` of each task registered so far (idempotent; never finalizes the app)."""
        for name, task in list(self.app._tasks.items()):
            if name.startswith("celery."):
                continue  # Celery's own tasks (chord_unlock, backend_cleanup, ...)
            with self._lock:
                if self._done or name in self._wrapped:
                    continue
                self._wrapped[name] = (task, task.__dict__.get("run", _MISSING))
                task.run = self._guard(task, task.run)

    def _guard(self, task: Any, run: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(run)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            request = task.request
            if request.called_directly:
                return run(*args, **kwargs)  # a plain call in the caller's own scope
            return self._run(task, request, run, args, kwargs)

        return guarded

    def _run(
        self,
        task: Any,
        request: Any,
        run: Callable[..., Any],
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
    ) -> Any:
        hard, soft = _request_limits(request)
        conf = self.app.conf
        soft = soft or _positive(task.soft_time_limit) or _positive(conf.task_soft_time_limit)
        hard = hard or _positive(task.time_limit) or _positive(conf.task_time_limit)
        caller = _caller_left(request)
        window = task_window(caller, soft=soft, hard=hard, margin=self.margin)
        if window is None:
            return run(*args, **kwargs)
        seconds, why = window
        stage = f"celery:{task.name}"
        if seconds <= 0:
            raise DeadlineExceeded(
                f"task {task.name!r} not started: {why}; time in the queue counts against "
                "the caller's budget",
                stage=stage,
                elapsed=0.0,
                remaining=0.0,
            )
        budget = current_child(seconds, stage=stage)
        token = _RUNNING.set(request.id)
        try:
            with using_budget(budget):
                return run(*args, **kwargs)
        except Cancelled as exc:
            if not owns(budget, exc):
                raise
            raise _task_error(exc, task.name, why) from None
        finally:
            _RUNNING.reset(token)


def task_window(
    caller_left: Optional[float],
    *,
    soft: Optional[float],
    hard: Optional[float],
    margin: float,
) -> Optional[Tuple[float, str]]:
    """Seconds a task's body may run, and why that much; ``None`` when nothing limits it.

    ``caller_left``: what is left of the caller's deadline (negative once it
    passed); ``soft``/``hard``: the task's time limits. A limit's window is
    ``limit - margin``, but never less than half the limit.
    """
    choices: List[Tuple[float, str]] = []
    if caller_left is not None:
        if caller_left <= 0:
            return (caller_left, f"its caller's deadline passed {-caller_left:.2f}s ago")
        choices.append((caller_left, f"its caller's deadline ({caller_left:.2f}s left at start)"))
    for limit, name in ((soft, "soft_time_limit"), (hard, "time_limit")):
        if limit is not None:
            inside = max(limit - margin, limit / 2)
            choices.append((inside, f"its {name} of {limit:g}s less the margin ({inside:.2f}s)"))
    return min(choices, key=lambda choice: choice[0]) if choices else None


def _caller_left(request: Any) -> Optional[float]:
    headers = getattr(request, "headers", None)
    headers = headers if isinstance(headers, dict) else {}

    def header(key: str) -> Any:
        return headers.get(key, getattr(request, key, None))

    at = parse_seconds(header(HEADER_DEADLINE), HEADER_DEADLINE)
    left = parse_seconds(header(HEADER_TIMEOUT), HEADER_TIMEOUT)
    return time_left(at, left, time.time())


def _request_limits(request: Any) -> Tuple[Optional[float], Optional[float]]:
    limits = getattr(request, "timelimit", None)
    if not isinstance(limits, (list, tuple)) or len(limits) < 2:
        return None, None
    return _positive(limits[0]), _positive(limits[1])


def _positive(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _earlier_expires(existing: Any, at: float) -> str:
    """The message's ``expires``: ours, unless the caller's own is earlier (ISO 8601, UTC)."""
    ours = datetime.datetime.fromtimestamp(at, tz=datetime.timezone.utc)
    if isinstance(existing, str):
        try:
            theirs = datetime.datetime.fromisoformat(existing)
        except ValueError:
            return existing  # Celery rejects it at the worker, as it would have anyway
        if theirs.tzinfo is None:
            theirs = theirs.replace(tzinfo=datetime.timezone.utc)
        if theirs <= ours:
            return existing
    return ours.isoformat()


def _task_error(exc: Cancelled, name: str, why: str) -> WatchdogError:
    if exc.reason != "deadline_exceeded":
        return error_for(exc)
    ended: Budget = exc.budget
    elapsed = ended.elapsed()
    return DeadlineExceeded(
        f"deadline exceeded in task {name!r} after {elapsed:.2f}s: {why}",
        stage=ended.stage,
        elapsed=elapsed,
        remaining=0.0,
    )
