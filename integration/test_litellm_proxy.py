"""ChatClient and the openai SDK on ``httpx_client()`` through a real LiteLLM proxy whose
upstream is the FaultGateway.

Needs the ``integration`` extra (``litellm[proxy]``; ``.ci/run`` installs it); run with
``pytest integration -n 0``. One proxy serves the module (see ``integration/litellm_proxy.py``):
each route below is one of its models, with LiteLLM's defaults except ``stream_timeout``
(its own upstream read limit, 2 s here). What reaches the client for each upstream
incident is in docs/reliability.md, "Behind a LiteLLM proxy".
"""

from __future__ import annotations

import time
from typing import Any, List

import openai
import pytest

from watchdog_sync import (
    ChatClient,
    DeadlineExceeded,
    HTTPStatusError,
    RetryExhausted,
    RetryPolicy,
    StreamIdleTimeout,
    StreamProtocolError,
    deadline,
    httpx_client,
)
from watchdog_sync.testing import FaultGateway, SeenRequest

from .litellm_proxy import MASTER_KEY, STREAM_TIMEOUT, LiteLLMProxy, Routes

# The first test also waits for the proxy to start (16-24 s measured, 90 s allowed).
pytestmark = pytest.mark.timeout(150)

MESSAGES = [{"role": "user", "content": "hi"}]
TEXT = "Hello from the watchdog_sync fault gateway."
ONE_ATTEMPT = RetryPolicy(max_attempts=1)
# LiteLLM's router tries an upstream that timed out twice more (its default num_retries 2).
LITELLM_TRIES = 3


@pytest.fixture(scope="module")
def litellm_routes() -> Routes:
    """The proxy's models: one FaultGateway route each, named for what the test does."""
    return {
        "ok": ("ok", {"chunks": 5, "interval": 0.1}),
        "silent": ("silent_after_200", {}),
        "silent-patient": ("silent_after_200", {}),
        "pings": ("pings_only", {}),
        "drip": ("slow_drip", {}),
        "cut": ("no_finish_reason", {}),
        "stall": ("stall_after_chunks", {}),
        "reset": ("reset_mid_stream", {}),
        "sdk-ok": ("ok", {"chunks": 5, "interval": 0.1}),
        "sdk-silent": ("silent_after_200", {}),
        "sdk-pings": ("pings_only", {}),
        "sdk-drip": ("slow_drip", {}),
        "sdk-cut": ("no_finish_reason", {}),
    }


def _client(proxy: LiteLLMProxy, model: str, **options: Any) -> ChatClient:
    return ChatClient(proxy.base_url, api_key=MASTER_KEY, model=model, **options)


def _settled(gateway: FaultGateway, url: str, count: int, within: float) -> List[SeenRequest]:
    """The route's requests once ``count`` have arrived and all have ended (bounded wait)."""
    give_up = time.monotonic() + within
    while True:
        seen = gateway.requests_seen(url)
        done = len(seen) >= count and all(s.ended_at is not None for s in seen)
        if done or time.monotonic() > give_up:
            return seen
        time.sleep(0.02)


def test_a_healthy_stream_arrives_whole_and_as_it_is_sent(litellm_proxy: LiteLLMProxy) -> None:
    """Every chunk and the finish_reason reach the client; LiteLLM forwards as it reads."""
    arrivals: List[float] = []
    client = _client(litellm_proxy, "ok", timeout=10, idle_timeout=5)
    with client, client.stream(MESSAGES) as stream:
        for _ in stream:
            arrivals.append(time.monotonic())
    assert stream.text == TEXT and stream.finish_reason == "stop"
    assert len(arrivals) == 6  # 5 content chunks, then the one carrying finish_reason
    assert arrivals[4] - arrivals[0] >= 0.3  # sent 0.1 s apart: not held back until the end
    (seen,) = litellm_proxy.gateway.requests_seen(litellm_proxy.upstream["ok"])
    assert seen.status == 200 and not seen.client_disconnected and seen.stream


def test_200_then_silence_ends_at_the_clients_idle_limit_while_litellm_holds_the_upstream(
    litellm_proxy: LiteLLMProxy,
) -> None:
    """The client's first-event limit ends the call; LiteLLM keeps the silent upstream
    request open after the client left, until its own stream_timeout, and tries it again."""
    url = litellm_proxy.upstream["silent"]
    started = time.monotonic()
    client = _client(litellm_proxy, "silent", timeout=10, idle_timeout=1, retry=ONE_ATTEMPT)
    with client, pytest.raises(RetryExhausted) as caught:
        client.stream(MESSAGES)
    gave_up = time.monotonic()
    assert 1.0 <= gave_up - started < 1.5
    idle = caught.value.last_error
    assert isinstance(idle, StreamIdleTimeout) and idle.chunks_received == 0
    seen = _settled(litellm_proxy.gateway, url, LITELLM_TRIES, LITELLM_TRIES * STREAM_TIMEOUT + 5)
    assert len(seen) == LITELLM_TRIES  # two of them sent after the client had gone
    assert seen[1].arrived_at > gave_up
    for request in seen:
        assert request.ended_at is not None and request.status == 200
        assert STREAM_TIMEOUT - 0.1 < request.ended_at - request.arrived_at < STREAM_TIMEOUT + 1


