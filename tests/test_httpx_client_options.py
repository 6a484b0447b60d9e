"""httpx_client() takes every HTTPXTransport option and hands the rest to the client: one
test per option, each through a real stream from the FaultGateway on 127.0.0.1."""

from __future__ import annotations

import time
from typing import Any, Dict

import httpx2
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(30)

BODY: Dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def read_stream(client: httpx2.Client, base_url: str) -> bytes:
    """POST a streaming chat request and read its whole body."""
    body = {**BODY, "stream": True}
    with client.stream("POST", base_url + "/chat/completions", json=body) as response:
        return b"".join(response.iter_bytes())


def test_idle_timeout_ends_a_stream_that_stalls_after_its_first_chunks(
    fault_gateway: FaultGateway,
) -> None:
    """idle_timeout: the gap after the first events is bounded."""
    with ws.httpx_client(idle_timeout=0.3) as client:
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout) as caught:
            read_stream(client, fault_gateway.base_url("stall_after_chunks"))
    assert caught.value.idle_timeout == pytest.approx(0.3)
    assert caught.value.chunks_received > 0
    assert time.monotonic() - started < 5


def test_first_event_timeout_bounds_the_wait_for_the_first_event(
    fault_gateway: FaultGateway,
) -> None:
    """first_event_timeout: a silent stream is sent again, then fails, by that limit and
    not by the (long) idle limit."""
    base = fault_gateway.base_url("silent_after_200")
    with ws.httpx_client(idle_timeout=30, first_event_timeout=0.2) as client:
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout) as caught:
            read_stream(client, base)
    assert caught.value.chunks_received == 0
    assert time.monotonic() - started < 5
    assert len(fault_gateway.requests_seen(base)) >= 2  # sent again before it gave up


def test_budget_ends_every_request_of_the_client(fault_gateway: FaultGateway) -> None:
    """budget: a silent stream under a long idle limit ends with the client's budget."""
    with ws.httpx_client(idle_timeout=30, budget=ws.Budget(0.5)) as client:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded):
            read_stream(client, fault_gateway.base_url("silent_after_200"))
    assert time.monotonic() - started < 5


def test_max_event_bytes_caps_an_event(fault_gateway: FaultGateway) -> None:
    """max_event_bytes: an event over the cap ends the stream with event_too_large; the
    same stream passes a client with the default cap."""
    options = {"size": 200 * 1024, "piece": 16 * 1024}
    capped = ws.httpx_client(idle_timeout=5, max_event_bytes=64 * 1024)
    with capped as client, pytest.raises(ws.StreamProtocolError) as caught:
        read_stream(client, fault_gateway.base_url("oversized_event", **options))
    assert caught.value.reason == "event_too_large"
    with ws.httpx_client(idle_timeout=5) as client:
        body = read_stream(client, fault_gateway.base_url("oversized_event", **options))
    assert len(body) > 200 * 1024


def test_propagate_sends_the_time_left(fault_gateway: FaultGateway) -> None:
    """propagate: each request carries the remaining budget as deadline headers."""
    base = fault_gateway.base_url("ok")
    with ws.httpx_client(idle_timeout=5, propagate=True) as client, ws.deadline(10):
        read_stream(client, base)
    (seen,) = fault_gateway.requests_seen(base)
    assert "grpc-timeout" in seen.headers
    assert 0 < int(seen.headers["x-envoy-upstream-rq-timeout-ms"]) <= 10_000


def test_the_other_arguments_go_to_the_client(fault_gateway: FaultGateway) -> None:
    """Every argument that is not the transport's is the client's (base_url, headers)."""
    base = fault_gateway.base_url("ok")
    with ws.httpx_client(idle_timeout=5, base_url=base, headers={"X-Test": "yes"}) as client:
        body = read_stream(client, "")
    assert b"[DONE]" in body
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.headers["x-test"] == "yes"


@pytest.mark.parametrize(
    ("option", "error"),
    [
        ({"max_event_bytes": 0}, ValueError),
        ({"budget": 5}, TypeError),
        ({"idle_timeout": "soon"}, TypeError),
    ],
)
def test_a_bad_option_is_a_clear_error(option: Dict[str, Any], error: type) -> None:
    """A bad transport option raises its error naming it (and leaves no client open)."""
    name = next(iter(option))
    with pytest.raises(error, match=name):
        ws.httpx_client(**option)
