"""One set of stream rules on every path: a stream that only pings ends at its idle limit
through stream_sse, ChatClient and httpx_client() alike (pings are not activity)."""

from __future__ import annotations

import time
from typing import Callable, Dict

import httpx2
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(30)

IDLE = 0.5
BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _through_stream_sse(base: str) -> None:
    for _ in ws.stream_sse(base + "/chat/completions", json=BODY, idle_timeout=IDLE):
        pass


def _through_chat_client(base: str) -> None:
    client = ws.ChatClient(base, "sk-test", idle_timeout=IDLE, retry=ws.RetryPolicy(max_attempts=1))
    for _ in client.stream([{"role": "user", "content": "hi"}], model="m"):
        pass


def _through_httpx_client(base: str) -> None:
    client = ws.httpx_client(idle_timeout=IDLE)
    try:
        with client.stream("POST", base + "/chat/completions", json=BODY) as response:
            for _ in response.iter_bytes():
                pass
    finally:
        client.close()


PATHS: Dict[str, Callable[[str], None]] = {
    "stream_sse": _through_stream_sse,
    "ChatClient": _through_chat_client,
    "httpx_client": _through_httpx_client,
}
# Outside a retry owner the transport sends a stream silent before its first event again,
# at most twice (documented): each send ends at the idle limit.
SENDS = {"stream_sse": 1, "ChatClient": 1, "httpx_client": 3}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_ping_only_stream_ends_at_the_idle_limit_on_every_path(
    fault_gateway: FaultGateway, path: str
) -> None:
    """Pings every 50 ms, never data: StreamIdleTimeout at the idle limit of each send, not at
    the deadline."""
    base = fault_gateway.base_url("pings_only", interval=0.05)
    started = time.monotonic()
    with pytest.raises(ws.WatchdogError) as info, ws.deadline(10):
        PATHS[path](base)
    elapsed = time.monotonic() - started
    error = info.value
    if isinstance(error, ws.RetryExhausted):
        error = error.last_error  # type: ignore[assignment]
    assert isinstance(error, ws.StreamIdleTimeout), repr(error)
    sends = SENDS[path]
    assert sends * IDLE * 0.8 <= elapsed < sends * IDLE + 2.0
    assert len(fault_gateway.requests_seen(base)) == sends


def test_stream_sse_hands_pings_on_in_front_of_the_next_data_event(
    fault_gateway: FaultGateway,
) -> None:
    """A ping is still delivered to a stream_sse consumer, with the data event after it."""
    base = fault_gateway.base_url("ok", api="anthropic")
    body = {"model": "m", "stream": True, "max_tokens": 8, "messages": BODY["messages"]}
    names = [e.event for e in ws.stream_sse(base + "/v1/messages", json=body, idle_timeout=5)]
    assert names[0] == "message_start" and names[-1] == "message_stop"


def test_httpx2_is_the_library_under_test() -> None:
    """The httpx_client() path above runs on httpx2 (the SDKs' library)."""
    assert isinstance(ws.httpx_client(), httpx2.Client)
