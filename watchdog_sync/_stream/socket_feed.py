"""A stream read by its consumer's own thread, for its whole life: the socket feed.

For a socket-backed body (``stream_sse``, ``ChatClient``, the httpx transport's HTTP/1.1
streams). The stream's ``opener`` runs in the consumer's thread at the first ``next()``
(it sends the request and attaches the body); then, each time no item waits, the consumer
reads the body once (:meth:`Body.pull`), waiting at most what its
:class:`~.watch.StreamWatch` allows, and takes that read's items as its batch.

On timeout or cancel ``on_timeout`` shuts the socket from outside, which ends a read in
progress. The body is then ended by that read or, when none is in progress, by the thread
that stopped the stream or saw its budget end (the consumer, a ``close()``, the watchdog).
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any, Callable, Generic, Iterator, List, Optional, Protocol, TypeVar

from .._core.budget import Budget
from .._core.clock import MONOTONIC, Clock
from .._core.errors import Cancelled
from .limits import StreamLimits
from .progress import StreamProgress
from .stream import GuardedStream, started
from .watch import StreamStats, StreamWatch

__all__ = ["Body", "OpenTimedOut", "SocketFeed", "socket_stream"]

T = TypeVar("T")

_log = logging.getLogger("watchdog_sync")


class Body(Protocol):
    """What a socket feed reads: one read at a time, in the consumer's thread."""

    def pull(self, timeout: Optional[float]) -> List[Any]:
        """Read once, waiting at most ``timeout`` (``None``: no limit); the read's items."""

    def end(self, error: Optional[BaseException], eof: bool) -> None:
        """End the body (once) and let its connection go."""


class OpenTimedOut(Exception):
    """Raised by an opener whose wait for the response ran into the first-item limit."""


