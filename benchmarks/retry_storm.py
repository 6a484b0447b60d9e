"""Retry storm: 100 threads against a gateway that answers 500 to everything, with and
without a shared RetryBudget. Prints how many requests reached the gateway in each case.

Usage: python benchmarks/retry_storm.py [--threads 100] [--calls 5] [--attempts 6]

Each thread makes ``--calls`` calls, each with up to ``--attempts`` attempts and a short
backoff (10 ms, doubling). Everything runs on 127.0.0.1 under a hard deadline, and stops
by itself.
"""

from __future__ import annotations

import argparse
import http.server
import threading
import time
from typing import Dict, List, Optional

import requests

from watchdog_sync import (
    RetryBudget,
    RetryExhausted,
    RetryPolicy,
    WatchdogError,
    deadline,
    retry_call,
)

_RUN_SECONDS = 60.0  # hard bound for one mode


class _AlwaysFailing(http.server.BaseHTTPRequestHandler):
    """Answers every request with 500 and counts it."""

    server: _Gateway

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        with self.server.lock:
            self.server.requests += 1
        body = b'{"error": {"message": "internal error"}}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


class _Gateway(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _AlwaysFailing)
        self.lock = threading.Lock()
        self.requests = 0


def _run(threads: int, calls: int, policy: RetryPolicy) -> Dict[str, float]:
    """Run ``threads`` callers against a fresh gateway; return what happened."""
    gateway = _Gateway()
    server = threading.Thread(target=gateway.serve_forever, kwargs={"poll_interval": 0.05})
    server.start()
    url = f"http://127.0.0.1:{gateway.server_address[1]}/v1/chat/completions"
    outcomes: Dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def caller() -> None:
        start.wait(10)
        with requests.Session() as session, deadline(_RUN_SECONDS, stage="storm"):
            for _ in range(calls):

                def post() -> None:
                    session.post(url, json={"model": "m"}, timeout=5).raise_for_status()

                try:
                    retry_call(post, policy=policy, stage="storm")
                    outcome = "ok"
                except RetryExhausted as exc:
                    outcome = exc.reason
                except WatchdogError as exc:
                    outcome = exc.reason
                with lock:
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1

    started = time.monotonic()
    workers: List[threading.Thread] = [threading.Thread(target=caller) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(_RUN_SECONDS + 10)
    elapsed = time.monotonic() - started
    gateway.shutdown()
    server.join(5)
    gateway.server_close()
    return {"requests": gateway.requests, "seconds": elapsed, **outcomes}


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--calls", type=int, default=5, help="calls per thread")
    parser.add_argument("--attempts", type=int, default=6, help="max_attempts per call")
    args = parser.parse_args(argv)
    plain = RetryPolicy(max_attempts=args.attempts, initial_backoff=0.01)
    shared = RetryBudget(ratio=0.2, min_retries_per_second=10.0)
    budgeted = RetryPolicy(max_attempts=args.attempts, initial_backoff=0.01, retry_budget=shared)
    calls = args.threads * args.calls
    print(
        f"{args.threads} threads x {args.calls} calls, max_attempts={args.attempts}, "
        f"gateway answers 500 to every request"
    )
    print(f"  first attempts alone: {calls}; every retry allowed: {calls * args.attempts}")
    label = "with RetryBudget(ratio=0.2, min_retries_per_second=10, window=10 s)"
    for name, policy in (("without RetryBudget", plain), (label, budgeted)):
        result = _run(args.threads, args.calls, policy)
        outcomes = ", ".join(
            f"{k}={int(v)}" for k, v in sorted(result.items()) if k not in ("requests", "seconds")
        )
        print(
            f"  {name}: requests sent {int(result['requests'])} "
            f"({result['requests'] / calls:.2f} per call) in {result['seconds']:.2f}s; {outcomes}"
        )


if __name__ == "__main__":
    main()
