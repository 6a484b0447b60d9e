"""How far a socket-backed stream's request got, for the words of the timeout that ends it.

A stream opened by its consumer (:mod:`.socket_feed`) waits for its response's head, then
reads its body. While the head is awaited, the ``Cancelled`` its request raised says where
it was (:meth:`StreamProgress.heard`); once the body is attached the stream is in ``body``,
and the words say how many events came and when the last did. Used by the consumer's
thread alone (the one that opens and reads the stream).
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

from .._core.errors import Cancelled
from .._core.phase import mark

__all__ = ["StreamProgress"]


class StreamProgress:
    """A stream's request: the phase its request said, its head's arrival, its events."""

    __slots__ = ("_now", "_said", "events", "head_at", "last_event_at")

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._said: Optional[Tuple[str, Optional[str]]] = None
        self.head_at: Optional[float] = None
        self.last_event_at: Optional[float] = None
        self.events = 0

    def heard(self, exc: BaseException) -> None:
        """The request raised ``exc`` before its head: keep the phase it said, if any."""
        if isinstance(exc, Cancelled) and exc.phase is not None:
            self._said = (exc.phase, exc.progress)

    def head_in(self) -> None:
        """The response's head is in: the body is read from now on."""
        if self.head_at is None:
            self.head_at = self._now()

    def got(self, count: int) -> None:
        """``count`` (> 0) more events (or items) arrived."""
        self.events += count
        self.last_event_at = self._now()

    def phase(self) -> str:
        """``'body'`` once the head is in, else ``'head'`` (for a stream's idle timeout)."""
        return "head" if self.head_at is None else "body"

    def stamp(self, exc: Cancelled) -> None:
        """Put where the stream was, and how far it got, on ``exc`` (unless a part below
        already did)."""
        if self._said is not None:
            mark(exc, *self._said)
            return
        if self.head_at is None:
            return
        now = self._now()
        if self.events and self.last_event_at is not None:
            plural = "" if self.events == 1 else "s"
            words = f"after the head and {self.events} event{plural}, "
            words += f"the last {now - self.last_event_at:.1f} s ago"
        else:
            words = f"after the head, {now - self.head_at:.1f} s ago, while reading the body"
        mark(exc, "body", words)
