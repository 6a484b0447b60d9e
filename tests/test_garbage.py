"""A finished call leaves no reference cycles of its own behind.

Objects in a cycle wait for the cyclic garbage collector, which promotes them with
every call still running and then stops every thread while it walks the old
generation: in the soak such full collections took 100-200 ms, longer than the
0.1 s a call may run past its deadline. So a call's budgets, guards, retry loop,
responses and errors must be freed by reference counting alone.
"""

from __future__ import annotations

import gc
import threading
import types
from typing import Any, Dict, Iterator, List

import pytest
import requests

import watchdog_sync as ws
from watchdog_sync import Budget, ChatStream
from watchdog_sync.testing import FakeClock, FaultGateway

from .internals import _GUARD_ATTR, _ConnectionGuard, _Loop

pytestmark = pytest.mark.timeout(30)

# Objects of the call itself; the in-process gateway's own garbage is not ours to judge.
_CALL_TYPES = (Budget, ChatStream, _ConnectionGuard, _Loop, requests.Response, ws.WatchdogError)


@pytest.fixture
def saved_garbage() -> Iterator[List[Any]]:
    """Every object the cyclic collector finds, kept in ``gc.garbage`` instead of freed."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()


def _stream_once(base_url: str, timeout: float = 3.0) -> None:
    """One stream read to its end; a WatchdogError is an end like any other here."""
    policy = ws.RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.01)
    with ws.ChatClient(
        base_url, model="m", timeout=timeout, idle_timeout=0.3, retry=policy
    ) as client:
        try:
            with client.stream([{"role": "user", "content": "hi"}]) as stream:
                for _ in stream:
                    pass
        except ws.WatchdogError:
            pass


@pytest.mark.parametrize(
    "scenario, options",
    [
        ("ok", {}),
        ("http500", {}),
        ("http429", {"retry_after": 0.01}),
        ("silent_after_200", {}),
        ("stall_after_chunks", {"chunks": 2}),
        ("slow_drip", {"interval": 0.05}),
    ],
)
def test_a_chat_stream_leaves_no_cycles_of_its_own(
    fault_gateway: FaultGateway,
    saved_garbage: List[Any],
    scenario: str,
    options: Dict[str, Any],
) -> None:
    base = fault_gateway.base_url(scenario, **options)
    _stream_once(fault_gateway.base_url("ok"))  # warm up: imports and pools
    gc.collect()
    saved_garbage.clear()
    _stream_once(base, timeout=0.4 if scenario == "slow_drip" else 3.0)
    gc.collect()
    ours = [type(o).__name__ for o in saved_garbage if isinstance(o, _CALL_TYPES)]
    assert ours == []


def test_a_budget_cancelled_by_itself_is_freed_without_the_collector(
    saved_garbage: List[Any],
) -> None:
    parent = Budget(10)
    child = parent.child()
    parent.cancel()
    assert child.end_cause() == (parent, "cancelled")
    del parent, child
    gc.collect()
    assert [o for o in saved_garbage if isinstance(o, Budget)] == []


def test_a_failed_request_lets_go_of_the_connections_urllib3_dropped() -> None:
    # On a failure urllib3 closes the connection and puts back None, so the guard learns of
    # it only from the request's end. A guard still waiting for it stayed registered on the
    # budget until the budget ended (here a minute), in a cycle with the connection; that
    # garbage then surfaced in whichever test ran next.
    budget = Budget(60)
    guard = _ConnectionGuard(budget, budget, lambda: None)
    conn = types.SimpleNamespace(sock=None)
    guard.attach(conn)
    guard.request_finished(answered=False)
    assert getattr(conn, _GUARD_ATTR) is None
    assert budget._callbacks == []  # nothing left waiting for the budget's end


def test_a_reader_error_left_behind_by_the_budgets_end_is_not_kept_in_a_cycle(
    saved_garbage: List[Any],
) -> None:
    """The reader fails after the budget ended but before the consumer looked: the
    consumer reports the budget's end and the reader's error is dropped, not kept."""
    clock = FakeClock()
    budget = Budget(1.0, clock=clock)
    go = threading.Event()
    done = threading.Event()

    def source() -> Iterator[int]:
        try:
            yield 1
            go.wait(5)
            budget.check()  # raises Cancelled: what stream_sse's reader does after a shutdown
            yield 2
        finally:
            done.set()

    stream = ws.guard_stream(source(), idle_timeout=10, budget=budget, clock=clock)
    assert next(stream) == 1
    clock.advance(2.0)  # the budget ends while the consumer is not waiting
    go.set()
    assert done.wait(5)
    with pytest.raises(ws.DeadlineExceeded):
        next(stream)
    stream.close()
    del stream
    gc.collect()
    left = [type(o).__name__ for o in saved_garbage if isinstance(o, (ws.Cancelled, Budget))]
    assert left == []
