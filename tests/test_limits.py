"""Limits at their extremes: huge values are clamped or rejected, the watchdog thread never dies."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import WATCHDOG_THREAD_NAME, FaultGateway

pytestmark = pytest.mark.timeout(30)

WEEK = 7 * 24 * 3600.0
MESSAGES = [{"role": "user", "content": "hi"}]


def _fired_on(budget: ws.Budget) -> threading.Event:
    """An event set by ``budget``'s on_done callback; the callback's thread is recorded on it."""
    done = threading.Event()

    def callback(ended: ws.Budget) -> None:
        done.thread = threading.current_thread()  # type: ignore[attr-defined]
        done.set()

    budget.on_done(callback)
    return done


def test_a_far_deadline_does_not_kill_the_watchdog_thread() -> None:
    """Budget(1e10) is clamped to 7 days; the watchdog thread waits on it and stays alive."""
    far = ws.Budget(1e10)
    assert WEEK - 5 <= far.remaining() <= WEEK
    far.on_done(lambda budget: None)
    probe = ws.Budget(0.05)
    fired = _fired_on(probe)
    assert fired.wait(5)
    watchdog: threading.Thread = fired.thread  # type: ignore[attr-defined]
    assert watchdog.name == WATCHDOG_THREAD_NAME
    watchdog.join(0.5)  # after the probe, the thread goes back to waiting for the far deadline
    assert watchdog.is_alive()
    later = _fired_on(ws.Budget(0.05))
    assert later.wait(5)
    assert later.thread is watchdog  # type: ignore[attr-defined]
    far.cancel()


def test_a_far_absolute_deadline_is_clamped_like_a_long_timeout() -> None:
    """deadline= far in the future ends no later than 7 days from now."""
    budget = ws.Budget(deadline=time.monotonic() + 1e12)
    assert WEEK - 5 <= budget.remaining() <= WEEK


def test_a_callback_raising_a_base_exception_does_not_stop_later_budgets() -> None:
    """A callback raising Cancelled (a BaseException) is logged; a later budget's on_done fires."""
    first = ws.Budget(0.05)
    first.on_done(lambda budget: budget.check())  # raises Cancelled on the watchdog thread
    later = _fired_on(ws.Budget(0.4))  # scheduled before the failure, nothing scheduled after
    assert later.wait(5)


def test_a_huge_chat_timeout_is_clamped_and_the_call_succeeds(fault_gateway: FaultGateway) -> None:
    """ChatClient(timeout=1e10) completes, and the watchdog thread is alive afterwards."""
    with ws.ChatClient(fault_gateway.base_url("ok"), model="m", timeout=1e10) as client:
        assert client.complete(MESSAGES)["choices"]
    watchdogs = [t for t in threading.enumerate() if t.name == WATCHDOG_THREAD_NAME]
    assert len(watchdogs) == 1
    watchdogs[0].join(0.3)  # the call's cancelled far timer is still on the heap
    assert watchdogs[0].is_alive()


HUGE = 10**400  # an int no float can hold


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("timeout", lambda: ws.Budget(HUGE)),
        ("deadline", lambda: ws.Budget(deadline=HUGE)),
        ("timeout", lambda: ws.deadline(HUGE).__enter__()),
        ("timeout", lambda: ws.ChatClient("http://127.0.0.1:1/v1", timeout=HUGE)),
        ("idle_timeout", lambda: ws.ChatClient("http://127.0.0.1:1/v1", idle_timeout=HUGE)),
        ("connect_timeout", lambda: ws.ChatClient("http://127.0.0.1:1/v1", connect_timeout=HUGE)),
        ("timeout", lambda: ws.run_sample(int, timeout=HUGE)),
        ("idle_timeout", lambda: ws.guard_stream(iter(()), idle_timeout=HUGE)),
        ("max_backoff", lambda: ws.RetryPolicy(max_backoff=HUGE)),
    ],
)
def test_a_number_too_large_for_a_float_is_a_value_error_naming_the_parameter(
    name: str, build: Callable[[], Any]
) -> None:
    """10**400 is a ValueError whose message names the argument, never an OverflowError."""
    with pytest.raises(ValueError, match="too large") as info:
        build()
    assert str(info.value).startswith(name)


def test_a_huge_sleep_waits_and_wakes_on_cancel() -> None:
    """Budget().sleep(1e10) is clamped: it waits (no OverflowError) until a cancel wakes it."""
    budget = ws.Budget()
    ws.Budget(0.1).on_done(lambda ended: budget.cancel())
    started = time.monotonic()
    with pytest.raises(ws.Cancelled):
        budget.sleep(1e10)
    assert 0.05 <= time.monotonic() - started < 5


def test_a_huge_sample_timeout_is_clamped_and_the_sample_runs() -> None:
    """run_sample(timeout=1e10) returns the sample's value; the watchdog thread stays alive."""
    result = ws.run_sample(int, "7", timeout=1e10)
    assert (result.ok, result.value) == (True, 7)
    watchdogs = [t for t in threading.enumerate() if t.name == WATCHDOG_THREAD_NAME]
    assert len(watchdogs) == 1
    watchdogs[0].join(0.3)
    assert watchdogs[0].is_alive()
