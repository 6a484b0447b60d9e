"""The channel between a guarded stream's reader thread and its consumer.

The reader thread (``watchdog_sync-stream-reader``) fills a bounded buffer; the
consumer takes what has accumulated as one batch and waits only on an empty
buffer, at most ``min(idle limit, budget remaining)``; on an idle timeout or the
budget's end ``on_timeout`` shuts the source from outside and the consumer raises.
``_lock`` guards every flag, the ending, ``_gate``, every wait and notification;
``_buf`` changes only by single list operations. Why this holds without the GIL:
docs/architecture.md, "The stream hand-off".
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import logging
import math
import operator
import threading
from typing import Any, Callable, Dict, Generic, Iterable, Iterator, List, Optional, Tuple, TypeVar

from .._core import events as _events
from .._core import scope as _scope
from .._core.budget import Budget
from .._core.clock import Clock
from .._core.errors import Cancelled
from .._http.reads import READER_SOCKETS, ReaderSockets
from .idle import idle_timeout_error
from .limits import StreamLimits
from .stats import StreamStats
from .wire import Activity

__all__ = [
    "DEFAULT_MAX_BUFFERED",
    "READER_THREAD_NAME",
    "Channel",
    "close_quietly",
]


T = TypeVar("T")

READER_THREAD_NAME = "watchdog_sync-stream-reader"
DEFAULT_MAX_BUFFERED = 1024
_JOIN_SECONDS = 1.0
_NOTHING: Dict[object, Any] = {}
_PASS = _NOTHING.get  # _PASS(slot, item) -> item, in C: lets map() pair gate slots with items
_USED_UP: Iterator[Any] = iter(())

_log = logging.getLogger("watchdog_sync")


class Channel(Generic[T]):
    """State shared by the consumer and the reader thread (never refers to the GuardedStream)."""

    def __init__(
        self,
        *,
        limits: StreamLimits,
        budgets: List[Budget],
        explicit: Optional[Budget],
        on_timeout: Optional[Callable[[], object]],
        max_buffered: int,
        clock: Clock,
        active: Optional[Callable[[T], bool]] = None,
    ) -> None:
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        # A reader thread's own, made by start(): a fed channel has none (each stream's
        # objects are what the cyclic GC walks while many are open).
        self._not_full: Optional[threading.Condition] = None
        self._reads: Optional[ReaderSockets] = None  # its reads through instrumented connections
        self._buf: List[T] = []
        self._max = max_buffered
        self._gate: List[None] = []  # the current round's slots; cleared = closed
        self._consumer_waiting = False
        self._reader_waiting = False
        self._stopping = False
        self._budget_ended = False
        self._reader_done = False
        self._reader_completed = False
        self._reader_error: Optional[BaseException] = None
        self._unblocked = False
        self._on_timeout = on_timeout
        self._idle = limits.idle
        self._first = limits.first
        self._first_named = limits.first_named
        self._budgets = budgets
        # The earliest deadline on the stream's clock (budgets' deadlines never move).
        self._deadline = min(
            (b.deadline for b in budgets if b.clock is clock and b.deadline is not None),
            default=math.inf,
        )
        self._other_clocks = [b for b in budgets if b.clock is not clock]
        self._explicit = explicit
        self._stage = budgets[0].stage if budgets else None
        self._unregister: List[Callable[[], None]] = []
        self._ended_by: Optional[str] = None
        self._ended_at: Optional[float] = None
        self._first_at: Optional[float] = None
        self._taken = 0  # items in the batches before the current one (consumer's own)
        # Which of them were activity, and since when only items that are not came.
        self._activity = Activity(active)
        # (items before, batch size, the batch's countdown): one tuple, so that stats
        # read from another thread see a consistent triple.
        self._current: Tuple[int, List[T], Iterator[T]] = (0, [], iter(()))
        self._thread: Optional[threading.Thread] = None
        # Every time of the stream (idle waits, stats, events) is on its clock.
        self._clock = clock
        self._now = clock.now
        self._created = self._now()

    # -- starting ------------------------------------------------------------

    def start(self, source: Iterable[T], iterator: Iterator[T]) -> None:
        self._not_full = threading.Condition(self._lock)
        self._reads = ReaderSockets()
        for budget in self._budgets:
            self._unregister.append(budget.on_done(self._on_budget_done))
        context = contextvars.copy_context()
        context.run(READER_SOCKETS.set, self._reads)
        thread = threading.Thread(
            target=context.run,
            args=(self._read, source, iterator),
            name=READER_THREAD_NAME,
            daemon=True,
        )
        self._thread = thread
        thread.start()

    # -- reader side -----------------------------------------------------------

    def _read(self, source: Iterable[T], iterator: Iterator[T]) -> None:
        error: Optional[BaseException] = None
        completed = False
        try:
            completed = self._pump(iterator)
        except (Exception, Cancelled) as exc:  # handed to the consumer, who raises it
            error = exc
        finally:
            close_quietly(iterator)  # a generator can only be closed by its own thread
            if source is not iterator:
                close_quietly(source)
            self._reader_exited(error, completed)
            error = None  # break the traceback -> frame -> error cycle

    def _pump(self, iterator: Iterator[T]) -> bool:
        """Move items into the buffer. True when the source ended, False when told to stop."""
        buf = self._buf
        append = buf.append
        extend = buf.extend
        try:
            item = next(iterator)
        except StopIteration:
            return True
        self._first_at = self._now()
        append(item)
        del item
        room = self._next_round()  # hands the first item over before announcing it
        _events.emit_observed(
            "first_byte", stage=self._stage, first_byte_ms=(self._first_at - self._created) * 1000.0
        )
        # The source, then a marker that records its end (all in C, nothing per item).
        ended: List[bool] = []
        items = itertools.chain(iterator, iter(functools.partial(ended.append, True), None))
        while room >= 0:
            if room == 0:  # the consumer waits: one item at a time, under the lock
                for one in itertools.islice(items, 1):
                    self._hand_over(one)
            else:
                extend(map(_PASS, iter(self._gate), items))
            if ended:
                return True
            room = self._next_round()
        return False

    def _hand_over(self, item: T) -> None:
        """One item, appended and announced under the lock (while the consumer waits)."""
        with self._lock:
            self._buf.append(item)
            if self._consumer_waiting:
                self._wake_consumer()

    def _next_round(self) -> int:
        """Between rounds: wake a waiting consumer, wait while full, size the next round.

        Returns the round's size, 0 for a single step, -1 to stop.
        """
        with self._lock:
            if self._stopping:
                return -1
            if self._consumer_waiting and self._buf:
                self._wake_consumer()
            while len(self._buf) >= self._max:
                assert self._not_full is not None  # (on the reader thread start() made)
                self._reader_waiting = True
                self._not_full.wait()
                self._reader_waiting = False
                if self._stopping:
                    return -1
            if self._consumer_waiting:  # the gate is closed while the consumer waits
                return 0
            room = self._max - len(self._buf)
            self._gate = [None] * room
            return room

    def _room_again(self) -> None:  # with ``_lock`` held; a fed channel resumes its feeder
        assert self._not_full is not None  # (only a reader thread waits for room)
        self._not_full.notify()

    def _wake_consumer(self) -> None:
        """With ``_lock`` held: the consumer stops waiting now, so rounds resume at once."""
        self._consumer_waiting = False
        self._not_empty.notify()

    def _reader_exited(self, error: Optional[BaseException], completed: bool) -> None:
        with self._lock:
            self._reader_done = True
            self._reader_completed = completed
            if not self._stopping:  # after the consumer gave up, a late error is dropped
                self._reader_error = error
            self._not_empty.notify()

    # -- consumer side ---------------------------------------------------------

    def next_batch(self) -> Optional[Iterator[T]]:
        """Wait for buffered items and return an iterator over them; ``None`` at the end.

        Raises the source's error, :class:`StreamIdleTimeout`, or ``Cancelled``
        (converted when the explicit budget owns it).
        """
        self._begin_batch()
        return self._batch_after(self._activity.quiet_since)

    def _begin_batch(self) -> None:
        """The previous batch is used up (the chain only asks then): count it as taken."""
        before, batch, _ = self._current
        self._taken = taken = before + len(batch)
        self._current = (taken, [], _USED_UP)

    def _batch_after(self, wait_from: Optional[float]) -> Optional[Iterator[T]]:
        """:meth:`next_batch`'s wait, the idle wait counted from ``wait_from`` if given."""
        while True:
            outcome, wait_from = self._poll(wait_from)
            if outcome is not None:
                return outcome
            # Something ended; act outside the lock (on_timeout and events run user code).
            # The budget goes first, so a cancel wins over an idle timeout due at once.
            if self._stopping:
                return None
            self._end_if_budget_ended()
            if self._reader_done and not self._buf:
                self._end_by_reader()
                return None
            if wait_from is not None and self._idle_left(wait_from, self._now()) <= 0:
                self._end_by_idle(wait_from)

    def _ended(self, now: float) -> bool:
        """The stream was stopped, or a budget it watches ended (at ``now``, its clock's)."""
        if self._stopping or self._budget_ended or now >= self._deadline:
            return True
        for budget in self._budgets:
            if budget.cancelled:
                return True
        return bool(self._other_clocks) and any(budget.ended for budget in self._other_clocks)

    def _poll(self, wait_from: Optional[float]) -> Tuple[Optional[Iterator[T]], Optional[float]]:
        """Take the buffered batch, waiting while it is empty; ``None`` when something ended."""
        with self._lock:
            while True:
                now = self._now()
                if self._ended(now):
                    return None, wait_from
                buf = self._buf
                count = len(buf)
                if count:
                    # Two atomic list operations: the reader only ever appends, so the
                    # first ``count`` items are the ones copied, whatever it does between.
                    batch = buf[:count]
                    del buf[:count]
                    if self._reader_waiting:  # room again, also when it filled while we waited
                        self._room_again()
                    items = iter(batch)
                    self._current = (self._taken, batch, items)
                    self._activity.took(batch, wait_from, now)
                    return items, wait_from
                if self._reader_done:
                    return None, wait_from
                if wait_from is None:
                    wait_from = now
                timeout = self._idle_left(wait_from, now)
                if timeout <= 0:
                    return None, wait_from
                # Another clock's budget wakes us from its on_done.
                timeout = min(timeout, self._deadline - now)
                self._consumer_waiting = True
                self._gate.clear()  # the reader's round ends before its next source item
                # Looked at again through a slice, which takes the list's own lock on a
                # free-threaded build, as the reader's append does: either this sees the
                # item, or the reader, after appending it, sees the cleared gate.
                if not buf[-1:]:
                    self._wait(timeout)
                self._consumer_waiting = False

    def _wait(self, timeout: float) -> None:
        """With ``_lock`` held and the buffer empty: wait at most ``timeout`` for the reader."""
        if math.isinf(timeout):
            self._not_empty.wait()
        else:
            self._clock.wait(self._not_empty, timeout)

    def _idle_left(self, wait_from: float, now: float) -> float:
        """Seconds until the idle (or first-item) limit; ``inf`` when disabled."""
        if self._activity.chunks == 0:
            return math.inf if self._first is None else self._created + self._first - now
        return math.inf if self._idle is None else wait_from + self._idle - now

    def _end_if_budget_ended(self) -> None:
        for budget in self._budgets:
            try:
                budget.check()
            except Cancelled as exc:
                self._finish_cancelled(exc)
                if self._explicit is not None and _scope.owns(self._explicit, exc):
                    raise _scope.error_for(exc, stage=self._stage) from None
                raise
        self._budget_ended = False  # a stale wake-up: nothing has ended

    def _finish_cancelled(self, exc: Cancelled) -> None:
        self._finish("deadline" if exc.reason == "deadline_exceeded" else "cancelled")

    def _end_by_reader(self) -> None:
        error = self._reader_error
        if error is None:
            self._finish("completed" if self._reader_completed else "error")
            if not self._reader_completed:
                raise RuntimeError("the stream's reader thread ended without an outcome")
            return
        self._reader_error = None
        try:
            if isinstance(error, Cancelled):
                self._finish_cancelled(error)
                if self._explicit is not None and _scope.owns(self._explicit, error):
                    raise _scope.error_for(error, stage=self._stage) from None
            else:
                self._finish("error")
            raise error
        finally:
            error = None

    def _end_by_idle(self, wait_from: Optional[float]) -> None:
        now = self._now()
        first_phase = self._activity.chunks == 0
        limit = self._first if first_phase else self._idle
        assert limit is not None and wait_from is not None
        waited = now - (self._created if first_phase else wait_from)
        self._finish("idle_timeout")
        raise idle_timeout_error(
            first_phase=first_phase,
            first_named=self._first_named,
            waited=waited,
            limit=limit,
            chunks=self._activity.chunks,
            lifetime=now - self._created,
            stage=self._stage,
        )

    # -- ending ----------------------------------------------------------------

    def _finish(self, ended_by: str) -> None:
        """Record the end (once), stop the reader, unblock the source, emit ``stream_end``."""
        with self._lock:
            if self._ended_by is not None:
                return
            self._ended_by = ended_by
            self._ended_at = self._now()
            self._stopping = True
            # An error the reader left that the consumer will never take (the budget's end
            # came first): dropped, since its traceback holds the reader's frame, and so this.
            self._reader_error = None
            self._gate.clear()
            if self._not_full is not None:
                self._not_full.notify_all()
            self._not_empty.notify_all()
            unregister, self._unregister = self._unregister, []
        for release in unregister:
            release()
        self._unblock()
        _events.emit_observed(
            "stream_end",
            stage=self._stage,
            reason=ended_by,
            chunks_received=self.delivered(),
            elapsed_ms=(self._ended_at - self._created) * 1000.0,
        )

    def _unblock(self) -> None:
        """Shut the sockets the reader is reading through instrumented connections, and call
        ``on_timeout`` once, if the reader may still be inside the source."""
        with self._lock:
            if self._unblocked or self._reader_done:
                return
        shut = self._reads is not None and self._reads.shut()
        with self._lock:
            if self._unblocked or (self._on_timeout is None and not shut):
                return
            self._unblocked = True
            callback = self._on_timeout
        if callback is None:
            return
        try:
            callback()
        except Exception:
            _log.exception("watchdog_sync: the stream's on_timeout hook raised; ignored")

    def _on_budget_done(self, budget: Budget) -> None:
        """On the watchdog thread: the budget ended; wake the consumer, free the source."""
        with self._lock:
            self._budget_ended = True
            self._not_empty.notify_all()
        self._unblock()

    def close(self, *, join: bool) -> None:
        """End the stream (``'closed'``, or ``'completed'`` if everything was delivered).

        With ``join``, wait (bounded) for the reader to exit, unless the stream had
        already ended by a timeout, the budget or an error with the source unblocked
        from outside: that reader is on its way out, and the caller, who is raising
        the error, must not queue behind it for the GIL.
        """
        with self._lock:
            join = join and not (self._ended_by is not None and self._unblocked)
            everything_delivered = (
                self._reader_done
                and self._reader_completed
                and not self._buf
                and operator.length_hint(self._current[2]) == 0
            )
        self._finish("completed" if everything_delivered else "closed")
        thread = self._thread
        if not join or thread is None or thread is threading.current_thread():
            return
        thread.join(_JOIN_SECONDS)
        if thread.is_alive():
            _log.warning(
                "watchdog_sync: the stream reader is still blocked in the source %.1fs after "
                "close(); leaving the daemon thread behind (pass on_timeout= to unblock it)",
                _JOIN_SECONDS,
            )

    # -- reading state -------------------------------------------------------

    def delivered(self) -> int:
        before, batch, items = self._current
        return before + len(batch) - operator.length_hint(items)

    def stats(self) -> StreamStats:
        end = self._ended_at if self._ended_at is not None else self._now()
        first = None if self._first_at is None else self._first_at - self._created
        return StreamStats(self.delivered(), first, end - self._created, self._ended_by)


def close_quietly(source: object) -> None:
    close = getattr(source, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        _log.exception("watchdog_sync: closing the stream's source raised; ignored")
