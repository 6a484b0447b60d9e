"""Many concurrent event streams through httpx_client() vs plain httpx2, side by side.

Usage: python benchmarks/httpx_scale.py [--streams 1,100,300] [--events 200] [--gap 0.005]
[--rounds 3]

The server of ``scale.py`` (``_scale_server.py``'s selector loop, in its own process) sends each stream
``--events`` small events ``--gap`` seconds apart, each carrying its send time; the
events are in no known format (no ``choices``), so a stream ends as the server ends
it. For each N a fresh client process opens N streams at once from a thread pool
over one client (``Limits`` sized for N), once with ``httpx2.Client()`` and once with
``watchdog_sync.httpx_client()`` (inside ``deadline()``), and reports events/s, CPU
per event, event latency (median, and the median of each stream's p99), the
threads added beyond the pool's, and when the last stream's request reached the server
("last open", as in ``scale.py``). It checks that httpx_client() adds at most 5
threads (the shared watchdog thread; code before issue 36 also had its shared reader). Loopback only; every
run has a time limit.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import sys
import threading
import time
from typing import Any, Dict, List, Tuple

from _scale_server import EventServer, cpu_seconds, percentile, raise_nofile, run_worker, serving

_WORKER_SECONDS = 180.0
_THREADS_ADDED = 5


def _event_chunk(index: int) -> bytes:
    """scale.py's event without its ``choices``: a format no parser knows."""
    payload = b'data: {"t":%.6f,"i":%d}\n\n' % (time.monotonic(), index)
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _read(client: Any, url: str) -> Tuple[float, List[float]]:
    """When the server sent the stream's first event (when its request reached the server),
    and each event's latency."""
    sent: List[float] = []
    lags: List[float] = []
    rest = b""
    with client.stream("POST", url, json={"stream": True}) as response:
        for piece in response.iter_bytes():
            now = time.monotonic()
            *events, rest = (rest + piece).split(b"\n\n")
            for event in events:  # b'data: {"t":<seconds>,"i":...'
                sent.append(float(event[11 : event.index(b",")]))
                lags.append(now - sent[-1])
    return sent[0], lags


def _worker(impl: str, streams: int, url: str) -> Dict[str, Any]:
    raise_nofile(streams * 2 + 256)
    import httpx2

    import watchdog_sync as ws

    limits = httpx2.Limits(max_connections=streams + 8, max_keepalive_connections=streams + 8)
    if impl == "plain":
        client: Any = httpx2.Client(limits=limits, timeout=60)
    else:
        client = ws.httpx_client(idle_timeout=60, limits=limits, timeout=60)
    start = threading.Barrier(streams + 1)

    def task() -> Tuple[float, List[float]]:
        start.wait(60)
        if impl == "plain":
            return _read(client, url)
        with ws.deadline(_WORKER_SECONDS):
            return _read(client, url)

    peak = [0]
    done = threading.Event()

    def monitor() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], threading.active_count())

    with client, concurrent.futures.ThreadPoolExecutor(max_workers=streams) as pool:
        futures = [pool.submit(task) for _ in range(streams)]  # every pool thread exists now
        baseline = threading.active_count() + 1  # the monitor's own
        watcher = threading.Thread(target=monitor, name="bench-monitor", daemon=True)
        watcher.start()
        start.wait(60)
        started = time.perf_counter()
        opened = time.monotonic()
        cpu_before = cpu_seconds()
        streams_done = [future.result(timeout=_WORKER_SECONDS) for future in futures]
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds() - cpu_before
        done.set()
        watcher.join(5)
    results = [lags for _, lags in streams_done]
    lags = sorted(lag for lags in results for lag in lags)
    stream_p99 = sorted(percentile(sorted(r), 0.99) for r in results if r)
    return {
        "events": len(lags),
        "rate": len(lags) / elapsed,
        "cpu_us_per_event": cpu / max(1, len(lags)) * 1e6,
        "p50_ms": percentile(lags, 0.5) * 1000,
        "stream_p99_ms": percentile(stream_p99, 0.5) * 1000,
        "threads_added": peak[0] - baseline,
        "last_open": max(first for first, _ in streams_done) - opened,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", default="1,100,300")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.005)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=3, metavar=("IMPL", "N", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        impl, streams, url = args.worker
        print(json.dumps(_worker(impl, int(streams), url)))
        return
    counts = [int(n) for n in args.streams.split(",")]
    print(
        f"{args.events} events per stream, {args.gap * 1000:g} ms apart; median of "
        f"{args.rounds} rounds (threads added: the highest), each run in a fresh process"
    )
    print()
    print(
        "| N | client | events/s | CPU µs/event | latency p50 (ms) | per-stream p99 (ms) "
        "| threads added | last open (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    failed = False
    with serving(
        lambda sock: EventServer(sock, args.events, args.gap, _event_chunk), max(counts)
    ) as url:
        for streams in counts:
            runs: Dict[str, List[Dict[str, Any]]] = {"plain": [], "httpx_client": []}
            for round_ in range(args.rounds):
                order = ("plain", "httpx_client") if round_ % 2 == 0 else ("httpx_client", "plain")
                for impl in order:
                    label = f"{impl} N={streams}"
                    result = run_worker(__file__, [impl, str(streams), url], _WORKER_SECONDS, label)
                    if result["events"] != streams * args.events:
                        raise RuntimeError(f"{impl} N={streams}: {result['events']} events")
                    runs[impl].append(result)
            for impl, name in (("plain", "httpx2.Client()"), ("httpx_client", "httpx_client()")):
                rows = runs[impl]

                def median(key: str, rows: List[Dict[str, Any]] = rows) -> float:
                    return float(statistics.median(row[key] for row in rows))

                added = max(row["threads_added"] for row in rows)
                print(
                    f"| {streams} | {name} | {median('rate'):,.0f} "
                    f"| {median('cpu_us_per_event'):.1f} | {median('p50_ms'):.2f} "
                    f"| {median('stream_p99_ms'):.2f} | +{added} | {median('last_open'):.2f} |",
                    flush=True,
                )
                failed = failed or (impl == "httpx_client" and added > _THREADS_ADDED)
    if failed:
        print(f"FAILED: httpx_client() added more than {_THREADS_ADDED} threads")
        sys.exit(1)


if __name__ == "__main__":
    main()
