"""guard_stream's cost and reaction time, measured side by side in one run.

1. Throughput: a source of 200,000 small items consumed directly and through
   guard_stream (best of several rounds each), for a bare source and for one
   that does a little parsing per item. Prints items/s and guarded/direct.
2. Idle detection latency: 200 stalls (one item, then silence) with
   idle_timeout=0.05 s on a real socketpair; how late StreamIdleTimeout fires
   after the limit (median, p99).
3. Release: time from the timeout until the reader thread has exited, with an
   on_timeout that shuts down the socket the reader is blocked on.

Run: ``python benchmarks/handoff.py`` (about 20 s; stops by itself).
"""

from __future__ import annotations

import argparse
import gc
import socket
import statistics
import time
from typing import Callable, Iterable, Iterator, List, Tuple

from watchdog_sync import StreamIdleTimeout
from watchdog_sync._stream import guard_stream

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


def rate(make: Callable[[], Iterable[bytes]], n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        items = make()
        started = time.perf_counter()
        assert consume(items) == n
        best = min(best, time.perf_counter() - started)
    return n / best


def throughput(n: int, rounds: int) -> None:
    print(f"throughput: {n:,} items, best of {rounds} rounds")
    for name, source in (("bare", bare), ("parsing", parsing)):
        direct = rate(lambda s=source: s(n), n, rounds)  # type: ignore[misc]
        guarded = rate(lambda s=source: guard_stream(s(n), idle_timeout=60), n, rounds)  # type: ignore[misc]
        print(
            f"  {name:8s} direct {direct / 1e6:6.2f} M items/s   guarded {guarded / 1e6:6.2f} M items/s"
            f"   ratio {guarded / direct:.2f}x"
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
        waiting_from = time.perf_counter()
        try:
            next(stream)
        except StreamIdleTimeout:
            fired = time.perf_counter()
        else:
            raise AssertionError("the stall did not time out")
        reader = stream._channel._thread
        assert reader is not None
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
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--stalls", type=int, default=200)
    parser.add_argument("--idle", type=float, default=0.05)
    args = parser.parse_args()
    throughput(args.items, args.rounds)
    stalls(args.stalls, args.idle)


if __name__ == "__main__":
    main()
