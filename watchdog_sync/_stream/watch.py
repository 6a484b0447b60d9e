"""One guarded stream's watch: its limits, budgets and deadline, its single end, stats and errors.

Each stream's feed holds one (:mod:`.thread_feed`, :mod:`.socket_feed`); the watch has no
thread, buffer or socket.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import math
import operator
import threading
from typing import Any, Callable, Iterator, List, Optional, Tuple

from .._core import events as _events
from .._core import scope as _scope
from .._core.budget import Budget, _noop
from .._core.clock import Clock
from .._core.config import ENV_IDLE_TIMEOUT
from .._core.errors import Cancelled, StreamIdleTimeout
from .._core.phase import mark
from .limits import StreamLimits
from .wire import Activity

__all__ = ["StreamStats", "StreamWatch", "quietly"]

_USED_UP: Iterator[Any] = iter(())

_log = logging.getLogger("watchdog_sync")


def quietly(action: Callable[[], object], what: str) -> None:
    """Run ``action`` (a hook, or letting a source or body go); log what it raises."""
    try:
        action()
    except Exception:
        _log.exception("watchdog_sync: %s raised; ignored", what)


@dataclasses.dataclass(frozen=True)
class StreamStats:
    """What a guarded stream did so far.

    Attributes:
        items: items delivered to the consumer.
        first_item_after: seconds from the stream's creation to the source's
            first item, or ``None`` if none came yet.
        lifetime: seconds from creation to the end (or to now while running).
        ended_by: ``'completed'``, ``'idle_timeout'``, ``'deadline'``,
            ``'cancelled'``, ``'error'``, ``'closed'``, or ``None`` while running.
    """

    items: int
    first_item_after: Optional[float]
    lifetime: float
    ended_by: Optional[str]


class StreamWatch:
    """The limits, budgets, end and stats of one stream, and how its source ended.

    It says how long the consumer may wait (``min(idle limit left, budget left)``), whether
    the stream has ended and with which error, records the end once (budgets let go, the
    feed woken and its source unblocked, ``stream_end`` emitted), and counts the items
    handed out, so ``stats`` read from any thread are consistent; for a request's stream,
    how far the request got, for the words of its end.

    ``wake`` (notify whoever waits on the feed, under its own lock) and ``unblock`` (free
    a source that may be blocked) are the feed's, given to :meth:`start` and called when
    the stream or a budget it watches ends, never with the watch's lock held. The source's
    end (:meth:`source_done`, ``error``) is set and cleared under the feed's lock.
    """

    def __init__(
        self,
        limits: StreamLimits,
        budgets: List[Budget],
        explicit: Optional[Budget],
        clock: Clock,
        active: Optional[Callable[[Any], bool]] = None,
        request: bool = False,
    ) -> None:
        self._lock = threading.Lock()  # the end: recorded once
        self._wake: Callable[[], None] = _noop
        self._unblock: Callable[[], None] = _noop
        self._idle = limits.idle
        self._first = limits.first
        self._first_named = limits.first_named
        self._budgets = budgets
        # The earliest deadline on the stream's clock (budgets' deadlines never move).
        self.deadline = min(
            (b.deadline for b in budgets if b.clock is clock and b.deadline is not None),
            default=math.inf,
        )
        self._other_clocks = [b for b in budgets if b.clock is not clock]
        self._explicit = explicit
        self.stage = budgets[0].stage if budgets else None
        self._unregister: List[Callable[[], None]] = []
        self.ended_by: Optional[str] = None
        self._ended_at: Optional[float] = None
        self.first_at: Optional[float] = None
        self.stopping = False
        self._budget_ended = False
        self.source_over = False  # the source ended (its items may still be buffered)
        self._completed = False
        self.error: Optional[BaseException] = None  # the source's, raised after its items
        # The idle clock: which items were activity, since when only others came.
        self.activity = Activity(active)
        # (items before this batch, the batch, its countdown): one tuple, replaced whole.
        self._current: Tuple[int, List[Any], Iterator[Any]] = (0, [], _USED_UP)
        self.clock = clock
        self.now = clock.now
        self.created = self.now()
        self._context = contextvars.copy_context()  # events carry the opener's fields
        # A ``request``'s stream (a socket feed's), for the words of its end: the phase its
        # open's ``Cancelled`` said, its head's arrival, the items that arrived, the last's.
        self.phase: Optional[str] = "head" if request else None
        self._said: Optional[Tuple[str, Optional[str]]] = None
        self._head_at: Optional[float] = None
        self._arrived = 0
        self._last_at: Optional[float] = None

    def start(self, wake: Callable[[], None], unblock: Callable[[], None]) -> None:
        """Watch the budgets: a budget's end calls ``wake``, then ``unblock``."""
        self._wake = wake
        self._unblock = unblock
        for budget in self._budgets:
            self._unregister.append(budget.on_done(self._on_budget_done))

    def _on_budget_done(self, budget: Budget) -> None:
        self._budget_ended = True
        self._wake()
        self._unblock()

    # -- waiting ---------------------------------------------------------------

    def ended(self, now: float) -> bool:
        """The stream was stopped, or a budget it watches ended (at ``now``, its clock's)."""
        if self.stopping or self._budget_ended or now >= self.deadline:
            return True
        for budget in self._budgets:
            if budget.cancelled:
                return True
        return bool(self._other_clocks) and any(budget.ended for budget in self._other_clocks)

    def idle_left(self, wait_from: float, now: float) -> float:
        """Seconds until the idle (or first-item) limit; ``inf`` when disabled."""
        if self.activity.chunks == 0:
            return math.inf if self._first is None else self.created + self._first - now
        return math.inf if self._idle is None else wait_from + self._idle - now

    def wait_left(self, wait_from: float, now: float) -> float:
        """Seconds the consumer may wait: ``min(idle limit left, deadline left)``."""
        return min(self.idle_left(wait_from, now), self.deadline - now)

    # -- ending ----------------------------------------------------------------

    def source_done(self, error: Optional[BaseException], completed: bool) -> None:
        """With the feed's lock held: the source ended (``completed``: it ran out), with
        ``error`` to raise once its items are out; dropped after the consumer gave up."""
        self.source_over = True
        self._completed = completed
        if not self.stopping:
            self.error = error

    def everything_delivered(self, nothing_buffered: bool) -> bool:
        """With the feed's lock held: the source completed and the consumer has all of it."""
        return (
            self._completed
            and nothing_buffered
            and operator.length_hint(self._current[2]) == 0  # the current batch is used up
        )

    def ended_after_wait(self, nothing_buffered: bool, wait_from: Optional[float]) -> bool:
        """A feed's wait brought nothing: True when the stream is over (stopped, or its
        source ended with everything before it handed out); raises the budget's end first,
        so that a cancel wins over an idle timeout due at once, then the source's error or
        the idle timeout. Each end is recorded before it is raised."""
        if self.stopping:
            return True
        for budget in self._budgets:
            try:
                budget.check()
            except Cancelled as exc:
                self._end_cancelled(exc)
                raise
        self._budget_ended = False  # a stale wake-up: nothing has ended
        if self.source_over and nothing_buffered:
            self._source_ended()
            return True
        self._check_idle(wait_from)
        return False

    def _source_ended(self) -> None:
        """The source's end, once everything before it was handed out: recorded, and its
        error raised (a ``Cancelled`` converted when the explicit budget owns it)."""
        error, self.error = self.error, None  # no frame keeps it: no cycle
        if error is None:
            self.finish("completed" if self._completed else "error")
            if not self._completed:
                raise RuntimeError("the stream's reader thread ended without an outcome")
            return
        try:
            if isinstance(error, Cancelled):
                self._end_cancelled(error)
            else:
                self.finish("error")
            raise error
        finally:
            error = None

    def _check_idle(self, wait_from: Optional[float]) -> None:
        """Raise :class:`StreamIdleTimeout` when the wait from ``wait_from`` passed the idle
        (or first-item) limit: what was waited for, and the knob to turn."""
        if wait_from is None:
            return
        now = self.now()
        if self.idle_left(wait_from, now) > 0:
            return
        first_phase = self.activity.chunks == 0
        limit = self._first if first_phase else self._idle
        assert limit is not None
        waited = now - (self.created if first_phase else wait_from)
        lifetime = now - self.created
        self.finish("idle_timeout")
        if first_phase:
            what = f"no first item within {waited:.2f}s of opening the stream"
            knob = "first_item_timeout=" if self._first_named else "idle_timeout="
        else:
            what = f"no stream activity for {waited:.2f}s after {self.activity.chunks} chunks"
            knob = "idle_timeout="
        raise StreamIdleTimeout(
            f"{what} (limit {limit:g}s, stream open {lifetime:.2f}s); if the source is "
            f"legitimately this slow, raise {knob} (or the {ENV_IDLE_TIMEOUT} environment "
            "variable)",
            idle_timeout=limit,
            chunks_received=self.activity.chunks,
            stream_lifetime=lifetime,
            stage=self.stage,
            elapsed=lifetime,
            phase=self.phase,
        )

    def _end_cancelled(self, exc: Cancelled) -> None:
        """Record the end; raise the public error when the explicit budget owns ``exc``."""
        self._stamp(exc)
        self.finish("deadline" if exc.reason == "deadline_exceeded" else "cancelled")
        if self._explicit is not None and _scope.owns(self._explicit, exc):
            raise _scope.error_for(exc, stage=self.stage) from None

    def finish(self, ended_by: str) -> None:
        """Record the end (once): let the budgets go, wake the feed, unblock its source,
        emit ``stream_end``."""
        with self._lock:
            if self.ended_by is not None:
                return
            self.ended_by = ended_by
            self._ended_at = ended_at = self.now()
            self.stopping = True
            unregister, self._unregister = self._unregister, []
            # The feed's hooks are let go here: no cycle (feed -> watch -> feed) stays behind.
            wake, self._wake = self._wake, _noop
            unblock, self._unblock = self._unblock, _noop
        wake()
        for release in unregister:
            release()
        unblock()
        _events.emit_observed(
            "stream_end",
            stage=self.stage,
            reason=ended_by,
            chunks_received=self.delivered(),
            elapsed_ms=(ended_at - self.created) * 1000.0,
        )

    # -- counting --------------------------------------------------------------

    def announce_first(self) -> None:
        """The ``first_byte`` event, with the fields of the context the stream was made in."""
        assert self.first_at is not None
        self._context.run(
            _events.emit_observed,
            "first_byte",
            stage=self.stage,
            first_byte_ms=(self.first_at - self.created) * 1000.0,
        )

    # -- a request's progress (the socket feed's, in its consumer's thread) -----

    def heard(self, exc: BaseException) -> None:
        """The request raised ``exc`` before its head: keep the phase it said, if any."""
        if isinstance(exc, Cancelled) and exc.phase is not None:
            self._said = (exc.phase, exc.progress)

    def head_in(self) -> None:
        """The response's head is in: the body is read from now on."""
        self._head_at = self.now()
        self.phase = "body"

    def arrived(self, count: int) -> None:
        """``count`` (> 0) more items of the body arrived; the first one announced."""
        self._arrived += count
        self._last_at = now = self.now()
        if self.first_at is None:
            self.first_at = now
            self.announce_first()

    def _stamp(self, exc: Cancelled) -> None:
        """Put where a request's stream was, and how far it got, on ``exc`` (unless a part
        below already did)."""
        if self._said is not None:
            mark(exc, *self._said)
            return
        if self._head_at is None:
            return
        now = self.now()
        if self._arrived and self._last_at is not None:
            plural = "" if self._arrived == 1 else "s"
            words = f"after the head and {self._arrived} event{plural}, "
            words += f"the last {now - self._last_at:.1f} s ago"
        else:
            words = f"after the head, {now - self._head_at:.1f} s ago, while reading the body"
        mark(exc, "body", words)

    def begin_batch(self) -> None:
        """The previous batch is used up (the chain only asks then): count it as taken."""
        before, batch, _ = self._current
        self._current = (before + len(batch), [], _USED_UP)

    def hand_out(self, batch: List[Any], waited_from: Optional[float]) -> Iterator[Any]:
        """The iterator the consumer takes ``batch`` through, counted as it goes; the consumer
        waited for it since ``waited_from`` (``None``: it found it buffered)."""
        items = iter(batch)
        self._current = (self._current[0], batch, items)
        self.activity.took(batch, waited_from, self.now())
        return items

    def delivered(self) -> int:
        before, batch, items = self._current
        return before + len(batch) - operator.length_hint(items)

    def stats(self) -> StreamStats:
        end = self._ended_at if self._ended_at is not None else self.now()
        first = None if self.first_at is None else self.first_at - self.created
        return StreamStats(self.delivered(), first, end - self.created, self.ended_by)
