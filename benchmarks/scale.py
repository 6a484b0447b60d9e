"""Many concurrent guarded streams vs plain requests + sseclient-py, side by side.

Usage: python benchmarks/scale.py [--streams 1,10,100,300] [--events 200] [--gap 0.005] [--rounds 5]
                                  [--trickle 0] [--trickle-every 0.3]

A selector-based server in its own process (so it does not compete for the GIL)
holds every connection and sends each stream ``--events`` small events,
``--gap`` seconds apart, as a gateway sends tokens; each event carries the
server's ``time.monotonic()`` at sending (both processes read the same
CLOCK_MONOTONIC on Linux). For each N, a fresh client process opens N streams at
once from a thread pool, once with ``stream_sse`` and once with plain
``requests`` + sseclient-py, and reports total events/s, event latency (arrival
minus send time: median, and each stream's p99), peak threads, RSS, when the last of the N
streams opened at once reached the server ("last open": the total events/s counts from the
start, so it falls as the last open comes later), and (on Linux,
from the per-thread counters) the CPU of the callers' own threads beside the rest of
the process and how often a caller's thread went to sleep per event. It
checks that the guarded streams add at most 5 threads (the shared watchdog thread;
code before issue 36 also had its shared reader; a per-stream reader thread still
counts, so code with one per stream fails from N = 5 on). With ``--trickle K``, once the N streams have
started, K more open one at a time, one every ``--trickle-every`` seconds, as a
service's requests come in beside the streams it holds (their events counted too).
Loopback only; every run has a time limit.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

from _scale_server import (
    EventServer,
    Sampler,
    cpu_seconds,
    percentile,
    raise_nofile,
    run_worker,
    serving,
)

_WORKER_SECONDS = 180.0  # one client process (one N, one implementation)
_STREAM_IDLE = 30.0
_SHARED_READER = "watchdog_sync-shared-reader"  # code before issue 36: one thread for many
_THREADS_ADDED = 5  # at most this many threads beyond the callers' (the issue's goal)


def _event_chunk(index: int) -> bytes:
    payload = b'data: {"t":%.6f,"i":%d,"choices":[{"delta":{"content":"tok"}}]}\n\n' % (
        time.monotonic(),
        index,
    )
    return b"%x\r\n%s\r\n" % (len(payload), payload)


# -- a client process: one implementation, N streams ------------------------------


def _rss_kib(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _caller_threads() -> Tuple[float, int]:
    """CPU seconds and voluntary context switches of the pool's threads (the callers), from
    Linux's per-thread counters; (nan, 0) elsewhere."""
    seconds, switches = 0.0, 0
    for thread in threading.enumerate():
        if not thread.name.startswith("ThreadPoolExecutor") or thread.native_id is None:
            continue
        try:
            with open(f"/proc/self/task/{thread.native_id}/schedstat") as stat:
                seconds += int(stat.read().split()[0]) / 1e9
            with open(f"/proc/self/task/{thread.native_id}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches:"):
                        switches += int(line.split()[1])
        except OSError:
            return float("nan"), 0
    return seconds, switches


def _send_time(data: str) -> float:
    return float(data[5 : data.index(",")])  # data is '{"t":<seconds>,"i":...'


# One stream's events: when the server sent its first (on this process's clock: the time
# its request reached the server), and each event's latency.
Stream = Tuple[float, List[float]]


def _plain(url: str) -> Stream:
    import requests
    import sseclient

    sent: List[float] = []
    lags: List[float] = []
    with requests.post(url, json={}, stream=True, timeout=(10, _STREAM_IDLE)) as response:
        for event in sseclient.SSEClient(response).events():
            sent.append(_send_time(event.data))
            lags.append(time.monotonic() - sent[-1])
    return sent[0], lags


def _guarded(url: str) -> Stream:
    """Under a deadline, as a chat call runs: the shared watchdog thread serves every stream."""
    from watchdog_sync import deadline, stream_sse

    sent: List[float] = []
    lags: List[float] = []
    with deadline(_WORKER_SECONDS):
        for event in stream_sse(url, json={}, idle_timeout=_STREAM_IDLE):
            sent.append(_send_time(event.data))
            lags.append(time.monotonic() - sent[-1])
    return sent[0], lags


