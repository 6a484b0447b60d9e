"""The bytes the SSE parser reads: complete events only, size-bounded, BOM-stripped.

:class:`EventFramer` splits the raw byte stream into complete events (each ending in a
blank line, line endings normalised to ``\\n``), refuses an event larger than
``max_event_bytes`` before buffering more, strips a leading UTF-8 BOM, and at EOF reports a
truncated last event instead of passing it on: sseclient-py's own buffer is unbounded, drops
the first event after a BOM and dispatches a half event at EOF.
"""

from __future__ import annotations

from typing import List, Optional

from .._core.errors import StreamProtocolError

__all__ = ["EventFramer"]

_BOM = b"\xef\xbb\xbf"


class EventFramer:
    """Incremental splitter of an SSE byte stream into complete, bounded events."""

    __slots__ = ("_at_start", "_buffer", "_failure", "_max", "_skip_lf")

    def __init__(self, max_event_bytes: int) -> None:
        if isinstance(max_event_bytes, bool) or not isinstance(max_event_bytes, int):
            raise TypeError("max_event_bytes must be a whole number of bytes")
        if max_event_bytes < 64:
            raise ValueError(f"max_event_bytes must be at least 64, got {max_event_bytes}")
        self._max = max_event_bytes
        self._buffer = bytearray()
        self._skip_lf = False
        self._at_start = True
        self._failure: Optional[StreamProtocolError] = None

    def feed(self, chunk: bytes) -> List[bytes]:
        """Add raw bytes; return the events they complete (each ends with ``b"\\n\\n"``).

        Call :meth:`check` after handing on the events returned.

        Raises:
            StreamProtocolError: ``reason='event_too_large'`` when an event grows
                past ``max_event_bytes`` and no event completed before it in this
                chunk (else those events are returned and :meth:`check` raises).
        """
        self.check()
        if (
            not self._buffer
            and not self._skip_lf
            and not self._at_start
            and chunk.endswith(b"\n\n")
            and chunk.find(b"\n\n") == len(chunk) - 2
            and b"\r" not in chunk
            and len(chunk) <= self._max
        ):
            return [chunk]  # the common case: one whole event per read, nothing to copy
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                self._skip_lf = True  # a CRLF may be split across chunks
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer
        search_from = max(0, len(buffer) - 1)
        buffer += chunk
        if self._at_start:
            if len(buffer) < len(_BOM) and _BOM.startswith(bytes(buffer)):
                return []
            self._at_start = False
            if buffer.startswith(_BOM):
                del buffer[: len(_BOM)]
                search_from = 0
        events: List[bytes] = []
        start = 0
        while True:
            end = buffer.find(b"\n\n", search_from)
            if end < 0:
                break
            if end + 2 - start > self._max:
                return self._too_large(events)
            events.append(bytes(buffer[start : end + 2]))
            start = search_from = end + 2
        if start:
            del buffer[:start]
        if len(buffer) > self._max:
            return self._too_large(events)
        return events

    def check(self) -> None:
        """Raise the error that :meth:`feed` held back to return the events before it."""
        if self._failure is not None:
            raise self._failure

    def _too_large(self, events: List[bytes]) -> List[bytes]:
        self._buffer.clear()
        self._failure = StreamProtocolError(
            f"an SSE event grew past max_event_bytes={self._max}; the stream was stopped "
            "to bound memory (raise max_event_bytes if the server really sends events "
            "this large)",
            reason="event_too_large",
        )
        if not events:
            raise self._failure
        return events

    def truncated(self) -> bool:
        """At EOF: True when an unfinished event (not just blank lines) was left over."""
        return bool(self._buffer.strip(b"\n"))
