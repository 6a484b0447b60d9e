"""The idle-detection benchmark at scale still runs (its --quick mode, both clients, real
sockets and processes) and computes what its docstring says; its figures are in
docs/benchmarks.md, never asserted here."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import List

import pytest

from .benchload import BENCHMARKS, load_benchmark

pytestmark = pytest.mark.timeout(120)

_SCRIPT = BENCHMARKS / "idle_scale.py"
bench = load_benchmark("idle_scale")


def test_the_overshoot_is_the_errors_arrival_past_the_last_event_plus_the_limit() -> None:
    record = (3, 10.0, 10.5125, "read timeout")
    assert bench.overshoot(record, 0.5) == pytest.approx(0.0125)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert (bench._percentile(values, 0.5), bench._percentile(values, 0.99)) == (50.0, 99.0)
    assert bench._percentile([7.0], 0.99) == 7.0
    assert math.isnan(bench._percentile([], 0.5))


def test_the_server_reads_the_moment_of_silence_from_the_request_line() -> None:
    request = b"POST /v1/chat/completions?silent_at=123.25 HTTP/1.1\r\nHost: x\r\n\r\n"
    assert bench._silent_at(request) == 123.25
    assert bench._silent_at(b"POST /v1/chat/completions HTTP/1.1\r\n\r\n") == 0.0


@pytest.mark.parametrize("mode", [[], ["--as-connected"]], ids=["together", "as-connected"])
def test_the_quick_run_reports_both_clients_at_each_n_without_errors(mode: List[str]) -> None:
    """Every stream of both clients ended by its read timeout after its events."""
    done = subprocess.run(
        [sys.executable, str(_SCRIPT), "--quick", *mode],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ")]
    measured = {(cells[0].strip(), cells[1].strip()): cells for cells in rows[2:]}
    for n in ("1", "5"):
        for client in ("requests + sseclient-py", "stream_sse"):
            cells = measured[(n, client)]
            assert int(cells[2]) >= 6 and int(cells[-1]) == 0, cells  # streams, errors
            p50, p99, worst = (float(cell) for cell in cells[4:7])
            assert 0 <= p50 <= p99 <= worst < 1000  # ms: measured, ordered, under a second
    assert "N=1: stream_sse p99" in done.stdout
