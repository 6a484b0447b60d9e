"""In the sample's child process: run ``fn``, send its outcome, end what it started.

The child leads a process group of its own (a subreaper on Linux, see
``tree``), so everything ``fn`` starts is in that group or, if it left the
group, still found under the child. ``fn`` runs under the sample's budget; its
outcome goes back as one :data:`~.frames.RESULT` frame (a small pickled header:
returned, reason, description, child traceback; then the pickled value or
exception). Then the child ends every process ``fn`` left running and writes a
:data:`~.frames.REPORT` frame saying how many there were. If the caller goes
away, the child ends its tree and exits at once.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import struct
import threading
import traceback
from typing import Any, Optional, Tuple

from .._core.budget import Budget
from .._core.scope import boundary
from .frames import REPORT, RESULT, pack_report, write_frame
from .outcome import safe_text, settle
from .tree import end_own_tree, lead_group

__all__ = ["META", "ORPHANED", "TERM_GRACE", "sample_main"]

TERM_GRACE = 0.05
"""Seconds between SIGTERM and SIGKILL (Python's default SIGTERM action kills at once)."""

META = struct.Struct("!Q")  # the length of a RESULT frame's pickled header
ORPHANED = 70  # exit code of a child whose caller went away
_TREE_LIMIT = 1.0  # after SIGKILL, only a process stuck in the kernel takes this long

Header = Tuple[bool, Optional[str], str, str, bool]
# (returned, reason, description, child traceback, whether a pickled object follows)


def sample_main(
    writer: multiprocessing.connection.Connection, payload: bytes, real_deadline: float
) -> None:
    """The child's target: lead the group, run and report ``fn``, end what it left running."""
    fd = writer.fileno()
    home, _subreaper = lead_group()
    _exit_with_parent(home)
    _run(fd, payload, real_deadline)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # fn is done: let the clean-up finish
    left = end_own_tree(home, TERM_GRACE, _TREE_LIMIT)
    write_frame(fd, REPORT, pack_report(left))


def _exit_with_parent(home: int) -> None:
    """If the caller goes away, end the tree and exit at once (no orphan keeps running)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        try:
            end_own_tree(home, 0.0, _TREE_LIMIT)
        finally:
            os._exit(ORPHANED)

    threading.Thread(target=watch, name="watchdog_sync-sample-parent-watch", daemon=True).start()


def _run(fd: int, payload: bytes, real_deadline: float) -> None:
    budget = Budget(deadline=real_deadline, stage="sample")
    try:
        fn, args, kwargs = pickle.loads(payload)
    except Exception as exc:
        error = pickle.UnpicklingError(
            "fn or its arguments could not be unpickled in the child process: "
            f"{type(exc).__name__}: {exc}; define fn in a module the child can import"
        )
        _send(fd, *_error_message(error, "not_picklable"))
        return
    me = os.getpid()
    returned, value, raised = False, None, None
    try:
        with boundary(budget):
            value = fn(*args, **kwargs)
        returned = True
    except BaseException as exc:
        # The process boundary: every outcome of fn goes back to the parent.
        raised = exc
    if os.getpid() != me:
        os._exit(0)  # a copy that fn forked returned from fn: only the child itself reports
    outcome = settle(budget.end_cause(), returned=returned, value=value, error=raised)
    if outcome.reason is None:
        _send(fd, *_value_message(outcome.value))
    else:
        assert outcome.error is not None
        _send(fd, *_error_message(outcome.error, outcome.reason))


def _send(fd: int, header: Header, blob: bytes) -> None:
    meta = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
    write_frame(fd, RESULT, META.pack(len(meta)), meta, blob)


def _describe(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _value_message(value: Any) -> Tuple[Header, bytes]:
    try:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        error = pickle.PicklingError(
            f"the sample returned a {_describe(value)}, which cannot be pickled back to the "
            f"caller: {type(exc).__name__}: {safe_text(exc)}; return plain data from process "
            "samples"
        )
        return _error_message(error, "not_picklable")
    return (True, None, f"a {_describe(value)}", "", True), blob


def _error_message(error: BaseException, reason: str) -> Tuple[Header, bytes]:
    description = f"{_describe(error)}: {safe_text(error)}"
    child_tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        blob = pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt (required args)
    except Exception:
        return (False, reason, description, child_tb, False), b""  # described instead
    return (False, reason, description, child_tb, True), blob
