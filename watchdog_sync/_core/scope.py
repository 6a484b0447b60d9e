"""Scopes: the current budget in a ContextVar, and the boundary that turns Cancelled into errors.

Inside a scope, library waits raise :class:`Cancelled` (a BaseException) when
the budget ends. The scope that owns the ended budget converts it on exit into
:class:`DeadlineExceeded` or :class:`OperationCancelled`; a ``Cancelled`` that
belongs to an outer budget passes through inner scopes untouched.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Callable, Iterator, Optional, Tuple, TypeVar

from .budget import Budget, _noop
from .durations import Duration
from .errors import Cancelled, DeadlineExceeded, OperationCancelled, WatchdogError
from .forks import process_local
from .redact import describe

__all__ = [
    "boundary",
    "carry_budget",
    "current_budget",
    "current_child",
    "deadline",
    "entry_scope",
    "error_for",
    "joined_budget",
    "owns",
    "set_current",
    "using_budget",
]

# A forked child starts outside every scope of its parent's (:mod:`.forks`).
_CURRENT: contextvars.ContextVar[Optional[Budget]] = process_local(
    contextvars.ContextVar("watchdog_sync_budget", default=None)
)

T = TypeVar("T")


def current_budget() -> Budget:
    """The innermost scope's budget, or a fresh unbounded one outside any scope."""
    budget = _CURRENT.get()
    return budget if budget is not None else Budget()


def current_child(timeout: Optional[Duration] = None, *, stage: Optional[str] = None) -> Budget:
    """A child of the innermost scope's budget, capped at ``timeout``; outside any scope a
    budget of its own (as a child of a fresh unbounded one would be, without making one)."""
    budget = _CURRENT.get()
    if budget is None:
        return Budget(timeout, stage=stage)
    return budget.child(timeout, stage=stage)


def scoped_budget() -> Optional[Budget]:
    """The innermost scope's budget, or ``None`` outside any scope."""
    return _CURRENT.get()


def owns(budget: Budget, exc: Cancelled) -> bool:
    """True when ``exc`` is about ``budget`` or one of its descendants."""
    node: Optional[Budget] = exc.budget
    while node is not None:
        if node is budget:
            return True
        node = node.parent
    return False


def error_for(
    exc: Cancelled,
    *,
    stage: Optional[str] = None,
    attempts: int = 0,
    last_error: Optional[BaseException] = None,
    request_id: Optional[str] = None,
) -> WatchdogError:
    """The public error for a ``Cancelled`` leaving the scope that owns its budget.

    The ``Cancelled``'s ``phase`` becomes the error's, and its ``progress`` (how far
    the interrupted work got) goes into the message.
    """
    ended = exc.budget
    stage = stage or ended.stage
    elapsed = ended.elapsed()
    where = f" in stage {stage!r}" if stage else ""
    tried = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
    last = f"; last error: {describe(last_error)}" if last_error else ""
    progress = f" ({exc.progress})" if exc.progress else ""
    if exc.reason == "deadline_exceeded":
        total = "" if ended.deadline is None else f" of {ended.deadline - ended.started:.2f}s"
        return DeadlineExceeded(
            f"deadline{total} exceeded{where} after {elapsed:.2f}s{progress}{tried}{last}; "
            "give the call a larger timeout (timeout=..., deadline(...)) if the work needs it",
            attempts=attempts,
            last_error=last_error,
            phase=exc.phase,
            stage=stage,
            elapsed=elapsed,
            remaining=0.0,
            request_id=request_id,
        )
    return OperationCancelled(
        f"operation cancelled{where} after {elapsed:.2f}s{tried}: {exc.reason}",
        stage=stage,
        elapsed=elapsed,
        remaining=0.0,
        request_id=request_id,
    )


def set_current(budget: Budget) -> None:
    """Make ``budget`` current in the running context for good.

    Only for a private ``contextvars.Context`` that is dropped with the work it
    runs (a WSGI request's: its app and every ``next()`` of its body run in it),
    so a scope the work opens stays open across ``Context.run`` calls.
    """
    _CURRENT.set(budget)


