"""instrument(threads=True): threads and pool tasks started in a scope run in its budget."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List, Optional

import pytest
import requests

import watchdog_sync as ws

from .rawserver import RawServer, silent

pytestmark = pytest.mark.timeout(30)

SLACK = 0.8


@pytest.fixture
def carried() -> Iterator[None]:
    undo = ws.instrument(threads=True)
    try:
        yield
    finally:
        undo()


def _deadline_of_thread(start: Any) -> Optional[float]:
    """The deadline a thread started by ``start(record)`` sees as its current budget."""
    seen: List[Optional[float]] = []
    start(lambda: seen.append(ws.current_budget().deadline))
    return seen[0]


def _in_thread(fn: Any) -> None:
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join(5)


def test_a_thread_started_in_a_scope_sees_its_budget(carried: None) -> None:
    with ws.deadline(5) as budget:
        assert _deadline_of_thread(_in_thread) == budget.deadline


def test_a_thread_subclass_with_its_own_run_is_carried(carried: None) -> None:
    seen: List[Optional[float]] = []

    class Worker(threading.Thread):
        def run(self) -> None:
            seen.append(ws.current_budget().deadline)

    with ws.deadline(5) as budget:
        worker = Worker()
        worker.start()
        worker.join(5)
    assert seen == [budget.deadline]


def test_a_thread_started_outside_any_scope_has_none(carried: None) -> None:
    assert _deadline_of_thread(_in_thread) is None


def test_a_request_in_a_carried_thread_ends_at_the_scope_deadline() -> None:
    """With urllib3 instrumented too: the thread's request stops at ~0.5 s, quietly."""
    undo = ws.instrument(threads=True)
    ended: Dict[str, float] = {}
    try:
        with RawServer(silent) as server:

            def fetch() -> None:
                try:
                    requests.get(server.url, timeout=30)
                finally:
                    ended["at"] = time.monotonic()

            started = time.monotonic()
            with ws.deadline(0.5):
                thread = threading.Thread(target=fetch)
                thread.start()
            thread.join(5)
            assert not thread.is_alive()
            assert ended["at"] - started < 0.5 + SLACK
    finally:
        undo()


def test_a_pool_task_submitted_in_a_scope_ends_with_deadline_exceeded() -> None:
    undo = ws.instrument(threads=True)
    try:
        with RawServer(silent) as server, ThreadPoolExecutor(2) as pool:
            started = time.monotonic()
            with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.5):
                pool.submit(requests.get, server.url, timeout=30).result()
            assert time.monotonic() - started < 0.5 + SLACK
    finally:
        undo()


def test_a_pool_worker_does_not_keep_the_scope_it_was_started_in(carried: None) -> None:
    """The worker started for a task in a scope runs a later task, sent outside, with no budget."""
    with ThreadPoolExecutor(1) as pool:
        with ws.deadline(5) as budget:
            inside = pool.submit(lambda: ws.current_budget().deadline).result()
        outside = pool.submit(lambda: ws.current_budget().deadline).result()
        mapped = list(pool.map(lambda _: ws.current_budget().deadline, range(2)))
    assert inside == budget.deadline
    assert outside is None and mapped == [None, None]


def test_map_in_a_scope_carries_it(carried: None) -> None:
    with ThreadPoolExecutor(2) as pool, ws.deadline(5) as budget:
        seen = list(pool.map(lambda _: ws.current_budget().deadline, range(3)))
    assert seen == [budget.deadline] * 3


def test_undo_restores_thread_start_and_submit_exactly() -> None:
    before = (vars(threading.Thread).get("start"), vars(ThreadPoolExecutor).get("submit"))
    ws.instrument(threads=True)()
    assert (vars(threading.Thread).get("start"), vars(ThreadPoolExecutor).get("submit")) == before
    with ws.deadline(5):
        assert _deadline_of_thread(_in_thread) is None


def test_threads_is_off_by_default() -> None:
    undo = ws.instrument()
    try:
        with ws.deadline(5):
            assert _deadline_of_thread(_in_thread) is None
    finally:
        undo()


def test_threads_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="threads"):
        ws.instrument(threads=1)  # type: ignore[arg-type]


# -- the options from the environment --------------------------------------------------


def test_threads_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_SYNC_INSTRUMENT_THREADS", "yes")
    undo = ws.instrument(urllib3=False, httpx=False)
    try:
        with ws.deadline(5) as budget:
            assert _deadline_of_thread(_in_thread) == budget.deadline
    finally:
        undo()


def test_an_explicit_argument_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_SYNC_INSTRUMENT_THREADS", "1")
    undo = ws.instrument(urllib3=False, httpx=False, threads=False)
    try:
        with ws.deadline(5):
            assert _deadline_of_thread(_in_thread) is None
    finally:
        undo()


@pytest.mark.parametrize(
    "variable, value",
    [
        ("WATCHDOG_SYNC_INSTRUMENT_THREADS", "maybe"),
        ("WATCHDOG_SYNC_INSTRUMENT_SOCKETS", "2"),
        ("WATCHDOG_SYNC_INSTRUMENT_REQUEST_TIMEOUT", "-1"),
        ("WATCHDOG_SYNC_INSTRUMENT_REQUEST_TIMEOUT", "0"),
        ("WATCHDOG_SYNC_INSTRUMENT_REQUEST_TIMEOUT", "soon"),
    ],
)
def test_a_malformed_variable_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=variable):
        ws.instrument()


def test_a_task_still_queued_at_the_budget_end_does_not_start(carried: None) -> None:
    """One worker busy past the end: the task queued behind it fails at once, unrun."""
    ran: List[int] = []
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.3) as budget:
            first = pool.submit(lambda: budget.sleep(5))
            second = pool.submit(ran.append, 1)
            first.result()
        with pytest.raises(ws.Cancelled):
            second.result(timeout=5)
    assert ran == []
