"""Event streams through an httpx client, as the HTTPXTransport tests open and read them."""

from __future__ import annotations

import json
from typing import Any, List

import anthropic
import openai

KEY = "sk-test-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "hi"}]


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