def test_a_silent_upstream_reaches_a_patient_client_as_http_408_after_litellms_retries(
    litellm_proxy: LiteLLMProxy,
) -> None:
    """With client limits above LiteLLM's, the proxy's stream_timeout ends each upstream
    try, and after its retries the client gets a 408 (retryable: a client retry multiplies)."""
    url = litellm_proxy.upstream["silent-patient"]
    started = time.monotonic()
    client = _client(
        litellm_proxy, "silent-patient", timeout=30, idle_timeout=20, retry=ONE_ATTEMPT
    )
    with client, pytest.raises(RetryExhausted) as caught:
        client.stream(MESSAGES)
    elapsed = time.monotonic() - started
    status = caught.value.last_error
    assert isinstance(status, HTTPStatusError) and status.status == 408 and status.retryable
    assert LITELLM_TRIES * STREAM_TIMEOUT <= elapsed < 20
    seen = _settled(litellm_proxy.gateway, url, LITELLM_TRIES, 2.0)
    assert len(seen) == LITELLM_TRIES and all(s.ended_at is not None for s in seen)


def test_a_ping_only_upstream_ends_at_the_clients_first_event_limit(
    litellm_proxy: LiteLLMProxy,
) -> None:
    """LiteLLM forwards no ping (nor even the response head): the client's first-event limit
    ends the call, and LiteLLM closes the upstream at the next ping after the client left."""
    started = time.monotonic()
    client = _client(litellm_proxy, "pings", timeout=10, idle_timeout=1, retry=ONE_ATTEMPT)
    with client, pytest.raises(RetryExhausted) as caught:
        client.stream(MESSAGES)
    gave_up = time.monotonic()
    assert 1.0 <= gave_up - started < 1.5
    idle = caught.value.last_error
    assert isinstance(idle, StreamIdleTimeout) and idle.chunks_received == 0
    (seen,) = _settled(litellm_proxy.gateway, litellm_proxy.upstream["pings"], 1, 2.0)
    assert seen.client_disconnected and seen.ended_at is not None
    assert seen.ended_at - gave_up < 1.0  # a ping every 0.5 s, the gateway's 50 ms tick


def test_a_slow_drip_ends_at_the_deadline(litellm_proxy: LiteLLMProxy) -> None:
    """A chunk every 0.5 s never trips the idle limit; the 2 s deadline ends the call."""
    received = 0
    started = time.monotonic()
    client = _client(litellm_proxy, "drip", timeout=2, idle_timeout=1.5)
    with client, pytest.raises(DeadlineExceeded), client.stream(MESSAGES) as stream:
        for _ in stream:
            received += 1
    gave_up = time.monotonic()
    assert 2.0 <= gave_up - started < 2.25
    assert received >= 2
    (seen,) = _settled(litellm_proxy.gateway, litellm_proxy.upstream["drip"], 1, 2.0)
    assert seen.client_disconnected and seen.ended_at is not None
    assert seen.ended_at - gave_up < 1.0  # LiteLLM noticed at its next upstream chunk


def test_a_stall_after_chunks_ends_at_the_clients_idle_limit(litellm_proxy: LiteLLMProxy) -> None:
    """Two chunks, then silence: the idle limit ends the call, and LiteLLM lets go upstream."""
    received = 0
    started = time.monotonic()
    client = _client(litellm_proxy, "stall", timeout=10, idle_timeout=1, retry=ONE_ATTEMPT)
    with client, pytest.raises(StreamIdleTimeout) as caught, client.stream(MESSAGES) as stream:
        for _ in stream:
            received += 1
    gave_up = time.monotonic()
    assert 1.0 <= gave_up - started < 1.5
    assert received == 2 and caught.value.chunks_received == 2
    (seen,) = _settled(litellm_proxy.gateway, litellm_proxy.upstream["stall"], 1, 2.0)
    assert seen.client_disconnected and seen.ended_at is not None


def test_a_reset_mid_stream_reaches_the_client_as_an_error_event(
    litellm_proxy: LiteLLMProxy,
) -> None:
    """A TCP reset after two chunks stays visible: LiteLLM ends the stream with an error
    event (500, 'Connection error'), which the client raises after the two chunks."""
    received = 0
    client = _client(litellm_proxy, "reset", timeout=10, idle_timeout=5, retry=ONE_ATTEMPT)
    with client, pytest.raises(HTTPStatusError) as caught, client.stream(MESSAGES) as stream:
        for _ in stream:
            received += 1
    assert received == 2 and caught.value.status == 500
    assert "Connection error" in str(caught.value)


