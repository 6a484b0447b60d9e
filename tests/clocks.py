"""Driving a FakeClock from a second thread while the test's thread waits on it."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, List

from watchdog_sync.testing import FakeClock


@contextlib.contextmanager
def driving(clock: FakeClock, *steps: float) -> Iterator[None]:
    """Run the block while another thread advances ``clock`` by each step in turn, each
    once a thread is waiting on the clock; fail if a step found nobody waiting."""
    errors: List[str] = []

    def drive() -> None:
        for number, step in enumerate(steps, 1):
            if not clock.wait_for_waiters():
                errors.append(f"step {number} (+{step}s): nobody waited on the clock")
                return
            clock.advance(step)

    driver = threading.Thread(target=drive, name="test-clock-driver")
    driver.start()
    try:
        yield
    finally:
        driver.join(10)
    assert not driver.is_alive(), "the clock driver did not finish"
    assert not errors, errors[0]
