"""Process isolation: ``fn`` runs in a child process that is killed at the deadline.

Start method: ``forkserver`` where the platform has it (Linux, macOS), else
``spawn`` (see ``_sample_server``). Not ``fork``: the parent always has
threads (the shared watchdog thread, the caller's own), and a forked child can
deadlock on a lock another thread held at fork time (Python 3.12+ warns about
exactly this), which here would turn into a false timeout. The fork server is
single-threaded and preloads what samples need, so a child starts in a few
milliseconds. The price: ``fn`` and its arguments must be picklable.

At the deadline the child gets SIGTERM, :data:`TERM_GRACE` seconds later
SIGKILL, and is then reaped (joined and closed): no zombie, no orphan. Results
and exceptions come back pickled; an exception that cannot be pickled comes
back as a ``RuntimeError`` naming it, with the reason the child computed.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
import time
import traceback
from typing import Any, Callable, Dict, Optional, Tuple

from .._core.budget import Budget
from .._core.scope import boundary
from .outcome import Outcome, ended, settle, stop_if_outer

__all__ = ["EXIT_WAIT", "TERM_GRACE", "pickle_call", "run_in_process"]

TERM_GRACE = 0.05
"""Seconds between SIGTERM and SIGKILL (Python's default SIGTERM action kills at once)."""

EXIT_WAIT = 0.05
"""Seconds a child that sent its result gets to exit by itself before it is terminated."""

_POLL = 0.05  # the longest wait before looking at the caller's budget again (cancel)
_REAP_LIMIT = 2.0  # after SIGKILL, only a process stuck in the kernel takes this long
_ORPHANED = 70  # exit code of a child whose parent went away

_log = logging.getLogger("watchdog_sync")
# multiprocessing's bookkeeping (start, poll, join, close) reads other threads' processes
# (Process.start() polls every child), so our threads do it one at a time.
_lock = threading.Lock()

_Message = Tuple[bool, Optional[bytes], Optional[str], str, str]
# (returned, pickled value or exception, reason, description, child traceback)


def pickle_call(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bytes:
    """``fn`` and its arguments pickled for the child, or a ``TypeError`` saying why not."""
    try:
        return pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TypeError(
            "run_sample(..., isolate='process') sends fn and its arguments to a child process, "
            f"so they must be picklable, and this failed: {type(exc).__name__}: {exc}. Define fn "
            "at module level (not a lambda or nested function), pass picklable arguments, or "
            "use isolate='thread'"
        ) from exc


def run_in_process(context: Any, budget: Budget, real_deadline: float, payload: bytes) -> Outcome:
    """Run the pickled call in a child process started by ``context`` (see ``get_context``).

    Returns by ``real_deadline`` plus the kill time; raises the outer scope's
    ``Cancelled`` when an enclosing budget ended first.
    """
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(
        target=_child_main, args=(writer, payload, real_deadline), name="watchdog_sync-sample"
    )
    started = False
    try:
        try:
            with _lock:
                process.start()
            started = True
        finally:
            writer.close()
        kind, data = _await(reader, process, budget, real_deadline)
        exitcode = _stop(process, 0.0 if kind == "ended" else EXIT_WAIT)
        started = False
    finally:
        if started:  # we are leaving early (an interrupt): still kill and reap the child
            _stop(process, 0.0)
        reader.close()
    if kind == "message":
        assert data is not None
        outcome = _decode(data)
        if outcome.reason is not None:  # a failure as an outer scope ended: that scope decides
            stop_if_outer(budget, budget.end_cause())
        return outcome
    if kind == "exited":
        return Outcome(error=ChildProcessError(_exit_text(exitcode)), reason="process_exited")
    cause = budget.end_cause() or (budget, "deadline_exceeded")
    stop_if_outer(budget, cause)
    return ended(cause, note="the child process was killed", abandoned=exitcode is None)


def _await(
    reader: multiprocessing.connection.Connection,
    process: Any,
    budget: Budget,
    real_deadline: float,
) -> Tuple[str, Optional[bytes]]:
    """``("message", data)``, ``("exited", None)`` or ``("ended", None)`` (deadline or cancel)."""
    while True:
        left = real_deadline - time.monotonic()
        if left <= 0 or budget.ended:
            return "ended", None
        ready = multiprocessing.connection.wait([reader, process.sentinel], min(left, _POLL))
        if reader in ready or (ready and reader.poll(0)):
            try:
                return "message", reader.recv_bytes()
            except (EOFError, OSError):
                return "exited", None  # died before (or while) sending
        if ready:
            return "exited", None


def _stop(process: Any, wait_first: float) -> Optional[int]:
    """Let ``process`` exit, else SIGTERM, then SIGKILL; reap it. Its exit code, once gone."""
    if not _exited(process, wait_first):
        _signal(process, "terminate")
        if not _exited(process, TERM_GRACE):
            _signal(process, "kill")
            _exited(process, _REAP_LIMIT)
    with _lock:
        process.join(0)
        if process.exitcode is None:
            _log.error(
                "watchdog_sync: sample process %s survived SIGKILL for %.0fs (stuck in the "
                "kernel); it was abandoned",
                process.pid,
                _REAP_LIMIT,
            )
            return None
        exitcode: int = process.exitcode
        process.close()
    return exitcode


def _exited(process: Any, timeout: float) -> bool:
    return bool(multiprocessing.connection.wait([process.sentinel], timeout))


def _signal(process: Any, how: str) -> None:
    with _lock:
        if process.exitcode is None:  # never signal a pid that may have been reused
            getattr(process, how)()


def _exit_text(code: Optional[int]) -> str:
    if code is None:
        how = "could not be reaped"
    elif code < 0:
        how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"the sample's child process {how} before sending a result"


def _decode(data: bytes) -> Outcome:
    returned, blob, reason, description, child_tb = pickle.loads(data)
    if returned:
        try:
            return Outcome(value=pickle.loads(blob))
        except Exception as exc:
            error: BaseException = pickle.PicklingError(
                f"the sample returned {description}, which could not be unpickled in the "
                f"caller: {type(exc).__name__}: {exc}"
            )
            return Outcome(error=error, reason="not_picklable")
    rebuilt: Optional[BaseException] = None
    try:
        rebuilt = pickle.loads(blob) if blob is not None else None
    except Exception:
        rebuilt = None  # the child checked it, but the caller may lack a module the child had
    error = (
        rebuilt
        if rebuilt is not None
        else RuntimeError(
            f"the sample raised {description}; the exception could not be pickled back "
            "from the child process (its traceback is attached as __cause__)"
        )
    )
    error.__cause__ = _ChildTraceback(child_tb)
    return Outcome(error=error, reason=reason)


class _ChildTraceback(Exception):
    """The traceback of an exception raised in the sample's child process."""

    def __str__(self) -> str:
        return f'\n"""\n{self.args[0]}"""'


# -- in the child ---------------------------------------------------------------


def _child_main(
    writer: multiprocessing.connection.Connection, payload: bytes, real_deadline: float
) -> None:
    _exit_with_parent()
    budget = Budget(deadline=real_deadline, stage="sample")
    try:
        fn, args, kwargs = pickle.loads(payload)
    except Exception as exc:
        error = pickle.UnpicklingError(
            "fn or its arguments could not be unpickled in the child process: "
            f"{type(exc).__name__}: {exc}; define fn in a module the child can import"
        )
        writer.send_bytes(_error_message(error, "not_picklable"))
        return
    returned, value, raised = False, None, None
    try:
        with boundary(budget):
            value = fn(*args, **kwargs)
        returned = True
    except BaseException as exc:
        # The process boundary: every outcome of fn goes back to the parent.
        raised = exc
    outcome = settle(budget.end_cause(), returned=returned, value=value, error=raised)
    if outcome.reason is None:
        writer.send_bytes(_value_message(outcome.value))
    else:
        assert outcome.error is not None
        writer.send_bytes(_error_message(outcome.error, outcome.reason))


def _exit_with_parent() -> None:
    """Exit at once if the parent process goes away (no orphan keeps running ``fn``)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(_ORPHANED)

    threading.Thread(target=watch, name="watchdog_sync-sample-parent-watch", daemon=True).start()


def _describe(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _value_message(value: Any) -> bytes:
    try:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        error = pickle.PicklingError(
            f"the sample returned a {_describe(value)}, which cannot be pickled back to the "
            f"caller: {type(exc).__name__}: {exc}; return plain data from process samples"
        )
        return _error_message(error, "not_picklable")
    message: _Message = (True, blob, None, f"a {_describe(value)}", "")
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def _error_message(error: BaseException, reason: str) -> bytes:
    description = f"{_describe(error)}: {error}"
    child_tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    blob: Optional[bytes] = None
    try:
        pickled = pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(pickled)  # some exceptions pickle but cannot be rebuilt (required args)
        blob = pickled
    except Exception:
        pass  # sent as a description and traceback instead
    message: _Message = (False, blob, reason, description, child_tb)
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
