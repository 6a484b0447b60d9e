"""run_sample: per-call overhead in each isolation mode, and the incident's time to return.

Usage: ``python benchmarks/sample_overhead.py [--calls 200] [--incident-runs 7]``

Prints, for thread and process mode: the first call (process mode starts the
fork server), the median and 95th percentile of a call to a function that
returns at once, and the median time a ``timeout=1`` sample that retries a
silent 127.0.0.1 server inside ``except Exception`` takes to come back.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from typing import Callable, Iterator, List

import requests

from watchdog_sync import current_budget, run_sample


def noop() -> None:
    return None


def raw_socket_retried_forever(port: int) -> None:
    for _ in range(10_000):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sock.settimeout(0.02)
                for _ in range(100_000):
                    current_budget().check()
                    try:
                        sock.recv(1)
                    except socket.timeout:
                        continue
        except Exception:
            continue


def requests_retried_forever(port: int) -> None:
    for _ in range(10_000):
        try:
            requests.get(f"http://127.0.0.1:{port}/", timeout=None)
        except Exception:
            continue


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers (at most 256, 120 s)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = int(self.listener.getsockname()[1])
        self._stop = threading.Event()
        self._held: List[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, name="silent-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        give_up = time.monotonic() + 120
        while not self._stop.is_set() and time.monotonic() < give_up and len(self._held) < 256:
            try:
                self._held.append(self.listener.accept()[0])
            except socket.timeout:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self.listener.close()


def timed(call: Callable[[], object], times: int) -> Iterator[float]:
    for _ in range(times):
        started = time.perf_counter()
        call()
        yield time.perf_counter() - started


def report(label: str, seconds: List[float]) -> None:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    print(
        f"{label:<44} median {statistics.median(ordered) * 1000:8.2f} ms   "
        f"p95 {p95 * 1000:8.2f} ms   (n={len(ordered)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--incident-runs", type=int, default=7)
    options = parser.parse_args()

    report("direct call of noop()", list(timed(noop, options.calls)))
    for mode in ("thread", "process"):
        first = list(timed(lambda m=mode: run_sample(noop, timeout=30, isolate=m), 1))
        print(f"{'first ' + mode + '-mode call':<44} {first[0] * 1000:8.2f} ms")
        calls = list(timed(lambda m=mode: run_sample(noop, timeout=30, isolate=m), options.calls))
        report(f"run_sample(noop, isolate={mode!r})", calls)

    server = SilentServer()
    try:
        for mode, sample in (
            ("thread", raw_socket_retried_forever),
            ("process", requests_retried_forever),
        ):
            elapsed = []
            for _ in range(options.incident_runs):
                result = run_sample(sample, server.port, timeout=1, isolate=mode)  # type: ignore[arg-type]
                assert result.reason == "deadline_exceeded", result
                elapsed.append(result.elapsed)
            print(
                f"incident, timeout=1, isolate={mode!r}: median {statistics.median(elapsed):.3f} s,"
                f" max {max(elapsed):.3f} s (n={len(elapsed)})"
            )
    finally:
        server.close()


if __name__ == "__main__":
    main()
