"""One request being answered by a FaultGateway scenario: where to write, what was asked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from ._format import Event, Rendering, content_pieces, frame
from ._wire import Exchange

__all__ = ["EVENT_STREAM", "JSON", "Call"]

EVENT_STREAM = "text/event-stream"
JSON = "application/json"


@dataclass(frozen=True)
class Call:
    """One request being answered: the exchange to write to, the request, its wire format.

    ``render`` spells the answer in the route's API (OpenAI or Anthropic); the
    scenario decides what goes wrong.
    """

    exchange: Exchange
    stream: bool
    options: Mapping[str, Any]
    body: Any
    render: Rendering

    def wait(self, seconds: Optional[float]) -> None:
        """Hold the connection (``None``: until the client leaves or the gateway stops)."""
        self.exchange.conn.wait(seconds)

    def completion(self, content: str, *, finished: bool = True) -> bytes:
        """The non-streaming body for ``content``."""
        return self.render.completion(content, finished=finished)

    def open_stream(self) -> None:
        """Send 200 and the SSE headers."""
        self.exchange.head(200, EVENT_STREAM)

    def send_events(self, events: Iterable[Event]) -> None:
        """Send each event as its own write (its own HTTP chunk when chunked)."""
        for event in events:
            self.exchange.write(frame(event))

    def send_chunks(self, count: int, interval: float) -> None:
        """Send ``count`` content events carrying the ``text`` option, ``interval`` apart.

        The stream's opening events (Anthropic: ``message_start``, ...) go with the first.
        """
        for index, piece in enumerate(content_pieces(self.options["text"], count)):
            if index:
                self.wait(interval)
            self.send_events(self.render.text(piece))

    def end_stream(self, chunks_sent: int) -> None:
        """Send the closing events (with the usage), and end the body."""
        self.send_events(self.render.finish(self.options["text"] if chunks_sent else ""))
        self.exchange.finish()

    def send_body(self, body: bytes) -> None:
        """Send a complete ``application/json`` body with Content-Length."""
        self.exchange.head(200, JSON, length=len(body))
        self.exchange.write(body)
        self.exchange.finish()