class _Monitor(Sampler):
    """Samples threads and RSS every few milliseconds while the load runs."""

    def __init__(self, baseline_threads: int) -> None:
        from watchdog_sync.testing import READER_THREAD_NAME, WATCHDOG_THREAD_NAME

        super().__init__("bench-monitor")
        self._reader_name = READER_THREAD_NAME
        self._watchdog_name = WATCHDOG_THREAD_NAME
        self._baseline = baseline_threads
        self.peak_threads = 0
        self.peak_extra = 0  # threads beyond the pool's and the baseline's
        self.peak_readers = 0
        self.peak_watchdogs = 0
        self.peak_rss_kib = 0
        self.foreign: List[str] = []

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(0.005):
                return

    def sample(self) -> None:
        threads = threading.enumerate()
        names = [t.name for t in threads]
        pool = sum(1 for n in names if n.startswith("ThreadPoolExecutor"))
        readers = names.count(self._reader_name)
        watchdogs = names.count(self._watchdog_name)
        self.foreign.extend(
            n
            for n in names
            if n.startswith("watchdog_sync")
            and n not in (self._reader_name, self._watchdog_name, _SHARED_READER)
        )
        self.peak_threads = max(self.peak_threads, len(threads))
        self.peak_extra = max(self.peak_extra, len(threads) - pool - self._baseline)
        self.peak_readers = max(self.peak_readers, readers)
        self.peak_watchdogs = max(self.peak_watchdogs, watchdogs)
        self.peak_rss_kib = max(self.peak_rss_kib, _rss_kib())


class _Live:
    """How many streams are open at once (the pool's threads all start before the clock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def run(self, fn: Callable[[str], Stream], url: str) -> Stream:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            return fn(url)
        finally:
            with self._lock:
                self.now -= 1


def _worker(impl: str, streams: int, url: str, trickle: int, every: float) -> Dict[str, Any]:
    """``streams`` opened at once; then, with ``trickle``, one more every ``every`` seconds."""
    raise_nofile((streams + trickle) * 2 + 256)
    fn: Callable[[str], Stream] = _guarded if impl == "guarded" else _plain
    import requests  # noqa: F401  (imports before the baseline, for both implementations)
    import sseclient  # noqa: F401

    import watchdog_sync  # noqa: F401

    live = _Live()
    start = threading.Barrier(streams + 1)

    def task() -> Stream:
        start.wait(60)
        return live.run(fn, url)

    rss_before = _rss_kib()
    with concurrent.futures.ThreadPoolExecutor(max_workers=streams + trickle) as pool:
        futures = [pool.submit(task) for _ in range(streams)]  # every pool thread now exists
        with _Monitor(threading.active_count() - streams + 1) as monitor:
            callers_before = _caller_threads()
            start.wait(60)
            started = time.perf_counter()
            opened = time.monotonic()
            cpu_before = cpu_seconds()
            for n in range(trickle):  # opens that come one at a time, beside the open streams
                time.sleep(max(0.0, started + (n + 1) * every - time.perf_counter()))
                futures.append(pool.submit(live.run, fn, url))
            streams_done: List[Stream] = []
            errors: List[str] = []
            for future in futures:
                try:
                    streams_done.append(future.result(timeout=_WORKER_SECONDS))
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds() - cpu_before
            callers_after = _caller_threads()
    results = [lags for _, lags in streams_done]
    all_lags = sorted(lag for lags in results for lag in lags)
    stream_p99 = sorted(percentile(sorted(lags), 0.99) for lags in results if lags)
    return {
        "events": len(all_lags),
        "errors": errors,
        "elapsed": elapsed,
        "rate": len(all_lags) / elapsed,
        # The last of the streams opened at once to reach the server (trickled ones aside).
        "last_open": max(first for first, _ in streams_done[:streams]) - opened,
        "cpu_us_per_event": cpu / max(1, len(all_lags)) * 1e6,
        # The callers' own threads, and everything else (watchdog, monitor):
        "caller_cpu_us_per_event": (callers_after[0] - callers_before[0])
        / max(1, len(all_lags))
        * 1e6,
        "caller_switches_per_event": (callers_after[1] - callers_before[1]) / max(1, len(all_lags)),
        "p50": percentile(all_lags, 0.5),
        "stream_p99_median": percentile(stream_p99, 0.5),
        "stream_p99_worst": stream_p99[-1] if stream_p99 else float("nan"),
        "peak_live": live.peak,
        "peak_threads": monitor.peak_threads,
        "peak_extra": monitor.peak_extra,
        "peak_readers": monitor.peak_readers,
        "peak_watchdogs": monitor.peak_watchdogs,
        "foreign": sorted(set(monitor.foreign)),
        "rss_before_mib": rss_before / 1024,
        "rss_peak_mib": max(monitor.peak_rss_kib, _rss_kib("VmHWM")) / 1024,
    }


# -- the driver --------------------------------------------------------------------


def _median(runs: List[Dict[str, Any]], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def _row(streams: int, impl: str, runs: List[Dict[str, Any]]) -> str:
    return (
        f"| {streams} | {impl} | {_median(runs, 'rate'):,.0f} "
        f"| {_median(runs, 'cpu_us_per_event'):.0f} | {_median(runs, 'p50') * 1000:.2f} "
        f"| {_median(runs, 'stream_p99_median') * 1000:.2f} / "
        f"{_median(runs, 'stream_p99_worst') * 1000:.2f} "
        f"| {_median(runs, 'peak_live'):.0f} | {max(r['peak_threads'] for r in runs)} "
        f"| {_median(runs, 'rss_peak_mib'):.1f} "
        f"(+{_median(runs, 'rss_peak_mib') - _median(runs, 'rss_before_mib'):.1f}) "
        f"| {_median(runs, 'last_open'):.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", default="1,10,100,300")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.005)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trickle", type=int, default=0)
    parser.add_argument("--trickle-every", type=float, default=0.3)
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        impl, streams, url, trickle, every = args.worker
        print(json.dumps(_worker(impl, int(streams), url, int(trickle), float(every))))
        return
    counts = [int(n) for n in args.streams.split(",")]
    ideal = 1 / args.gap
    print(
        f"{args.events} events per stream, {args.gap * 1000:g} ms apart (ideal {ideal:,.0f} "
        f"events/s per stream); median of {args.rounds} rounds (peak threads: the highest), "
        "each run in a fresh process"
    )
    rows: List[str] = []
    ratios: List[str] = []
    checks: List[str] = []
    split: List[str] = []
    failed = False
    with serving(
        lambda sock: EventServer(sock, args.events, args.gap, _event_chunk),
        max(counts) + args.trickle,
    ) as url:
        for streams in counts:
            runs: Dict[str, List[Dict[str, Any]]] = {"plain": [], "guarded": []}
            for round_ in range(args.rounds):
                order = ("plain", "guarded") if round_ % 2 == 0 else ("guarded", "plain")
                for impl in order:
                    label = f"{impl} N={streams}"
                    worker_args = [
                        impl,
                        str(streams),
                        url,
                        str(args.trickle),
                        str(args.trickle_every),
                    ]
                    result = run_worker(__file__, worker_args, _WORKER_SECONDS, label)
                    if (
                        result["errors"]
                        or result["events"] != (streams + args.trickle) * args.events
                    ):
                        raise RuntimeError(f"{impl} N={streams}: {result['errors'][:3]}")
                    runs[impl].append(result)
            plain, guarded = runs["plain"], runs["guarded"]
            rows.append(_row(streams, "requests + sseclient-py", plain))
            rows.append(_row(streams, "stream_sse", guarded))
            extra = max(r["peak_extra"] for r in guarded) - max(r["peak_extra"] for r in plain)
            readers = max(r["peak_readers"] for r in guarded)
            watchdogs = max(r["peak_watchdogs"] for r in guarded)
            foreign = sorted({n for r in guarded for n in r["foreign"]})
            ok = extra <= _THREADS_ADDED and watchdogs <= 1 and not foreign
            failed = failed or not ok
            checks.append(
                f"N={streams}: extra threads {extra} (limit {_THREADS_ADDED}), reader threads "
                f"{readers}, watchdog threads {watchdogs}"
                + (f", unexpected {foreign}" if foreign else "")
                + (": OK" if ok else ": FAILED")
            )
            for name, runs_ in (("requests + sseclient-py", plain), ("stream_sse", guarded)):
                callers = _median(runs_, "caller_cpu_us_per_event")
                split.append(
                    f"| {streams} | {name} | {callers:.1f} "
                    f"| {_median(runs_, 'cpu_us_per_event') - callers:.1f} "
                    f"| {_median(runs_, 'caller_switches_per_event'):.2f} |"
                )
            ratios.append(
                f"| {streams} | {_median(guarded, 'rate') / _median(plain, 'rate'):.2f} "
                f"| {_median(guarded, 'cpu_us_per_event') / _median(plain, 'cpu_us_per_event'):.2f} "
                f"| {_median(guarded, 'stream_p99_median') / _median(plain, 'stream_p99_median'):.2f} "
                f"| +{max(r['peak_threads'] for r in guarded) - max(r['peak_threads'] for r in plain)} "
                f"| {_median(guarded, 'rss_peak_mib') / _median(plain, 'rss_peak_mib'):.2f} |"
            )
    print()
    print(
        "| N | client | events/s | CPU µs/event | latency p50 (ms) | per-stream p99 (ms): median / worst "
        "| streams open at once | peak threads | RSS peak MiB (+ during load) | last open (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print()
    print(
        "| N | events/s ratio | CPU/event ratio | per-stream p99 ratio | threads added | RSS ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(ratios))
    print()
    print(
        "Where the CPU goes (Linux's per-thread counters; medians): the callers' threads, the "
        "rest of the process (watchdog, this benchmark's monitor), and how often "
        "a caller's thread went to sleep"
    )
    print()
    print("| N | client | callers µs/event | rest µs/event | caller sleeps/event |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(split))
    print()
    print(f"Threads added by the watchdog (at most {_THREADS_ADDED}: the watchdog):")
    print("\n".join(checks))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
