"""Late work is never a success: leaving a deadline() scope after its deadline raises."""

from __future__ import annotations

import time
from typing import Iterator, List

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FakeClock

ONCE = ws.RetryPolicy(max_attempts=1)


def on_fake_time(clock: FakeClock) -> ws.Budget:
    """A budget on ``clock`` for ``retry_call`` to make current (scopes inside use its clock)."""
    return ws.Budget(60, clock=clock)


def test_a_sleep_past_the_deadline_raises_on_leaving_the_scope() -> None:
    """The issue's case, on real time: nothing interrupts time.sleep, the exit still fails."""
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(0.2, stage="sample"):
        time.sleep(0.4)
    assert time.monotonic() - started >= 0.4
    error = info.value
    assert error.stage == "sample" and error.elapsed is not None and error.elapsed >= 0.4
    assert error.attempts == 0 and error.last_error is None and error.remaining == 0.0
    assert error.phase is None
    message = str(error)
    assert "nothing inside was interrupted" in message
    assert "instrument(sockets=True)" in message and "isolate='process'" in message


def test_work_that_ends_in_time_leaves_the_scope_normally() -> None:
    clock = FakeClock()

    def work() -> str:
        with ws.deadline(1.0):
            clock.advance(0.9)
        return "in time"

    assert ws.retry_call(work, policy=ONCE, budget=on_fake_time(clock)) == "in time"


def test_late_work_on_a_fake_clock_raises_deadline_exceeded() -> None:
    clock = FakeClock()

    def work() -> None:
        with ws.deadline(1.0, stage="tool"):
            clock.advance(1.5)

    with pytest.raises(ws.DeadlineExceeded, match="stage 'tool'"):
        ws.retry_call(work, policy=ONCE, budget=on_fake_time(clock))


def test_an_inner_scope_leaves_an_outer_deadline_to_the_outer_scope() -> None:
    """Only the outer deadline passed: the inner scope exits normally, the outer one raises."""
    clock = FakeClock()
    reached: List[str] = []

    def work() -> None:
        with ws.deadline(1.0, stage="outer"):
            with ws.deadline(5.0, stage="inner"):
                clock.advance(2.0)
            reached.append("after the inner scope")

    with pytest.raises(ws.DeadlineExceeded) as info:
        ws.retry_call(work, policy=ONCE, budget=on_fake_time(clock))
    assert info.value.stage == "outer"
    assert reached == ["after the inner scope"]


def test_a_scope_left_by_an_exception_keeps_that_exception() -> None:
    clock = FakeClock()

    def work() -> None:
        with ws.deadline(1.0):
            clock.advance(2.0)
            raise KeyError("the caller's own")

    with pytest.raises(KeyError, match="the caller's own"):
        ws.retry_call(work, policy=ONCE, budget=on_fake_time(clock))


def test_a_generator_closed_inside_a_late_scope_closes_quietly() -> None:
    clock = FakeClock()

    def numbers() -> Iterator[int]:
        with ws.deadline(1.0):
            yield 1
            yield 2

    def work() -> int:
        gen = numbers()
        first = next(gen)
        clock.advance(2.0)
        gen.close()  # GeneratorExit leaves the scope: no DeadlineExceeded instead of it
        return first

    assert ws.retry_call(work, policy=ONCE, budget=on_fake_time(clock)) == 1


def test_retry_call_keeps_returning_what_its_late_attempt_returned() -> None:
    """An entry point keeps its rule: only a deadline() scope fails late work."""
    clock = FakeClock()

    def work() -> str:
        clock.advance(2.0)
        return "late"

    assert ws.retry_call(work, policy=ONCE, budget=ws.Budget(1.0, clock=clock)) == "late"


def test_a_scope_with_no_time_at_all_fails_on_exit() -> None:
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(0):
        pass
