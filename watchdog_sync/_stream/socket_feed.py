"""A stream read by its consumer's own thread, for its whole life: the socket feed.

For a socket-backed body (``stream_sse``, ``ChatClient``, the httpx transport's HTTP/1.1
streams). The stream's ``opener`` runs in the consumer's thread at the first ``next()``
(it sends the request and attaches the body); then, each time no item waits, the consumer
reads the body once (:meth:`~.pipeline.BodyFeed.pull`), waiting at most what its
:class:`~.watch.StreamWatch` allows, and takes that read's items as its batch.

On timeout or cancel ``on_timeout`` shuts the socket from outside, which ends a read in
progress. The body is then ended by that read or, when none is in progress, by the thread
that stopped the stream or saw its budget end (the consumer, a ``close()``, the watchdog).
"""

from __future__ import annotations

import functools
import math
import threading
from typing import TYPE_CHECKING, Callable, Generic, Iterator, List, Optional, TypeVar

from .._core.budget import Budget
from .._core.clock import MONOTONIC
from .._core.errors import Cancelled
from .limits import StreamLimits
from .stream import GuardedStream, started
from .watch import StreamWatch, quietly

if TYPE_CHECKING:
    from .pipeline import BodyFeed

__all__ = ["SocketFeed", "socket_stream"]

T = TypeVar("T")


class SocketFeed(Generic[T]):
    """A body read by its consumer (see the module's docstring)."""

    def __init__(
        self,
        opener: Callable[[SocketFeed[T]], None],
        watch: StreamWatch,
        on_timeout: Optional[Callable[[], object]],
    ) -> None:
        self._lock = threading.Lock()
        self._woken = threading.Condition(self._lock)  # waited on only with no body attached
        self._opener: Optional[Callable[[SocketFeed[T]], None]] = opener
        self._body: Optional[BodyFeed[T]] = None
        self._reading = False  # the consumer is in ``body.pull``: that read ends the body
        self._pending: List[T] = []  # items not from the consumer's read: with the head, ...
        self._on_timeout = on_timeout  # taken by the first unblock
        self.watch = watch

    def start(self) -> None:
        self.watch.start(self._wake, self._unblock)

    # -- consumer side ---------------------------------------------------------

    def next_batch(self) -> Optional[Iterator[T]]:
        """Read the body once, unless items wait, and return an iterator over the items
        (see :class:`~.stream.Feed`)."""
        if self._opener is not None:
            self._open()
        watch = self.watch
        watch.begin_batch()
        try:
            wait_from = watch.activity.quiet_since  # only activity restarts the idle clock
            while True:
                body: Optional[BodyFeed[T]] = None
                timeout = 0.0
                with self._lock:
                    now = watch.now()
                    if not watch.ended(now):
                        if self._pending:
                            batch, self._pending = self._pending, []
                            return watch.hand_out(batch, wait_from)
                        if not watch.source_over:
                            if wait_from is None:
                                wait_from = now
                            timeout = watch.wait_left(wait_from, now)
                            if timeout > 0:
                                body = self._body
                                if body is None:  # its open timed out: wait for the limit
                                    watch.clock.wait(self._woken, timeout)  # or a budget's end
                                    continue
                                self._reading = True
                if body is None:
                    if watch.ended_after_wait(not self._pending, wait_from):
                        return None
                    continue
                items: List[T] = []
                try:
                    items = body.pull(None if math.isinf(timeout) else timeout)
                finally:
                    with self._lock:
                        self._reading = False
                        if items and watch.ended(watch.now()):
                            items = []  # the stream ended meanwhile: nothing more is handed out
                if items:
                    watch.arrived(len(items))
                    return watch.hand_out(items, wait_from)
        finally:
            if watch.stopping:  # a read that returned as the stream was stopped left the body
                self._let_go()

    def _open(self) -> None:
        """The first ``next()``: the request goes out now, so the first-item limit and the
        lifetime count from here."""
        opener, self._opener = self._opener, None
        assert opener is not None
        self.watch.created = self.watch.now()
        try:
            opener(self)
        except (Exception, Cancelled) as exc:
            self.watch.heard(exc)
            self.body_ended(exc)

    # -- the body's side -------------------------------------------------------

    def attach(self, body: BodyFeed[T]) -> None:
        """From the opener: the consumer reads ``body`` whenever no item waits."""
        with self._lock:
            self._body = body
        self.watch.head_in()
        self._let_go()  # stopped while it opened: nobody will read it

    def offer(self, items: List[T]) -> None:
        """Items from outside a read's result (those that came with the headers, those
        before a body's end or error): handed out before anything else."""
        if not items:
            return
        with self._lock:
            if self.watch.stopping:
                return
            self._pending.extend(items)
        self.watch.arrived(len(items))

    def body_ended(self, error: Optional[BaseException]) -> None:
        """The body is done (its error, if any, is raised once the items before it are out)."""
        with self._lock:
            self._body = None
            self.watch.source_done(error, error is None)
            self._woken.notify_all()

    # -- ending ----------------------------------------------------------------

    def _wake(self) -> None:
        with self._lock:
            if self.watch.stopping:
                self.watch.error = None
            self._woken.notify_all()

    def _unblock(self) -> None:
        """The watch's, at the stream's end or a budget's: call ``on_timeout`` (it shuts the
        socket, which ends a read in progress) once, if the body is open; then end the body
        here unless its consumer is reading it, so that the connection ends now."""
        with self._lock:
            callback = None if self.watch.source_over else self._on_timeout
            self._on_timeout = None
        if callback is not None:
            quietly(callback, "the stream's on_timeout hook")
        self._let_go()

    def _let_go(self) -> None:
        """A stopped stream's body (or one whose budget ended) is ended here, unless its
        consumer is reading it: then that read, woken by the shutdown, ends it."""
        watch = self.watch
        with self._lock:
            body = self._body
            if self._reading or body is None or not watch.ended(watch.now()):
                return
            self._body = None
        quietly(functools.partial(body.end, None, False), "ending a stopped stream's body")

    def close(self, *, join: bool) -> None:
        """End the stream (``'closed'``, or ``'completed'`` if everything was delivered) and
        let the body go. ``join`` is the thread feed's: there is no thread here."""
        with self._lock:
            delivered = self.watch.everything_delivered(not self._pending)
        self.watch.finish("completed" if delivered else "closed")
        self._let_go()


def socket_stream(
    opener: Callable[[SocketFeed[T]], None],
    *,
    limits: StreamLimits,
    budgets: List[Budget],
    explicit: Optional[Budget],
    on_timeout: Optional[Callable[[], object]],
    active: Optional[Callable[[T], bool]] = None,
) -> GuardedStream[T]:
    """The guarded stream whose consumer runs ``opener`` at its first ``next()``, then reads
    the body it attaches (an opener that attaches none leaves the first-item limit to end
    the stream)."""
    watch = StreamWatch(limits, budgets, explicit, MONOTONIC, active, request=True)
    feed: SocketFeed[T] = SocketFeed(opener, watch, on_timeout)
    return started(feed)
