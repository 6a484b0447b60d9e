"""run_sample: run one benchmark sample under a hard deadline, the replacement for signal.alarm.

``signal.alarm`` raised an ``Exception`` that the sample's own ``except
Exception`` blocks caught and retried, and it only works in the main thread.
``run_sample`` works from any thread, never uses signals in the caller, and
always returns a :class:`SampleResult` by ``timeout`` + 0.1 s (see its
docstring for the exact guarantee), telling a timeout from a wrong answer from
a transport failure in ``reason``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Generic, Literal, Optional, TypeVar

from .._core.clock import MONOTONIC
from .._core.durations import Duration, validate_duration
from .._core.events import Event, emit
from .._core.scope import current_child
from . import process
from .outcome import Outcome
from .process import pickle_call, run_in_process
from .server import get_context
from .thread import abandoned_workers, run_in_thread

__all__ = ["SampleResult", "abandoned_workers", "run_sample"]

T = TypeVar("T")

STAGE = "sample"
_ISOLATIONS = ("thread", "process")
# What the fork server imports before any sample: the process module, then the preload module,
# which is named here, not imported (importing it is what runs the preload, in the server).
_FORK_SERVER_PRELOAD = (process.__name__, f"{__package__}.preload")


@dataclasses.dataclass(frozen=True)
class SampleResult(Generic[T]):
    """What one :func:`run_sample` call produced.

    Attributes:
        ok: True when ``fn`` returned before the deadline.
        value: what ``fn`` returned (``None`` unless ``ok``).
        error: the exception, or ``None`` when ``ok``. A timeout is a
            :class:`DeadlineExceeded` (stage ``'sample'``).
        reason: ``None`` on success; otherwise the reason of the error's class,
            so that each reason means one thing: ``'deadline_exceeded'`` (a
            :class:`DeadlineExceeded`) when the sample ran out of time;
            ``'cancelled'`` (an :class:`OperationCancelled`) when the sample's
            budget was cancelled from inside it; ``'operation_timeout'`` (an
            :class:`OperationTimeout` whose ``__cause__`` is the inner
            ``DeadlineExceeded``) when a deadline of ``fn``'s own ran out while
            the sample still had time; ``'not_picklable'`` / ``'process_exited'``
            in process mode (see :func:`run_sample`); otherwise
            ``classify(error).reason`` (``'programming_error'`` for a
            ``ValueError``, ``'transport'`` for a refused connection, ...;
            ``'unknown'`` when reading the error raises).
        elapsed: seconds from the call to the result.
        abandoned: True when the worker did not stop and was left running
            (thread mode: counted by :func:`abandoned_workers`).
    """

    ok: bool
    value: Optional[T]
    error: Optional[BaseException]
    reason: Optional[str]
    elapsed: float
    abandoned: bool = False


def run_sample(
    fn: Callable[..., T],
    *args: Any,
    timeout: Duration,
    isolate: Literal["thread", "process"] = "thread",
    **kwargs: Any,
) -> SampleResult[T]:
    """Run ``fn(*args, **kwargs)`` with a hard deadline and report what happened.

    The replacement for ``signal.alarm`` in benchmark harnesses: works from any
    thread, uses no signals in the caller, and never raises for the sample's
    own failures: a timeout, a wrong answer (an exception) and a transport
    failure all come back as a :class:`SampleResult` whose ``reason`` tells
    them apart.

    ``isolate="thread"``: ``fn`` runs in a daemon worker thread inside a
    ``deadline(timeout)`` scope whose budget is a child of the caller's current
    scope. Every library wait in it (``current_budget().sleep()``, ``check()``,
    a ``Session`` request) ends at the deadline with ``Cancelled``, which
    ``except Exception`` in ``fn`` cannot swallow. Code the library cannot
    interrupt (pure CPU, a C call, ``time.sleep``) is not stopped: after the
    deadline plus 0.05 s the worker is *abandoned* (``abandoned=True``, counted
    by :func:`abandoned_workers`, one warning logged) and its late outcome is
    discarded.

    ``isolate="process"`` (POSIX): ``fn`` runs in a child process (start method
    ``forkserver``, or ``spawn`` where there is none), inside a scope with the
    same deadline. The child leads a process group of its own and, on Linux,
    is a child subreaper, so everything ``fn`` starts is found. At the deadline
    the whole tree gets SIGTERM, 0.05 s later SIGKILL, and the child is reaped;
    after a success the child ends whatever ``fn`` left running (logged as a
    warning with the count). The result is read from its pipe without ever
    blocking past the deadline, whatever holds the pipe: a result still
    arriving at the deadline is a timeout. ``fn`` and its arguments must be picklable (a module-level
    function): if not, ``TypeError`` is raised before anything runs. A return
    value that cannot be pickled back gives ``reason='not_picklable'`` (a
    ``pickle.PicklingError``); an exception that cannot be pickled back comes
    as a ``RuntimeError`` naming it, with the reason computed in the child; a
    child that dies without a result (``os._exit``, a crash, the OOM killer)
    gives ``reason='process_exited'`` (a ``ChildProcessError`` with the exit
    code). The child's traceback is the returned error's ``__cause__``.

    Timing guarantee: the result comes back no later than ``timeout`` + 0.1 s
    after the call in both modes (thread: the deadline + 0.05 s grace;
    process: the deadline + at most 0.05 s before SIGKILL + 0.02 s; the
    kernel's teardown of a killed child's memory finishes in the background), plus
    only scheduling delay on a loaded machine. The timeout counts from the
    call, so in process mode the child's start-up (a few ms) is part of it.
    One exception: the first process-mode call in a process first starts the
    fork server and waits for its preloading (a few tenths of a second, longer
    when the harness script's imports are slow) before the sample's clock starts.

    Args:
        fn: the sample: any callable (picklable in process mode).
        *args: positional arguments for ``fn``.
        timeout: seconds (``float`` or ``timedelta``), finite and ``> 0``:
            this limit cannot be off (``None``, ``inf``, ``0`` and negatives
            are errors naming it); more than 7 days is clamped to 7 days.
        isolate: ``"thread"`` (default) or ``"process"``.
        **kwargs: keyword arguments for ``fn``. ``timeout`` and ``isolate``
            are ``run_sample``'s own and never reach ``fn``: to give ``fn`` a
            ``timeout=`` of its own, pass ``functools.partial(fn, timeout=...)``.

    Returns:
        A :class:`SampleResult`. A value returned after the deadline is
        discarded (``reason='deadline_exceeded'``). A ``DeadlineExceeded`` that
        ``fn`` raises from a deadline of its own, while the sample still had
        time, comes back as an ``OperationTimeout``
        (``reason='operation_timeout'``), so ``'deadline_exceeded'`` always
        means run_sample's timeout.

    Raises:
        TypeError: ``fn`` is not callable, ``timeout`` is not a number, or (process
            mode) ``fn`` or its arguments cannot be pickled.
        ValueError: ``timeout`` is not finite and ``> 0``, or ``isolate`` is unknown.

    On timeout: the result has ``reason='deadline_exceeded'``. On cancel or end
    of an *enclosing* scope (``with deadline(...)`` around the call, or its
    ``budget.cancel()``): the sample is stopped as at a timeout and that
    scope's ``Cancelled`` propagates, so the scope raises ``DeadlineExceeded``
    / ``OperationCancelled`` as it would for any library call inside it.

    Events: ``sample_start`` and ``sample_end`` (stage ``'sample'``, with
    ``reason`` and ``elapsed_ms``) go to listeners and the logger.
    """
    if not callable(fn):
        raise TypeError(f"run_sample(fn, ...): fn must be callable, got {type(fn).__name__}")
    seconds = validate_duration(timeout, "timeout", allow_none=False, allow_zero=False)
    assert seconds is not None
    if isolate not in _ISOLATIONS:
        raise ValueError(f"isolate must be 'thread' or 'process', got {isolate!r}")
    payload, context = b"", None
    if isolate == "process":
        payload = pickle_call(fn, args, kwargs)
        context = get_context(  # the first call starts a server
            getattr(fn, "__module__", None), preload=_FORK_SERVER_PRELOAD
        )
    started = time.monotonic()
    budget = current_child(seconds, stage=STAGE)
    budget.check()  # an enclosing scope that has already ended: its scope decides
    if budget.clock is MONOTONIC and budget.deadline is not None:
        real_deadline = budget.deadline  # exactly the budget's, so both ends agree
    else:  # a test clock: real time still bounds the wait
        real_deadline = started + min(seconds, budget.remaining())
    emit(Event("sample_start", stage=STAGE, remaining_ms=(real_deadline - started) * 1000.0))
    outcome: Optional[Outcome] = None
    try:
        if isolate == "thread":
            outcome = run_in_thread(budget, real_deadline, fn, args, kwargs)
        else:
            outcome = run_in_process(context, budget, real_deadline, payload)
    finally:
        elapsed = time.monotonic() - started
        if outcome is None:  # an enclosing scope ended (or an interrupt): say so, then go on
            cause = budget.end_cause()
            timed_out = cause is not None and cause[1] == "deadline_exceeded"
            ended_as = "deadline_exceeded" if timed_out else "cancelled"
            emit(Event("sample_end", stage=STAGE, reason=ended_as, elapsed_ms=elapsed * 1000.0))
    emit(Event("sample_end", stage=STAGE, reason=outcome.reason, elapsed_ms=elapsed * 1000.0))
    return SampleResult(
        ok=outcome.reason is None,
        value=outcome.value,
        error=outcome.error,
        reason=outcome.reason,
        elapsed=elapsed,
        abandoned=outcome.abandoned,
    )
