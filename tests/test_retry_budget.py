"""RetryBudget: retries stay under a ratio of recent attempts plus a floor, across threads."""

from __future__ import annotations

import math
import threading
from typing import Any, Dict

import pytest

from watchdog_sync import RetryBudget
from watchdog_sync.testing import FakeClock

pytestmark = pytest.mark.timeout(20)


def granted(budget: RetryBudget, tries: int) -> int:
    return sum(budget.try_withdraw() for _ in range(tries))


def test_the_floor_allows_min_retries_per_second_times_window_without_traffic() -> None:
    budget = RetryBudget(ratio=0.0, min_retries_per_second=1.0, window=10, clock=FakeClock())
    assert granted(budget, 50) == 10


def test_retries_are_capped_at_the_ratio_of_recent_attempts() -> None:
    budget = RetryBudget(ratio=0.2, min_retries_per_second=0.0, clock=FakeClock())
    for _ in range(100):
        budget.deposit()
    assert granted(budget, 50) == 20


def test_a_refusal_takes_nothing() -> None:
    budget = RetryBudget(ratio=0.5, min_retries_per_second=0.0, clock=FakeClock())
    assert budget.try_withdraw() is False
    budget.deposit()
    budget.deposit()
    assert budget.try_withdraw() is True
    assert budget.try_withdraw() is False


def test_old_traffic_leaves_the_sliding_window() -> None:
    clock = FakeClock()
    budget = RetryBudget(ratio=0.2, min_retries_per_second=0.0, window=10, clock=clock)
    for _ in range(50):
        budget.deposit()
    assert granted(budget, 20) == 10
    clock.advance(5)
    assert granted(budget, 5) == 0  # still inside the window: spent
    clock.advance(6)
    assert granted(budget, 5) == 0  # attempts and retries both expired: nothing to spend
    for _ in range(10):
        budget.deposit()
    assert granted(budget, 5) == 2


def test_concurrent_callers_never_overdraw_the_budget() -> None:
    ratio, floor, window = 0.2, 2.0, 10.0
    budget = RetryBudget(
        ratio=ratio, min_retries_per_second=floor, window=window, clock=FakeClock()
    )
    counts = [0]
    lock = threading.Lock()
    start = threading.Barrier(16)

    def caller() -> None:
        start.wait(5)
        mine = 0
        for _ in range(500):
            budget.deposit()
            mine += budget.try_withdraw()
        with lock:
            counts[0] += mine

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    allowed = ratio * 16 * 500 + floor * window
    assert allowed - 16 <= counts[0] <= allowed  # each thread may lag its last grant


def test_repr_shows_settings_and_recent_counts() -> None:
    budget = RetryBudget(clock=FakeClock())
    budget.deposit()
    text = repr(budget)
    assert "ratio=0.2" in text and "min_retries_per_second=10.0" in text
    assert "recent attempts=1, retries=0" in text


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"ratio": -0.1}, ValueError, "ratio"),
        ({"ratio": math.inf}, ValueError, "ratio"),
        ({"ratio": "0.2"}, TypeError, "ratio"),
        ({"min_retries_per_second": math.nan}, ValueError, "min_retries_per_second"),
        ({"min_retries_per_second": True}, TypeError, "min_retries_per_second"),
        ({"window": 0}, ValueError, "window"),
        ({"window": -1}, ValueError, "window"),
        ({"clock": 5}, TypeError, "clock"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs: Dict[str, Any], error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        RetryBudget(**kwargs)
