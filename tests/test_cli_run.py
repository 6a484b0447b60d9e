"""watchdog-sync run: an unmodified program gets instrument() in every Python process it starts."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import sys
import threading
import time
from typing import List

import pytest

import watchdog_sync as ws
from watchdog_sync.cli import main
from watchdog_sync.testing import FaultGateway

from .rawserver import RawServer, silent

pytestmark = pytest.mark.timeout(90)

PYTHON = sys.executable
STARTUP = 8.0  # a Python start-up that imports requests, urllib3 and httpx, on 2 loaded cores

# An unmodified program: requests with its own 30 s per-read timeout, nothing of ours.
FETCH = """
import sys, time
import requests
started = time.monotonic()
try:
    requests.get(sys.argv[1], timeout=30)
except requests.exceptions.Timeout as exc:
    print("timeout after %.2f" % (time.monotonic() - started), "request timeout" in str(exc))
"""


# An unmodified openai program: the SDK's defaults (600 s read timeout), a stream read whole.
OPENAI_STREAM = """
import sys, time
import openai
client = openai.OpenAI(base_url=sys.argv[1], api_key="sk-test", max_retries=0)
started = time.monotonic()
try:
    chunks = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    print("answer", text, "%.2f" % (time.monotonic() - started))
except Exception as exc:
    print(type(exc).__name__, getattr(exc, "reason", ""), "%.2f" % (time.monotonic() - started))
"""


def quiet(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(30)


def _seconds_from(out: str) -> float:
    line = next(line for line in out.splitlines() if line.startswith("timeout after"))
    assert line.endswith("True"), line  # our message: the request's own timeout
    return float(line.split()[2])


def test_each_request_of_an_unmodified_program_gets_its_timeout(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with RawServer(silent) as server:
        status = main(["run", "--request-timeout", "0.5", "--", PYTHON, "-c", FETCH, server.url])
    assert status == 0
    assert 0.45 <= _seconds_from(capfd.readouterr().out) < 1.5


def test_a_python_grandchild_is_instrumented_too(capfd: pytest.CaptureFixture[str]) -> None:
    parent = (
        "import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c'] + sys.argv[1:]))"
    )
    with RawServer(silent) as server:
        status = main(
            ["run", "--request-timeout", "0.5", "--", PYTHON, "-c", parent, FETCH, server.url]
        )
    assert status == 0
    assert _seconds_from(capfd.readouterr().out) < 1.5


@pytest.mark.parametrize(
    "command, status",
    [([PYTHON, "-c", "raise SystemExit(7)"], 7), (["sh", "-c", "exit 3"], 3)],
    ids=["python", "shell"],
)
def test_the_exit_status_is_the_commands(command: List[str], status: int) -> None:
    assert main(["run", "--", *command]) == status


def test_the_deadline_ends_a_command_nothing_can_interrupt_with_124() -> None:
    """time.sleep(30) in the command: its process group is ended just past 1 s, exit status 124."""
    started = time.monotonic()
    status = main(["run", "--deadline", "1", "--", PYTHON, "-c", "import time; time.sleep(30)"])
    assert status == 124
    assert 0.9 <= time.monotonic() - started < 1 + 0.5 + 2.5  # SIGTERM 0.5 s past, SIGKILL 2 s on


def test_each_python_process_runs_inside_the_deadline(capfd: pytest.CaptureFixture[str]) -> None:
    """A raw recv with --sockets ends at the run's deadline as DeadlineExceeded, exit 124."""
    program = (
        "import socket, sys\n"
        "conn = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
        "conn.recv(100)\n"
    )
    with RawServer(quiet) as server:
        started = time.monotonic()
        status = main(
            ["run", "--deadline", "3", "--sockets", "--", PYTHON, "-c", program, str(server.port)]
        )
        elapsed = time.monotonic() - started
    assert status == 124
    assert 2.9 <= elapsed < 3 + 1.0
    last = capfd.readouterr().err.strip().splitlines()[-1]
    raised, _, message = last.partition(": ")
    assert raised.endswith(".DeadlineExceeded") and message.startswith("deadline of")


def test_threads_carry_the_run_scope(capfd: pytest.CaptureFixture[str]) -> None:
    program = (
        "import threading, watchdog_sync as ws\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(ws.current_budget().deadline))\n"
        "t.start(); t.join()\n"
        "print('carried', seen[0] is not None and seen[0] == ws.current_budget().deadline)\n"
    )
    assert main(["run", "--deadline", "60", "--threads", "--", PYTHON, "-c", program]) == 0
    assert "carried True" in capfd.readouterr().out


def test_a_sitecustomize_already_on_the_path_still_runs(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sitecustomize.py").write_text("print('theirs ran')\n")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    program = (
        "import urllib3\n"
        "print('patched', hasattr(urllib3.connectionpool.HTTPConnectionPool.urlopen, '__wrapped__'))\n"
    )
    assert main(["run", "--", PYTHON, "-c", program]) == 0
    out = capfd.readouterr().out
    assert "theirs ran" in out and "patched True" in out


@pytest.mark.parametrize(
    "option, value",
    [
        ("--request-timeout", "0"),
        ("--request-timeout", "soon"),
        ("--idle-timeout", "0"),
        ("--first-event-timeout", "nan"),
        ("--deadline", "-1"),
        ("--deadline", "inf"),
    ],
)
def test_a_bad_option_is_a_clear_error(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", option, value, "--", "true"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "seconds" in err


@pytest.mark.parametrize(
    "scenario, printed, sent",
    [
        ("silent_then_ok", "answer Hello from the watchdog_sync fault gateway.", 2),
        ("stall_after_chunks", "StreamIdleTimeout stream_idle_timeout", 1),
    ],
)
def test_an_unmodified_openai_program_gets_the_stream_rules(
    scenario: str, printed: str, sent: int, capfd: pytest.CaptureFixture[str]
) -> None:
    """run --idle-timeout: a silent first attempt is sent again, a stalled stream ends."""
    with FaultGateway() as gateway:
        base = gateway.base_url(scenario)
        status = main(["run", "--idle-timeout", "0.5", "--", PYTHON, "-c", OPENAI_STREAM, base])
        assert len(gateway.requests_seen(base)) == sent
    assert status == 0
    out = capfd.readouterr().out
    assert out.startswith(printed + " ")
    assert float(out.split()[-1]) < 2.0  # a silent send takes 0.5 s, its SDK 600 s


def test_no_command_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--request-timeout", "5", "--"]) == 2
    assert "no command given" in capsys.readouterr().err


def test_a_command_not_found_exits_127(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--", "watchdog-sync-no-such-command"]) == 127
    assert "command not found" in capsys.readouterr().err


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out and "watchdog-sync run --request-timeout 60" in out


@pytest.mark.parametrize("deadline", [[], ["--deadline", "60"]], ids=["same group", "own group"])
def test_sigterm_to_run_reaches_the_command(deadline: List[str]) -> None:
    """SIGTERM sent to run (a runner stopping it) ends the command too: 128 + 15."""
    stopper = ws.Budget(1.5)  # the watchdog thread sends the signal: no thread of the test's
    unregister = stopper.on_done(lambda _: os.kill(os.getpid(), signal.SIGTERM))
    try:
        started = time.monotonic()
        status = main(["run", *deadline, "--", PYTHON, "-c", "import time; time.sleep(30)"])
    finally:
        unregister()
    assert status == 128 + signal.SIGTERM
    assert time.monotonic() - started < 10
