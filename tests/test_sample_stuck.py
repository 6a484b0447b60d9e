"""run_sample's abandon message names the likely cause: a socket read says instrument()."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import requests

from watchdog_sync import DeadlineExceeded, abandoned_workers, run_sample

from .rawserver import RawServer, silent

pytestmark = pytest.mark.timeout(30)


def plain_requests_get(url: str) -> int:
    """requests without a watchdog_sync.Session and without instrument(): nothing bounds it."""
    return requests.get(url, timeout=20, headers={"Connection": "close"}).status_code


def sleep_a_while(release: threading.Event) -> None:
    while not release.is_set():
        time.sleep(0.02)  # uninterruptible by the library


def wait_for_no_abandoned_worker(before: int) -> None:
    give_up = time.monotonic() + 5
    while abandoned_workers() > before and time.monotonic() < give_up:
        time.sleep(0.01)  # the released worker ends within a few ms
    assert abandoned_workers() == before


def test_a_worker_blocked_in_a_socket_read_is_told_to_call_instrument(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="watchdog_sync")
    before = abandoned_workers()
    with RawServer(silent) as server:
        result = run_sample(plain_requests_get, server.url, timeout=0.5)
        assert (result.ok, result.reason, result.abandoned) == (False, "deadline_exceeded", True)
        assert isinstance(result.error, DeadlineExceeded)
        message = str(result.error)
        assert "instrument()" in message and "blocked reading a socket" in message
        assert "isolate='process'" not in message
    wait_for_no_abandoned_worker(before)  # the server's stop closed the socket
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "watchdog_sync.instrument()" in warning and "socket." in warning


def test_a_worker_stuck_elsewhere_is_told_to_use_a_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="watchdog_sync")
    before = abandoned_workers()
    release = threading.Event()
    try:
        result = run_sample(sleep_a_while, release, timeout=0.3)
        assert result.abandoned
        assert "isolate='process'" in str(result.error)
        assert "instrument()" not in str(result.error)
    finally:
        release.set()
    wait_for_no_abandoned_worker(before)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "isolate='process'" in warning and "instrument()" not in warning
