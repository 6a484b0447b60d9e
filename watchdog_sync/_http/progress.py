"""How far one request got: its phase, and the body bytes since its head, for the timeout's words.

A request moves through ``resolve`` -> ``connect`` -> ``tls`` (HTTPS) -> ``send`` ->
``head`` -> ``body`` (a reused connection starts at ``send``). The steps of
``guard.py`` move it on; when the budget ends, the ``Cancelled`` raised for it
carries the phase and a few words on the progress (``after the head and 37 body
bytes, the last 0.4 s ago``), which the converting scope puts into its
``DeadlineExceeded``.

One request is driven by one thread at a time: the thread that sends it, then
the one that reads its body. The watchdog thread never touches this record.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

__all__ = ["RequestProgress"]

_WORDS = {
    "resolve": "while resolving the server's name",
    "connect": "while connecting",
    "tls": "during the TLS handshake",
    "send": "while sending the request",
}


class RequestProgress:
    """The phase one request is in, when it entered it, and the body bytes read so far.

    ``counts_body``: the body's bytes are counted as they are handed to its reader (a
    body read through ``streamed.py``: :meth:`count_body`); bytes still in a buffer below
    are not, so the words never claim that none came.
    """

    __slots__ = ("_now", "body_bytes", "counts_body", "head_at", "last_read_at", "phase", "since")

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self.phase: Optional[str] = None
        self.since = now()
        self.head_at: Optional[float] = None
        self.last_read_at: Optional[float] = None
        self.body_bytes = 0
        self.counts_body = False

    def enter(self, phase: str) -> None:
        """The request is now in ``phase`` (``body``: use :meth:`head_in`)."""
        if phase != self.phase:
            self.phase = phase
            self.since = self._now()

    def head_in(self) -> None:
        """The final response's head is in: the body comes next."""
        self.enter("body")
        self.head_at = self.since

    def count_body(self) -> None:
        """From now on every body byte read is told to :meth:`read`."""
        self.counts_body = True

    def read(self, count: int) -> None:
        """``count`` more body bytes arrived (a zero count is the end: nothing to note)."""
        if count:
            self.body_bytes += count
            self.last_read_at = self._now()

    def words(self) -> Optional[str]:
        """How far the request got, for an error message; ``None`` before it began."""
        phase = self.phase
        if phase is None:
            return None
        now = self._now()
        if phase in _WORDS:
            return f"{_WORDS[phase]}, for {now - self.since:.1f} s"
        if phase == "head":
            return f"after sending the request, waiting {now - self.since:.1f} s for the head"
        if self.body_bytes and self.last_read_at is not None:
            return (
                f"after the head and {self.body_bytes} body bytes, "
                f"the last {now - self.last_read_at:.1f} s ago"
            )
        head = "" if self.head_at is None else f", {now - self.head_at:.1f} s ago"
        return f"after the head{head}, while reading the body"
