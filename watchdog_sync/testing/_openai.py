"""The OpenAI-compatible payloads the FaultGateway sends: chunks, completions, error bodies."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

__all__ = [
    "completion",
    "content_pieces",
    "error_body",
    "finish_chunk",
    "sse_data",
    "text_chunk",
    "usage_for",
]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sse_data(payload: bytes) -> bytes:
    """One SSE event carrying ``payload`` on a single ``data:`` line."""
    return b"data: " + payload + b"\n\n"


def content_pieces(text: str, count: int) -> List[str]:
    """Split ``text`` into ``count`` consecutive pieces (some may be empty) that join to it."""
    size = len(text)
    return [text[i * size // count : (i + 1) * size // count] for i in range(count)]


def usage_for(body: Any, text: str) -> Dict[str, int]:
    """A deterministic ``usage`` object: words in the request messages and in ``text``."""
    prompt = 0
    messages = body.get("messages") if isinstance(body, dict) else None
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                prompt += len(content.split())
    completion_tokens = len(text.split())
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }


def _chunk(ident: str, created: int, model: str, choice: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
    }


def text_chunk(ident: str, created: int, model: str, content: str, *, first: bool) -> bytes:
    """A ``chat.completion.chunk`` JSON carrying ``content`` (and the role when ``first``)."""
    delta: Dict[str, Any] = (
        {"role": "assistant", "content": content} if first else {"content": content}
    )
    return _dumps(
        _chunk(ident, created, model, {"index": 0, "delta": delta, "finish_reason": None})
    )


def finish_chunk(
    ident: str, created: int, model: str, usage: Optional[Dict[str, int]], *, first: bool
) -> bytes:
    """The last chunk: an empty delta, ``finish_reason: "stop"`` and ``usage`` if given."""
    delta: Dict[str, Any] = {"role": "assistant"} if first else {}
    payload = _chunk(ident, created, model, {"index": 0, "delta": delta, "finish_reason": "stop"})
    if usage is not None:
        payload["usage"] = usage
    return _dumps(payload)


def completion(
    ident: str,
    created: int,
    model: str,
    content: str,
    usage: Optional[Dict[str, int]],
    *,
    finish_reason: Optional[str] = "stop",
) -> bytes:
    """A non-streaming ``chat.completion`` JSON body."""
    payload: Dict[str, Any] = {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
    }
    if usage is not None:
        payload["usage"] = usage
    return _dumps(payload)


def error_body(message: str, error_type: str, code: Optional[str]) -> bytes:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return _dumps({"error": {"message": message, "type": error_type, "param": None, "code": code}})
