"""deadline() scopes: nesting, conversion at the owning boundary, swallow-proof cancellation."""

from __future__ import annotations

import concurrent.futures
import math
import threading
from typing import Iterator

import pytest

from watchdog_sync import (
    Budget,
    Cancelled,
    DeadlineExceeded,
    OperationCancelled,
    carry_budget,
    current_budget,
    deadline,
)
from watchdog_sync.testing import FakeClock

from .internals import entry_scope

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    """A fake clock under every scope of the test: budget sleeps advance it at once."""
    fake = FakeClock()
    with entry_scope(Budget(clock=fake)):
        yield fake


def test_current_budget_outside_any_scope_is_unbounded() -> None:
    assert current_budget().remaining() == math.inf


def test_current_budget_is_the_innermost_scope() -> None:
    with deadline(5, stage="outer") as outer:
        assert current_budget() is outer
        with deadline(1, stage="inner") as inner:
            assert current_budget() is inner
            assert inner.parent is outer
        assert current_budget() is outer


def test_an_outermost_scope_is_one_budget_of_its_own() -> None:
    """Outside any scope, ``deadline()`` makes its budget alone (no unbounded parent made
    only to be its root), with its limit and stage; a scope inside it is its child."""
    with deadline(5, stage="outer") as outer:
        assert outer.parent is None and outer.stage == "outer"
        assert 4.0 < outer.remaining() <= 5.0
        with deadline(stage="inner") as inner:
            assert inner.parent is outer and inner.deadline == outer.deadline
    with deadline() as unbounded:
        assert unbounded.parent is None and unbounded.remaining() == math.inf


def test_nested_scopes_only_shrink() -> None:
    with deadline(1), deadline(100) as inner:
        assert inner.remaining() <= 1.0


def test_legacy_except_exception_retry_loop_cannot_swallow_the_deadline(clock: FakeClock) -> None:
    """The incident: a bare `except Exception` around a watchdog, retried in a loop."""
    swallowed = 0
    with pytest.raises(DeadlineExceeded) as info, deadline(0.3, stage="sample"):
        while True:
            try:
                current_budget().sleep(10)
            except Exception:
                swallowed += 1
    assert swallowed == 0
    assert clock.sleeps == [0.3]  # slept until the deadline, once, then raised
    assert info.value.stage == "sample"
    assert info.value.reason == "deadline_exceeded"
    assert "sample" in str(info.value)


def test_cancel_becomes_operation_cancelled_at_the_scope() -> None:
    with pytest.raises(OperationCancelled) as info, deadline(10) as budget:
        budget.cancel("user pressed stop")
        budget.check()
    assert "user pressed stop" in str(info.value)
    assert info.value.retryable is False


def test_outer_cancelled_passes_through_the_inner_scope_untouched(clock: FakeClock) -> None:
    seen_inner: list[BaseException] = []
    with pytest.raises(DeadlineExceeded), deadline(0.1, stage="outer") as outer:
        try:
            with deadline(10, stage="inner"):
                current_budget().sleep(5)
        except BaseException as exc:
            seen_inner.append(exc)
            raise
    assert isinstance(seen_inner[0], Cancelled)
    assert seen_inner[0].budget is outer


def test_a_scope_that_ends_normally_raises_nothing() -> None:
    with deadline(5) as budget:
        pass
    assert not budget.expired


def test_carry_budget_runs_thread_pool_work_under_the_callers_scope(clock: FakeClock) -> None:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        with pytest.raises(DeadlineExceeded), deadline(0.2) as budget:
            seen = pool.submit(carry_budget(current_budget)).result()
            assert seen is budget
            pool.submit(carry_budget(lambda: current_budget().sleep(10))).result()
    finally:
        pool.shutdown(wait=True)
    assert clock.sleeps == [0.2]


def test_a_thread_without_carry_budget_sees_no_scope() -> None:
    seen: list[float] = []
    with deadline(5):
        thread = threading.Thread(target=lambda: seen.append(current_budget().remaining()))
        thread.start()
        thread.join()
    assert seen == [math.inf]


def test_entry_scope_with_an_unrelated_explicit_budget_takes_the_tighter() -> None:
    explicit = Budget(0.5)
    with deadline(10), entry_scope(explicit) as joined:
        assert joined.remaining() <= 0.5


def test_entry_scope_follows_a_cancel_of_the_explicit_budget() -> None:
    explicit = Budget(30)
    with pytest.raises(OperationCancelled), deadline(10), entry_scope(explicit) as joined:
        explicit.cancel()
        joined.sleep(5)


def test_entry_scope_converts_its_own_deadline_for_the_caller() -> None:
    with pytest.raises(DeadlineExceeded), entry_scope(None, 0.05) as budget:
        budget.sleep(1)


def test_entry_scope_converts_the_end_of_an_explicit_budget_outside_any_scope() -> None:
    explicit = Budget(0.05)
    with pytest.raises(DeadlineExceeded), entry_scope(explicit) as budget:
        budget.sleep(1)


def test_entry_scope_with_explicit_budget_lets_an_outer_scope_end_pass_through() -> None:
    with pytest.raises(DeadlineExceeded), deadline(0.05) as outer:
        explicit = outer.child(10)
        try:
            with entry_scope(explicit) as budget:
                budget.sleep(1)
        except Cancelled as exc:
            assert exc.budget is outer
            raise
