"""run_sample: the signal.alarm replacement, in thread and process isolation.

Sample functions live at module level so process mode can pickle them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Literal, Optional

import pytest
import requests

from watchdog_sync import (
    Cancelled,
    DeadlineExceeded,
    Event,
    OperationCancelled,
    OperationTimeout,
    SampleResult,
    TransportError,
    abandoned_workers,
    add_listener,
    current_budget,
    deadline,
    run_sample,
)

from .internals import sample_preload_module

pytestmark = pytest.mark.timeout(60)

Isolate = Literal["thread", "process"]
MODES: List[Isolate] = ["thread", "process"]
INCIDENT_BOUND = 1.1  # the bound for timeout=1, in both modes


# -- samples (module level: picklable) ------------------------------------------


def double(x: int) -> int:
    return 2 * x


def echo(*args: Any, **kwargs: Any) -> Any:
    return args, kwargs


def wrong_answer() -> int:
    raise ValueError("expected 42, got 41")


def fetch(port: int) -> str:
    return requests.get(f"http://127.0.0.1:{port}/", timeout=5).text


def library_wait_retried_forever() -> None:
    """The incident's shape: a library wait inside `except Exception` and retry."""
    for _ in range(100_000):  # "forever", bounded as the test rules ask
        try:
            current_budget().sleep(30)  # stands for any wait the library bounds
        except Exception:  # the harness's view: every error is transient
            continue


def raw_socket_retried_forever(port: int) -> None:
    """Blocking reads from a silent server inside `except Exception: continue`."""
    for _ in range(10_000):  # "forever", bounded
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sock.settimeout(0.02)
                for _ in range(100_000):
                    current_budget().check()  # the library's cancellation point
                    try:
                        sock.recv(1)
                    except socket.timeout:
                        continue
        except Exception:  # swallows socket errors, but Cancelled is no Exception
            continue


def requests_retried_forever(port: int) -> None:
    """A plain requests.get with no timeout at all, retried on any Exception."""
    for _ in range(10_000):  # "forever", bounded
        try:
            requests.get(f"http://127.0.0.1:{port}/", timeout=None)
        except Exception:
            continue


def inner_deadline_expires() -> None:
    with deadline(0.05, stage="inner"):
        current_budget().sleep(1)


def cancel_own_budget() -> None:
    current_budget().cancel("sample gave up")
    current_budget().check()


def budget_seen_by_sample() -> Dict[str, Any]:
    budget = current_budget()
    return {"stage": budget.stage, "remaining": budget.remaining()}


def sleep_and_return(seconds: float) -> int:
    time.sleep(seconds)  # uninterruptible by the library
    return 42


def sleep_after_writing_pid(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(5)  # uninterruptible: only the kill ends it


def write_pid_and_wait(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
    library_wait_retried_forever()


def return_pid() -> int:
    return os.getpid()


def return_lock() -> Any:
    return threading.Lock()


def exit_abruptly() -> None:
    os._exit(3)


def raise_transport_error() -> None:
    raise TransportError(
        "connection reset by upstream", transport_code="ECONNRESET", stage="upstream", attempt=2
    )


class UnpicklableError(ValueError):
    """An exception holding a lock: it cannot be pickled."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def raise_unpicklable() -> None:
    raise UnpicklableError("answer was 41")


def stuck_until(release: threading.Event) -> None:
    """Thread mode only: time.sleep the library cannot interrupt, then a late failure."""
    for _ in range(100):  # up to 5 s of time.sleep, ended early by the test
        if release.is_set():
            break
        time.sleep(0.05)
    raise RuntimeError("late failure: must be discarded, not reach threading.excepthook")


def current_thread_info() -> Dict[str, Any]:
    thread = threading.current_thread()
    return {"name": thread.name, "daemon": thread.daemon}


# -- fixtures --------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _fork_server() -> None:
    """Start multiprocessing's fork server (process-wide, like the watchdog thread) up front."""
    assert run_sample(double, 1, timeout=30, isolate="process").value == 2


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A 127.0.0.1 server that accepts and never answers (at most 64 connections, 30 s)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()
    held: List[socket.socket] = []

    def serve() -> None:
        give_up = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < give_up and len(held) < 64:
            try:
                held.append(listener.accept()[0])
            except socket.timeout:
                continue

    thread = threading.Thread(target=serve, name="silent-server", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


@pytest.fixture
def closed_port() -> int:
    """A local port nobody listens on (bound, then closed): connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def events() -> Iterator[List[Event]]:
    seen: List[Event] = []

    def listener(event: Event) -> None:
        seen.append(event)

    unregister = add_listener(listener)
    try:
        yield seen
    finally:
        unregister()


def _once_running(pid_file: Path, action: Any, *args: Any) -> None:
    """Run ``action`` once the sample has written its pid and blocks (waits at most 10 s)."""
    give_up = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < give_up:
        time.sleep(0.01)
    time.sleep(0.1)  # the scenario: the sample is blocked in its wait by now
    action(*args)


def process_is_gone(pid: int) -> bool:
    """True when no process (not even a zombie) has this pid any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"timeout": None}, TypeError, "timeout"),
        ({"timeout": True}, TypeError, "timeout"),
        ({"timeout": "1"}, TypeError, "timeout"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": float("nan")}, ValueError, "timeout"),
        ({"timeout": float("inf")}, ValueError, "timeout"),
        ({"timeout": 1, "isolate": "fork"}, ValueError, "isolate"),
    ],
)
def test_bad_arguments_raise_naming_the_parameter(
    kwargs: Dict[str, Any], error: type, names: str
) -> None:
    with pytest.raises(error, match=names):
        run_sample(double, 1, **kwargs)


