"""The cost of WatchdogSyncInstrumentor: guarded streams with and without it, interleaved.

Usage: python benchmarks/otel_overhead.py [--chunks 5000] [--streams 4] [--short 200] [--rounds 7]

A FaultGateway in its own process (so it does not compete for the GIL) serves
the ``ok`` scenario on 127.0.0.1 with no pause between chunks. Each round runs,
in turn (the order alternates), (a) ChatClient streams without telemetry and
(b) the same with the instrumentor on an SDK TracerProvider (batch span
processor, an exporter that drops spans) and MeterProvider (in-memory reader).
Prints the median events/s of long streams (``--streams`` of ``--chunks`` chunks)
and calls/s of short ones (``--short`` streams of 5 chunks), and the ratios (b)/(a).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from typing import Any, Callable, Dict, List, Sequence

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--short", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
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


if __name__ == "__main__":
    main()
