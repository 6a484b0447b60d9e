"""Guarded SSE vs a plain requests + sseclient-py loop, side by side in one run.

Usage: python benchmarks/stream_overhead.py [--events 100000] [--rounds 7] [--stalls 200]

A local server (its own process, so it does not compete for the GIL) sends
``--events`` small events on 127.0.0.1, each its own HTTP chunk, as gateways
send them. Prints events/s of (a) requests + sseclient-py and (b) stream_sse,
and their ratio (median over ``--rounds`` alternating runs); then the idle-timeout detection latency
(fired-at minus idle) over ``--stalls`` silent streams. (The time from the timeout to
the stream's reader thread gone is no longer measured: socket-backed streams have no
reader thread of their own: their consumers read them; ``benchmarks/idle_scale.py``
measures detection at scale.)
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from typing import Callable, List, Tuple

import requests
import sseclient
from _chunked_server import HEAD, chunk, running

import watchdog_sync as ws
from watchdog_sync import stream_sse

_EVENT = b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n'
_CHUNK = chunk(_EVENT)


def _answer(conn: socket.socket, request: bytes, events: int) -> None:
    conn.sendall(HEAD)
    if b"/silent" in request.split(b"\r\n", 1)[0]:
        conn.settimeout(10)
        while conn.recv(65536):  # hold until the client shuts the connection
            pass
        return
    batch = _CHUNK * 50
    for _ in range(events // 50):
        conn.sendall(batch)
    conn.sendall(b"0\r\n\r\n")


def _plain(url: str) -> int:
    count = 0
    with requests.post(url, json={}, stream=True, timeout=(5, 30)) as response:
        for _ in sseclient.SSEClient(response).events():
            count += 1
    return count


def _guarded(url: str) -> int:
    count = 0
    for _ in stream_sse(url, json={}, idle_timeout=30):
        count += 1
    return count


def _timed(fn: Callable[[str], int], url: str, events: int) -> float:
    started = time.perf_counter()
    got = fn(url)
    elapsed = time.perf_counter() - started
    assert got == events, f"{fn.__name__} read {got} of {events} events"
    return events / elapsed


def _paired(url: str, events: int, rounds: int) -> Tuple[List[float], List[float]]:
    """Alternate the two readers so machine noise hits both alike."""
    plain: List[float] = []
    guarded: List[float] = []
    for _ in range(rounds):
        plain.append(_timed(_plain, url, events))
        guarded.append(_timed(_guarded, url, events))
    return plain, guarded


def _stalls(url: str, count: int, idle: float) -> List[float]:
    lateness: List[float] = []
    for _ in range(count):
        started = time.monotonic()
        stream = stream_sse(url + "/silent", json={}, idle_timeout=idle)
        try:
            next(iter(stream))
        except ws.StreamIdleTimeout:
            lateness.append(time.monotonic() - started - idle)
    return lateness


def _percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--stalls", type=int, default=200)
    parser.add_argument("--idle", type=float, default=0.05)
    args = parser.parse_args()
    with running(_answer, args.events) as (host, port):
        url = f"http://{host}:{port}/v1/chat/completions"
        plain, guarded = _paired(url, args.events, args.rounds)
        ratios = [g / p for p, g in zip(plain, guarded)]
        print(f"events per run: {args.events}, {args.rounds} alternating rounds")
        print(f"(a) requests + sseclient-py: median {statistics.median(plain):,.0f} events/s")
        print(f"(b) stream_sse (guarded):    median {statistics.median(guarded):,.0f} events/s")
        print(
            f"ratio (b)/(a): median {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
        )
        lateness = _stalls(f"http://{host}:{port}", args.stalls, args.idle)
        print(
            f"idle detection lateness over {len(lateness)} stalls (idle {args.idle}s): "
            f"median {statistics.median(lateness) * 1000:.2f} ms, "
            f"p99 {_percentile(lateness, 0.99) * 1000:.2f} ms"
        )


if __name__ == "__main__":
    main()
