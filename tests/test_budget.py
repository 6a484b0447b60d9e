"""Budget: absolute deadline, children that only shrink, cancellation, on_done, sleep."""

from __future__ import annotations

import datetime
import gc
import math
import threading
import time
import tracemalloc
from typing import Callable, Tuple

import pytest

from watchdog_sync import Budget, Cancelled
from watchdog_sync.testing import WATCHDOG_THREAD_NAME, FakeClock

pytestmark = pytest.mark.timeout(20)


def test_unbounded_budget_has_infinite_remaining_and_no_deadline() -> None:
    budget = Budget()
    assert budget.deadline is None
    assert budget.remaining() == math.inf
    assert not budget.expired and not budget.cancelled


def test_remaining_counts_down_on_the_injected_clock_and_never_goes_negative() -> None:
    clock = FakeClock(100.0)
    budget = Budget(5, clock=clock)
    assert budget.deadline == 105.0
    clock.advance(2)
    assert budget.remaining() == 3.0
    assert budget.elapsed() == 2.0
    clock.advance(10)
    assert budget.remaining() == 0.0
    assert budget.expired


def test_timedelta_and_absolute_deadline_take_the_earlier() -> None:
    clock = FakeClock()
    assert Budget(datetime.timedelta(seconds=3), clock=clock).deadline == 3.0
    assert Budget(10, deadline=4.0, clock=clock).deadline == 4.0


@pytest.mark.parametrize(
    ("value", "error"),
    [(True, TypeError), ("5", TypeError), (-1, ValueError), (float("nan"), ValueError)],
)
def test_bad_timeouts_are_rejected_with_the_parameter_name(value: object, error: type) -> None:
    with pytest.raises(error, match="timeout"):
        Budget(value)  # type: ignore[arg-type]


def test_child_can_only_shrink_the_parent_time() -> None:
    clock = FakeClock()
    parent = Budget(2, clock=clock)
    assert parent.child(10).remaining() == 2.0
    assert parent.child(0.5).remaining() == 0.5
    assert parent.child().deadline == parent.deadline


def test_cancelling_the_parent_ends_every_descendant_at_once() -> None:
    parent = Budget(60)
    child = parent.child(30)
    grandchild = child.child()
    parent.cancel("stop")
    assert child.cancelled and grandchild.cancelled
    assert grandchild.remaining() == 0.0
    with pytest.raises(Cancelled) as info:
        grandchild.check()
    assert info.value.budget is parent
    assert info.value.reason == "stop"


def test_cancelling_a_child_leaves_the_parent_alone() -> None:
    parent = Budget(60)
    child = parent.child()
    child.cancel()
    assert child.cancelled
    assert not parent.cancelled
    parent.check()


def test_a_long_lived_budget_keeps_nothing_of_its_ended_children() -> None:
    """A process-wide deadline outlives the calls under it: 10,000 children made and
    dropped leave it holding almost nothing (each kept weak reference would be ~80 bytes:
    800 kB in all), and the children alive among them still end with it."""
    parent = Budget(60)
    alive = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(10_000):
            child = parent.child()
            if n % 2500 == 0:
                alive.append(child)
        del child
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 20_000, f"{kept} bytes kept"
    parent.cancel("stop")
    assert len(alive) == 4 and all(child.cancelled for child in alive)


def test_a_child_of_a_cancelled_budget_starts_cancelled() -> None:
    parent = Budget()
    parent.cancel()
    assert parent.child(5).cancelled


def test_cancel_is_idempotent_and_keeps_the_first_reason() -> None:
    budget = Budget()
    budget.cancel("first")
    budget.cancel("second")
    with pytest.raises(Cancelled) as info:
        budget.check()
    assert info.value.reason == "first"


def test_end_cause_names_the_outermost_ended_budget() -> None:
    clock = FakeClock()
    outer = Budget(1, clock=clock)
    inner = outer.child(1)
    clock.advance(1)
    cause = inner.end_cause()
    assert cause == (outer, "deadline_exceeded")


def test_sleep_on_a_fake_clock_advances_it_without_real_time() -> None:
    clock = FakeClock()
    budget = Budget(10, clock=clock)
    started = time.monotonic()
    budget.sleep(3)
    assert clock() == 3.0
    assert time.monotonic() - started < 0.5


