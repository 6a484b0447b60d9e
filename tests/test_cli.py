"""The watchdog-sync demo: both clients on every incident scenario, one table, exit 0."""

from __future__ import annotations

import io
import time

import pytest

from watchdog_sync.cli import main

from .internals import SCENARIOS, run_demo

pytestmark = pytest.mark.timeout(90)


def test_demo_runs_every_scenario_both_ways_and_exits_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    assert main(["demo"]) == 0
    elapsed = time.monotonic() - started
    out = capsys.readouterr().out
    assert elapsed < 60
    table = out[out.index("scenario ") :]
    for name, _, _ in SCENARIOS:
        assert name in table
    assert f"[{2 * len(SCENARIOS)}/{2 * len(SCENARIOS)}]" in out  # progress while it runs
    assert "still waiting after 10s" in table  # the plain client hangs on the incident
    assert out.rstrip().splitlines()[-1].startswith("Next: the tutorial, docs/tutorial.md")


def test_demo_rows_say_what_watchdog_sync_did() -> None:
    chosen = [s for s in SCENARIOS if s[0] in ("ok", "http429_then_ok", "http401")]
    rows = {row.scenario: row for row in run_demo(io.StringIO(), chosen)}
    assert rows["ok"].ours.startswith("ok, ")
    assert rows["http429_then_ok"].ours.startswith("ok, ")
    assert "2 attempts" in rows["http429_then_ok"].ours
    assert rows["http401"].ours.startswith("HTTPStatusError (auth)")
    assert "1 attempt," in rows["http401"].ours


def test_demo_says_why_a_call_ended_before_its_timeout() -> None:
    """Silence after 200: two attempts and a backoff leave too little time for the next
    backoff; the row and a line under the table say so, and the demo points at the tutorial."""
    chosen = [s for s in SCENARIOS if s[0] == "silent_after_200"]
    out = io.StringIO()
    (row,) = run_demo(out, chosen)
    assert row.ours.startswith("DeadlineExceeded (deadline_exceeded), 0 chunks, 2 attempts")
    assert row.ours.endswith("(ended early: the next backoff would end past the deadline)")
    text = out.getvalue()
    assert "would have ended past the deadline" in text
    assert "docs/tutorial.md" in text.rstrip().splitlines()[-1]
