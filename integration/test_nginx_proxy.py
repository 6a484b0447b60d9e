"""ChatClient through a real nginx (reverse proxy) in front of the FaultGateway.

Needs the ``nginx`` binary (``.ci/run`` installs it); run with ``pytest integration -n 0``.
The proxy runs with ``proxy_buffering off`` and ``proxy_http_version 1.1`` (see conftest).
"""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

from watchdog_sync import Budget, ChatClient, OperationCancelled, RetryPolicy
from watchdog_sync.testing import FaultGateway

from .conftest import Nginx

pytestmark = pytest.mark.timeout(30)

MESSAGES = [{"role": "user", "content": "hi"}]
TEXT = "Hello from the watchdog_sync fault gateway."


def test_a_stream_arrives_event_by_event_through_the_proxy(
    fault_gateway: FaultGateway, nginx: Nginx
) -> None:
    """Each chunk reaches the client within 50 ms of the gateway sending it: nothing buffered."""
    base = fault_gateway.base_url("ok", chunks=5, interval=0.1)
    arrivals: List[float] = []
    client = ChatClient(nginx.url(base), model="m", timeout=10, idle_timeout=2)
    with client, client.stream(MESSAGES) as stream:
        for _ in stream:
            arrivals.append(time.monotonic())
    assert stream.text == TEXT and stream.finish_reason == "stop"
    (seen,) = fault_gateway.requests_seen(base)
    # The gateway sends content chunk i at about arrived_at + i * 0.1 s, then the last chunk.
    sent = [seen.arrived_at + 0.1 * i for i in range(5)]
    late = [arrival - at for arrival, at in zip(arrivals, sent)]
    assert len(arrivals) == 6
    assert all(-0.01 < lag < 0.05 for lag in late), [f"{lag * 1000:.1f} ms" for lag in late]


def test_200_then_silence_behind_the_proxy_ends_at_the_idle_timeout_and_the_retry_succeeds(
    fault_gateway: FaultGateway, nginx: Nginx
) -> None:
    """nginx forwards the 200 and then nothing: the client's own idle limit ends the attempt."""
    base = fault_gateway.base_url("silent_then_ok")
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)
    client = ChatClient(nginx.url(base), model="m", timeout=10, idle_timeout=0.5, retry=policy)
    started = time.monotonic()
    with client, client.stream(MESSAGES) as stream:
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in stream)
    elapsed = time.monotonic() - started
    assert text == TEXT and stream.attempts == 2
    assert 0.5 <= elapsed < 1.5  # 0.5 s of silence, 0.05 s backoff, a 0.1 s stream
    first, second = fault_gateway.requests_seen(base)
    assert first.faulted and first.status == 200 and not second.faulted
    assert first.client_disconnected  # nginx hung up on the silent upstream for the client


def test_a_client_that_gives_up_releases_the_proxys_upstream_connection(
    fault_gateway: FaultGateway, nginx: Nginx
) -> None:
    """Cancelled from another thread, the client's connection is shut; nginx then closes
    its upstream connection (proxy_ignore_client_abort off), and the gateway sees it."""
    base = fault_gateway.base_url("silent_after_200")
    budget = Budget()
    cancelled_at: List[float] = []

    def cancel_soon() -> None:
        time.sleep(0.3)  # the scenario: let the request reach the silent upstream first
        cancelled_at.append(time.monotonic())
        budget.cancel()

    canceller = threading.Thread(target=cancel_soon)
    policy = RetryPolicy(max_attempts=1)
    with ChatClient(nginx.url(base), model="m", timeout=10, idle_timeout=5, retry=policy) as c:
        canceller.start()
        try:
            with pytest.raises(OperationCancelled):
                c.stream(MESSAGES, budget=budget)
        finally:
            canceller.join(5)
    give_up = time.monotonic() + 2.0
    while time.monotonic() < give_up:
        (seen,) = fault_gateway.requests_seen(base)
        if seen.ended_at is not None:
            break
        time.sleep(0.01)
    assert seen.client_disconnected and seen.ended_at is not None
    assert seen.ended_at - cancelled_at[0] < 0.3  # the gateway notices within a 50 ms tick
