"""watchdog-sync demo: a plain client and ChatClient side by side on the incidents.

An in-process FaultGateway misbehaves on purpose. For each scenario a plain
client (requests + sseclient-py with a 120 s read timeout, as typical code
has) runs in its own process, stopped after 10 s and shown as "still
waiting"; ChatClient runs with idle_timeout=1 and a 5 s deadline. Everything
runs at once, so the demo takes about 12 s. A call that ends before its deadline says
why on screen (the next backoff would end past the deadline, so it fails at once), and
the demo ends by pointing at the tutorial.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, TextIO, Tuple

from .._chat.client import ChatClient
from .._core.errors import DeadlineExceeded, WatchdogError
from ..testing import FaultGateway

__all__ = ["SCENARIOS", "run_demo"]

PLAIN_PATIENCE = 10.0
DEADLINE = 5.0
IDLE = 1.0
EARLY = "ended early: the next backoff would end past the deadline"
NEXT_STEP = (
    "Next: the tutorial, docs/tutorial.md, builds this up step by step, from a hanging "
    "stream to a guarded, budgeted call (on the repository page, or `tox -e docs`)."
)

# (scenario, gateway options, what goes wrong)
SCENARIOS: Sequence[Tuple[str, Dict[str, Any], str]] = (
    ("ok", {}, "nothing: a healthy stream"),
    ("silent_after_200", {}, "200, then silence (the incident)"),
    ("stall_after_chunks", {"chunks": 3}, "3 chunks, then silence"),
    ("slow_drip", {"interval": 0.5}, "a chunk every 0.5 s, forever"),
    ("keepalive_only", {"interval": 0.3}, "keep-alive comments, never data"),
    ("no_headers", {}, "accepts, never answers"),
    ("silent_then_ok", {}, "silence once, then a good stream"),
    ("reset_mid_stream", {}, "TCP reset after 2 chunks"),
    ("http429_then_ok", {"retry_after": 1}, "429 + Retry-After once, then ok"),
    ("http401", {}, "bad API key"),
    ("no_finish_reason", {}, "ends without finish_reason"),
    ("huge_line", {"size": 16 * 1024 * 1024}, "a 16 MiB line, no newline"),
)

_PLAIN_CLIENT = r"""
import json, sys, time
import requests, sseclient
url = sys.argv[1]
started = time.monotonic()
chunks, finish = 0, None
try:
    response = requests.post(url + "/chat/completions", stream=True, timeout=(10, 120),
                             json={"model": "demo", "stream": True,
                                   "messages": [{"role": "user", "content": "hi"}]})
    response.raise_for_status()
    for event in sseclient.SSEClient(response).events():
        if event.data == "[DONE]":
            break
        choice = json.loads(event.data)["choices"][0]
        chunks += 1
        finish = choice.get("finish_reason") or finish
    outcome = "ok" if finish else "silent truncation (no finish_reason)"
except Exception as exc:
    outcome = "error " + type(exc).__name__
print(json.dumps({"outcome": outcome, "chunks": chunks, "elapsed": time.monotonic() - started}))
"""


@dataclasses.dataclass(frozen=True)
class Row:
    scenario: str
    problem: str
    plain: str
    ours: str


def _plain(url: str) -> str:
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-c", _PLAIN_CLIENT, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        out, _ = process.communicate(timeout=PLAIN_PATIENCE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return f"still waiting after {PLAIN_PATIENCE:.0f}s (stopped)"
    try:
        result = json.loads(out)
    except ValueError:
        return f"crashed after {time.monotonic() - started:.1f}s"
    return f"{result['outcome']}, {result['chunks']} chunks, {result['elapsed']:.1f}s"


def _ours(url: str) -> str:
    started = time.monotonic()
    chunks = 0
    with ChatClient(url, model="demo", timeout=DEADLINE, idle_timeout=IDLE) as client:
        try:
            with client.stream([{"role": "user", "content": "hi"}]) as stream:
                for _ in stream:
                    chunks += 1
        except WatchdogError as exc:
            attempts = getattr(exc, "attempts", 0) or 1
            # Time was left, but not enough for the next backoff: the loop failed at once.
            early = isinstance(exc, DeadlineExceeded) and (exc.remaining or 0.0) > 0.0
            return (
                f"{type(exc).__name__} ({exc.reason}), {_count(chunks, 'chunk')}, "
                f"{_attempts(attempts)}, {time.monotonic() - started:.1f}s"
                + (f" ({EARLY})" if early else "")
            )
    return (
        f"ok, {_count(chunks, 'chunk')}, finish_reason={stream.finish_reason}, "
        f"{_attempts(stream.attempts)}, {time.monotonic() - started:.1f}s"
    )


def _attempts(count: int) -> str:
    return _count(count, "attempt")


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def run_demo(
    out: TextIO = sys.stdout, scenarios: Sequence[Tuple[str, Dict[str, Any], str]] = SCENARIOS
) -> List[Row]:
    """Run every scenario both ways at once; print progress and the table to ``out``."""
    print(
        f"FaultGateway scenarios, side by side: plain requests + sseclient-py (read timeout 120 s, "
        f"stopped after {PLAIN_PATIENCE:.0f} s) vs watchdog_sync ChatClient "
        f"(idle_timeout={IDLE:.0f}s, timeout={DEADLINE:.0f}s)",
        file=out,
        flush=True,
    )
    rows: Dict[str, Row] = {}
    with FaultGateway(keep_alive=False) as gateway:
        jobs: Dict[concurrent.futures.Future[str], Tuple[str, str, str]] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=2 * len(scenarios)) as pool:
            for name, options, problem in scenarios:
                for side, fn in (("plain", _plain), ("ours", _ours)):
                    url = gateway.base_url(name, **options)
                    jobs[pool.submit(_guarded(fn), url)] = (name, problem, side)
            results: Dict[Tuple[str, str], str] = {}
            finished = concurrent.futures.as_completed(jobs)
            for done, future in enumerate(finished, start=1):
                name, problem, side = jobs[future]
                results[(name, side)] = future.result()
                label = "plain" if side == "plain" else "watchdog_sync"
                print(
                    f"  [{done:>2}/{len(jobs)}] {name:<20} {label:<13} {results[(name, side)]}",
                    file=out,
                    flush=True,
                )
    for name, _, problem in scenarios:
        rows[name] = Row(name, problem, results[(name, "plain")], results[(name, "ours")])
    _print_table(list(rows.values()), out)
    if any(EARLY in row.ours for row in rows.values()):
        print(
            f"Why 'ended early' under timeout={DEADLINE:.0f}s: after the last attempt, the "
            f"next backoff (1.5 s x 2^n, +-25 %) would have ended past the deadline; a wait "
            "that cannot end in time fails now (DeadlineExceeded) instead of sleeping into "
            "the deadline, and retries never get new time.",
            file=out,
        )
    print(NEXT_STEP, file=out, flush=True)
    return list(rows.values())


def _guarded(fn: Callable[[str], str]) -> Callable[[str], str]:
    def run(url: str) -> str:
        try:
            return fn(url)
        except Exception as exc:  # the demo reports every outcome instead of stopping
            return f"demo error: {type(exc).__name__}: {exc}"

    return run


def _print_table(rows: List[Row], out: TextIO) -> None:
    headers = ("scenario", "what goes wrong", "plain client", "watchdog_sync")
    table = [headers] + [(r.scenario, r.problem, r.plain, r.ours) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    print(file=out)
    for index, row in enumerate(table):
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip(), file=out)
        if index == 0:
            print("  ".join("-" * w for w in widths), file=out)
    print(file=out, flush=True)
