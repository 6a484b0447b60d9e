"""guard_stream, an inactivity watchdog for any blocking iterator, and :class:`GuardedStream`,
the iterator every guarded stream is: over a reader thread's buffer (:mod:`.thread_feed`,
guard_stream's) or a socket-backed body its consumer reads itself (:mod:`.socket_feed`).
"""

from __future__ import annotations

import itertools
import time
from typing import Callable, Generic, Iterable, Iterator, List, Optional, Protocol, TypeVar

from .._core import scope as _scope
from .._core.budget import Budget
from .._core.clock import MONOTONIC, Clock, ClockLike, as_clock
from .._core.config import AS_IDLE
from .._core.durations import Duration
from .limits import StreamLimits, stream_limits
from .thread_feed import DEFAULT_MAX_BUFFERED, READER_THREAD_NAME, ThreadFeed
from .watch import StreamStats, StreamWatch

__all__ = [
    "DEFAULT_MAX_BUFFERED",
    "READER_THREAD_NAME",
    "GuardedStream",
    "StreamStats",
    "budgets_to_watch",
    "guard_source",
    "guard_stream",
    "started",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Feed(Protocol[T_co]):
    """What a guarded stream iterates: a thread feed or a socket feed, with its watch."""

    watch: StreamWatch

    def start(self) -> None:
        """Watch the budgets (and start a reader thread)."""

    def next_batch(self) -> Optional[Iterator[T_co]]:
        """The next items (``None`` at the end). Raises what ended the stream: the
        source's error, :class:`StreamIdleTimeout`, or ``Cancelled`` (converted when the
        explicit budget owns it)."""

    def close(self, *, join: bool) -> None:
        """End the stream; with ``join``, wait (bounded) for a reader thread to exit."""


def batches_of(feed: Feed[T]) -> Iterator[Iterator[T]]:
    """Yield one iterator per batch; closing (or collecting) it ends the stream."""
    try:
        yield iter(())  # primed at creation, so that collecting it always runs the finally
        while True:
            batch = feed.next_batch()
            if batch is None:
                return
            yield batch
    finally:
        feed.close(join=False)


class GuardedStream(Generic[T]):
    """An iterator over a source's items, with an inactivity watchdog. Made by :func:`guard_stream`.

    Iterate it (``for item in stream``) or call ``next(stream)``; both share
    one position. ``iter(stream)`` returns a fast internal iterator (batches
    are chained in C), not ``stream`` itself. Use it as a context manager, or
    call :meth:`close`, to release the reader thread and the source early.
    """

    __slots__ = ("_feed", "_items")

    def __init__(self, feed: Feed[T], items: Iterator[T]) -> None:
        self._feed = feed
        self._items = items

    def __iter__(self) -> Iterator[T]:
        return self._items

    def __next__(self) -> T:
        return next(self._items)

    def __enter__(self) -> GuardedStream[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the stream: call ``on_timeout`` if the source is still running, let the
        reader close the source, and wait up to 1 s for the reader thread to exit.

        Idempotent. A consumer waiting in another thread stops (``StopIteration``).
        """
        self._feed.close(join=True)

    @property
    def stats(self) -> StreamStats:
        """A snapshot of :class:`StreamStats` (items delivered, timings, how it ended)."""
        return self._feed.watch.stats()

    def __repr__(self) -> str:
        stats = self.stats
        state = stats.ended_by or "running"
        return f"<GuardedStream {state} items={stats.items} lifetime={stats.lifetime:.3f}s>"


def guard_stream(
    source: Iterable[T],
    *,
    idle_timeout: Optional[Duration],
    first_item_timeout: Optional[Duration] = AS_IDLE,
    budget: Optional[Budget] = None,
    on_timeout: Optional[Callable[[], object]] = None,
    max_buffered: int = DEFAULT_MAX_BUFFERED,
    clock: ClockLike = time.monotonic,
) -> GuardedStream[T]:
    """Iterate ``source`` with an inactivity watchdog and the budget's deadline.

    The reader thread starts at once (the request can be in flight while the
    caller sets up) and runs under the caller's ``contextvars`` context, so
    library waits inside the source share the caller's budget. ``guard_stream``
    owns the source: it is closed (``source.close()``, in the reader thread)
    when the stream ends, whichever way.

    Timing: ``first_item_timeout`` (default ``idle_timeout``) bounds the wait
    for the first item, measured from this call. After that, ``idle_timeout``
    bounds every wait of the consumer with an empty buffer: the timer starts
    when the consumer asks for an item and none is buffered, and stops when one
    arrives. Time the consumer spends on its own work is never counted, so
    items every ``0.8 * idle_timeout`` never trip it, and a slow consumer never
    causes a timeout; the price is that a source which goes silent while the
    consumer is busy is detected ``idle_timeout`` after the consumer comes back
    for more. ``inf`` or any value ``<= 0`` turns either limit off, and so does
    ``idle_timeout=None`` (``first_item_timeout=None`` is ``idle_timeout``,
    deprecated); the budget still applies (and ends a stream whose consumer
    never has to wait: it is checked before each batch of buffered items is
    handed over). Values above 7 days are clamped to 7 days.

    Args:
        source: any iterable, typically a generator doing blocking reads.
        idle_timeout: seconds allowed between items (float or ``timedelta``);
            required, no environment default; ``None``, ``inf`` or ``<= 0``: off.
        first_item_timeout: seconds allowed until the first item (default:
            ``idle_timeout``); ``<= 0`` or ``inf``: off. ``None`` still means
            "as ``idle_timeout``", with a ``DeprecationWarning``: leave it out.
        budget: the budget to honour; guard_stream is its boundary (its end
            becomes :class:`DeadlineExceeded` / :class:`OperationCancelled`).
            The current ``deadline()`` scope's budget is honoured as well.
        on_timeout: called (at most once, without arguments) when the stream
            ends before the source did: idle timeout, the budget's end,
            ``close()``, ``break`` + garbage collection. It must unblock the
            source from outside (e.g. ``sock.shutdown(SHUT_RDWR)``) and return
            quickly. It runs on the consumer's thread, on the watchdog thread
            (budget end), or on whichever thread drops the stream. Exceptions
            it raises are logged, not propagated.
        max_buffered: the most items held for a slow consumer; the reader
            waits while the buffer is full, so memory stays bounded (at most
            ``max_buffered`` buffered plus the batch the consumer is on).
            Larger values cost less per item with very fast sources.
        clock: the clock the idle limits, the stats and the events are measured
            on: ``time.monotonic`` (or another callable returning monotonic
            seconds), or ``watchdog_sync.testing.FakeClock``, whose ``advance()``
            ends a stream that has been silent past its limit without real
            waiting. Budgets keep their own clocks.

    Returns:
        A :class:`GuardedStream`: iterator, context manager, ``.close()``, ``.stats``.

    Raises:
        StreamIdleTimeout: (while iterating) no item for the limit; ``on_timeout``
            was called first. Retryable only when no item had been delivered.
        Cancelled: (while iterating) the budget of the ``deadline()`` scope that
            was current at creation ended; that scope converts it, so iterate the
            stream inside it. ``on_timeout`` was called first.
        DeadlineExceeded, OperationCancelled: (while iterating) the explicit
            ``budget`` ended or was cancelled. A cancel wins over an idle
            timeout due at the same moment.
        TypeError, ValueError: a bad argument (the message names it).

    Errors raised by the source reach the consumer unchanged, after the items
    that preceded them. An error the source raises after the consumer gave up
    is dropped.

    Example::

        def lines(sock):                 # blocking reads, as legacy code does them
            with sock.makefile("rb") as f:
                yield from f

        with guard_stream(
            lines(sock),
            idle_timeout=120,            # StreamIdleTimeout after 120 s of silence
            on_timeout=lambda: sock.shutdown(socket.SHUT_RDWR),  # wakes the blocked read
        ) as stream:
            for line in stream:
                handle(line)
    """
    try:
        iterator = iter(source)
    except TypeError:
        raise TypeError(
            f"source must be an iterable (a generator, a response's iter_lines(), ...), "
            f"not {type(source).__name__}"
        ) from None
    limits = stream_limits(idle_timeout, first_item_timeout, "first_item_timeout")
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(
            f"budget must be a watchdog_sync.Budget or None, not {type(budget).__name__}"
        )
    if on_timeout is not None and not callable(on_timeout):
        raise TypeError(f"on_timeout must be a callable or None, not {type(on_timeout).__name__}")
    if isinstance(max_buffered, bool) or not isinstance(max_buffered, int):
        raise TypeError(f"max_buffered must be an int, not {type(max_buffered).__name__}")
    if max_buffered < 1:
        raise ValueError(f"max_buffered must be >= 1, got {max_buffered}")
    return guard_source(
        source,
        iterator,
        limits,
        budget=budget,
        on_timeout=on_timeout,
        max_buffered=max_buffered,
        clock=as_clock(clock),
    )


def guard_source(
    source: Iterable[T],
    iterator: Iterator[T],
    limits: StreamLimits,
    *,
    on_timeout: Optional[Callable[[], object]],
    budget: Optional[Budget] = None,
    max_buffered: int = DEFAULT_MAX_BUFFERED,
    clock: Clock = MONOTONIC,
    active: Optional[Callable[[T], bool]] = None,
) -> GuardedStream[T]:
    """:func:`guard_stream` below the public edge: the arguments checked, the limits resolved.

    ``active`` tells the items that restart the idle clock (``None``: every one does).
    """
    watch = StreamWatch(limits, budgets_to_watch(budget), budget, clock, active)
    feed: ThreadFeed[T] = ThreadFeed(watch, source, iterator, on_timeout, max_buffered)
    return started(feed)


def started(feed: Feed[T]) -> GuardedStream[T]:
    """The stream over ``feed``: its batches primed first (so that collecting the stream
    always ends it), then the feed started."""
    batches = batches_of(feed)
    next(batches)
    feed.start()
    return GuardedStream(feed, itertools.chain.from_iterable(batches))


def budgets_to_watch(explicit: Optional[Budget]) -> List[Budget]:
    scoped = _scope.scoped_budget()
    if explicit is None:
        return [] if scoped is None else [scoped]
    node: Optional[Budget] = explicit
    while node is not None:
        if node is scoped:
            return [explicit]
        node = node.parent
    return [explicit] if scoped is None else [explicit, scoped]
