"""Process isolation: ``fn`` runs in a child process tree that is ended at the deadline.

Start method: ``forkserver`` where the platform has it (Linux, macOS), else
``spawn`` (see ``server``). Not ``fork``: the parent always has threads (the
shared watchdog thread, the caller's own), and a forked child can deadlock on
a lock another thread held at fork time (Python 3.12+ warns about exactly
this), which here would turn into a false timeout. The fork server is
single-threaded and preloads what samples need, so a child starts in a few
milliseconds. The price: ``fn`` and its arguments must be picklable.

The child leads the sample's process group (a subreaper on Linux; see
``child`` and ``tree``). The result comes back in frames over a pipe that is
read without blocking (``frames``), so the wait is bounded by the deadline
whoever holds the pipe; a result still arriving at the deadline is a timeout.
At the deadline the whole tree is stopped, sent SIGTERM, given
:data:`TERM_GRACE` seconds, then SIGKILL; the child is reaped. After a
success the child ends what ``fn`` left running itself. Results and exceptions
come back pickled; an exception that cannot be pickled comes back as a
``RuntimeError`` naming it, with the reason the child computed.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from .._core.budget import Budget
from .child import META, TERM_GRACE, sample_main
from .frames import REPORT, RESULT, FrameReader, Payload, unpack_report
from .outcome import Outcome, ended, stop_if_outer
from .tree import end_group, stop_tree

__all__ = ["EXIT_WAIT", "TERM_GRACE", "pickle_call", "run_in_process"]

EXIT_WAIT = 0.05
"""Seconds a child that sent its result gets to exit by itself before it is terminated."""

_POLL = 0.05  # the longest wait before looking at the caller's budget again (cancel)
_REAP_LIMIT = 2.0  # after SIGKILL, only a process stuck in the kernel takes this long
_DYING_WAIT = 0.02  # after SIGKILL, the wait before the rest of the teardown is left to a thread
_DRAIN_LIMIT = 0.05  # reading what an exited child left in the pipe
_PIPE_SIZE = 1 << 20  # Linux: a larger pipe moves large results in fewer reads
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

_log = logging.getLogger("watchdog_sync")
# multiprocessing's bookkeeping (start, poll, join, close) reads other threads' processes
# (Process.start() polls every child), so our threads do it one at a time.
_lock = threading.Lock()


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
    """Run the pickled call in a child process tree started by ``context`` (see ``get_context``).

    Returns by ``real_deadline`` plus the time to end the tree; raises the
    outer scope's ``Cancelled`` when an enclosing budget ended first.
    """
    reader, writer = context.Pipe(duplex=False)
    _enlarge(reader.fileno())
    process = context.Process(
        target=sample_main, args=(writer, payload, real_deadline), name="watchdog_sync-sample"
    )
    frames = FrameReader(reader.fileno())
    started = False
    pid: Optional[int] = None
    try:
        try:
            with _lock:
                process.start()
            started = True
            pid = process.pid
        finally:
            writer.close()
        kind = _await(frames, process, budget, real_deadline)
        exitcode = _stop(process, 0.0 if kind == "ended" else EXIT_WAIT)
        started = False
        frames.pump(time.monotonic() + _DRAIN_LIMIT)  # the child's report, if any
    finally:
        if started:  # we are leaving early (an interrupt): still end and reap the tree
            _stop(process, 0.0)
        reader.close()
    _end_leftovers(pid, kind, frames.first(REPORT))
    if kind == "message":
        result = frames.first(RESULT)
        assert result is not None
        outcome = _decode(result)
        if outcome.reason is not None:  # a failure as an outer scope ended: that scope decides
            stop_if_outer(budget, budget.end_cause())
        return outcome
    if kind == "exited":
        return Outcome(error=ChildProcessError(_exit_text(exitcode)), reason="process_exited")
    cause = budget.end_cause() or (budget, "deadline_exceeded")
    stop_if_outer(budget, cause)
    return ended(
        cause, note="the child process was killed", abandoned=exitcode is None, phase="wait"
    )


def _end_leftovers(pid: Optional[int], kind: str, report: Optional[Payload]) -> None:
    """Log what the sample left running; end the group of a child that could not end it."""
    if report is not None:
        left = unpack_report(bytes(report))
        if left:
            _log.warning(
                "watchdog_sync: the sample in process %s returned but left %d process(es) "
                "running; they were ended (SIGTERM, then SIGKILL)",
                pid,
                left,
            )
    elif kind != "ended" and pid is not None and end_group(pid, TERM_GRACE):
        _log.warning(
            "watchdog_sync: the sample in process %s died without ending the processes it "
            "started; what was left of its process group was ended",
            pid,
        )


def _enlarge(fd: int) -> None:
    # Not Linux, or over the system's limit: the default size works, with more reads.
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)


def _await(frames: FrameReader, process: Any, budget: Budget, real_deadline: float) -> str:
    """``"message"``, ``"exited"`` or ``"ended"`` (deadline or cancel; a result still
    arriving then is a timeout). Never blocks past ``real_deadline``."""
    sentinel = process.sentinel
    while True:
        left = real_deadline - time.monotonic()
        if left <= 0 or budget.ended:
            return "ended"
        ready = multiprocessing.connection.wait([frames.fileno(), sentinel], min(left, _POLL))
        if ready:
            frames.pump(real_deadline)
        if frames.first(RESULT) is not None:
            return "message"
        if frames.closed or frames.broken or frames.first(REPORT) is not None:
            return "exited"  # ended before (or while) sending
        if sentinel in ready:
            frames.pump(min(real_deadline, time.monotonic() + _DRAIN_LIMIT))
            return "message" if frames.first(RESULT) is not None else "exited"


def _stop(process: Any, wait_first: float) -> Optional[int]:
    """Let the child exit by itself, else end its whole tree (see ``stop_tree``); reap it.

    Returns the child's exit code once it is gone; ``-SIGKILL`` for a child
    that was killed and is still being torn down by the kernel (a large memory
    footprint takes tenths of a second to free): it can run no more code, and
    a reaper thread closes it once it is gone.
    """
    if not _exited(process, wait_first):
        with _lock:
            alive = process.exitcode is None  # never signal a pid that may have been reused
        if alive:
            found, outside = stop_tree(process.pid, TERM_GRACE, lambda t: _exited(process, t))
            if outside:
                _log.warning(
                    "watchdog_sync: %d of the %d process(es) the sample in process %s started "
                    "had left its process group (a new session); they were found through the "
                    "subreaper and ended",
                    outside,
                    found,
                    process.pid,
                )
        if not _exited(process, _DYING_WAIT):
            threading.Thread(
                target=_reap, args=(process,), name="watchdog_sync-sample-reaper", daemon=True
            ).start()
            return -int(signal.SIGKILL)
    return _reap(process)


def _reap(process: Any) -> Optional[int]:
    """Wait (bounded) for ``process`` to be gone, then close it; its exit code."""
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


def _exit_text(code: Optional[int]) -> str:
    if code is None:
        how = "could not be reaped"
    elif code < 0:
        how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"the sample's child process {how} before sending a result"


def _decode(data: Payload) -> Outcome:
    view = memoryview(data)
    try:
        (size,) = META.unpack_from(view)
        returned, reason, description, child_tb, has_blob = pickle.loads(view[META.size :][:size])
    except Exception as exc:  # not what the worker writes: something else wrote to the pipe
        unreadable = ChildProcessError(
            f"the sample's result could not be read ({type(exc).__name__}); something in the "
            "sample wrote to the result pipe"
        )
        return Outcome(error=unreadable, reason="process_exited")
    blob = view[META.size + size :]
    if returned:
        try:
            return Outcome(value=pickle.loads(blob))
        except Exception as exc:
            failed: BaseException = pickle.PicklingError(
                f"the sample returned {description}, which could not be unpickled in the "
                f"caller: {type(exc).__name__}: {exc}"
            )
            return Outcome(error=failed, reason="not_picklable")
    rebuilt: Optional[BaseException] = None
    try:
        rebuilt = pickle.loads(blob) if has_blob else None
    except Exception:
        rebuilt = None  # the child checked it, but the caller may lack a module the child had
    error = (
        rebuilt
        if isinstance(rebuilt, BaseException)
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
