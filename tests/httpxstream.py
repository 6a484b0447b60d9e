"""Event streams through an httpx client, as the HTTPXTransport tests open and read them."""

from __future__ import annotations

import contextlib
import json
from typing import Any, Callable, Iterator, List

import anthropic
import openai

import watchdog_sync as ws

KEY = "sk-test-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "hi"}]
# The SDK tests' limits: idle 0.5 s, deadline 1.5 s, and the slack they allow past it.
IDLE = 0.5
DEADLINE = 1.5
SLACK = 0.3  # the deadline holds to +0.1 s; 2 noisy shared cores get more room
FAST = ws.RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)


@contextlib.contextmanager
def sdk_clients(sdk_class: Callable[..., Any], key: str) -> Iterator[Callable[..., Any]]:
    """A maker of ``sdk_class`` clients on httpx_client() (idle 0.5 s, no SDK retries unless
    asked), each closed at the end."""
    made: List[Any] = []

    def make(base_url: str, *, max_retries: int = 0, **options: Any) -> Any:
        http = ws.httpx_client(**{"idle_timeout": IDLE, **options})
        client = sdk_class(
            base_url=base_url, api_key=key, http_client=http, max_retries=max_retries
        )
        made.append(client)
        return client

    try:
        yield make
    finally:
        for client in made:
            client.close()


def stream(client: Any, url: str) -> Any:
    """``client.stream`` of a streaming POST to ``url`` (a context manager of the response)."""
    return client.stream("POST", url, json={"stream": True})


def sdk_stream(api: str, base: str, http: Any) -> Any:
    """A streamed chat call of the ``api`` ("openai" or "anthropic") SDK over ``http``."""
    if api == "openai":
        sdk: Any = openai.OpenAI(base_url=base, api_key=KEY, http_client=http, max_retries=0)
        return sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    sdk = anthropic.Anthropic(base_url=base, api_key=KEY, http_client=http, max_retries=0)
    return sdk.messages.create(model="m", max_tokens=16, messages=MESSAGES, stream=True)


def numbers(body: bytes) -> List[int]:
    """The ``n`` of each ``data: {"n": ...}`` event in the body bytes."""
    return [json.loads(e[len(b"data: ") :])["n"] for e in body.split(b"\n\n") if e]
