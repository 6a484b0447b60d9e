"""What a wire format gives the FaultGateway's scenarios: SSE events and JSON bodies.

A scenario says *what* goes wrong (silence, a stall, a cut); a rendering says
how the API in question spells the pieces it sends. ``_openai`` renders the
OpenAI chat completions format, ``_anthropic`` the Anthropic Messages API,
``_gemini`` the Gemini API (google-genai).
"""

from __future__ import annotations

import json
from typing import Any, List, Optional, Protocol, Tuple

__all__ = ["APIS", "Event", "Rendering", "content_pieces", "dumps", "frame"]

APIS = ("openai", "anthropic", "gemini")
"""The wire formats the gateway speaks, the values of ``base_url(..., api=...)``."""

Event = Tuple[Optional[str], bytes]
"""One SSE event: its ``event:`` name (None: no ``event:`` line) and its ``data:`` payload."""


def dumps(value: Any) -> bytes:
    """Compact JSON, UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def frame(event: Event) -> bytes:
    """The bytes of one SSE event: an optional ``event:`` line and one ``data:`` line."""
    name, payload = event
    head = b"" if name is None else b"event: " + name.encode("ascii") + b"\n"
    return head + b"data: " + payload + b"\n\n"


def content_pieces(text: str, count: int) -> List[str]:
    """Split ``text`` into ``count`` consecutive pieces (some may be empty) that join to it."""
    size = len(text)
    return [text[i * size // count : (i + 1) * size // count] for i in range(count)]


class Rendering(Protocol):
    """How one API spells the answer to one request (a rendering is used for one request).

    A streaming rendering is stateful: the first ``text()`` (or a ``finish()``
    with no text before it) also returns the events that open a stream.
    ``retry_in_body``: a status scenario's ``retry_after`` goes in the error body
    (Gemini's ``RetryInfo``) instead of a ``Retry-After`` header.
    """

    retry_in_body: bool

    def text(self, piece: str) -> List[Event]:
        """The events that carry ``piece`` of the assistant text (the opening ones first)."""

    def finish(self, text: str) -> List[Event]:
        """The events that end a whole stream whose text was ``text`` (for the usage counts)."""

    def completion(self, content: str, *, finished: bool = True) -> bytes:
        """A non-streaming answer; ``finished=False``: without a stop/finish reason."""

    def error_body(self, message: str, error_type: str, code: Optional[str]) -> bytes:
        """The JSON body of an error status."""

    def error_event(self, message: str, error_type: str, code: Optional[str]) -> Event:
        """An error event sent in the middle of a stream."""

    def malformed(self) -> bytes:
        """The bytes of one SSE event whose data is not valid JSON."""
