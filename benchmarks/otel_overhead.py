"""The cost of WatchdogSyncInstrumentor: guarded streams with and without it, interleaved.

Usage: python benchmarks/otel_overhead.py [--chunks 5000] [--streams 4] [--short 200] [--rounds 7]

A FaultGateway in its own process (so it does not compete for the GIL) serves
the ``ok`` scenario on 127.0.0.1 with no pause between chunks. Each round runs,
in turn (the order alternates), (a) ChatClient streams without telemetry and
(b) the same with the instrumentor on an SDK TracerProvider (batch span
processor, an exporter that drops spans) and MeterProvider (in-memory reader).
Prints the median events/s of long streams (``--streams`` of ``--chunks`` chunks)
and calls/s of short ones (``--short`` streams of 5 chunks), and the ratios (b)/(a).

``--breakdown``: then where the instrumented short call's time goes, in place: the
listener's span work at a call's start, in between and at its end (the SDK's span,
its events, the duration and time-to-first-chunk records), and the chunk sinks (one
``time_per_output_chunk`` record per chunk after the first), timed with
``perf_counter`` around each (the rest of the added time is the library's own
``call_start`` / ``call_end`` events); and the SDK's costs alone, in a tight loop.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
import timeit
from typing import Any, Callable, Dict, List, Sequence

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

import watchdog_sync as ws
from watchdog_sync.otel import WatchdogSyncInstrumentor
from watchdog_sync.testing import FaultGateway

HELLO = [{"role": "user", "content": "Hello"}]


class _Drop(SpanExporter):
    """Counts spans and keeps none (the cost measured is ours, not an exporter's)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def _serve(conn: Any, seconds: float) -> None:
    """The gateway process: sends the two base URLs, serves until told (or ``seconds``)."""
    with FaultGateway(max_connections=8) as gw:
        conn.send(
            {
                "long": gw.base_url("ok", chunks=10_000, interval=0.0),
                "short": gw.base_url("ok", chunks=5, interval=0.0),
            }
        )
        conn.poll(seconds)


def _long(client: ws.ChatClient, streams: int, chunks: int) -> float:
    """Events per second over ``streams`` streams of ``chunks`` chunks (closed early)."""
    got = 0
    started = time.perf_counter()
    for _ in range(streams):
        with client.stream(HELLO) as stream:
            for got_here, _chunk in enumerate(stream, 1):
                if got_here >= chunks:
                    break
            got += got_here
    return got / (time.perf_counter() - started)


def _short(client: ws.ChatClient, calls: int) -> float:
    """Whole short streams per second."""
    started = time.perf_counter()
    for _ in range(calls):
        with client.stream(HELLO) as stream:
            for _chunk in stream:
                pass
    return calls / (time.perf_counter() - started)


_PARTS = {
    "_start": "call_start: the span's start",
    "_during": "attempt_start: a span event",
    "_end": "call_end: the span's end, the duration and time-to-first-chunk records",
    "chunk sinks": "time_per_output_chunk: one record per chunk after the first",
}


def _timed(totals: Dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - started

    return timed


def _breakdown(
    client: ws.ChatClient,
    calls: int,
    instrumentor: WatchdogSyncInstrumentor,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
) -> Dict[str, float]:
    """Microseconds per short call spent in each part of the listener, measured in place."""
    totals: Dict[str, float] = {}
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        listener = instrumentor._listener  # (the benchmark looks inside)
        for part in ("_start", "_during", "_end"):
            setattr(listener, part, _timed(totals, part, getattr(listener, part)))
        instruments = listener._instruments
        per_chunk = instruments.per_chunk

        class _PerChunk:  # what the chunk sinks record into: the histogram, timed
            record = staticmethod(_timed(totals, "chunk sinks", per_chunk.record))

        instruments.per_chunk = _PerChunk()
        _short(client, calls)
    finally:
        instrumentor.uninstrument()
    return {name: seconds / calls * 1e6 for name, seconds in totals.items()}


def _sdk_costs(tracer_provider: TracerProvider, meter_provider: MeterProvider) -> Dict[str, float]:
    """Microseconds per SDK operation as the listener makes them, in a tight loop."""
    tracer = tracer_provider.get_tracer("bench")
    histogram = meter_provider.get_meter("bench").create_histogram("bench", unit="s")
    metric = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "bench",
        "server.address": "127.0.0.1",
        "server.port": 8080,
    }
    start = {
        **metric,
        "gen_ai.request.stream": True,
        "watchdog_sync.stage": "chat",
        "watchdog_sync.request_id": "0123456789abcdef0123456789abcdef",
        "watchdog_sync.idle_timeout": 10.0,
    }
    end = {
        "watchdog_sync.attempts": 1,
        "watchdog_sync.chunks_received": 6,
        "watchdog_sync.budget.remaining": 59.9,
        "watchdog_sync.ended_by": "completed",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.response.time_to_first_chunk": 0.001,
    }
    event = {"attempt": 1, "elapsed_ms": 0.1, "remaining_ms": 59999.0}

    def span() -> None:
        made = tracer.start_span("chat bench", kind=SpanKind.CLIENT, attributes=start)
        made.add_event("watchdog_sync.attempt_start", event)
        made.set_attributes(end)
        made.end()

    def record() -> None:
        histogram.record(0.001, metric)

    n = 5000
    return {
        name: min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
        for name, fn in (
            ("a chat span (start, 1 event, end)", span),
            ("a histogram record", record),
        )
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--short", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--breakdown", action="store_true", help="where the time goes")
    args = parser.parse_args()
    if not 1 <= args.chunks <= 10_000:
        parser.error("--chunks must be between 1 and 10000 (what one gateway stream sends)")

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(child, 600.0), daemon=True)
    server.start()
    try:
        urls: Dict[str, str] = parent.recv()
        exporter = _Drop()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        instrumentor = WatchdogSyncInstrumentor()
        results: Dict[str, Dict[str, List[float]]] = {
            "long": {"off": [], "on": []},
            "short": {"off": [], "on": []},
        }
        long_client = ws.ChatClient(urls["long"], model="bench", idle_timeout=10, timeout=60)
        short_client = ws.ChatClient(urls["short"], model="bench", idle_timeout=10, timeout=60)
        runs: Dict[str, Callable[[], float]] = {
            "long": lambda: _long(long_client, args.streams, args.chunks),
            "short": lambda: _short(short_client, args.short),
        }
        for run in runs.values():
            run()  # warm up connections and code paths
        for round_ in range(args.rounds):
            order = ("off", "on") if round_ % 2 == 0 else ("on", "off")
            for mode in order:
                if mode == "on":
                    instrumentor.instrument(
                        tracer_provider=tracer_provider, meter_provider=meter_provider
                    )
                try:
                    for name, run in runs.items():
                        results[name][mode].append(run())
                finally:
                    if mode == "on":
                        instrumentor.uninstrument()
        parts = (
            _breakdown(short_client, args.short, instrumentor, tracer_provider, meter_provider)
            if args.breakdown
            else {}
        )
        tracer_provider.force_flush()
        long_client.close()
        short_client.close()
    finally:
        parent.send("stop")
        server.join(10)
    print(f"rounds: {args.rounds}, spans exported: {exporter.spans}")
    print("| measure | without | with the instrumentor | ratio (median; min..max) |")
    print("| --- | --- | --- | --- |")
    for name, unit in (("long", "events/s"), ("short", "calls/s")):
        off, on = results[name]["off"], results[name]["on"]
        ratios = [b / a for a, b in zip(off, on)]
        print(
            f"| {name} streams, {unit} | {statistics.median(off):,.0f} | "
            f"{statistics.median(on):,.0f} | **{statistics.median(ratios):.2f}** "
            f"({min(ratios):.2f}..{max(ratios):.2f}) |"
        )
    if args.breakdown:
        off, on = (statistics.median(results["short"][m]) for m in ("off", "on"))
        print(f"\nadded per short call (medians): {1e6 / on - 1e6 / off:.0f} us; of it, in place:")
        for name, micros in parts.items():
            print(f"- {_PARTS[name]}: {micros:.1f} us")
        print("the SDK alone, in a tight loop:")
        for name, micros in _sdk_costs(tracer_provider, meter_provider).items():
            print(f"- {name}: {micros:.1f} us")


if __name__ == "__main__":
    main()
