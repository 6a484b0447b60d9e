"""The public surface: __all__ is exactly the contract's names, sorted."""

from __future__ import annotations

import pytest

import watchdog_sync

pytestmark = pytest.mark.timeout(10)

CONTRACT = {
    "Budget",
    "Cancelled",
    "ChatClient",
    "ChatStream",
    "Classification",
    "DeadlineExceeded",
    "Event",
    "GuardedStream",
    "HTTPStatusError",
    "HTTPXTransport",
    "OperationCancelled",
    "OperationTimeout",
    "RetryBudget",
    "RetryExhausted",
    "RetryPolicy",
    "SSEStream",
    "SampleResult",
    "Session",
    "StreamIdleTimeout",
    "StreamProtocolError",
    "StreamStats",
    "TransportError",
    "WatchdogError",
    "__version__",
    "abandoned_workers",
    "add_listener",
    "budget_from_headers",
    "carry_budget",
    "classify",
    "current_budget",
    "deadline",
    "deadline_headers",
    "guard_stream",
    "httpx_client",
    "instrument",
    "retry_call",
    "retrying",
    "run_sample",
    "stream_sse",
}


def test_all_is_the_public_contract() -> None:
    assert set(watchdog_sync.__all__) == CONTRACT


def test_all_is_sorted_and_every_name_imports() -> None:
    assert watchdog_sync.__all__ == sorted(watchdog_sync.__all__)
    for name in watchdog_sync.__all__:
        assert getattr(watchdog_sync, name) is not None