def test_a_non_callable_fn_is_a_type_error_naming_fn() -> None:
    with pytest.raises(TypeError, match="fn must be callable"):
        run_sample(42, timeout=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [lambda: 1, threading.Lock()], ids=["lambda", "lock-argument"])
def test_process_mode_needs_picklable_fn_and_arguments(bad: Any) -> None:
    fn, args = (bad, ()) if callable(bad) else (echo, (bad,))
    with pytest.raises(TypeError, match=r"picklable.*isolate='thread'"):
        run_sample(fn, *args, timeout=1, isolate="process")


# -- outcomes, in both modes -------------------------------------------------------


@pytest.mark.parametrize("isolate", MODES)
def test_success_returns_the_value(isolate: Isolate) -> None:
    result = run_sample(double, 21, timeout=10, isolate=isolate)
    assert result == SampleResult(True, 42, None, None, result.elapsed, False)
    assert 0 <= result.elapsed < 5


@pytest.mark.parametrize("isolate", MODES)
def test_args_and_kwargs_reach_fn(isolate: Isolate) -> None:
    result = run_sample(echo, 1, "two", key=3, timeout=10, isolate=isolate)
    assert result.value == ((1, "two"), {"key": 3})


@pytest.mark.parametrize("isolate", MODES)
def test_a_wrong_answer_is_a_programming_error(isolate: Isolate) -> None:
    result = run_sample(wrong_answer, timeout=10, isolate=isolate)
    assert (result.ok, result.value, result.reason) == (False, None, "programming_error")
    assert isinstance(result.error, ValueError)
    assert "expected 42" in str(result.error)


@pytest.mark.parametrize("isolate", MODES)
def test_a_refused_connection_is_a_transport_failure(isolate: Isolate, closed_port: int) -> None:
    result = run_sample(fetch, closed_port, timeout=10, isolate=isolate)
    assert (result.ok, result.reason) == (False, "transport")
    assert isinstance(result.error, requests.ConnectionError)


@pytest.mark.parametrize("isolate", MODES)
def test_an_inner_deadline_of_the_sample_is_an_operation_timeout(isolate: Isolate) -> None:
    """fn's own deadline is an OperationTimeout; 'deadline_exceeded' is run_sample's timeout."""
    result = run_sample(inner_deadline_expires, timeout=10, isolate=isolate)
    assert result.reason == "operation_timeout"
    assert isinstance(result.error, OperationTimeout)
    assert not isinstance(result.error, DeadlineExceeded)
    assert (result.error.reason, result.error.stage) == ("operation_timeout", "inner")
    assert "DeadlineExceeded" in repr(result.error.__cause__) + str(result.error.__cause__)
    assert result.elapsed < 5


@pytest.mark.parametrize("isolate", MODES)
def test_a_sample_that_cancels_its_own_budget_is_cancelled(isolate: Isolate) -> None:
    result = run_sample(cancel_own_budget, timeout=10, isolate=isolate)
    assert result.reason == "cancelled"
    assert isinstance(result.error, OperationCancelled)
    assert "sample gave up" in str(result.error)


@pytest.mark.parametrize("isolate", MODES)
def test_the_sample_runs_in_a_scope_of_its_own(isolate: Isolate) -> None:
    result = run_sample(budget_seen_by_sample, timeout=5, isolate=isolate)
    assert result.value is not None
    assert result.value["stage"] == "sample"
    assert 0 < result.value["remaining"] <= 5


