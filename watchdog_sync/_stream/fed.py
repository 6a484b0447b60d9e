"""A guarded stream without a reader thread of its own: its consumer reads it, or the shared
reader feeds it.

The consumer side is :class:`Channel`'s (idle limit, budget, stats, ending);
instead of a reader thread, the stream's ``opener`` runs in the consumer's
thread at the first ``next()`` (it sends the request and attaches the body).
Attached, the body is read in the consumer's thread: whenever the consumer
finds the buffer empty it reads once (:meth:`Body.pull`), for at most what its
wait may last. Detached, the shared reader reads it and calls :meth:`offer`
with each read's items and :meth:`flush` after its turn; a full buffer pauses
it, taking a batch out resumes it. Either way :meth:`fed_end` records the end.

On timeout or cancel ``on_timeout`` shuts the socket from outside, which ends a
read in progress; an attached body is then ended by that read or, when none is
in progress, on the shared reader's thread (so that the thread stopping it goes on).
"""

from __future__ import annotations

import contextvars
import functools
import math
from typing import Any, Callable, Iterator, List, Optional, Protocol, Tuple, TypeVar

from .._core import events as _events
from .._core.budget import Budget
from .._core.clock import MONOTONIC, Clock
from .._core.errors import Cancelled
from . import engine
from .channel import DEFAULT_MAX_BUFFERED, Channel
from .limits import StreamLimits
from .stream import GuardedStream, started

__all__ = ["FedChannel", "OpenTimedOut", "fed_stream"]

T = TypeVar("T")


class Body(Protocol):
    """What a fed channel reads: one read at a time, in the consumer's thread."""

    def pull(self, timeout: Optional[float]) -> List[Any]:
        """Read once, waiting at most ``timeout`` (``None``: no limit); the read's items (or
        none: the body may have ended, ``fed_end``)."""

    def end(self, error: Optional[BaseException], eof: bool) -> None:
        """End the body (once) and let its connection go."""


class OpenTimedOut(Exception):
    """Raised by an opener whose wait for the response ran into the first-item limit."""