def test_sleep_past_the_deadline_sleeps_only_until_it_then_raises() -> None:
    clock = FakeClock()
    budget = Budget(2, clock=clock)
    with pytest.raises(Cancelled) as info:
        budget.sleep(30)
    assert clock.sleeps == [2.0]
    assert info.value.reason == "deadline_exceeded"


def test_sleep_in_an_ended_budget_raises_at_once() -> None:
    budget = Budget()
    budget.cancel()
    with pytest.raises(Cancelled):
        budget.sleep(5)


def _woken_by_cancel(sleeping: Budget, cancel: Callable[[], None]) -> Tuple[str, float]:
    """``sleeping.sleep(20)`` in a thread, ``cancel()`` once it sleeps: the ``Cancelled``'s
    reason, and how long after ``cancel()`` the sleeper woke."""
    woke: list[float] = []
    errors: list[Cancelled] = []

    def sleeper() -> None:
        try:
            sleeping.sleep(20)
        except Cancelled as exc:
            errors.append(exc)
            woke.append(time.monotonic())

    thread = threading.Thread(target=sleeper)
    thread.start()
    time.sleep(0.05)  # let the sleeper block before cancelling it (the test's subject)
    cancelled_at = time.monotonic()
    cancel()
    thread.join(5)
    assert not thread.is_alive() and errors
    return errors[0].reason, woke[0] - cancelled_at


def test_cancel_from_another_thread_wakes_a_sleeper_within_50ms() -> None:
    budget = Budget(30)
    reason, late = _woken_by_cancel(budget, budget.cancel)
    assert reason == "cancelled" and late < 0.05


def test_cancelling_an_ancestor_wakes_a_sleeping_grandchild_within_50ms() -> None:
    """A budget's children and its sleep's wake-up are made when first needed: a grandchild
    made and put to sleep after its parents still ends with them."""
    root = Budget(30)
    reason, late = _woken_by_cancel(root.child().child(), lambda: root.cancel("stop"))
    assert reason == "stop" and late < 0.05


def test_children_made_while_the_parent_is_cancelled_all_end_cancelled() -> None:
    parent = Budget(60)
    children: list[Budget] = []
    lock = threading.Lock()
    start = threading.Barrier(5)

    def make_children() -> None:
        start.wait(5)
        for _ in range(2000):
            child = parent.child().child()
            with lock:
                children.append(child)

    makers = [threading.Thread(target=make_children) for _ in range(4)]
    for thread in makers:
        thread.start()
    start.wait(5)
    parent.cancel("stop")
    for thread in makers:
        thread.join(10)
    assert len(children) == 8000
    assert all(child.cancelled and child.remaining() == 0.0 for child in children)
    assert {child.end_cause() for child in children} == {(parent, "stop")}


def test_a_fake_clock_callback_may_use_its_own_budget() -> None:
    clock = FakeClock()
    budget = Budget(5, clock=clock)
    seen: list[object] = []

    def callback(ended: Budget) -> None:  # runs inside advance(), on this thread
        ended.cancel()
        seen.append((ended.expired, ended.child().remaining()))

    late = threading.Event()
    budget.on_done(callback)
    budget.on_done(lambda ended: ended.on_done(lambda _: late.set()))  # already ended: soon
    clock.advance(5)
    assert seen == [(True, 0.0)]
    assert late.wait(5)


def test_on_done_runs_once_at_expiry_on_the_watchdog_thread() -> None:
    fired: list[str] = []
    done = threading.Event()

    def callback(budget: Budget) -> None:
        fired.append(threading.current_thread().name)
        done.set()

    budget = Budget(0.05)
    budget.on_done(callback)
    assert done.wait(5)
    budget.cancel()  # ending again does not run it twice
    assert watchdog_ran_everything_queued_so_far()  # a wrong second run would be done by now
    assert fired == [WATCHDOG_THREAD_NAME]


def watchdog_ran_everything_queued_so_far() -> bool:
    """The watchdog runs callbacks in the order they were queued: wait for one queued now."""
    flushed = threading.Event()
    marker = Budget()
    marker.cancel()
    marker.on_done(lambda _: flushed.set())
    return flushed.wait(5)


