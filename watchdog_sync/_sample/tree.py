"""The sample's process tree: one process group under a subreaper, ended as a whole.

The sample's child process leads a new process group that everything ``fn``
starts inherits, and, on Linux, marks itself a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``): a descendant whose parent dies is
re-parented to the child instead of init, so even one that left the group
(``start_new_session=True``, a daemon's ``setsid()``) is still found under it
(``/proc/<pid>/task/<tid>/children``).

Two ways the tree ends:

- :func:`end_own_tree`, in the child once ``fn`` is done (or its caller went
  away): leave the group, SIGTERM the group and every child, ``grace``
  seconds, then SIGKILL until the group is empty and no child is left,
  reaping as it goes.
- :func:`stop_tree`, in the caller at the deadline: stop (SIGSTOP) the group
  and every descendant found under the child, so none can fork or reap while
  they are counted, then SIGTERM and SIGCONT them all, ``grace`` seconds, and
  SIGKILL what is left.

Only pids that cannot have been reused are signalled: a group's id is its
leader's pid, and a child's pid stays reserved until its (stopped) parent
reaps it.

What can escape: without a subreaper (off Linux, or a kernel without
``/proc/<pid>/task/<tid>/children``), a descendant that starts a new session
*and* whose parent has died (the classic double-forking daemon) is re-parented
to init and cannot be found. A child killed by SIGKILL from elsewhere (the OOM
killer) ends nothing; its group is still ended by the caller.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from typing import Callable, Optional, Set, Tuple

__all__ = ["end_group", "end_own_tree", "lead_group", "stop_tree"]

_PR_SET_CHILD_SUBREAPER = 36
_PAUSE = 0.005  # between two rounds of signals while a tree ends


def _load_prctl() -> Optional[Callable[..., int]]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_prctl = _load_prctl()  # resolved once, in the fork server (this module is preloaded there)


def lead_group() -> Tuple[int, bool]:
    """Lead a new process group, and be a subreaper where the platform allows.

    Returns ``(old_group, subreaper)``.
    """
    old = os.getpgid(0)
    os.setpgid(0, 0)
    subreaper = _prctl is not None and _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return old, subreaper


def _reap() -> None:
    """Reap every child that has ended."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _children(pid: int) -> Set[int]:
    """The children of every thread of ``pid``, from ``/proc`` (empty where there is none)."""
    found: Set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as listing:
                found.update(int(word) for word in listing.read().split())
        except OSError:
            continue
    return found


def _signal_group(group: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when the group is empty (or gone)."""
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def end_own_tree(home: int, grace: float, limit: float) -> int:
    """End this process's group and every child of ours; return how many children we had.

    ``home`` is the group to go back to first, so that SIGKILL to our group
    spares us. Waits at most ``limit`` seconds.
    """
    me = os.getpid()
    if os.getpgid(0) == me:
        os.setpgid(0, home)
    started = time.monotonic()
    seen: Set[int] = set()
    termed: Set[int] = set()
    group_termed = False
    while True:
        _reap()
        kids = _children(me)
        seen |= kids
        group_alive = _signal_group(me, 0)
        elapsed = time.monotonic() - started
        if (not kids and not group_alive) or elapsed >= limit:
            return len(seen)
        sig = signal.SIGKILL if elapsed >= grace else signal.SIGTERM
        if group_alive and (sig == signal.SIGKILL or not group_termed):
            group_termed = _signal_group(me, sig)
        for pid in kids - termed if sig == signal.SIGTERM else kids:
            _signal(pid, sig)
        termed |= kids
        time.sleep(_PAUSE)


def stop_tree(leader: int, grace: float, ended: Callable[[float], bool]) -> Tuple[int, int]:
    """End the tree of the child ``leader`` from outside (it leads its group).

    ``ended(timeout)`` waits for the leader to exit. Returns ``(found, outside)``:
    how many running descendants (not zombies) were found under the leader, and
    how many of them had left its process group (a new session or group: they escaped the group and
    were caught only through the subreaper).
    """
    _signal_group(leader, signal.SIGSTOP)
    _signal(leader, signal.SIGSTOP)
    found = _frozen_descendants(leader)
    running = [pid for pid in found if not _zombie(pid)]
    outside = sum(1 for pid in running if _group_of(pid) not in (leader, None))
    for sig in (signal.SIGTERM, signal.SIGCONT):
        _signal_group(leader, sig)
        for pid in (leader, *found):
            _signal(pid, sig)
    give_up = time.monotonic() + grace
    while time.monotonic() < give_up:
        if ended(_PAUSE) and not any(_alive(pid) for pid in found):
            return len(running), outside
    if not ended(0):
        found |= _frozen_descendants(leader)
    if not ended(0) or any(_alive(pid) for pid in found):
        _signal_group(leader, signal.SIGKILL)
        for pid in found:
            _signal(pid, signal.SIGKILL)
        if not ended(0):
            _signal(leader, signal.SIGKILL)
    return len(running), outside


def _frozen_descendants(leader: int) -> Set[int]:
    """Every descendant of ``leader``, each stopped (SIGSTOP) as it is found."""
    found: Set[int] = set()
    frontier = [leader]
    while frontier:
        for pid in _children(frontier.pop()):
            if pid not in found:
                _signal(pid, signal.SIGSTOP)
                found.add(pid)
                frontier.append(pid)
    return found


def _zombie(pid: int) -> bool:
    """True for a process that has exited and waits to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _group_of(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def end_group(group: int, grace: float) -> bool:
    """SIGTERM, then SIGKILL after ``grace``, what is left of the group of a child that died.

    For a child that could not end its own tree (killed by SIGKILL, or died
    mid-send): its group outlives it while a member lives, so its id cannot
    name another group then. Returns True if the group still had members.
    """
    if not _signal_group(group, signal.SIGTERM):
        return False
    give_up = time.monotonic() + grace
    while time.monotonic() < give_up and _signal_group(group, 0):
        time.sleep(_PAUSE)
    _signal_group(group, signal.SIGKILL)
    return True
