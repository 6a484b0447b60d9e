"""The OpenAI chat completions wire format of the FaultGateway: chunks, completions, errors."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._format import Event, dumps

__all__ = ["OpenAIRendering", "error_body", "usage_for"]

_DONE: Event = (None, b"[DONE]")
_MALFORMED = b'data: {"id": "malformed", "choices": [\n\n'


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


def error_body(message: str, error_type: str, code: Optional[str]) -> bytes:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return dumps({"error": {"message": message, "type": error_type, "param": None, "code": code}})


class OpenAIRendering:
    """``chat.completion.chunk`` events ended by ``data: [DONE]``; ``chat.completion`` bodies.

    The first chunk carries ``"role": "assistant"``; the last one
    ``finish_reason: "stop"`` and the ``usage`` (if ``usage``).
    """

    retry_in_body = False

    def __init__(self, ident: str, created: int, model: str, body: Any, *, usage: bool) -> None:
        self._ident = ident
        self._created = created
        self._model = model
        self._body = body
        self._usage = usage
        self._started = False

    def _chunk(self, delta: Dict[str, Any], finish_reason: Optional[str]) -> Dict[str, Any]:
        if not self._started:
            delta = {"role": "assistant", **delta}
            self._started = True
        return {
            "id": self._ident,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    def _usage_of(self, text: str) -> Optional[Dict[str, int]]:
        return usage_for(self._body, text) if self._usage else None

    def text(self, piece: str) -> List[Event]:
        return [(None, dumps(self._chunk({"content": piece}, None)))]

    def finish(self, text: str) -> List[Event]:
        payload = self._chunk({}, "stop")
        usage = self._usage_of(text)
        if usage is not None:
            payload["usage"] = usage
        return [(None, dumps(payload)), _DONE]

    def completion(self, content: str, *, finished: bool = True) -> bytes:
        payload: Dict[str, Any] = {
            "id": self._ident,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop" if finished else None,
                }
            ],
        }
        usage = self._usage_of(content)
        if usage is not None:
            payload["usage"] = usage
        return dumps(payload)

    def error_body(self, message: str, error_type: str, code: Optional[str]) -> bytes:
        return error_body(message, error_type, code)

    def error_event(self, message: str, error_type: str, code: Optional[str]) -> Event:
        """``data: {"error": {...}}``: how OpenAI-compatible servers fail mid-stream."""
        return (None, error_body(message, error_type, code))

    def malformed(self) -> bytes:
        return _MALFORMED
