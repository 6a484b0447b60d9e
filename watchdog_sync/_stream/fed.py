"""A guarded stream fed from outside: the shared reader pushes items, the consumer waits.

The consumer side is :class:`Channel`'s (idle limit, budget, stats, ending);
instead of a reader thread of its own, the stream's ``opener`` runs in the
consumer's thread at the first ``next()`` (it sends the request and hands the
socket to the shared reader), and the shared reader calls :meth:`FedChannel.offer`
with each read's items and :meth:`FedChannel.fed_end` at the end. A full
buffer pauses the feeder; taking a batch out resumes it.
"""

from __future__ import annotations

import contextvars
from typing import Callable, List, Optional, TypeVar

from .._core import events as _events
from .._core.budget import Budget
from .._core.clock import MONOTONIC, Clock
from .._core.errors import Cancelled
from .channel import DEFAULT_MAX_BUFFERED, Channel
from .limits import StreamLimits
from .stream import GuardedStream, started

__all__ = ["FedChannel", "OpenTimedOut", "fed_stream"]

T = TypeVar("T")


class OpenTimedOut(Exception):
    """Raised by an opener whose wait for the response ran into the first-item limit."""


class FedChannel(Channel[T]):
    """A :class:`Channel` whose items are pushed by a feeder instead of a reader thread."""

    def __init__(self, opener: Callable[[FedChannel[T]], None], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._opener: Optional[Callable[[FedChannel[T]], None]] = opener
        self._resume: Optional[Callable[[], None]] = None
        self._context = contextvars.copy_context()  # events from the feeder carry the caller's

    def start_fed(self) -> None:
        for budget in self._budgets:
            self._unregister.append(budget.on_done(self._on_budget_done))

    def next_batch(self):  # type: ignore[no-untyped-def]
        opener, self._opener = self._opener, None
        if opener is not None:
            # The request goes out now: the first-event limit and the lifetime count from here,
            # as they did when a reader thread sent it at once.
            self._created = self._now()
            try:
                opener(self)
            except OpenTimedOut:
                pass  # the idle check below reports it
            except (Exception, Cancelled) as exc:
                self.fed_end(exc, completed=False)
        return super().next_batch()

    def first_item_left(self) -> Optional[float]:
        """Seconds left of the first-item limit (``None``: no limit, or an item was taken)."""
        if self._first is None or self._taken:
            return None
        return self._created + self._first - self._now()

    def set_resume(self, resume: Optional[Callable[[], None]]) -> None:
        self._resume = resume

    def offer(self, items: List[T]) -> bool:
        """From the feeder: add items; False when the buffer is full (stop feeding)."""
        first = False
        with self._lock:
            if self._stopping:
                return True
            if self._first_at is None and items:
                self._first_at = self._now()
                first = True
            self._buf.extend(items)  # the consumer is woken by flush(), after the turn
            room = len(self._buf) < self._max
            self._reader_waiting = not room
        if first:
            assert self._first_at is not None
            self._context.run(
                _events.emit,
                _events.Event(
                    "first_byte",
                    stage=self._stage,
                    first_byte_ms=(self._first_at - self._created) * 1000.0,
                ),
            )
        return room

    def flush(self) -> None:
        """From the feeder, after a turn's reads: wake the consumer if it waits for these.

        Deferred to the end of the turn so that the woken consumers do not contend for the
        GIL with the feeder's next reads (each ``recv`` lets it go).
        """
        with self._lock:
            if self._consumer_waiting and self._buf:
                self._wake_consumer()

    def _room_again(self) -> None:
        self._reader_waiting = False
        if self._resume is not None:
            self._resume()

    def fed_end(self, error: Optional[BaseException], completed: bool) -> None:
        self._reader_exited(error, completed)


def fed_stream(
    opener: Callable[[FedChannel[T]], None],
    *,
    limits: StreamLimits,
    budgets: List[Budget],
    explicit: Optional[Budget],
    on_timeout: Optional[Callable[[], object]],
    max_buffered: int = DEFAULT_MAX_BUFFERED,
    clock: Clock = MONOTONIC,
) -> GuardedStream[T]:
    channel: FedChannel[T] = FedChannel(
        opener,
        limits=limits,
        budgets=budgets,
        explicit=explicit,
        on_timeout=on_timeout,
        max_buffered=max_buffered,
        clock=clock,
    )
    return started(channel, channel.start_fed)
