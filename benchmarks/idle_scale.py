"""Idle detection at scale: how late StreamIdleTimeout reaches N callers at once.

Usage: python benchmarks/idle_scale.py [--streams 1,10,100,300] [--idle 0.5] [--events 3]
       [--gap 0.01] [--rounds 3] [--samples 120] [--as-connected] [--quick]

A selector-based server in its own process (so it does not compete for the GIL)
answers every request with at least ``--events`` small events, ``--gap`` seconds
apart, and then goes silent with the connection open until the client leaves.
For each N, a fresh client process opens N streams at once (one thread each,
started together by a barrier), once with ``stream_sse(idle_timeout=I)`` under a
deadline, as a chat call runs, and once with plain ``requests`` + sseclient-py
with a read (socket) timeout of I. By default a wave's streams fall silent
together, as when a provider stalls every stream at once: each request names
the moment (``?silent_at=``, on the CLOCK_MONOTONIC both processes read), and
the server goes on sending events until then, so all N idle limits fall due
within a few ms. With ``--as-connected`` each stream falls silent after its own
``--events``, so the limits fall due as the connections were made.

Per stream, overshoot = the moment the timeout error reached the caller (its
``except``) minus (the last event's arrival, as the consumer got it, + I). A
process runs enough waves of N streams to give at least ``--samples`` per client
and N over all rounds; the rounds alternate the order of the two clients. Beside
them, a probe thread that sleeps 1 ms at a time records how late it wakes while
the timeouts fall due: the scheduling delay any thread of the process sees then.

Loopback only; the server and every client process have a time limit.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from _scale_server import (
    HEAD,
    Conn,
    Sampler,
    SelectorServer,
    raise_nofile,
    request_complete,
    run_worker,
    serving,
)

_WORKER_SECONDS = 240.0  # one client process (one N, one client, all its waves)
_FIRST_EVENT = 10.0  # the wait for the first event is not what is measured
_PROBE_SLEEP = 0.001
_LEAD, _LEAD_PER_STREAM = 0.05, 0.003  # time to open the wave's streams before the silence
_GOALS = {1: 0.005, 300: 0.030}  # issue 15: overshoot p99 at N = 1 and N = 300
_CLIENTS = ("plain", "guarded")
_LABELS = {"plain": "requests + sseclient-py", "guarded": "stream_sse"}


# -- the server (its own process) ------------------------------------------------


def _silent_at(request: bytes) -> float:
    """The request line's ``?silent_at=<time.monotonic()>``, or 0."""
    target = request.split(b"\r\n", 1)[0].split(b" ")[1] if b" " in request else b""
    _, found, value = target.partition(b"silent_at=")
    return float(value.split(b"&")[0]) if found else 0.0


def _event_chunk(index: int) -> bytes:
    payload = b'data: {"i":%d,"choices":[{"delta":{"content":"tok"}}]}\n\n' % index
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _SilentServer(SelectorServer):
    """Answers each request with its events on schedule, then holds it silent until the
    client closes (or resets) the connection."""

    def __init__(self, listener: socket.socket, events: int, gap: float) -> None:
        super().__init__(listener)
        self._events = events
        self._gap = gap

    def on_read(self, conn: Conn, piece: bytes) -> None:
        if not piece:  # the client left (a timeout's shutdown resets: that too)
            self.selector.unregister(conn.sock)
            conn.sock.close()
            conn.sent, conn.silent_at = self._events, 0.0  # a queued event finds it gone
            return
        if conn.answered:
            return
        conn.request += piece
        if not request_complete(conn.request):
            return
        conn.answered = True
        conn.silent_at = _silent_at(conn.request)
        self.schedule(time.monotonic(), conn)

    def on_due(self, when: float, tie: int, conn: Conn) -> None:
        if conn.sent >= self._events and when >= conn.silent_at:
            return  # already silent
        try:  # small writes into an empty socket buffer: they never wait
            data = _event_chunk(conn.sent)
            conn.sock.send(HEAD + data if conn.sent == 0 else data)
        except OSError:
            return  # the read side sees the end and closes it
        conn.sent += 1
        if conn.sent < self._events:
            self.schedule(when + self._gap, conn, tie)
        elif when < conn.silent_at:  # more, until the wave's moment of silence
            self.schedule(min(when + self._gap, conn.silent_at), conn, tie)