def test_litellm_turns_a_stream_cut_without_finish_reason_into_a_whole_one(
    litellm_proxy: LiteLLMProxy,
) -> None:
    """Direct, the cut stream raises no_finish_reason; through LiteLLM it arrives with
    finish_reason 'stop' and [DONE] that the upstream never sent, so no client can tell."""
    direct = litellm_proxy.gateway.base_url("no_finish_reason")
    client = ChatClient(direct, model="m", timeout=10, idle_timeout=5, retry=ONE_ATTEMPT)
    with client, pytest.raises(StreamProtocolError) as caught, client.stream(MESSAGES) as stream:
        for _ in stream:
            pass
    assert caught.value.reason == "no_finish_reason"
    client = _client(litellm_proxy, "cut", timeout=10, idle_timeout=5, retry=ONE_ATTEMPT)
    with client, client.stream(MESSAGES) as stream:
        chunks = list(stream)
    assert stream.text == TEXT and stream.finish_reason == "stop"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    (seen,) = litellm_proxy.gateway.requests_seen(litellm_proxy.upstream["cut"])
    assert seen.status == 200 and not seen.client_disconnected


# -- the openai SDK with http_client=watchdog_sync.httpx_client() ---------------------------


def _sdk(proxy: LiteLLMProxy, **limits: Any) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proxy.base_url,
        api_key=MASTER_KEY,
        max_retries=0,
        http_client=httpx_client(**limits),
    )


def _sdk_text(chunks: List[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_sdk_a_healthy_stream_arrives_whole(litellm_proxy: LiteLLMProxy) -> None:
    """The openai SDK on httpx_client() gets every chunk and the finish_reason through LiteLLM."""
    with _sdk(litellm_proxy, idle_timeout=5) as client, deadline(10):
        chunks = list(
            client.chat.completions.create(model="sdk-ok", messages=MESSAGES, stream=True)
        )
    assert _sdk_text(chunks) == TEXT
    assert chunks[-1].choices[0].finish_reason == "stop"
    (seen,) = litellm_proxy.gateway.requests_seen(litellm_proxy.upstream["sdk-ok"])
    assert seen.status == 200 and not seen.client_disconnected


@pytest.mark.parametrize("model", ["sdk-silent", "sdk-pings"])
def test_sdk_a_silent_or_ping_only_upstream_ends_at_the_clients_first_event_limits(
    litellm_proxy: LiteLLMProxy, model: str
) -> None:
    """LiteLLM forwards nothing, so httpx_client() sends the request again twice (its
    recovery of a stream silent before its first event), then raises StreamIdleTimeout:
    3 sends of 1 s each, and LiteLLM tries a silent upstream 3 times per send."""
    started = time.monotonic()
    client = _sdk(litellm_proxy, idle_timeout=1)
    with client, deadline(10), pytest.raises(StreamIdleTimeout) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
    gave_up = time.monotonic()
    assert 3.0 <= gave_up - started < 3.5
    assert caught.value.chunks_received == 0
    sends = 3
    per_send = LITELLM_TRIES if model == "sdk-silent" else 1  # pings: no LiteLLM timeout
    seen = _settled(
        litellm_proxy.gateway,
        litellm_proxy.upstream[model],
        sends * per_send,
        LITELLM_TRIES * STREAM_TIMEOUT + 5,
    )
    assert len(seen) == sends * per_send and all(s.ended_at is not None for s in seen)


def test_sdk_a_slow_drip_ends_at_the_deadline(litellm_proxy: LiteLLMProxy) -> None:
    """A chunk every 0.5 s never trips the idle limit; the deadline() scope ends the SDK call."""
    received = 0
    started = time.monotonic()
    client = _sdk(litellm_proxy, idle_timeout=1.5)
    with client, pytest.raises(DeadlineExceeded), deadline(2):
        for _ in client.chat.completions.create(model="sdk-drip", messages=MESSAGES, stream=True):
            received += 1
    gave_up = time.monotonic()
    assert 2.0 <= gave_up - started < 2.25
    assert received >= 2
    (seen,) = _settled(litellm_proxy.gateway, litellm_proxy.upstream["sdk-drip"], 1, 2.0)
    assert seen.client_disconnected and seen.ended_at is not None


def test_sdk_litellm_hides_a_cut_stream_from_httpx_client_too(
    litellm_proxy: LiteLLMProxy,
) -> None:
    """httpx_client() raises no_finish_reason on the cut stream straight from the gateway,
    and through LiteLLM gets a whole-looking stream ending in finish_reason 'stop'."""
    direct = litellm_proxy.gateway.base_url("no_finish_reason")
    client = openai.OpenAI(
        base_url=direct,
        api_key="sk-direct",
        max_retries=0,
        http_client=httpx_client(idle_timeout=5),
    )
    with client, deadline(10), pytest.raises(StreamProtocolError) as caught:
        for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            pass
    assert caught.value.reason == "no_finish_reason"
    with _sdk(litellm_proxy, idle_timeout=5) as client, deadline(10):
        chunks = list(
            client.chat.completions.create(model="sdk-cut", messages=MESSAGES, stream=True)
        )
    assert _sdk_text(chunks) == TEXT
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_the_proxy_sent_nothing_through_the_environments_http_proxy(
    litellm_proxy: LiteLLMProxy,
) -> None:
    """Run last: no connection reached the trap every *_PROXY variable of LiteLLM points at."""
    assert litellm_proxy.outbound_attempts() == 0, litellm_proxy.log()
