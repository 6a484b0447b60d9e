"""guard_stream's cost and reaction time, measured side by side in one run.

1. Throughput: a source of 200,000 small items consumed directly and through
   guard_stream (rounds alternate; best of each), for a bare source and for one
   that does a little parsing per item, at the default max_buffered and 4x it.
   Prints items/s, the ratio of the best runs and the median of paired ratios.
2. Idle detection latency: 200 stalls (one item, then silence) with
   idle_timeout=0.05 s on a real socketpair; how late StreamIdleTimeout fires
   after the limit (median, p99).
3. Release: time from the timeout until the reader thread has exited, with an
   on_timeout that shuts down the socket the reader is blocked on.

Run: ``python benchmarks/handoff.py`` (about 25 s; stops by itself).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import socket
import statistics
import threading
import time
from typing import Iterable, Iterator, List, Tuple

from watchdog_sync import StreamIdleTimeout, guard_stream
from watchdog_sync.testing import READER_THREAD_NAME

DEFAULT_MAX_BUFFERED: int = inspect.signature(guard_stream).parameters["max_buffered"].default

LINE = b'data: {"id":"c1","choices":[{"delta":{"content":"hi"}}]}\n'


def bare(n: int) -> Iterator[bytes]:
    line = LINE
    for _ in range(n):
        yield line


def parsing(n: int) -> Iterator[bytes]:
    line = LINE
    for _ in range(n):
        field, _, value = line.partition(b":")
        if field == b"data":
            yield value.strip()


def consume(items: Iterable[bytes]) -> int:
    count = 0
    for _ in items:
        count += 1
    return count


def timed(items: Iterable[bytes], n: int) -> Tuple[float, float]:
    """Wall-clock and process CPU seconds (both threads) to consume ``items``."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    assert consume(items) == n
    return time.perf_counter() - wall, time.process_time() - cpu


def throughput(n: int, rounds: int, max_buffered: List[int]) -> None:
    """Direct and guarded runs alternate, so that both see the same machine load."""
    print(
        f"throughput: {n:,} items, {rounds} rounds; best-of rates, ratio of the bests "
        "(median of paired ratios), and the same ratio in CPU time"
    )
    for name, source in (("bare", bare), ("parsing", parsing)):
        for size in max_buffered:
            direct: List[Tuple[float, float]] = []
            guarded: List[Tuple[float, float]] = []
            for _ in range(rounds):
                direct.append(timed(source(n), n))
                guarded.append(
                    timed(guard_stream(source(n), idle_timeout=60, max_buffered=size), n)
                )
            best_d = min(wall for wall, _ in direct)
            best_g = min(wall for wall, _ in guarded)
            paired = statistics.median(d[0] / g[0] for d, g in zip(direct, guarded))
            cpu = min(c for _, c in direct) / min(c for _, c in guarded)
            print(
                f"  {name:8s} max_buffered={size:<5d} direct {n / best_d / 1e6:5.2f} M items/s"
                f"  guarded {n / best_g / 1e6:5.2f} M items/s"
                f"  ratio {best_d / best_g:.2f}x ({paired:.2f}x)  cpu {cpu:.2f}x"
            )


def one_stall(idle: float) -> Tuple[float, float]:
    """Latency past the idle limit, and timeout-to-reader-exit, for one stall after one item."""
    sock, peer = socket.socketpair()
    try:

        def chunks() -> Iterator[bytes]:
            while True:
                data = sock.recv(1024)
                if not data:
                    return
                yield data

        peer.sendall(b"x")
        stream = guard_stream(
            chunks(), idle_timeout=idle, on_timeout=lambda: sock.shutdown(socket.SHUT_RDWR)
        )
        next(stream)
        # This stream's reader thread: the one reader alive (a stall at a time).
        (reader,) = [t for t in threading.enumerate() if t.name == READER_THREAD_NAME]
        waiting_from = time.perf_counter()
        try:
            next(stream)
        except StreamIdleTimeout:
            fired = time.perf_counter()
        else:
            raise AssertionError("the stall did not time out")
        reader.join(5)
        exited = time.perf_counter()
        assert not reader.is_alive()
        return fired - waiting_from - idle, exited - fired
    finally:
        sock.close()
        peer.close()


def percentile(values: List[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def stalls(count: int, idle: float) -> None:
    late: List[float] = []
    release: List[float] = []
    for _ in range(count):
        delay, exit_after = one_stall(idle)
        late.append(delay)
        release.append(exit_after)
    ms = 1000.0
    print(f"idle detection: {count} stalls, idle_timeout={idle}s")
    print(
        f"  fired after the limit: median {statistics.median(late) * ms:.2f} ms, "
        f"p99 {percentile(late, 99) * ms:.2f} ms, max {max(late) * ms:.2f} ms"
    )
    print(
        f"  timeout -> reader thread exited: median {statistics.median(release) * ms:.2f} ms, "
        f"p99 {percentile(release, 99) * ms:.2f} ms, max {max(release) * ms:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--max-buffered",
        type=int,
        nargs="+",
        default=[DEFAULT_MAX_BUFFERED, 4 * DEFAULT_MAX_BUFFERED],
    )
    parser.add_argument("--stalls", type=int, default=200)
    parser.add_argument("--idle", type=float, default=0.05)
    args = parser.parse_args()
    throughput(args.items, args.rounds, args.max_buffered)
    stalls(args.stalls, args.idle)


if __name__ == "__main__":
    main()