@pytest.mark.parametrize("isolate", MODES)
def test_start_and_end_events_carry_stage_and_reason(isolate: Isolate, events: List[Event]) -> None:
    run_sample(double, 1, timeout=5, isolate=isolate)
    run_sample(library_wait_retried_forever, timeout=0.2, isolate=isolate)
    sample_events = [(e.event, e.stage, e.reason) for e in events]
    assert sample_events == [
        ("sample_start", "sample", None),
        ("sample_end", "sample", None),
        ("sample_start", "sample", None),
        ("sample_end", "sample", "deadline_exceeded"),
    ]
    assert events[-1].elapsed_ms is not None and events[-1].elapsed_ms >= 200


def test_sample_result_is_frozen() -> None:
    result = run_sample(double, 1, timeout=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.ok = False  # type: ignore[misc]


# -- the incident: `except Exception` retry loops around a silent server ------------


def test_incident_thread_mode_library_wait_cannot_be_swallowed() -> None:
    result = run_sample(library_wait_retried_forever, timeout=1)
    assert (result.ok, result.reason, result.abandoned) == (False, "deadline_exceeded", False)
    assert isinstance(result.error, DeadlineExceeded)
    assert result.error.stage == "sample"
    assert 1.0 <= result.elapsed <= INCIDENT_BOUND


@pytest.mark.parametrize(
    ("isolate", "sample"),
    [("thread", raw_socket_retried_forever), ("process", requests_retried_forever)],
)
def test_incident_silent_server_retried_forever_ends_at_the_deadline(
    isolate: Isolate, sample: Any, silent_server: int
) -> None:
    result = run_sample(sample, silent_server, timeout=1, isolate=isolate)
    assert (result.ok, result.reason, result.abandoned) == (False, "deadline_exceeded", False)
    assert isinstance(result.error, DeadlineExceeded)
    assert 1.0 <= result.elapsed <= INCIDENT_BOUND


def test_uninterruptible_thread_sample_is_abandoned_reported_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="watchdog_sync")
    before = abandoned_workers()
    release = threading.Event()
    try:
        result = run_sample(stuck_until, release, timeout=0.5)
        assert (result.ok, result.reason, result.abandoned) == (False, "deadline_exceeded", True)
        assert isinstance(result.error, DeadlineExceeded)
        assert result.error.phase == "wait"  # the caller's wait for the worker ended it
        assert "abandoned" in str(result.error)
        assert 0.5 <= result.elapsed <= 0.5 + 0.1
        assert abandoned_workers() == before + 1
    finally:
        release.set()
    give_up = time.monotonic() + 5
    while abandoned_workers() > before and time.monotonic() < give_up:
        time.sleep(0.01)  # the released worker ends within ~50 ms
    assert abandoned_workers() == before
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "stuck_until" in warnings[0].getMessage()
    assert any("ended" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_a_value_returned_after_the_deadline_is_discarded() -> None:
    result = run_sample(sleep_and_return, 0.32, timeout=0.3)
    assert (result.ok, result.value, result.reason) == (False, None, "deadline_exceeded")
    give_up = time.monotonic() + 2
    while abandoned_workers() and time.monotonic() < give_up:
        time.sleep(0.01)  # if the grace was missed on a busy machine, it ends in ms


def test_uninterruptible_process_sample_is_killed_and_reaped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    result = run_sample(sleep_after_writing_pid, str(pid_file), timeout=1, isolate="process")
    assert (result.ok, result.reason, result.abandoned) == (False, "deadline_exceeded", False)
    assert isinstance(result.error, DeadlineExceeded)
    assert result.error.phase == "wait"
    assert 1.0 <= result.elapsed <= INCIDENT_BOUND
    assert process_is_gone(int(pid_file.read_text()))


def test_process_sample_that_finishes_leaves_no_process_behind() -> None:
    result = run_sample(return_pid, timeout=10, isolate="process")
    assert result.ok and isinstance(result.value, int)
    assert result.value != os.getpid()
    assert process_is_gone(result.value)


# -- outer scopes ----------------------------------------------------------------


@pytest.mark.parametrize("isolate", MODES)
def test_an_outer_deadline_ends_the_sample_and_its_scope_raises(isolate: Isolate) -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as info, deadline(0.3, stage="harness"):
        run_sample(library_wait_retried_forever, timeout=10, isolate=isolate)
    assert info.value.stage == "harness"
    assert 0.3 <= time.monotonic() - started < 1.5


@pytest.mark.parametrize("isolate", MODES)
def test_cancelling_the_outer_scope_stops_the_sample(isolate: Isolate, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(OperationCancelled, match="harness stopped"), deadline(10) as outer:
        canceller = threading.Thread(
            target=_once_running, args=(pid_file, outer.cancel, "harness stopped")
        )
        canceller.start()
        try:
            run_sample(write_pid_and_wait, str(pid_file), timeout=10, isolate=isolate)
        finally:
            canceller.join(5)
    assert time.monotonic() - started < 2
    if isolate == "process":
        assert process_is_gone(int(pid_file.read_text()))


@pytest.mark.parametrize("isolate", MODES)
def test_an_outer_scope_that_already_ended_runs_nothing(isolate: Isolate, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(OperationCancelled), deadline(10) as outer:
        outer.cancel()
        run_sample(write_pid_and_wait, str(pid_file), timeout=10, isolate=isolate)
    assert not pid_file.exists()


# -- threads, signals, interrupts ----------------------------------------------------


def test_thread_mode_worker_is_a_named_daemon() -> None:
    result = run_sample(current_thread_info, timeout=5)
    assert result.value is not None
    assert result.value["daemon"] is True
    assert result.value["name"].startswith("watchdog_sync-sample-")
    assert "current_thread_info" in result.value["name"]


@pytest.mark.parametrize("isolate", MODES)
def test_eight_threads_at_once(isolate: Isolate) -> None:
    results: Dict[str, Optional[SampleResult[Any]]] = {}

    def call(i: int) -> None:
        results[f"ok{i}"] = run_sample(double, i, timeout=20, isolate=isolate)
        results[f"late{i}"] = run_sample(
            library_wait_retried_forever,
            timeout=0.5,
            isolate=isolate,
        )

    threads = [threading.Thread(target=call, args=(i,), name=f"harness-{i}") for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for i in range(8):
        ok, late = results[f"ok{i}"], results[f"late{i}"]
        assert ok is not None and ok.value == 2 * i
        assert late is not None and late.reason == "deadline_exceeded"
        assert late.elapsed < 0.5 + 1.0  # generous: 8 parallel samples on 2 cores


def _collect_timeout_sample(box: List[SampleResult[Any]], isolate: Isolate) -> None:
    if isolate == "process":  # uninterruptible: only the kill ends it
        box.append(run_sample(sleep_and_return, 5, timeout=0.3, isolate=isolate))
    else:
        box.append(run_sample(library_wait_retried_forever, timeout=0.3, isolate=isolate))


@pytest.mark.parametrize("isolate", MODES)
def test_works_with_main_thread_signal_handlers_installed(isolate: Isolate) -> None:
    """A harness that still has its old SIGALRM handler (and a SIGTERM one) is unaffected."""
    fired: List[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: fired.append(signum))
        for sig in (signal.SIGALRM, signal.SIGTERM)
    }
    try:
        for caller in ("main", "other"):
            box: List[SampleResult[Any]] = []
            call = functools.partial(_collect_timeout_sample, box, isolate)
            if caller == "main":
                call()
            else:
                thread = threading.Thread(target=call)
                thread.start()
                thread.join(10)
            assert box[0].reason == "deadline_exceeded"
            assert box[0].elapsed <= 0.3 + 0.1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert fired == []


@pytest.fixture
def interruptible() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread, as in an interactive shell: a
    process started with SIGINT ignored (a background job, ``trap "" INT``) gets no such
    handler from Python. Restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("isolate", MODES)
def test_an_interrupt_of_the_caller_stops_the_sample(
    isolate: Isolate, tmp_path: Path, interruptible: None
) -> None:
    pid_file = tmp_path / "pid"
    main = threading.get_ident()
    interrupter = threading.Thread(
        target=_once_running, args=(pid_file, signal.pthread_kill, main, signal.SIGINT)
    )
    interrupter.start()  # Ctrl-C while the sample blocks
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sample(write_pid_and_wait, str(pid_file), timeout=10, isolate=isolate)
    finally:
        interrupter.join(5)
    if isolate == "process":
        assert process_is_gone(int(pid_file.read_text()))
    give_up = time.monotonic() + 2
    while abandoned_workers() and time.monotonic() < give_up:
        time.sleep(0.01)  # thread mode: the cancelled worker ends at once
    assert abandoned_workers() == 0


# -- process mode: what comes back ---------------------------------------------------


def test_watchdog_errors_come_back_with_their_fields_and_the_child_traceback() -> None:
    result = run_sample(raise_transport_error, timeout=10, isolate="process")
    error = result.error
    assert isinstance(error, TransportError)
    assert (error.transport_code, error.stage, error.attempt) == ("ECONNRESET", "upstream", 2)
    assert result.reason == "transport"
    assert "raise_transport_error" in str(error.__cause__)


def test_an_unpicklable_exception_comes_back_as_an_informative_runtime_error() -> None:
    result = run_sample(raise_unpicklable, timeout=10, isolate="process")
    assert isinstance(result.error, RuntimeError)
    assert "UnpicklableError: answer was 41" in str(result.error)
    assert result.reason == "programming_error"  # classified in the child, from the real one
    assert "raise_unpicklable" in str(result.error.__cause__)


def test_an_unpicklable_return_value_is_reported_not_raised() -> None:
    result = run_sample(return_lock, timeout=10, isolate="process")
    assert (result.ok, result.reason) == (False, "not_picklable")
    assert isinstance(result.error, pickle.PicklingError)
    assert "lock" in str(result.error)


def test_a_child_that_dies_without_a_result_is_process_exited() -> None:
    result = run_sample(exit_abruptly, timeout=10, isolate="process")
    assert (result.ok, result.reason) == (False, "process_exited")
    assert isinstance(result.error, ChildProcessError)
    assert "code 3" in str(result.error)


def test_cancelled_is_never_a_result_value() -> None:
    """Cancelled stays a BaseException of scopes: results only carry ordinary errors."""
    for isolate in MODES:
        result = run_sample(library_wait_retried_forever, timeout=0.1, isolate=isolate)
        assert not isinstance(result.error, Cancelled)


def test_the_fork_server_preloads_a_harness_script_that_imports_the_library(
    tmp_path: Path,
) -> None:
    """The workaround for CPython gh-126631: __main__ is run once, in the server."""
    script = tmp_path / "harness.py"
    script.write_text("from watchdog_sync import run_sample\nLOADED = True\n")
    setup = {"main_path": str(script), "sys_path": sys.path, "sys_argv": [str(script), "-x"]}
    probe = (
        "import os, sys\n"
        f"import {sample_preload_module.__name__}\n"
        "main = sys.modules['__main__']\n"
        "print(main.__file__, main.LOADED, sys.argv[1], os.environ.get('WATCHDOG_SYNC_FORKSERVER_MAIN'))\n"
    )
    env = {**os.environ, "WATCHDOG_SYNC_FORKSERVER_MAIN": json.dumps(setup)}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(script), "True", "-x", "None"]


HARNESS = """
import os, sys, time
from watchdog_sync import run_sample

def sample(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(30)  # uninterruptible; only the harness's death should end it

if __name__ == "__main__":
    run_sample(sample, sys.argv[1], timeout=30, isolate="process")
"""


def _gone_or_zombie(pid: int) -> bool:
    """True once ``pid`` no longer runs (a zombie waiting for init to reap it counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return process_is_gone(pid)
    return "\nState:\tZ" in status


def test_a_sample_process_does_not_outlive_a_killed_harness(tmp_path: Path) -> None:
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    pid_file = tmp_path / "pid"
    harness = subprocess.Popen([sys.executable, str(script), str(pid_file)])
    try:
        give_up = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < give_up:
            time.sleep(0.02)
        assert pid_file.exists(), "the harness never started its sample"
    finally:
        harness.kill()
        harness.wait(10)
    child = int(pid_file.read_text())
    give_up = time.monotonic() + 5
    while not _gone_or_zombie(child) and time.monotonic() < give_up:
        time.sleep(0.02)
    assert _gone_or_zombie(child)


SLOW_HARNESS = """
import os, sys, time
time.sleep(0.5)  # stands for the heavy imports at the top of a harness script
from watchdog_sync import run_sample

def sample():
    return os.getpid()

if __name__ == "__main__":
    for _ in range(3):
        result = run_sample(sample, timeout=0.4, isolate="process")
        print(result.reason, round(result.elapsed, 3))
"""


def test_a_harness_script_is_imported_once_not_on_every_sample_clock(tmp_path: Path) -> None:
    """Samples of a slow-to-import script start fast, the first one included."""
    script = tmp_path / "harness.py"
    script.write_text(SLOW_HARNESS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert [reason for reason, _ in lines] == ["None", "None", "None"], done.stdout
    assert all(float(elapsed) < 0.4 for _, elapsed in lines)
