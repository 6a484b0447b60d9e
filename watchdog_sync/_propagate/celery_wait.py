"""Celery: waiting for a result inside a deadline scope waits at most the time left.

Once :func:`~watchdog_sync.celery.install` ran for an app, ``AsyncResult.get()`` (and its
deprecated alias ``wait()``), ``ResultSet.join()`` / ``join_native()`` (so
``ResultSet.get()`` and ``GroupResult``'s too) of that app's results, called inside a
:func:`~watchdog_sync.deadline` scope, wait at most what is left of the scope's budget
(a result of a task with ``ignore_result`` is ``None`` at once, as in Celery); at its end
they raise
:class:`~watchdog_sync.Cancelled`, which the scope turns into
:class:`~watchdog_sync.DeadlineExceeded` (``cancel()``: ``OperationCancelled``). An
explicit ``timeout=`` smaller than the time left still wins, with Celery's own
``celery.exceptions.TimeoutError``. Outside a scope, or for another app's results, the
call is Celery's own, unchanged.

How the wait is bounded, with Celery's public API only: Celery's result wait (the
Redis pub/sub drainer, or a polling backend) looks at its ``timeout`` only about once a
second, so it runs in rounds of at most one second until one second is left, the budget
checked between rounds (a ``cancel()`` is seen within about a second there); the last
second is spent polling ``ready()`` (one backend read) every 50 ms with
:meth:`Budget.sleep`, which ends at the deadline, or at once on ``cancel()``.

Revoking: when the wait ends because the budget ran out, the results whose task was
sent carrying a deadline that has passed by then (sent inside this scope or one ending
no later, :func:`record_sent`) are revoked (``app.control.revoke``, without
``terminate``): no worker starts work nobody waits for. A task already running is not
killed; its body runs inside a scope with the same deadline, so its library I/O stops
then. A task sent outside any scope, or with a later deadline (an outer scope may wait
for it again), is left alone, and so is every task after a ``cancel()`` (the caller may
still want it).

The classes are patched once for the process while at least one app is installed (the
undo of the last one restores them); the patch does nothing for an app not installed.
Celery is imported here only when an app is installed.
"""

from __future__ import annotations

import collections
import functools
import inspect
import logging
import math
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Type

from .._core.budget import Budget
from .._core.errors import Cancelled
from .._core.phase import mark
from .._core.scope import scoped_budget

__all__ = ["enable", "record_sent"]

_log = logging.getLogger("watchdog_sync")

# Celery's result wait looks at its timeout once per second (the drainer's interval, the
# Redis pub/sub wait's cap): it gets the time left less this, the rest is polled.
_SLACK = 1.0
_POLL = 0.05  # seconds between two ready() reads in the last second
_ROUND = 1.0  # Celery waits at most this long per call, so that a cancel() is seen in time
_SENT_CAP = 10_000  # task ids remembered with their deadline, the oldest forgotten first
_PASSED_WITHIN = 0.25  # a task deadline within this of the wait's end counts as passed

_LOCK = threading.Lock()
_APPS: Dict[int, int] = {}  # id(app) -> how many installations are active for it
_SENT: collections.OrderedDict[str, float] = collections.OrderedDict()
_PATCHED: List[Tuple[type, str, Any, Any]] = []  # (class, name, original, wrapper)


def record_sent(task_id: str, at: float) -> None:
    """Remember that task ``task_id`` was sent carrying the wall-clock deadline ``at``."""
    with _LOCK:
        _SENT[task_id] = at
        _SENT.move_to_end(task_id)
        while len(_SENT) > _SENT_CAP:
            _SENT.popitem(last=False)


def enable(app: Any) -> Callable[[], None]:
    """Bound the result waits of ``app``'s results; returns the undo (idempotent)."""
    from celery import result as celery_result

    with _LOCK:
        _APPS[id(app)] = _APPS.get(id(app), 0) + 1
        if not _PATCHED:
            _patch(celery_result)
    done = threading.Event()

    def undo() -> None:
        with _LOCK:
            if done.is_set():
                return
            done.set()
            left = _APPS.get(id(app), 0) - 1
            if left > 0:
                _APPS[id(app)] = left
            else:
                _APPS.pop(id(app), None)
            if not _APPS:
                _unpatch()

    return undo


def _patch(celery_result: Any) -> None:
    from celery.exceptions import TimeoutError as CeleryTimeout

    async_result, result_set = celery_result.AsyncResult, celery_result.ResultSet
    wrappers = (
        (async_result, "get", _wrap_get),
        (async_result, "wait", _wrap_get),  # Celery's deprecated alias of get
        (result_set, "join", _wrap_join),
        (result_set, "join_native", _wrap_join_native),
    )
    for cls, name, wrap in wrappers:
        original = cls.__dict__[name]
        wrapper = wrap(original, celery_result.assert_will_not_block, CeleryTimeout)
        setattr(cls, name, wrapper)
        _PATCHED.append((cls, name, original, wrapper))


def _unpatch() -> None:
    for cls, name, original, wrapper in reversed(_PATCHED):
        if cls.__dict__.get(name) is wrapper:  # someone patched over us: leave theirs
            setattr(cls, name, original)
    _PATCHED.clear()


def _bounding(app: Any) -> Optional[Budget]:
    """The scope's budget when a wait for ``app``'s result must be bounded, else ``None``."""
    budget = scoped_budget()
    if budget is None or math.isinf(budget.remaining()):
        return None
    with _LOCK:
        installed = id(app) in _APPS
    return budget if installed else None


