"""A stream read by a reader thread of its own into a bounded buffer: the thread feed.

For ``guard_stream`` over any iterator, and the httpx transport's streams of any shape but
HTTP/1.1 on httpcore's own sockets. The reader thread (``watchdog_sync-stream-reader``)
fills a bounded buffer; the consumer takes what has accumulated as one batch and waits
only on an empty buffer, as long as its :class:`~.watch.StreamWatch` allows; on an idle
timeout or the budget's end the source is unblocked from outside (``on_timeout``, and the
sockets it reads through instrumented connections shut) and the consumer raises.
``_lock`` guards every flag, ``_gate``, every wait and notification; ``_buf`` changes
only by single list operations (why this holds without the GIL: docs/architecture.md).
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import logging
import math
import threading
from typing import Any, Callable, Dict, Generic, Iterable, Iterator, List, Optional, TypeVar

from .._core.errors import Cancelled
from .._http.reads import READER_SOCKETS, ReaderSockets
from .watch import StreamWatch, quietly

__all__ = ["DEFAULT_MAX_BUFFERED", "READER_THREAD_NAME", "ThreadFeed"]

T = TypeVar("T")

READER_THREAD_NAME = "watchdog_sync-stream-reader"
DEFAULT_MAX_BUFFERED = 1024
_JOIN_SECONDS = 1.0
_NOTHING: Dict[object, Any] = {}
_PASS = _NOTHING.get  # _PASS(slot, item) -> item, in C: lets map() pair gate slots with items

_log = logging.getLogger("watchdog_sync")


class ThreadFeed(Generic[T]):
    """A reader thread's buffer and its consumer's waits (never refers to the GuardedStream)."""

    def __init__(
        self,
        watch: StreamWatch,
        source: Iterable[T],
        iterator: Iterator[T],
        on_timeout: Optional[Callable[[], object]],
        max_buffered: int,
    ) -> None:
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._reads = ReaderSockets()  # the reader's reads through instrumented connections
        self._buf: List[T] = []
        self._max = max_buffered
        self._gate: List[None] = []  # the current round's slots; cleared = closed
        self._consumer_waiting = False
        self._reader_waiting = False
        self._unblocked = False
        self._on_timeout = on_timeout
        self.watch = watch
        context = contextvars.copy_context()
        context.run(READER_SOCKETS.set, self._reads)
        self._thread = threading.Thread(
            target=context.run,
            args=(self._read, source, iterator),
            name=READER_THREAD_NAME,
            daemon=True,
        )

    def start(self) -> None:
        self.watch.start(self._wake, self._unblock)
        self._thread.start()

    # -- reader side -----------------------------------------------------------

    def _read(self, source: Iterable[T], iterator: Iterator[T]) -> None:
        error: Optional[BaseException] = None
        completed = False
        try:
            completed = self._pump(iterator)
        except (Exception, Cancelled) as exc:  # handed to the consumer, who raises it
            error = exc
        finally:
            _close_quietly(iterator)  # a generator can only be closed by its own thread
            if source is not iterator:
                _close_quietly(source)
            with self._lock:
                self.watch.source_done(error, completed)
                self._not_empty.notify()
            error = None  # break the traceback -> frame -> error cycle

    def _pump(self, iterator: Iterator[T]) -> bool:
        """Move items into the buffer. True when the source ended, False when told to stop."""
        buf = self._buf
        extend = buf.extend
        try:
            item = next(iterator)
        except StopIteration:
            return True
        self.watch.first_at = self.watch.now()
        buf.append(item)
        del item
        room = self._next_round()  # hands the first item over before announcing it
        self.watch.announce_first()
        # The source, then a marker that records its end (all in C, nothing per item).
        ended: List[bool] = []
        items = itertools.chain(iterator, iter(functools.partial(ended.append, True), None))
        while room >= 0:
            if room == 0:  # the consumer waits: one item at a time, under the lock
                for one in itertools.islice(items, 1):
                    with self._lock:
                        buf.append(one)
                        if self._consumer_waiting:
                            self._wake_consumer()
            else:
                extend(map(_PASS, iter(self._gate), items))
            if ended:
                return True
            room = self._next_round()
        return False

    def _next_round(self) -> int:
        """Between rounds: wake a waiting consumer, wait while full, size the next round.

        Returns the round's size, 0 for a single step, -1 to stop.
        """
        with self._lock:
            if self.watch.stopping:
                return -1
            if self._consumer_waiting and self._buf:
                self._wake_consumer()
            while len(self._buf) >= self._max:
                self._reader_waiting = True
                self._not_full.wait()
                self._reader_waiting = False
                if self.watch.stopping:
                    return -1
            if self._consumer_waiting:  # the gate is closed while the consumer waits
                return 0
            room = self._max - len(self._buf)
            self._gate = [None] * room
            return room

    def _wake_consumer(self) -> None:
        """With ``_lock`` held: the consumer stops waiting now, so rounds resume at once."""
        self._consumer_waiting = False
        self._not_empty.notify()

    # -- consumer side ---------------------------------------------------------

    def next_batch(self) -> Optional[Iterator[T]]:
        """Wait for buffered items and return an iterator over them (see :class:`~.stream.Feed`)."""
        watch = self.watch
        watch.begin_batch()
        wait_from = watch.activity.quiet_since  # only activity restarts the idle clock
        while True:
            with self._lock:
                while True:
                    now = watch.now()
                    if watch.ended(now):
                        break
                    buf = self._buf
                    count = len(buf)
                    if count:
                        # Two atomic list operations: the reader only ever appends, so the
                        # first ``count`` items are the ones copied, whatever it does between.
                        batch = buf[:count]
                        del buf[:count]
                        if self._reader_waiting:  # room again, also if it filled as we waited
                            self._not_full.notify()
                        return watch.hand_out(batch, wait_from)
                    if watch.source_over:
                        break
                    if wait_from is None:
                        wait_from = now
                    timeout = watch.wait_left(wait_from, now)
                    if timeout <= 0:
                        break
                    self._wait(timeout)
            # Something ended; act outside the lock (on_timeout and events run user code).
            if watch.ended_after_wait(not self._buf, wait_from):
                return None

    def _wait(self, timeout: float) -> None:
        """With ``_lock`` held: wait for the reader's next item (or a budget's end)."""
        self._consumer_waiting = True
        self._gate.clear()  # the reader's round ends before its next source item
        # Looked at again through a slice, which takes the list's own lock on a
        # free-threaded build, as the reader's append does: either this sees the
        # item, or the reader, after appending it, sees the cleared gate.
        if not self._buf[-1:]:
            if math.isinf(timeout):
                self._not_empty.wait()
            else:
                self.watch.clock.wait(self._not_empty, timeout)
        self._consumer_waiting = False

    # -- ending ----------------------------------------------------------------

    def _wake(self) -> None:
        """The watch's: the stream ended (the reader stops) or a budget ended."""
        with self._lock:
            if self.watch.stopping:
                # An error the consumer will never take (the budget's end came first):
                # dropped, since its traceback holds the reader's frame, and so this.
                self.watch.error = None
                self._gate.clear()
                self._not_full.notify_all()
            self._not_empty.notify_all()

    def _unblock(self) -> None:
        """The watch's: shut the sockets the reader is reading through instrumented
        connections, and call ``on_timeout`` once, if the reader may still be inside the
        source."""
        with self._lock:
            if self._unblocked or self.watch.source_over:
                return
        shut = self._reads.shut()
        with self._lock:
            if self._unblocked or (self._on_timeout is None and not shut):
                return
            self._unblocked = True
            callback = self._on_timeout
        if callback is not None:
            quietly(callback, "the stream's on_timeout hook")

    def close(self, *, join: bool) -> None:
        """End the stream (``'closed'``, or ``'completed'`` if everything was delivered).

        With ``join``, wait (bounded) for the reader to exit, unless the stream had
        already ended by a timeout, the budget or an error with the source unblocked
        from outside: that reader is on its way out, and the caller, who is raising
        the error, must not queue behind it for the GIL.
        """
        watch = self.watch
        with self._lock:
            join = join and not (watch.ended_by is not None and self._unblocked)
            delivered = watch.everything_delivered(not self._buf)
        watch.finish("completed" if delivered else "closed")
        thread = self._thread
        if not join or thread is threading.current_thread():
            return
        thread.join(_JOIN_SECONDS)
        if thread.is_alive():
            _log.warning(
                "watchdog_sync: the stream reader is still blocked in the source %.1fs after "
                "close(); leaving the daemon thread behind (pass on_timeout= to unblock it)",
                _JOIN_SECONDS,
            )


def _close_quietly(source: object) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        quietly(close, "closing the stream's source")