def test_on_done_runs_on_cancel_and_unregister_stops_it() -> None:
    ran = threading.Event()
    skipped: list[Budget] = []
    budget = Budget(60)
    budget.on_done(lambda b: ran.set())
    unregister = budget.on_done(skipped.append)
    unregister()
    budget.cancel()
    assert ran.wait(5)
    assert skipped == []


def test_on_done_after_the_end_runs_at_once() -> None:
    ran = threading.Event()
    budget = Budget()
    budget.cancel()
    budget.on_done(lambda b: ran.set())
    assert ran.wait(5)


def test_on_done_with_a_fake_clock_fires_inside_advance() -> None:
    clock = FakeClock()
    fired: list[float] = []
    budget = Budget(5, clock=clock)
    budget.on_done(lambda b: fired.append(clock()))
    clock.advance(4.9)
    assert fired == []
    clock.advance(0.1)
    assert fired == [5.0]


def test_a_raising_callback_is_logged_and_the_watchdog_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    later = threading.Event()

    def bad(budget: Budget) -> None:
        raise RuntimeError("boom")

    first = Budget(0.01)
    first.on_done(bad)
    second = Budget(0.05)
    second.on_done(lambda b: later.set())
    assert later.wait(5)
    assert any("callback raised" in r.getMessage() for r in caplog.records)


def test_ten_thousand_live_budgets_share_one_watchdog_thread() -> None:
    budgets = [Budget(300) for _ in range(10_000)]
    unregisters = [b.on_done(lambda b: None) for b in budgets]
    names = [t.name for t in threading.enumerate() if t.name == WATCHDOG_THREAD_NAME]
    assert names == [WATCHDOG_THREAD_NAME]
    for unregister in unregisters:
        unregister()


def test_repr_says_state_and_time_left() -> None:
    budget = Budget(5, stage="fetch", clock=FakeClock())
    assert repr(budget) == "<Budget live 5.000s left stage='fetch'>"
    budget.cancel()
    assert "cancelled" in repr(budget)


# -- the clock ------------------------------------------------------------------------


def test_a_plain_callable_is_a_clock_that_runs_in_real_time() -> None:
    base = [1000.0]
    budget = Budget(5, clock=lambda: base[0])
    assert budget.deadline == 1005.0 and budget.clock.now() == 1000.0
    base[0] = 1004.0
    assert budget.remaining() == 1.0
    assert Budget(clock=time.monotonic).clock is Budget().clock


def test_a_bad_clock_is_rejected_naming_the_parameter() -> None:
    with pytest.raises(TypeError, match=r"clock must be a callable .* not int"):
        Budget(5, clock=5)  # type: ignore[arg-type]


def test_on_done_on_a_fake_budget_already_past_its_deadline_runs_at_once() -> None:
    clock = FakeClock()
    budget = Budget(1, clock=clock)
    clock.advance(2)  # nobody was watching: the budget has not noticed its end yet
    fired: list[bool] = []
    budget.on_done(lambda ended: fired.append(ended.expired))
    assert fired == [True]


def test_cancel_on_a_fake_clock_runs_the_callbacks_at_once_in_order() -> None:
    budget = Budget(5, clock=FakeClock())
    order: list[int] = []
    budget.on_done(lambda _: order.append(1))
    budget.on_done(lambda _: order.append(2))
    budget.cancel()
    assert order == [1, 2]


class RecordingClock:
    """A clock of our own: the protocol (now, sleep, wait, call_at), not a FakeClock."""

    def __init__(self) -> None:
        self.time = 0.0
        self.scheduled: list[float] = []
        self.slept: list[float] = []

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> None:
        self.slept.append(seconds)
        self.time += seconds

    def wait(self, condition: threading.Condition, timeout: float) -> None:
        raise AssertionError("a budget never waits on a condition")

    def call_at(self, when: float, callback: object) -> RecordingClock:
        self.scheduled.append(when)
        return self  # the timer: anything with cancel()

    def cancel(self) -> None:
        self.scheduled.clear()


def test_a_clock_object_schedules_the_expiry_and_sleeps_on_its_own_time() -> None:
    clock = RecordingClock()
    clock.time = 50.0
    budget = Budget(3, clock=clock)
    unregister = budget.on_done(lambda _: None)
    assert clock.scheduled == [53.0]
    budget.sleep(1)
    assert clock.slept == [1.0] and budget.remaining() == 2.0
    unregister()
    assert clock.scheduled == []  # the timer was cancelled