def _set_app(result_set: Any) -> Any:
    """A ResultSet's app without making Celery's default one (an empty set has none)."""
    return result_set.app if result_set.results else None


def _wrap_get(
    original: Any, no_block: Callable[[], None], timeout_error: Type[BaseException]
) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def get(self: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _bounding(self.app)
        if budget is None or getattr(self, "ignored", False):  # ignore_result: None at once
            return original(self, *args, **kwargs)
        call = signature.bind(self, *args, **kwargs).arguments
        if call.get("disable_sync_subtasks", True):
            no_block()  # Celery's own refusal inside a task, before any wait
        return _wait(
            budget,
            call,
            original,
            ready=self.ready,
            app=self.app,
            ids=lambda: [self.id],
            timeout_error=timeout_error,
        )

    return get


def _wrap_join(
    original: Any, no_block: Callable[[], None], timeout_error: Type[BaseException]
) -> Any:
    @functools.wraps(original)
    def join(self: Any, *args: Any, **kwargs: Any) -> Any:
        app = _set_app(self)
        budget = None if app is None else _bounding(app)
        if budget is None:
            return original(self, *args, **kwargs)
        # join() waits for each member with its get(), which is bounded: only the revoke of
        # every member at the end is added here.
        try:
            return original(self, *args, **kwargs)
        except Cancelled as exc:
            mark(exc, "wait")
            if exc.reason == "deadline_exceeded":
                _revoke(app, [member.id for member in self.results])
            raise

    return join


def _wrap_join_native(
    original: Any, no_block: Callable[[], None], timeout_error: Type[BaseException]
) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def join_native(self: Any, *args: Any, **kwargs: Any) -> Any:
        app = _set_app(self)
        budget = None if app is None else _bounding(app)
        if budget is None:
            return original(self, *args, **kwargs)
        call = signature.bind(self, *args, **kwargs).arguments
        if call.get("disable_sync_subtasks", True):
            no_block()
        callback = call.get("callback")
        if callback is not None:
            call["callback"] = _Once(callback)  # a second call must not repeat the delivered
        return _wait(
            budget,
            call,
            original,
            ready=self.ready,
            app=app,
            ids=lambda: [member.id for member in self.results],
            timeout_error=timeout_error,
        )

    return join_native


class _Once:
    """A join callback that forwards each (task id, value) once over repeated joins."""

    def __init__(self, callback: Callable[[str, Any], Any]) -> None:
        self._callback = callback
        self._delivered: Dict[str, int] = {}
        self._this_call: Dict[str, int] = {}

    def next_call(self) -> None:
        self._this_call = {}

    def __call__(self, task_id: str, value: Any) -> Any:
        seen = self._this_call[task_id] = self._this_call.get(task_id, 0) + 1
        if seen <= self._delivered.get(task_id, 0):
            return None  # delivered by an earlier call that then timed out
        self._delivered[task_id] = seen
        return self._callback(task_id, value)


def _wait(
    budget: Budget,
    call: Dict[str, Any],
    original: Callable[..., Any],
    *,
    ready: Callable[[], bool],
    app: Any,
    ids: Callable[[], Iterable[str]],
    timeout_error: Type[BaseException],
) -> Any:
    """Run Celery's wait ``original(**call)`` so that it ends by the budget's end."""
    own = call.get("timeout")
    if isinstance(own, bool) or not isinstance(own, (int, float, type(None))):
        return original(**call)  # a timeout Celery itself must judge
    started = time.monotonic()
    own_end = math.inf if own is None else started + float(own)
    theirs = call.get("on_interval")

    def on_interval() -> None:
        budget.check()  # Cancelled through Celery's loop: a cancel() is seen within a second
        if theirs is not None:
            theirs()

    call["on_interval"] = on_interval
    callback = call.get("callback")

    def run(timeout: float) -> Any:
        if isinstance(callback, _Once):
            callback.next_call()
        return original(**{**call, "timeout": timeout})

    try:
        while True:
            budget.check()
            limit = min(budget.remaining(), own_end - time.monotonic())
            if limit > _SLACK + _POLL:
                try:
                    return run(min(limit - _SLACK, _ROUND))
                except timeout_error:
                    continue  # the budget is checked between rounds; the last second is polled
            if ready():
                return run(max(limit, _POLL))  # ready: Celery returns from its cache
            if limit <= 0:
                break  # the caller's own timeout, before the budget's end
            budget.sleep(min(_POLL, limit))  # Cancelled at the budget's end
    except Cancelled as exc:
        mark(exc, "wait")
        if exc.reason == "deadline_exceeded":
            _revoke(app, ids())
        raise
    raise timeout_error("The operation timed out.")


def _revoke(app: Any, ids: Iterable[str]) -> None:
    """Revoke the tasks among ``ids`` sent with a deadline that has passed (never raises)."""
    passed = time.time() + _PASSED_WITHIN
    with _LOCK:
        chosen = [task_id for task_id in ids if _SENT.get(task_id, math.inf) <= passed]
        for task_id in chosen:
            _SENT.pop(task_id, None)
    if not chosen:
        return
    try:
        app.control.revoke(chosen)
    except Exception as exc:  # the caller's DeadlineExceeded matters more than this
        _log.warning(
            "could not revoke %d Celery task(s) whose caller's deadline passed: %s: %s",
            len(chosen),
            type(exc).__name__,
            exc,
        )
