"""Shared fixtures: every test must leave no extra threads and no open file descriptors."""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Iterator, List

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import WATCHDOG_THREAD_NAME

from .rawclient import Raw

_SETTLE_SECONDS = 2.0


def _threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name != WATCHDOG_THREAD_NAME]


def _fds() -> int:
    """Open file descriptors of this process: listed by the kernel where it can (Linux's
    /proc/self/fd, the BSDs' and macOS's /dev/fd), else probed one by one."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return sum(1 for fd in range(_fd_limit()) if _is_open(fd))


def _fd_limit() -> int:
    try:
        import resource
    except ImportError:  # Windows
        return 2048
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if 0 < soft <= 65536 else 65536


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep what is alive once the tests are collected (modules, and the SDKs some test
    modules import) out of the leak fixture's ``gc.collect()``, which would otherwise walk
    all of it after every test: with the anthropic SDK imported, 5x longer per test."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves threads or file descriptors behind (after a short settle)."""
    before_threads = set(_threads())
    before_fds = _fds()
    excepthook_calls: List[threading.ExceptHookArgs] = []
    previous_hook = threading.excepthook
    threading.excepthook = excepthook_calls.append
    try:
        yield
    finally:
        threading.excepthook = previous_hook
    give_up = time.monotonic() + _SETTLE_SECONDS
    gc.collect()  # sockets held only by reference cycles (exception tracebacks) close here
    while True:
        extra = [t for t in _threads() if t not in before_threads and t.is_alive()]
        fds = _fds()
        if (not extra and fds <= before_fds) or time.monotonic() > give_up:
            break
        time.sleep(0.01)
    assert not excepthook_calls, f"an exception escaped a thread: {excepthook_calls[0].exc_value!r}"
    assert not extra, f"threads left running: {[t.name for t in extra]}"
    assert fds <= before_fds, f"file descriptors leaked: {before_fds} before, {fds} after"


@pytest.fixture
def raw() -> Iterator[List[Raw]]:
    """Raw socket clients (``tests/rawclient.py``) to close after the test."""
    clients: List[Raw] = []
    yield clients
    for client in clients:
        client.close()


@pytest.fixture
def bound_sockets() -> Iterator[None]:
    """instrument(sockets=True) alone, undone after the test."""
    undo = ws.instrument(sockets=True, urllib3=False, httpx=False)
    try:
        yield
    finally:
        undo()
