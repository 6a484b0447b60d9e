"""The one watchdog thread's timers: a cancel takes no lock, and cancelled timers never pile up."""

from __future__ import annotations

import sys
import threading
import time
from typing import List

import pytest

from .internals import MONOTONIC, timers_held, watchdog_call_at, watchdog_lock

pytestmark = pytest.mark.timeout(20)


def test_a_timers_cancel_never_waits_for_the_watchdogs_lock() -> None:
    # A hundred streams whose heads come together cancel a hundred timers at once: a lock
    # that each cancel took became a convoy under the GIL (per-stream p99 10 -> 100 ms).
    handle = watchdog_call_at(time.monotonic() + 3600, lambda: None)
    cancelled = threading.Event()

    def cancel() -> None:
        handle.cancel()
        cancelled.set()

    canceller = threading.Thread(target=cancel)
    with watchdog_lock():  # the watchdog (or a thread scheduling a timer) holds it
        canceller.start()
        done_while_held = cancelled.wait(2)
    canceller.join(5)
    assert done_while_held
    assert handle.cancelled


def test_at_interpreter_exit_scheduling_never_waits_for_the_watchdogs_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At exit the watchdog thread may have been stopped holding its lock (a daemon thread
    ends where it stands when it next wants the GIL): a due callback then runs in the thread
    that schedules it, without the lock, and a later one is not waited for."""
    ran = threading.Event()
    scheduled = threading.Event()

    def schedule() -> None:
        watchdog_call_at(time.monotonic(), ran.set)
        watchdog_call_at(time.monotonic() + 3600, lambda: None)
        scheduled.set()

    scheduler = threading.Thread(target=schedule, daemon=True)
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)
    with watchdog_lock():  # the stopped watchdog thread's, never to be released
        scheduler.start()
        done_while_held = scheduled.wait(2)
    monkeypatch.undo()
    scheduler.join(5)
    assert done_while_held and ran.is_set()


def test_cancelled_timers_are_dropped_from_the_heap_and_live_ones_still_run() -> None:
    fired = threading.Event()
    MONOTONIC.call_at(time.monotonic() + 0.2, fired.set)
    far = time.monotonic() + 3600
    handles = [MONOTONIC.call_at(far, lambda: None) for _ in range(10_000)]
    for handle in handles:
        handle.cancel()
    MONOTONIC.call_at(far, lambda: None).cancel()  # the next push compacts
    assert timers_held() < 1_000
    assert fired.wait(5)


def test_timers_scheduled_at_once_from_many_threads_all_run_in_time_order() -> None:
    start = time.monotonic()
    ran: List[float] = []
    done = threading.Event()
    count = 8 * 200
    lock = threading.Lock()

    def schedule(offset: int) -> None:
        for i in range(200):
            when = start + 0.5 + ((offset + i * 8) % 50) / 1000  # all scheduled by then

            def record(when: float = when) -> None:
                with lock:
                    ran.append(when)
                    if len(ran) == count:
                        done.set()

            MONOTONIC.call_at(when, record)

    threads = [threading.Thread(target=schedule, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert done.wait(5)
    assert ran == sorted(ran)
    assert time.monotonic() - start < 5
