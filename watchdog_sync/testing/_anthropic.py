"""The Anthropic Messages API wire format of the FaultGateway: stream events, messages, errors.

A whole stream, as the Messages API sends it (each event its own write)::

    event: message_start        {"type": "message_start", "message": {... "content": [] ...}}
    event: content_block_start  {"type": "content_block_start", "index": 0, ...}
    event: ping                 {"type": "ping"}
    event: content_block_delta  {"type": "content_block_delta", "delta": {"type": "text_delta", ...}}
    ...
    event: content_block_stop   {"type": "content_block_stop", "index": 0}
    event: message_delta        {"type": "message_delta", "delta": {"stop_reason": "end_turn", ...}}
    event: message_stop         {"type": "message_stop"}
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._format import Event, dumps

__all__ = ["PING", "AnthropicRendering", "error_body", "error_type_for", "input_tokens"]

PING: Event = ("ping", b'{"type": "ping"}')
"""The keep-alive event of the Messages API (the SDK never yields it)."""

_MALFORMED = b'event: content_block_delta\ndata: {"type": "content_block_delta", "delta": [\n\n'
_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_type_for(status: int) -> str:
    """The Anthropic ``error.type`` of an HTTP status (``api_error`` for other 5xx)."""
    return _STATUS_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(message: str, error_type: str) -> bytes:
    """``{"type": "error", "error": {"type": ..., "message": ...}}``."""
    return dumps({"type": "error", "error": {"type": error_type, "message": message}})


def _words(content: Any) -> int:
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):  # content blocks: count the text ones
        return sum(_words(block.get("text")) for block in content if isinstance(block, dict))
    return 0


def input_tokens(body: Any) -> int:
    """Words in the request's ``system`` and ``messages``: a deterministic input count."""
    if not isinstance(body, dict):
        return 0
    count = _words(body.get("system"))
    messages = body.get("messages")
    if isinstance(messages, list):
        count += sum(_words(m.get("content")) for m in messages if isinstance(m, dict))
    return count


class AnthropicRendering:
    """Messages API stream events ended by ``message_stop``; ``message`` bodies.

    ``usage=False`` sends zero token counts (the SDK expects the ``usage`` fields).
    """

    retry_in_body = False

    def __init__(self, ident: str, model: str, body: Any, *, usage: bool) -> None:
        self._ident = ident
        self._model = model
        self._input = input_tokens(body) if usage else 0
        self._usage = usage
        self._started = False

    def _output(self, text: str) -> int:
        return len(text.split()) if self._usage else 0

    def _message(self, content: List[Dict[str, Any]], stop: Optional[str], text: str) -> Any:
        return {
            "id": self._ident,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": self._input, "output_tokens": self._output(text)},
        }

    def _opening(self) -> List[Event]:
        if self._started:
            return []
        self._started = True
        start = {"type": "message_start", "message": self._message([], None, "")}
        block = {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        }
        return [("message_start", dumps(start)), ("content_block_start", dumps(block)), PING]

    def text(self, piece: str) -> List[Event]:
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": piece},
        }
        return [*self._opening(), ("content_block_delta", dumps(delta))]

    def finish(self, text: str) -> List[Event]:
        stop_block = {"type": "content_block_stop", "index": 0}
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": self._output(text)},
        }
        return [
            *self._opening(),
            ("content_block_stop", dumps(stop_block)),
            ("message_delta", dumps(delta)),
            ("message_stop", b'{"type":"message_stop"}'),
        ]

    def completion(self, content: str, *, finished: bool = True) -> bytes:
        blocks = [{"type": "text", "text": content}]
        return dumps(self._message(blocks, "end_turn" if finished else None, content))

    def error_body(self, message: str, error_type: str, code: Optional[str]) -> bytes:
        return error_body(message, error_type)

    def error_event(self, message: str, error_type: str, code: Optional[str]) -> Event:
        """``event: error`` with the error body as its data (e.g. ``overloaded_error``)."""
        return ("error", error_body(message, error_type))

    def malformed(self) -> bytes:
        return _MALFORMED
