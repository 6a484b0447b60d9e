"""run_sample(isolate="process"): the result pipe is read within the deadline, and the
sample's whole process tree ends with it (real processes, bounded waits).

Sample functions live at module level so process mode can pickle them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List

import pytest

from watchdog_sync import run_sample

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)"),
]

SLEEPER = 8.0  # how long a left-behind process would live: a leak outlives every bound below
BIG = 32 * 1024 * 1024  # a multi-MB result: its send takes many reads of the pipe


# -- samples (module level: picklable) ------------------------------------------


def _sleep_then_exit() -> None:
    try:
        time.sleep(SLEEPER)
    finally:
        os._exit(0)


def _start_daemon(pid_file: Path) -> None:
    """The classic double fork: a new session, the middle process exits (and is reaped, so
    that it is never counted among what the sample left running), the daemon stays."""
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            pid_file.write_text(str(os.getpid()))
            _sleep_then_exit()
        os._exit(0)
    os.waitpid(middle, 0)


def start_children(directory: str, then: str) -> int:
    """Start a forked child, a subprocess, one in a new session and a daemon; then return or wait."""
    folder = Path(directory)
    pids: List[int] = []
    forked = os.fork()
    if forked == 0:
        _sleep_then_exit()
    pids.append(forked)
    pids.append(subprocess.Popen(["sleep", str(SLEEPER)]).pid)
    pids.append(subprocess.Popen(["sleep", str(SLEEPER)], start_new_session=True).pid)
    daemon_file = folder / "daemon"
    _start_daemon(daemon_file)
    give_up = time.monotonic() + 5
    while not (daemon_file.exists() and daemon_file.read_text()) and time.monotonic() < give_up:
        time.sleep(0.01)
    pids.append(int(daemon_file.read_text()))
    (folder / "pids").write_text(json.dumps(pids))
    if then == "wait":
        time.sleep(SLEEPER)  # uninterruptible: only the deadline's kill ends it
    return os.getpid()


def _rchar(pid: int) -> int:
    """Bytes process ``pid`` has read so far (all its threads)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/<pid>/io")


def big_value_interrupted_mid_send(caller: int, how: str, directory: str) -> bytes:
    """Return BIG bytes, but stop (or kill) itself once the caller has read a quarter of them.

    A forked grandchild inherits the result pipe and holds it open; it lives SLEEPER seconds
    (and, for ``how == "stop"``, kills the stopped sample then, so the old code ends too).
    """
    me = os.getpid()
    grandchild = os.fork()
    if grandchild == 0:
        try:
            time.sleep(SLEEPER)
            os.kill(me, signal.SIGKILL)
        finally:
            os._exit(0)
    Path(directory, "grandchild").write_text(str(grandchild))
    baseline = _rchar(caller)
    sig = signal.SIGSTOP if how == "stop" else signal.SIGKILL

    def interrupt_once_sending() -> None:
        give_up = time.monotonic() + SLEEPER
        while time.monotonic() < give_up:
            if _rchar(caller) - baseline > BIG // 4:
                os.kill(me, sig)
                return
            time.sleep(0.0002)

    threading.Thread(target=interrupt_once_sending, daemon=True).start()
    return b"x" * BIG


# -- helpers ---------------------------------------------------------------------


def _running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for init to reap it counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "\nState:\tZ" not in status


def _survivors(pids: List[int], within: float = 3.0) -> List[int]:
    """The pids still running after at most ``within`` seconds."""
    give_up = time.monotonic() + within
    while any(_running(pid) for pid in pids) and time.monotonic() < give_up:
        time.sleep(0.02)
    return [pid for pid in pids if _running(pid)]


@pytest.fixture(scope="module", autouse=True)
def _fork_server() -> None:
    """Start multiprocessing's fork server up front (process-wide, like the watchdog thread)."""
    assert run_sample(os.getpid, timeout=30, isolate="process").ok


# -- the whole tree ends -----------------------------------------------------------


def test_a_timed_out_sample_leaves_no_descendant_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Forked, subprocess, new-session and double-forked daemon children all end at the timeout."""
    caplog.set_level(logging.WARNING, logger="watchdog_sync")
    result = run_sample(start_children, str(tmp_path), "wait", timeout=2, isolate="process")
    assert result.reason == "deadline_exceeded"
    assert result.elapsed <= 2 + 0.3
    pids = json.loads((tmp_path / "pids").read_text())
    assert len(pids) == 4
    assert _survivors(pids) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("2 of the 4 process(es)" in message for message in warnings), warnings


def test_a_successful_sample_leaves_no_descendant_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What fn left running is ended after it returned, and the warning counts it."""
    caplog.set_level(logging.WARNING, logger="watchdog_sync")
    result = run_sample(start_children, str(tmp_path), "return", timeout=10, isolate="process")
    assert result.ok, result.error
    assert result.elapsed < 5
    pids = json.loads((tmp_path / "pids").read_text())
    assert _survivors([*pids, result.value]) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("left 4 process(es) running" in message for message in warnings), warnings


# -- the result pipe is read within the deadline ------------------------------------


def test_a_sample_that_dies_mid_send_while_a_grandchild_holds_the_pipe(tmp_path: Path) -> None:
    """No blocking read: the death is seen at once, and the grandchild is ended too."""
    result = run_sample(
        big_value_interrupted_mid_send, os.getpid(), "kill", str(tmp_path), timeout=20,
        isolate="process",
    )  # fmt: skip
    assert result.reason == "process_exited"
    assert "signal 9" in str(result.error)
    assert result.elapsed < 3  # the old blocking read waited for the grandchild (SLEEPER s)
    assert _survivors([int((tmp_path / "grandchild").read_text())]) == []


def test_a_value_still_arriving_at_the_deadline_is_a_timeout_on_time(tmp_path: Path) -> None:
    """A send stopped half-way (a grandchild holding the pipe) ends at the deadline."""
    result = run_sample(
        big_value_interrupted_mid_send, os.getpid(), "stop", str(tmp_path), timeout=1,
        isolate="process",
    )  # fmt: skip
    assert (result.ok, result.value, result.reason) == (False, None, "deadline_exceeded")
    assert 1.0 <= result.elapsed <= 1.3  # the old blocking read returned after SLEEPER s
    assert _survivors([int((tmp_path / "grandchild").read_text())]) == []
