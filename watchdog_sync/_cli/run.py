"""``watchdog-sync run``: an unmodified program, with instrument() in every Python process it starts.

As ``opentelemetry-instrument`` does it: the command runs with the ``boot``
directory first on ``PYTHONPATH``, whose ``sitecustomize`` (run by every Python
interpreter at start-up, the command's Python children and theirs included)
calls ``instrument()`` with the options passed through the environment
(``startup.py``), then chains to any ``sitecustomize`` already on the path.

``--deadline S``: every Python process runs inside a scope that ends S seconds
after ``run`` started (one wall-clock moment for all of them), and the command
runs in a process group of its own, which is sent ``SIGTERM`` shortly past that
moment (after the processes' own scopes have had their say) if it is still
running, and ``SIGKILL`` a grace period later. The exit status is
the command's (128 + N when a signal N ended it); 124 when the deadline ended
it, as ``timeout(1)`` says; 127 when the command is not found, 126 when it
cannot be run; 2 for a bad option.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Dict, List, Optional

from .._core.config import (
    ENV_INSTRUMENT_FIRST_EVENT_TIMEOUT,
    ENV_INSTRUMENT_IDLE_TIMEOUT,
    ENV_INSTRUMENT_REQUEST_TIMEOUT,
    ENV_INSTRUMENT_SOCKETS,
    ENV_INSTRUMENT_THREADS,
)
from .._core.durations import MAX_SECONDS
from .startup import ENV_RUN, ENV_RUN_DEADLINE

__all__ = ["add_run_command"]

BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")
TIMED_OUT = 124
_PAST = 0.5  # the processes' own deadline() scopes end first; the group is ended this late
_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
_EARLY = 0.05  # a command that fails this close to the deadline was ended by it

EXAMPLE = """\
example:
  watchdog-sync run --request-timeout 60 --idle-timeout 30 --deadline 3600 -- \\
      lm_eval --model local-chat-completions \\
      --model_args base_url=http://127.0.0.1:8000/v1/chat/completions,model=m \\
      --tasks my_task --apply_chat_template

  every request lm_eval (and any Python process it starts) sends through requests,
  urllib3 or httpx gets 60 s of its own, an event stream may stay silent 30 s at
  most (a stream silent before its first event is sent again), and the whole run
  ends after an hour (exit status 124). --sockets and --threads bind clients with HTTP code of their
  own (dspy's default engine) and work handed to threads.
"""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if math.isnan(value) or value <= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds (finite), got {text!r}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:.0f} s, got {text!r}")
    return value


def add_run_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``run`` to the ``watchdog-sync`` command's subcommands."""
    run = commands.add_parser(
        "run",
        help="run a program with instrument() in every Python process it starts",
        description="Run COMMAND (an unmodified program) with watchdog_sync.instrument() applied "
        "at start-up in every Python process it starts, and in their Python children. The "
        "exit status is COMMAND's; 124 when --deadline ended it.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--request-timeout",
        type=_seconds,
        metavar="S",
        help="every request through urllib3 or httpx gets S seconds of its own, to its body's "
        "end (an event stream: to its head); its end is the client's own timeout error "
        "(default: none)",
    )
    run.add_argument(
        "--idle-timeout",
        type=_seconds,
        metavar="S",
        help="every event stream (text/event-stream) read through urllib3 or httpx ends "
        "with StreamIdleTimeout after S seconds without a data event (default: none)",
    )
    run.add_argument(
        "--first-event-timeout",
        type=_seconds,
        metavar="S",
        help="an event stream silent S seconds before its first data event is sent again "
        "within the budget (outside a retry owner), else ends with StreamIdleTimeout "
        "(default: --idle-timeout)",
    )
    run.add_argument(
        "--deadline",
        type=_seconds,
        metavar="S",
        help="every Python process runs inside deadline(S) from now; the command's process "
        "group is ended at S (exit status 124) (default: none)",
    )
    run.add_argument(
        "--sockets",
        action="store_true",
        help="bind every socket connected inside a scope (http.client, urllib.request, raw "
        "sockets) (default: off)",
    )
    run.add_argument(
        "--threads",
        action="store_true",
        help="threads and ThreadPoolExecutor tasks started inside a scope run inside it "
        "(default: off)",
    )
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]")
    run.set_defaults(run=_run)


def _fail(message: str) -> int:
    print(f"watchdog-sync run: error: {message}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    command: List[str] = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        return _fail("no command given: watchdog-sync run [options] -- COMMAND [ARG...]")
    started = time.monotonic()
    env = _environment(args)
    try:
        process = subprocess.Popen(command, env=env, start_new_session=args.deadline is not None)
    except FileNotFoundError:
        print(f"watchdog-sync run: {command[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError as exc:
        print(f"watchdog-sync run: {command[0]}: cannot run it: {exc}", file=sys.stderr)
        return 126
    end = None if args.deadline is None else started + args.deadline
    return _wait(process, end)


def _environment(args: argparse.Namespace) -> Dict[str, str]:
    env = dict(os.environ)
    env[ENV_RUN] = "1"
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = BOOT + (os.pathsep + path if path else "")
    if args.request_timeout is not None:
        env[ENV_INSTRUMENT_REQUEST_TIMEOUT] = repr(args.request_timeout)
    if args.idle_timeout is not None:
        env[ENV_INSTRUMENT_IDLE_TIMEOUT] = repr(args.idle_timeout)
    if args.first_event_timeout is not None:
        env[ENV_INSTRUMENT_FIRST_EVENT_TIMEOUT] = repr(args.first_event_timeout)
    if args.sockets:
        env[ENV_INSTRUMENT_SOCKETS] = "1"
    if args.threads:
        env[ENV_INSTRUMENT_THREADS] = "1"
    if args.deadline is not None:
        env[ENV_RUN_DEADLINE] = f"{time.time() + args.deadline:.6f}"
    else:
        env.pop(ENV_RUN_DEADLINE, None)
    return env


def _wait(process: subprocess.Popen[bytes], end: Optional[float]) -> int:
    """Wait for the command, passing SIGINT and SIGTERM on; end its group at ``end``."""
    own_group = end is not None

    def forward(signum: int, frame: Optional[FrameType]) -> None:
        # Ctrl-C reaches a command in our own process group by itself: passed on only to
        # a group of its own (--deadline), else just waited through.
        if own_group or signum != signal.SIGINT:
            _signal(process, signum, own_group)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if end is None:
            return _status(process.wait())
        try:
            status = process.wait(timeout=max(0.0, end + _PAST - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGTERM, own_group)
            try:
                process.wait(timeout=_GRACE)
            except subprocess.TimeoutExpired:
                _signal(process, signal.SIGKILL, own_group)
                process.wait()
            print("watchdog-sync run: the deadline ended the command", file=sys.stderr)
            return TIMED_OUT
        if status != 0 and time.monotonic() >= end - _EARLY:
            return TIMED_OUT  # its own deadline() scope ended it
        return _status(status)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _signal(process: subprocess.Popen[bytes], signum: int, group: bool) -> None:
    try:
        if group and hasattr(os, "killpg"):  # POSIX: the whole group; elsewhere the command
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
    except ProcessLookupError:
        pass  # already gone


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode
