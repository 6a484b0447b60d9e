"""watchdog_sync.ray.run_samples beside plain ray.remote + ray.get, on one local Ray cluster.

N short samples (default 1,000; each returns its item, or first sleeps ``--work-ms``) run
both ways on the same cluster (``ray.init(num_cpus=2)`` on 127.0.0.1), interleaved for
``--rounds`` rounds:

* plain: ``ray.get([task.remote(i) for i in range(N)])``, every task sent at once;
* run_samples: ``list(run_samples(sample, range(N), timeout=10))``: each sample under
  ``run_sample``'s hard timeout on a runner actor, at most one per CPU at once.

Printed (medians over the rounds): each way's wall time and samples/s, the throughput
ratio (plain time / run_samples time; the goal is >= 0.9), the per-sample overhead in µs
((run_samples - plain) / N), and the same without the runners' start-up (run_samples'
time to its first result, from a run of one sample per CPU, taken off).

Run: ``python benchmarks/ray_samples.py [--samples 1000] [--rounds 3] [--work-ms 0]``
(about 30 s; the ``ray`` extra).
"""

from __future__ import annotations

import argparse
import os

# Before Ray is imported: a throwaway local cluster, on loopback only, without auth.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import statistics
import time
from typing import Any, Callable, Dict, List

import ray

import watchdog_sync.ray as wsray

CPUS = 2


def sample(item: int, work: float = 0.0) -> int:
    """One short sample."""
    if work > 0:
        time.sleep(work)
    return item


def _plain(count: int, work: float) -> float:
    task = ray.remote(num_cpus=1)(sample)
    started = time.perf_counter()
    values = ray.get([task.remote(i, work) for i in range(count)])
    elapsed = time.perf_counter() - started
    assert values == list(range(count))
    return elapsed


def _samples(count: int, work: float) -> float:
    fn: Callable[[int], int] = lambda item: sample(item, work)  # noqa: E731 - pickled by value
    started = time.perf_counter()
    results = list(wsray.run_samples(fn, range(count), timeout=10))
    elapsed = time.perf_counter() - started
    assert sorted(index for index, _ in results) == list(range(count))
    assert all(result.ok for _, result in results)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work-ms", type=float, default=0.0)
    args = parser.parse_args()
    work = args.work_ms / 1000.0
    ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    try:
        _plain(CPUS * 4, work)  # warm the workers and the function export
        times: Dict[str, List[float]] = {"plain": [], "run_samples": [], "start": []}
        for _ in range(args.rounds):
            times["plain"].append(_plain(args.samples, work))
            times["run_samples"].append(_samples(args.samples, work))
            times["start"].append(_samples(CPUS, work))  # the runners' start and one sample each
        report(args.samples, work, {key: statistics.median(v) for key, v in times.items()})
    finally:
        ray.shutdown()


def report(count: int, work: float, median: Dict[str, Any]) -> None:
    plain, ours, start = median["plain"], median["run_samples"], median["start"]
    print(f"{count} samples of {work * 1000:g} ms on {CPUS} CPUs, ray {ray.__version__}")
    print(f"plain ray.remote + ray.get: {plain:.3f} s ({count / plain:,.0f} samples/s)")
    print(f"run_samples:                {ours:.3f} s ({count / ours:,.0f} samples/s)")
    print(f"throughput ratio (plain time / run_samples time): {plain / ours:.2f}x")
    print(f"per-sample overhead: {(ours - plain) / count * 1e6:,.0f} us")
    steady = ours - start
    print(
        f"runners' start-up (a run of {CPUS} samples): {start:.3f} s; without it: "
        f"ratio {plain / steady:.2f}x, overhead {(steady - plain) / count * 1e6:,.0f} us/sample"
    )


if __name__ == "__main__":
    main()
