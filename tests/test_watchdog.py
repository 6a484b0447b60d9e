"""The one watchdog thread's timers: a cancel takes no lock, and cancelled timers never pile up."""

from __future__ import annotations

import threading
import time

import pytest

from .internals import MONOTONIC, watchdog_module

pytestmark = pytest.mark.timeout(20)


def test_a_timers_cancel_never_waits_for_the_watchdogs_lock() -> None:
    # A hundred streams whose heads come together cancel a hundred timers at once: a lock
    # that each cancel took became a convoy under the GIL (per-stream p99 10 -> 100 ms).
    handle = MONOTONIC.call_at(time.monotonic() + 3600, lambda: None)
    cancelled = threading.Event()
    canceller = threading.Thread(target=lambda: (handle.cancel(), cancelled.set()))
    lock = watchdog_module._WATCHDOG._lock
    with lock:  # the watchdog (or a thread scheduling a timer) holds it
        canceller.start()
        done_while_held = cancelled.wait(2)
    canceller.join(5)
    assert done_while_held
    assert handle.cancelled


def test_cancelled_timers_are_dropped_from_the_heap_and_live_ones_still_run() -> None:
    fired = threading.Event()
    MONOTONIC.call_at(time.monotonic() + 0.2, fired.set)
    far = time.monotonic() + 3600
    handles = [MONOTONIC.call_at(far, lambda: None) for _ in range(10_000)]
    for handle in handles:
        handle.cancel()
    MONOTONIC.call_at(far, lambda: None).cancel()  # the next push compacts
    assert len(watchdog_module._WATCHDOG._heap) < 1_000
    assert fired.wait(5)
