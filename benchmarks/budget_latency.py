"""Budget latencies: cancel() waking a sleeper, on_done at expiry; threads with many budgets.

Usage: python benchmarks/budget_latency.py [--runs 1000]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import List

from watchdog_sync import Budget, Cancelled


def _percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def cancel_wakeup(runs: int) -> List[float]:
    """Seconds from cancel() to the sleeping thread running again."""
    latencies: List[float] = []
    for _ in range(runs):
        budget = Budget(30)
        asleep = threading.Event()
        woke: List[float] = []

        def sleeper(
            budget: Budget = budget, asleep: threading.Event = asleep, woke: List[float] = woke
        ) -> None:
            asleep.set()
            try:
                budget.sleep(10)
            except Cancelled:
                woke.append(time.perf_counter())

        thread = threading.Thread(target=sleeper)
        thread.start()
        asleep.wait()
        time.sleep(0.001)  # let the sleeper block in its wait
        started = time.perf_counter()
        budget.cancel()
        thread.join(5)
        latencies.append(woke[0] - started)
    return latencies


def on_done_lateness(runs: int) -> List[float]:
    """Seconds between a budget's deadline and its on_done callback running."""
    lateness: List[float] = []
    done = threading.Semaphore(0)
    for _ in range(runs):
        budget = Budget(0.002)
        deadline = budget.deadline
        assert deadline is not None

        def callback(ended: Budget, deadline: float = deadline) -> None:
            lateness.append(time.monotonic() - deadline)
            done.release()

        budget.on_done(callback)
        done.acquire(timeout=5)
    return lateness


def threads_with_live_budgets(count: int) -> int:
    budgets = [Budget(300) for _ in range(count)]
    unregisters = [b.on_done(lambda b: None) for b in budgets]
    threads = threading.active_count()
    for unregister in unregisters:
        unregister()
    return threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    base = threading.active_count()
    with_budgets = threads_with_live_budgets(10_000)
    print(f"threads: {base} before, {with_budgets} with 10,000 live budgets with on_done")
    for name, values in (
        ("cancel() -> sleeper awake", cancel_wakeup(args.runs)),
        ("deadline -> on_done runs", on_done_lateness(args.runs)),
    ):
        median = statistics.median(values) * 1000
        p99 = _percentile(values, 0.99) * 1000
        print(f"{name}: median {median:.3f} ms, p99 {p99:.3f} ms over {len(values)} runs")


if __name__ == "__main__":
    main()