# -- a client process: one client, waves of N streams ------------------------------


# One stream's record: (events received, last event's arrival, error's arrival, error name).
_Record = Tuple[int, float, float, str]


def overshoot(record: _Record, idle: float) -> float:
    """How late the timeout reached the caller: raised - (last event + idle), in seconds."""
    _, last, raised, _ = record
    return raised - (last + idle)


def _plain(url: str, idle: float) -> _Record:
    import requests
    import sseclient
    import urllib3

    last = math.nan
    count = 0
    with requests.post(url, json={}, stream=True, timeout=(10, idle)) as response:
        try:
            for _ in sseclient.SSEClient(response).events():
                last = time.monotonic()
                count += 1
        except requests.ConnectionError as exc:  # requests wraps urllib3's ReadTimeoutError
            raised = time.monotonic()
            timed_out = isinstance(
                exc.args[:1] and exc.args[0], urllib3.exceptions.ReadTimeoutError
            )
            return count, last, raised, "read timeout" if timed_out else repr(exc)
    return count, last, math.nan, "ended without a timeout"


def _guarded(url: str, idle: float) -> _Record:
    from watchdog_sync import StreamIdleTimeout, deadline, stream_sse

    last = math.nan
    count = 0
    with (
        deadline(_WORKER_SECONDS),
        stream_sse(url, json={}, idle_timeout=idle, first_event_timeout=_FIRST_EVENT) as stream,
    ):
        try:
            for _ in stream:
                last = time.monotonic()
                count += 1
        except StreamIdleTimeout:
            return count, last, time.monotonic(), "read timeout"
    return count, last, math.nan, "ended without a timeout"


