"""The LiteLLM SDK and LangChain's ChatOpenAI against the FaultGateway, as the recipes of
docs/howto-keep-your-sdk.md have them: litellm bounded by ``instrument()`` + ``deadline()``,
its idle watchdog through an openai client on ``httpx_client()`` (``client=``), ChatOpenAI on
``http_client=httpx_client()``; ``retry_call`` the one retry owner.

Needs the ``sdks`` extra (litellm, langchain-openai; ``.ci/run`` installs it before
``pytest integration``).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterator, List

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the cost map
# litellm logs each call on a process-wide thread pool whose threads live until exit; one
# thread, started before the first test (below), so the leak check sees it as already there.
os.environ.setdefault("LOGGING_EXECUTOR_MAX_THREADS", "1")

import litellm
import openai
from langchain_openai import ChatOpenAI

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(60)

KEY = "sk-test-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "hi"}]
TEXT = "Hello from the watchdog_sync fault gateway."
IDLE = 0.5
DEADLINE = 1.5
SLACK = 0.3
FAST = ws.RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)
MakeClient = Callable[..., openai.OpenAI]


@pytest.fixture(scope="module", autouse=True)
def litellm_warmed_up() -> None:
    """One litellm call before the tests: it starts litellm's own process-wide state (its
    logging thread, an event loop and its socket pair), which lives until exit."""
    with FaultGateway() as gateway:
        assert litellm_text(gateway.base_url("ok")) == TEXT


@pytest.fixture
def openai_client() -> Iterator[MakeClient]:
    """openai.OpenAI clients on httpx_client() (idle 0.5 s, no SDK retries), closed after."""
    made: List[openai.OpenAI] = []

    def make(base_url: str, **options: Any) -> openai.OpenAI:
        http = ws.httpx_client(**{"idle_timeout": IDLE, **options})
        client = openai.OpenAI(base_url=base_url, api_key=KEY, http_client=http, max_retries=0)
        made.append(client)
        return client

    try:
        yield make
    finally:
        for client in made:
            client.close()


def litellm_text(base_url: str, client: Any = None) -> str:
    """litellm.completion(stream=True) of an OpenAI-compatible model, its own retries off."""
    extra = {} if client is None else {"client": client}
    chunks = litellm.completion(
        model="openai/m",
        messages=MESSAGES,
        stream=True,
        api_base=base_url,
        api_key=KEY,
        max_retries=0,
        **extra,
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def wait_for(predicate: Callable[[], bool], limit: float = 2.0) -> bool:
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def all_ended(gateway: FaultGateway, base: str) -> bool:
    seen = gateway.requests_seen(base)
    return bool(seen) and all(r.ended_at is not None for r in seen)


# -- litellm, bounded by instrument() + deadline() ------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "options"),
    [
        ("slow_drip", {"interval": 0.2}),
        ("keepalive_only", {"interval": 0.1}),
        ("silent_after_200", {}),
        ("no_headers", {}),
    ],
)
def test_instrument_ends_a_hanging_litellm_call_at_the_deadline(
    fault_gateway: FaultGateway, scenario: str, options: Any
) -> None:
    """litellm as it is (its own httpx client): DeadlineExceeded at the deadline, one request."""
    base = fault_gateway.base_url(scenario, **options)
    undo = ws.instrument()
    started = time.monotonic()
    try:
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
            litellm_text(base)
    finally:
        undo()
    assert time.monotonic() - started <= DEADLINE + SLACK
    assert len(fault_gateway.requests_seen(base)) == 1
    assert wait_for(lambda: all_ended(fault_gateway, base))


# -- litellm's idle watchdog: client= an openai client on httpx_client() ----------------------


def test_litellm_on_httpx_client_streams_whole(
    fault_gateway: FaultGateway, openai_client: MakeClient
) -> None:
    base = fault_gateway.base_url("ok")
    with ws.deadline(5):
        assert litellm_text(base, openai_client(base)) == TEXT


def test_litellm_on_httpx_client_sends_a_silent_start_again(
    fault_gateway: FaultGateway, openai_client: MakeClient
) -> None:
    base = fault_gateway.base_url("silent_then_ok")
    with ws.deadline(5):
        assert litellm_text(base, openai_client(base)) == TEXT
    assert [r.faulted for r in fault_gateway.requests_seen(base)] == [True, False]


def test_a_stall_under_litellm_is_our_idle_timeout_and_not_retryable(
    fault_gateway: FaultGateway, openai_client: MakeClient
) -> None:
    """litellm wraps it (MidStreamFallbackError); classify() reads ours inside."""
    base = fault_gateway.base_url("stall_after_chunks")
    started = time.monotonic()
    with pytest.raises(Exception) as info, ws.deadline(10):
        litellm_text(base, openai_client(base))
    assert time.monotonic() - started <= IDLE + 0.5 + SLACK
    verdict = ws.classify(info.value)
    assert (verdict.reason, verdict.retryable, verdict.transport_code) == (
        "stream_idle_timeout",
        False,
        "ETIMEDOUT",
    )
    assert len(fault_gateway.requests_seen(base)) == 1


def test_a_cut_stream_under_litellm_is_no_finish_reason(
    fault_gateway: FaultGateway, openai_client: MakeClient
) -> None:
    base = fault_gateway.base_url("no_finish_reason")
    with pytest.raises(Exception) as info, ws.deadline(5):
        litellm_text(base, openai_client(base))
    verdict = ws.classify(info.value)
    assert (verdict.reason, verdict.retryable) == ("no_finish_reason", False)


def test_keepalives_under_litellm_end_at_the_idle_limit(
    fault_gateway: FaultGateway, openai_client: MakeClient
) -> None:
    """Comments are no activity: each send ends at the idle limit, three sends in all."""
    base = fault_gateway.base_url("keepalive_only", interval=0.1)
    started = time.monotonic()
    with pytest.raises(Exception) as info, ws.deadline(10):
        litellm_text(base, openai_client(base))
    assert time.monotonic() - started <= 3 * IDLE + SLACK + 0.5
    assert ws.classify(info.value).reason == "stream_idle_timeout"
    assert len(fault_gateway.requests_seen(base)) == 3


def test_retry_call_owns_litellms_retries(
    fault_gateway: FaultGateway, openai_client: MakeClient
) -> None:
    base = fault_gateway.base_url("http500_then_ok")
    client = openai_client(base)
    with ws.deadline(5):
        assert ws.retry_call(litellm_text, base, client, policy=FAST) == TEXT
    assert len(fault_gateway.requests_seen(base)) == 2


# -- LangChain's ChatOpenAI on httpx_client() --------------------------------------------------


def chat_openai(base_url: str, **options: Any) -> ChatOpenAI:
    http = ws.httpx_client(**{"idle_timeout": IDLE, **options})
    return ChatOpenAI(model="m", base_url=base_url, api_key=KEY, http_client=http, max_retries=0)


def langchain_text(llm: ChatOpenAI) -> str:
    return "".join(str(chunk.content) for chunk in llm.stream("hi"))


def test_chat_openai_streams_whole(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    with ws.deadline(5):
        assert langchain_text(chat_openai(base)) == TEXT


def test_chat_openai_sends_a_silent_start_again(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("silent_then_ok")
    with ws.deadline(5):
        assert langchain_text(chat_openai(base)) == TEXT
    assert len(fault_gateway.requests_seen(base)) == 2


def test_a_stall_under_chat_openai_reaches_the_caller_as_ours(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("stall_after_chunks")
    with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
        langchain_text(chat_openai(base))
    assert info.value.chunks_received >= 2


def test_a_cut_stream_under_chat_openai_is_no_finish_reason(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("no_finish_reason")
    with pytest.raises(ws.StreamProtocolError) as info, ws.deadline(5):
        langchain_text(chat_openai(base))
    assert info.value.reason == "no_finish_reason"


def test_the_deadline_ends_chat_openai_on_a_drip(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("slow_drip", interval=0.2)
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
        langchain_text(chat_openai(base, idle_timeout=30))
    assert time.monotonic() - started <= DEADLINE + SLACK
    assert wait_for(lambda: all_ended(fault_gateway, base))
