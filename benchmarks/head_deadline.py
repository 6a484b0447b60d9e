"""How far past the deadline the httpx path ends before the response exists, and what it leaves.

Usage: python benchmarks/head_deadline.py [--runs 5] [--deadline 0.5] [--cases a,b]

Each case inside ``deadline(D)``, ``--runs`` times, for httpx2 and httpx 0.28 on
``httpx_client()``, the openai and anthropic SDKs on it, and the same four after
``instrument()`` (the plain clients and the SDKs as they come):

- ``early_hints_flood``: the FaultGateway sends ``103 Early Hints`` every 0.1 s, never a
  final response;
- ``header_drip``: the status line, then one header line every 0.1 s;
- ``slow_dns``: ``socket.getaddrinfo`` answers the made-up name ``slow.invalid`` only after
  5 s (patched in this process; no real look-up is made);
- ``check_after``: a whole answer that comes back past the deadline from a phase nothing
  can interrupt (a custom transport below ``httpx_client()`` that works on for D + 0.3 s;
  after ``instrument()``, httpcore's ``trace`` hook blocking as long once the headers are
  in); not for the SDKs after ``instrument()``, which take no such hook.

Per case: the error, the median and largest time past the deadline (past the slow phase's
end for ``check_after``), and the threads and file descriptors left 0.5 s after the call.
Needs the ``dev`` extra (openai, anthropic, httpx2, httpx). On 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import anthropic
import httpx
import httpx2
import openai

import watchdog_sync as ws
from watchdog_sync.testing import WATCHDOG_THREAD_NAME, FaultGateway

KEY = "sk-bench-0000"
MESSAGES = [{"role": "user", "content": "hi"}]
SLOW_NAME = "slow.invalid"
INTERVAL = 0.1
LATE_EXTRA = 0.3  # check_after: the slow phase ends this long after the deadline
SETTLE = 0.5
KINDS = (
    "httpx2",
    "httpx",
    "openai",
    "anthropic",
    "instrumented-httpx2",
    "instrumented-httpx",
    "instrumented-openai",
    "instrumented-anthropic",
)
CASES = ("early_hints_flood", "header_drip", "slow_dns", "check_after")


def _library(kind: str) -> Any:
    return httpx if kind.endswith("-httpx") or kind == "httpx" else httpx2


def _http_client(kind: str, transport: Any = None) -> Any:
    if kind.startswith("instrumented"):
        return _library(kind).Client(timeout=30)
    if transport is None and kind == "httpx":
        transport = httpx.HTTPTransport()
    return ws.httpx_client(**({} if transport is None else {"transport": transport}))


@contextlib.contextmanager
def _sender(kind: str, base: str, transport: Any, trace: Any) -> Iterator[Callable[[], None]]:
    """One chat call by ``kind`` to ``base`` (its clients made beforehand)."""
    with _http_client(kind, transport) as http:
        if kind.endswith("openai"):
            completions = openai.OpenAI(
                base_url=base, api_key=KEY, http_client=http
            ).chat.completions
            yield lambda: completions.create(model="m", messages=MESSAGES) and None
        elif kind.endswith("anthropic"):
            messages = anthropic.Anthropic(base_url=base, api_key=KEY, http_client=http).messages
            yield lambda: messages.create(model="m", max_tokens=8, messages=MESSAGES) and None
        else:
            body = {"model": "m", "messages": MESSAGES}
            extensions = {} if trace is None else {"trace": trace}
            url = base + "/chat/completions"
            yield lambda: http.post(url, json=body, extensions=extensions).read() and None


class _Late:
    """A custom transport: answers, then works on for ``late`` seconds, deaf to the budget."""

    def __init__(self, library: Any, late: float) -> None:
        self._inner = library.HTTPTransport()
        self._late = late

    def handle_request(self, request: Any) -> Any:
        response = self._inner.handle_request(request)
        threading.Event().wait(self._late)
        return response

    def close(self) -> None:
        self._inner.close()


@contextlib.contextmanager
def _slow_resolver() -> Iterator[threading.Event]:
    real = socket.getaddrinfo
    release = threading.Event()

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == SLOW_NAME:
            release.wait(5)
            host = "127.0.0.1"
        return real(host, port, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
    try:
        yield release
    finally:
        release.set()
        socket.getaddrinfo = real


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _threads() -> int:
    """Threads but the one watchdog thread (it starts with the first budget and stays)."""
    return sum(1 for t in threading.enumerate() if t.name != WATCHDOG_THREAD_NAME)


def one_run(gateway: FaultGateway, case: str, kind: str, limit: float) -> Dict[str, Any]:
    """One call: its outcome, the time past its end, what it left behind."""
    api = "anthropic" if kind.endswith("anthropic") else "openai"
    if case in ("early_hints_flood", "header_drip"):
        base = gateway.base_url(case, api=api, interval=INTERVAL, duration=10)
    else:
        base = gateway.base_url("ok", api=api)
    if case == "slow_dns":
        base = base.replace("127.0.0.1", SLOW_NAME)
    late = limit + LATE_EXTRA
    transport = trace = None
    if case == "check_after" and not kind.startswith("instrumented"):
        library = _library(kind)
        transport = type("Late", (_Late, library.BaseTransport), {})(library, late)
    if case == "check_after" and kind.startswith("instrumented"):

        def trace(name: str, info: Any) -> None:
            if name.endswith("receive_response_headers.complete"):
                threading.Event().wait(late)

    threads, fds = _threads(), _fds()
    undo = ws.instrument() if kind.startswith("instrumented") else (lambda: None)
    try:
        with contextlib.ExitStack() as stack:
            if case == "slow_dns":
                stack.enter_context(_slow_resolver())
            call = stack.enter_context(_sender(kind, base, transport, trace))
            started = time.monotonic()
            try:
                with ws.deadline(limit):
                    call()
                error = "none (a success)"
            except Exception as exc:
                error = type(exc).__name__
            elapsed = time.monotonic() - started
    finally:
        undo()
    time.sleep(SETTLE)  # the gateway's handler and the helper thread end meanwhile
    end = late if case == "check_after" else limit
    return {
        "error": error,
        "past": elapsed - end,
        "threads": _threads() - threads,
        "fds": _fds() - fds,
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--deadline", type=float, default=0.5)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases")
    args = parser.parse_args(argv)
    cases = [case for case in args.cases.split(",") if case]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    print(f"D = {args.deadline:g} s, {args.runs} runs per cell; {ws.__version__}", flush=True)
    print("| case | client | error | past the end: median / max | threads, fds left |")
    print("|---|---|---|---|---|")
    with FaultGateway() as gateway:
        for case in cases:
            for kind in KINDS:
                if case == "check_after" and kind in (
                    "instrumented-openai",
                    "instrumented-anthropic",
                ):
                    continue
                runs = [one_run(gateway, case, kind, args.deadline) for _ in range(args.runs)]
                errors = sorted({run["error"] for run in runs})
                past = [run["past"] * 1000 for run in runs]
                left = max(run["threads"] for run in runs), max(run["fds"] for run in runs)
                print(
                    f"| {case} | {kind} | {', '.join(errors)} | "
                    f"{statistics.median(past):+.1f} / {max(past):+.1f} ms | {left[0]}, {left[1]} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