class _Probe(Sampler):
    """A thread that sleeps 1 ms at a time and records (woke at, how late)."""

    def __init__(self) -> None:
        super().__init__("bench-probe")
        self.samples: List[Tuple[float, float]] = []

    def _run(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(_PROBE_SLEEP)
            after = time.monotonic()
            self.samples.append((after, after - before - _PROBE_SLEEP))


def _wave(
    fn: Callable[[str, float], _Record], streams: int, url: str, idle: float, together: bool
) -> Tuple[List[_Record], List[str]]:
    target = [url]

    def aim() -> None:  # once every thread is ready: the moment every stream falls silent
        silent_at = time.monotonic() + _LEAD + _LEAD_PER_STREAM * streams
        target[0] = f"{url}?silent_at={silent_at:.6f}"

    start = threading.Barrier(streams, action=aim if together else None)
    records: List[_Record] = []
    errors: List[str] = []
    lock = threading.Lock()

    def one() -> None:
        start.wait(60)
        try:
            record = fn(target[0], idle)
        except Exception as exc:
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
            return
        with lock:
            records.append(record)

    threads = [threading.Thread(target=one, name=f"bench-stream-{i}") for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(_WORKER_SECONDS)
    return records, errors


def _worker(
    client: str, streams: int, waves: int, events: int, idle: float, together: bool, url: str
) -> Dict[str, Any]:
    raise_nofile(streams * 2 + 256)
    import requests  # noqa: F401  (both clients import both, as in scale.py)
    import sseclient  # noqa: F401

    import watchdog_sync  # noqa: F401

    fn = _guarded if client == "guarded" else _plain
    overshoots: List[float] = []
    late: List[float] = []
    spreads: List[float] = []
    errors: List[str] = []
    with _Probe() as probe:
        for _ in range(waves):
            records, wave_errors = _wave(fn, streams, url, idle, together)
            errors += wave_errors
            good = [r for r in records if r[0] >= events and r[3] == "read timeout"]
            errors += [f"{r[0]} events, then {r[3]}" for r in records if r not in good]
            overshoots += [overshoot(r, idle) for r in good]
            if good:  # the probe's wake-ups while this wave's timeouts fell due
                due_from = min(r[1] for r in good) + idle
                due_to = max(r[2] for r in good)
                spreads.append(max(r[1] for r in good) + idle - due_from)
                late += [lag for at, lag in probe.samples if due_from <= at <= due_to + 0.001]
            probe.samples.clear()
    return {"overshoots": overshoots, "probe_late": late, "spreads": spreads, "errors": errors[:20]}


# -- the driver --------------------------------------------------------------------


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` of the sorted samples (nearest rank, rounding up)."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(len(ordered), rank) - 1]


def _run_worker(
    client: str, streams: int, waves: int, args: argparse.Namespace, url: str
) -> Dict[str, Any]:
    worker = [client, str(streams), str(waves), str(args.events), repr(args.idle),
              str(int(not args.as_connected)), url]  # fmt: skip
    return run_worker(__file__, worker, _WORKER_SECONDS, f"{client} N={streams}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _row(streams: int, client: str, got: Dict[str, List[Any]]) -> str:
    o, p = sorted(got["overshoots"]), sorted(got["probe_late"])
    spread = statistics.median(got["spreads"]) if got["spreads"] else math.nan
    return (
        f"| {streams} | {_LABELS[client]} | {len(o)} | {_ms(spread)} | {_ms(_percentile(o, 0.5))} "
        f"| {_ms(_percentile(o, 0.99))} | {_ms(o[-1] if o else math.nan)} "
        f"| {_ms(_percentile(p, 0.99))} / {_ms(p[-1] if p else math.nan)} | {len(got['errors'])} |"
    )


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", default="1,10,100,300", help="values of N (1,10,100,300)")
    parser.add_argument("--idle", type=float, default=0.5, help="the idle limit I, seconds (0.5)")
    parser.add_argument("--events", type=int, default=3, help="events before the silence (3)")
    parser.add_argument("--gap", type=float, default=0.01, help="seconds between them (0.01)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per N and client (3)")
    parser.add_argument(
        "--samples", type=int, default=120, help="at least this many streams per N and client (120)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: N = 1,5, I = 0.2 s, 6 samples, 1 round"
    )
    parser.add_argument(
        "--as-connected",
        action="store_true",
        help="each stream falls silent after its own events (default: a wave's streams all at once)",
    )
    parser.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.streams, args.idle, args.samples, args.rounds = "1,5", 0.2, 6, 1
    if args.idle <= 0 or args.events < 1 or args.rounds < 1 or args.samples < 1:
        parser.error("--idle must be > 0; --events, --rounds and --samples at least 1")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parse(argv)
    if args.worker:
        client, streams, waves, events, idle, together, url = args.worker
        result = _worker(
            client, int(streams), int(waves), int(events), float(idle), together == "1", url
        )
        print(json.dumps(result))
        return 0
    counts = [int(n) for n in args.streams.split(",")]
    print(
        f"{args.events} events {args.gap * 1000:g} ms apart, then silence; idle limit "
        f"I = {args.idle:g} s; {args.rounds} rounds per N and client, each a fresh process; "
        + (
            "each stream silent after its own events"
            if args.as_connected
            else "a wave's streams all silent at once (their last events sent together)"
        )
    )
    rows: List[str] = []
    goals: List[str] = []
    failed = False
    with serving(lambda sock: _SilentServer(sock, args.events, args.gap), max(counts)) as url:
        for streams in counts:
            waves = max(1, math.ceil(args.samples / (streams * args.rounds)))
            got: Dict[str, Dict[str, List[Any]]] = {
                c: {"overshoots": [], "probe_late": [], "spreads": [], "errors": []}
                for c in _CLIENTS
            }
            for round_ in range(args.rounds):
                for client in _CLIENTS if round_ % 2 == 0 else _CLIENTS[::-1]:
                    result = _run_worker(client, streams, waves, args, url)
                    for key, values in got[client].items():
                        values += result[key]
            for client in _CLIENTS:
                errors = got[client]["errors"]
                failed = failed or bool(errors)
                rows.append(_row(streams, client, got[client]))
                for error in errors[:3]:
                    print(f"N={streams} {_LABELS[client]}: {error}", file=sys.stderr)
            if streams in _GOALS:
                p99 = _percentile(sorted(got["guarded"]["overshoots"]), 0.99)
                verdict = "met" if p99 <= _GOALS[streams] else "MISSED"
                goals.append(
                    f"N={streams}: stream_sse p99 {_ms(p99)} ms (goal <= {_ms(_GOALS[streams])} ms): {verdict}"
                )
    print()
    print(
        "| N | client | streams | timeouts due within (ms) | overshoot p50 (ms) | p99 (ms) "
        "| max (ms) | probe late p99 / max (ms) | errors |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    if goals:
        print()
        print("\n".join(goals))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