class FedChannel(Channel[T]):
    """A :class:`Channel` read by its consumer (an attached body) or fed by the shared reader."""

    def __init__(self, opener: Callable[[FedChannel[T]], None], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._opener: Optional[Callable[[FedChannel[T]], None]] = opener
        self._body: Optional[Body] = None
        self._resume: Optional[Callable[[], None]] = None
        self._reading = False  # the consumer is in ``body.pull``: it ends the body
        self._context = contextvars.copy_context()  # events from the feeder carry the caller's

    def start_fed(self) -> None:
        for budget in self._budgets:
            self._unregister.append(budget.on_done(self._on_budget_done))

    def next_batch(self):  # type: ignore[no-untyped-def]
        if self._opener is not None:
            self._open()
        try:
            self._begin_batch()
            body = self._body
            if body is None or self._buf or self._first_at is None:
                return self._batch_after(self._activity.quiet_since)
            batch, wait_from = self._pulled(body)
            return batch if batch is not None else self._batch_after(wait_from)
        finally:
            if self._stopping:  # a read that returned as the stream was stopped left the body
                self._let_go()

    def _open(self) -> None:
        """The first ``next()``: the request goes out now, so the first-event limit and the
        lifetime count from here, as they did when a reader thread sent it at once."""
        opener, self._opener = self._opener, None
        assert opener is not None
        self._created = self._now()
        try:
            opener(self)
        except OpenTimedOut:
            pass  # the channel's idle check reports it
        except (Exception, Cancelled) as exc:
            self.fed_end(exc, completed=False)

    def _pulled(self, body: Body) -> Tuple[Optional[Iterator[T]], Optional[float]]:
        """The common step of a consumer reading its own body: one read, its items the batch.

        ``(None, wait_from)`` when it got none, or something ended: the channel's wait
        decides then, its idle wait counted from ``wait_from``.
        """
        now = self._now()
        quiet = self._activity.quiet_since
        wait_from = now if quiet is None else quiet
        timeout = min(self._idle_left(wait_from, now), self._deadline - now)  # <= 0: deadline
        with self._lock:
            if timeout <= 0 or self._stopping or self._budget_ended or self._body is not body:
                return None, quiet
            self._reading = True
        items: List[T] = []
        try:
            items = body.pull(None if timeout == math.inf else timeout)
        finally:
            with self._lock:
                self._reading = False
                delivered = bool(items) and not self._ended(self._now())
                if not delivered:
                    self._buf.extend(items)  # for the channel's wait: it delivers or drops them
        if not delivered:
            return None, wait_from
        batch = iter(items)
        self._current = (self._taken, items, batch)
        self._activity.took(items, wait_from, self._now())
        return batch, wait_from

    def first_item_left(self) -> Optional[float]:
        """Seconds left of the first-item limit (``None``: no limit, or an item was taken)."""
        if self._first is None or self._activity.chunks:
            return None
        return self._created + self._first - self._now()

    def attach(self, body: Body) -> None:
        """From the opener: the consumer reads ``body`` whenever its buffer is empty."""
        with self._lock:
            self._body = body
        self._let_go()  # stopped while it opened: nobody will read it

    def reattach(self, body: Body) -> bool:
        """From the shared reader: the consumer reads ``body`` again, at once if it waits.
        False: the stream was stopped or its budget ended, and the shared reader ends it."""
        with self._lock:
            if self._ended(self._now()):
                return False
            self._body = body
            if self._consumer_waiting:
                self._wake_consumer()
            return True

    def detach(self) -> bool:
        """From the body, during the consumer's read: the shared reader feeds the stream from
        now on (:meth:`offer`, :meth:`flush`). False: it was stopped, nothing changes."""
        with self._lock:
            if self._stopping:
                return False
            self._body = None
            return True

    def stopped_while_read(self) -> bool:
        """From the body, when its socket ended during the consumer's read: True when the
        stream was stopped or its budget ended (our own shutdown, then); the body is no
        longer the consumer's, and the caller ends it off the consumer's thread."""
        with self._lock:
            if not self._ended(self._now()):
                return False
            self._body = None
            return True

    def set_resume(self, resume: Optional[Callable[[], None]]) -> None:
        self._resume = resume

    def offer(self, items: List[T]) -> bool:
        """A read's items; False when the buffer is full (the shared reader pauses then)."""
        first = False
        with self._lock:
            if self._stopping:
                return True
            if self._first_at is None and items:
                self._first_at = self._now()
                first = True
            self._buf.extend(items)  # on the shared reader, flush() wakes the consumer
            room = len(self._buf) < self._max
            self._reader_waiting = not room
        if first:
            assert self._first_at is not None
            self._context.run(
                _events.emit_observed,
                "first_byte",
                stage=self._stage,
                first_byte_ms=(self._first_at - self._created) * 1000.0,
            )
        return room

    def flush(self) -> None:
        """From the shared reader, after a turn's reads: wake the consumer if it waits.

        Deferred to the end of the turn so that the woken consumers do not contend for the
        GIL with the reader's next reads (each ``recv`` lets it go).
        """
        with self._lock:
            if self._consumer_waiting and self._buf:
                self._wake_consumer()

    def _room_again(self) -> None:
        self._reader_waiting = False
        if self._resume is not None:
            self._resume()

    def fed_end(self, error: Optional[BaseException], completed: bool) -> None:
        with self._lock:
            self._body = None
        self._reader_exited(error, completed)

    def _wait(self, timeout: float) -> None:
        """With ``_lock`` held and the buffer empty: read the body once (the lock let go)."""
        body = self._body
        if body is None:  # its end is recorded already, or it was never attached
            super()._wait(timeout)
            return
        self._reading = True
        self._lock.release()
        try:
            items = body.pull(None if math.isinf(timeout) else timeout)
            if items:
                if self._first_at is None:
                    self.offer(items)  # the first: recorded, and announced
                else:
                    self._buf.extend(items)  # one list operation, as a reader thread's append
        finally:
            self._lock.acquire()
            self._reading = False

    def _finish(self, ended_by: str) -> None:
        super()._finish(ended_by)  # shuts the socket, if a read may be in progress
        self._let_go()

    def _on_budget_done(self, budget: Budget) -> None:
        super()._on_budget_done(budget)  # shuts the socket, if a read may be in progress
        self._let_go()  # the connection ends at the budget's end, not when the consumer is back

    def _let_go(self) -> None:
        """A stopped stream's body (or one whose budget ended) is ended, unless its consumer
        is reading it: then the read, woken by the shutdown, ends it. The end (the
        connection closed) runs on the shared reader's thread, so that the thread stopping
        the stream (a consumer raising its idle timeout, the watchdog) goes on at once."""
        with self._lock:
            if self._reading or self._body is None:
                return
            if not self._ended(self._now()):
                return
            body, self._body = self._body, None
        engine.call_soon(functools.partial(body.end, None, False))


def fed_stream(
    opener: Callable[[FedChannel[T]], None],
    *,
    limits: StreamLimits,
    budgets: List[Budget],
    explicit: Optional[Budget],
    on_timeout: Optional[Callable[[], object]],
    max_buffered: int = DEFAULT_MAX_BUFFERED,
    clock: Clock = MONOTONIC,
    active: Optional[Callable[[T], bool]] = None,
) -> GuardedStream[T]:
    """``active`` tells the items that restart the idle clock (``None``: every one does)."""
    channel: FedChannel[T] = FedChannel(
        opener,
        limits=limits,
        budgets=budgets,
        explicit=explicit,
        on_timeout=on_timeout,
        max_buffered=max_buffered,
        clock=clock,
        active=active,
    )
    return started(channel, channel.start_fed)