class SocketFeed(Generic[T]):
    """A body read by its consumer (see the module's docstring)."""

    def __init__(
        self,
        opener: Callable[[SocketFeed[T]], None],
        *,
        limits: StreamLimits,
        budgets: List[Budget],
        explicit: Optional[Budget],
        on_timeout: Optional[Callable[[], object]],
        clock: Clock,
        active: Optional[Callable[[T], bool]] = None,
    ) -> None:
        self._lock = threading.Lock()
        self._woken = threading.Condition(self._lock)  # waited on only with no body attached
        self._opener: Optional[Callable[[SocketFeed[T]], None]] = opener
        self._body: Optional[Body] = None
        self._reading = False  # the consumer is in ``body.pull``: that read ends the body
        self._pending: List[T] = []  # items not from the consumer's read: with the head, ...
        self._done = False
        self._completed = False
        self._error: Optional[BaseException] = None
        self._on_timeout = on_timeout
        self._unblocked = False
        self._progress = StreamProgress(clock.now)
        self._watch = StreamWatch(
            limits=limits,
            budgets=budgets,
            explicit=explicit,
            clock=clock,
            wake=self._wake,
            unblock=self._unblock,
            active=active,
            progress=self._progress,
        )

    def start(self) -> None:
        self._watch.start()

    # -- consumer side ---------------------------------------------------------

    def next_batch(self) -> Optional[Iterator[T]]:
        """Read the body once, unless items wait, and return an iterator over the items;
        ``None`` at the end.

        Raises the body's error, :class:`StreamIdleTimeout`, or ``Cancelled``
        (converted when the explicit budget owns it).
        """
        if self._opener is not None:
            self._open()
        watch = self._watch
        watch.begin_batch()
        try:
            return self._next(watch)
        finally:
            if watch.stopping:  # a read that returned as the stream was stopped left the body
                self._let_go()

    def _open(self) -> None:
        """The first ``next()``: the request goes out now, so the first-item limit and the
        lifetime count from here."""
        opener, self._opener = self._opener, None
        assert opener is not None
        self._watch.restart()
        try:
            opener(self)
        except OpenTimedOut:
            pass  # the idle check reports it
        except (Exception, Cancelled) as exc:
            self._progress.heard(exc)
            self.body_ended(exc, completed=False)

    def _next(self, watch: StreamWatch) -> Optional[Iterator[T]]:
        wait_from = watch.activity.quiet_since  # only activity restarts the idle clock
        while True:
            body: Optional[Body] = None
            timeout = 0.0
            with self._lock:
                now = watch.now()
                if not watch.ended(now):
                    if self._pending:
                        batch, self._pending = self._pending, []
                        return watch.hand_out(batch, wait_from)
                    if not self._done:
                        if wait_from is None:
                            wait_from = now
                        timeout = watch.wait_left(wait_from, now)
                        if timeout > 0:
                            body = self._body
                            if body is None:  # its open timed out: wait for the limit
                                watch.clock.wait(self._woken, timeout)  # or a budget's end
                                continue
                            self._reading = True
            if body is not None:
                items = self._pull(body, timeout, wait_from)
                if items is not None:
                    return items
                continue
            drained = self._done and not self._pending
            if watch.ended_after_wait(drained, self._taken_error, self._completed, wait_from):
                return None

    def _taken_error(self) -> Optional[BaseException]:
        """The source's error, taken (no frame of the consumer's keeps it: no cycle)."""
        error, self._error = self._error, None
        return error

    def _pull(
        self, body: Body, timeout: float, wait_from: Optional[float]
    ) -> Optional[Iterator[T]]:
        """One read of ``body``; its items, unless it brought none or the stream ended."""
        watch = self._watch
        items: List[T] = []
        try:
            items = body.pull(None if math.isinf(timeout) else timeout)
        finally:
            with self._lock:
                self._reading = False
                if items and watch.ended(watch.now()):
                    items = []  # the stream ended meanwhile: nothing more is handed out
        if not items:
            return None
        self._progress.got(len(items))
        if watch.first_item():
            watch.announce_first()
        return watch.hand_out(items, wait_from)

    # -- the body's side -------------------------------------------------------

    def first_item_left(self) -> Optional[float]:
        """Seconds left of the first-item limit (``None``: no limit, or an item was taken)."""
        return self._watch.first_item_left()

    def attach(self, body: Body) -> None:
        """From the opener: the consumer reads ``body`` whenever no item waits."""
        with self._lock:
            self._body = body
        self._progress.head_in()
        self._let_go()  # stopped while it opened: nobody will read it

    def offer(self, items: List[T]) -> None:
        """Items from outside a read's result (those that came with the headers, those
        before a body's end or error): handed out before anything else."""
        if not items:
            return
        with self._lock:
            if self._watch.stopping:
                return
            self._pending.extend(items)
            self._progress.got(len(items))
        if self._watch.first_item():
            self._watch.announce_first()

    def body_ended(self, error: Optional[BaseException], completed: bool) -> None:
        """The body is done (its error, if any, is raised once the items before it are out)."""
        with self._lock:
            self._body = None
            self._done = True
            self._completed = completed
            if not self._watch.stopping:  # after the consumer gave up, a late error is dropped
                self._error = error
            self._woken.notify_all()

    # -- ending ----------------------------------------------------------------

    def _wake(self) -> None:
        with self._lock:
            if self._watch.stopping:
                self._error = None
            self._woken.notify_all()

    def _unblock(self) -> None:
        """The watch's, at the stream's end or a budget's: call ``on_timeout`` (it shuts the
        socket, which ends a read in progress) once, if the body is open; then end the body
        here unless its consumer is reading it, so that the connection ends now."""
        with self._lock:
            callback = None if self._unblocked or self._done else self._on_timeout
            self._unblocked = True
        if callback is not None:
            try:
                callback()
            except Exception:
                _log.exception("watchdog_sync: the stream's on_timeout hook raised; ignored")
        self._let_go()

    def _let_go(self) -> None:
        """A stopped stream's body (or one whose budget ended) is ended here, unless its
        consumer is reading it: then that read, woken by the shutdown, ends it."""
        watch = self._watch
        with self._lock:
            body = self._body
            if self._reading or body is None or not watch.ended(watch.now()):
                return
            self._body = None
        try:
            body.end(None, False)
        except Exception:  # letting the connection go; whoever stopped the stream goes on
            _log.exception("watchdog_sync: ending a stopped stream's body raised; ignored")

    def close(self, *, join: bool) -> None:
        """End the stream (``'closed'``, or ``'completed'`` if everything was delivered) and
        let the body go. ``join`` is the thread feed's: there is no thread here."""
        watch = self._watch
        with self._lock:
            everything_delivered = (
                self._done and self._completed and not self._pending and watch.all_handed_out()
            )
        watch.finish("completed" if everything_delivered else "closed")
        self._let_go()

    def stats(self) -> StreamStats:
        return self._watch.stats()


def socket_stream(
    opener: Callable[[SocketFeed[T]], None],
    *,
    limits: StreamLimits,
    budgets: List[Budget],
    explicit: Optional[Budget],
    on_timeout: Optional[Callable[[], object]],
    clock: Clock = MONOTONIC,
    active: Optional[Callable[[T], bool]] = None,
) -> GuardedStream[T]:
    """The guarded stream whose consumer runs ``opener`` at its first ``next()``, then reads
    the body it attaches."""
    feed: SocketFeed[T] = SocketFeed(
        opener,
        limits=limits,
        budgets=budgets,
        explicit=explicit,
        on_timeout=on_timeout,
        clock=clock,
        active=active,
    )
    return started(feed, feed.start)
