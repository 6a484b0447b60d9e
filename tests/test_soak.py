"""The soak, shortened: 200 ChatClient streams from 50 threads against a misbehaving gateway.

The same code as ``benchmarks/soak.py`` (2,000 streams there; its figures are in
docs/reliability.md), with the same checks: every call ends with success or with its
scenario's documented error, no call overruns its timeout by more than the bound below,
threads and file descriptors come back to their baseline, RSS grows by less than 20 MiB
after a warm-up, and ``threading.excepthook`` never fires. (``run_soak`` pins glibc's mmap
threshold at 1 MiB for the rest of the process, so that RSS shows live memory; it only makes
later large allocations in this test session return to the OS when freed.)
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import time
from types import ModuleType

import pytest

pytestmark = pytest.mark.timeout(90)

# How far past its timeout a call may end: 0.1 s, as the issue asks. The 2,000-stream
# benchmark at the same (default, llm) pace ended its calls at most 0.022-0.043 s late over
# three seeds, the scheduling delay of the process at 56-58% CPU; docs/reliability.md has the
# figures, and those of the saturated `burst` pace.
MAX_OVERRUN = 0.1


def _load_soak() -> ModuleType:
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"
    spec = importlib.util.spec_from_file_location("watchdog_sync_soak", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


soak = _load_soak()


def test_the_plan_is_a_seeded_mix_with_every_scenario_and_a_third_faulty() -> None:
    plan = soak.make_plan(200, seed=7)
    assert plan == soak.make_plan(200, seed=7)
    assert set(plan) == set(soak.SCENARIOS) == set(soak.EXPECTED)
    assert 0.28 <= sum(name != "ok" for name in plan) / len(plan) <= 0.38


def test_200_streams_from_50_threads_end_as_documented_and_leave_nothing_behind() -> None:
    started = time.monotonic()
    report = soak.run_soak(200, 50, seed=3, warmup=100, max_overrun=MAX_OVERRUN)
    assert not report.problems, soak.format_report(report)
    assert len(report.outcomes) == 200
    assert {outcome.scenario for outcome in report.outcomes} == set(soak.SCENARIOS)
    assert report.threads_peak >= 50  # the threads really ran at once
    assert time.monotonic() - started < 30.0