@contextlib.contextmanager
def using_budget(budget: Budget) -> Iterator[Budget]:
    """Make ``budget`` current for the block, without converting anything at its exit."""
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def boundary(budget: Budget, owner: Optional[Budget] = None) -> Iterator[Budget]:
    """Run the block with ``budget`` current; convert a ``Cancelled`` that ``owner`` owns.

    ``owner`` (default: ``budget``) is the budget this boundary answers for; an
    end of any budget above it passes through untouched.
    """
    token = _CURRENT.set(budget)
    try:
        yield budget
    except Cancelled as exc:
        if not owns(owner or budget, exc):
            raise
        raise error_for(exc) from None
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def deadline(
    timeout: Optional[Duration] = None, *, stage: Optional[str] = None
) -> Iterator[Budget]:
    """A scope whose budget is a child of the current one, capped at ``timeout`` seconds.

    Nested scopes only shrink the time. Inside, every library wait is bounded
    by the budget and raises :class:`Cancelled` when it ends, which legacy
    ``except Exception`` blocks cannot swallow. On exit, an end of this
    scope's budget becomes :class:`DeadlineExceeded` (timeout) or
    :class:`OperationCancelled` (``budget.cancel()``); an end of an outer
    scope's budget passes through to that scope.

    ``timeout``: seconds; ``None`` or ``inf`` adds no limit of its own (the
    outer scopes still apply); ``0`` is a scope whose budget has already
    ended; a negative value is a ``ValueError`` (a budget's limit is never
    "off" by being <= 0, unlike an idle limit); more than 7 days is clamped.

    Late work is never a success: a block that ends normally after this
    scope's deadline (nothing inside was interrupted: a ``time.sleep``, pure
    CPU, a client the library does not bound) raises
    :class:`DeadlineExceeded` on exit all the same. A block that raises keeps
    its own exception; when an outer scope's deadline passed first, leaving
    this one is that scope's business, and it raises on its own exit.

    Example::

        with deadline(10, stage="sample") as budget:
            answer = client.complete(messages)   # shares the 10 s
    """
    budget = current_child(timeout, stage=stage)
    with boundary(budget):
        yield budget
    late = _late_error(budget)
    if late is not None:
        raise late


def _late_error(budget: Budget) -> Optional[DeadlineExceeded]:
    """The error for leaving ``budget``'s scope normally after its own deadline, or None.

    None when the budget is live, was cancelled, or ended because an ancestor
    ended first (that ancestor's scope answers for it).
    """
    cause = budget.end_cause()
    if cause is None or cause[0] is not budget or cause[1] != "deadline_exceeded":
        return None
    elapsed = budget.elapsed()
    where = f" in stage {budget.stage!r}" if budget.stage else ""
    total = "" if budget.deadline is None else f" of {budget.deadline - budget.started:.2f}s"
    return DeadlineExceeded(
        f"deadline{total} exceeded{where}: the block ended after {elapsed:.2f}s and nothing "
        "inside was interrupted (nothing inside could be: a time.sleep, pure CPU, or a client "
        "the library does not bound; or an interruption was caught and swallowed inside), so "
        "its late result is not a success. To bound such "
        "code: instrument(sockets=True) for sockets the library does not own, "
        "run_sample(..., isolate='process') for code that cannot be interrupted",
        stage=budget.stage,
        elapsed=elapsed,
        remaining=0.0,
    )


def joined_budget(
    explicit: Optional[Budget], timeout: Optional[Duration] = None, *, stage: Optional[str] = None
) -> Tuple[Budget, Budget, Callable[[], None]]:
    """The budget an entry point runs under, the budget it answers for, and a release function.

    The budget never outlives the current scope's budget, the explicit
    budget, or ``timeout``; cancelling the explicit budget ends it too. The
    entry point converts the end of the second budget (the explicit one, or
    its own) into an error; ends of outer scopes pass through to them.
    """
    if explicit is None:
        own = current_child(timeout, stage=stage)
        return own, own, _noop
    current = _CURRENT.get()
    if current is None or _descends(explicit, current):
        return explicit.child(timeout, stage=stage), explicit, _noop
    own = current.child(timeout, stage=stage or explicit.stage)
    joined = own.child(explicit.remaining()) if explicit.deadline is not None else own
    cause = explicit.end_cause()
    if cause is not None and cause[1] != "deadline_exceeded":
        own.cancel(cause[1])
        return joined, own, _noop
    return joined, own, explicit.on_done(lambda ended: _follow(own, ended))


@contextlib.contextmanager
def entry_scope(
    explicit: Optional[Budget] = None,
    timeout: Optional[Duration] = None,
    *,
    stage: Optional[str] = None,
) -> Iterator[Budget]:
    """The scope of a public entry point: its own (joined) budget, and the boundary for it."""
    budget, owner, release = joined_budget(explicit, timeout, stage=stage)
    try:
        with boundary(budget, owner):
            yield budget
    finally:
        release()


def _follow(target: Budget, ended: Budget) -> None:
    cause = ended.end_cause()
    if cause is not None and cause[1] != "deadline_exceeded":
        target.cancel(cause[1])


def _descends(node: Optional[Budget], ancestor: Budget) -> bool:
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent
    return False


def carry_budget(fn: Callable[..., T]) -> Callable[..., T]:
    """Wrap ``fn`` so that it runs, in any thread, under the caller's current scope.

    Use it for work you hand to threads::

        with deadline(5):
            future = pool.submit(carry_budget(fetch), url)

    Inside the worker, library waits end with the scope's budget; a
    ``Cancelled`` raised there propagates through ``future.result()`` to the
    scope, which converts it as usual.
    """
    context = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        return context.copy().run(fn, *args, **kwargs)

    return run
