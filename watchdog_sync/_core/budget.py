"""Budget: one absolute monotonic deadline plus cancellation, shared by every stage.

Budgets form a tree: a child ends no later than its parent (its deadline is
the parent's, capped, never extended) and ends at once when the parent is
cancelled. Every budget runs on a clock (``clock.py``): real time by
default, whose expiry callbacks (``on_done``) run on the one shared watchdog
thread (``watchdog.py``), or a test clock, whose callbacks run when the test
moves its time. Waits (``sleep``) wake on ``cancel()`` at once.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import weakref
from typing import Callable, List, Optional, Tuple

from .clock import Clock, ClockLike, Timer, as_clock
from .durations import MAX_SECONDS, Duration, validate_duration
from .errors import Cancelled

__all__ = ["Budget"]


class _Arming:
    """Stands for the expiry timer while it is being scheduled (outside the budget's lock)."""

    __slots__ = ()

    def cancel(self) -> None:
        return None


_ARMING = _Arming()
_PRUNE_FROM = 16  # a parent's list of children drops its dead from this length on (see _adopt)

# What ending a budget leaves to do outside its lock: the callbacks and the expiry timer.
_Ended = Optional[Tuple[List[Callable[["Budget"], None]], Optional[Timer]]]


class Budget:
    """An absolute deadline on a monotonic clock, with cancellation and children.

    Args:
        timeout: seconds from now (float or ``timedelta``); ``None`` or ``inf``
            for no limit. ``0`` is a budget that has already ended; a negative
            value is a ``ValueError`` (a budget's limit is never "off" by being
            <= 0, unlike an idle limit); more than 7 days is clamped to 7 days.
        deadline: an absolute deadline on ``clock``; the earlier of the two wins
            (clamped to 7 days from now, like ``timeout``).
        parent: the budget this one lives inside; its deadline caps this one and
            cancelling it ends this one too.
        stage: a name for what runs under this budget, used in errors and events.
        clock: the monotonic clock: a callable returning seconds (``time.monotonic``)
            or a clock object such as ``watchdog_sync.testing.FakeClock``, for tests
            whose time moves only when told. A child uses its parent's.

    On timeout, ``remaining()`` is ``0.0``, ``expired`` is true, and ``check()``
    / ``sleep()`` raise :class:`Cancelled`. On cancel the same happens at once,
    with ``cancelled`` true, for this budget and every descendant.
    """

    __slots__ = (
        "__weakref__",
        "_callbacks",
        "_cancel_origin",
        "_cancel_reason",
        "_children",
        "_clock",
        "_deadline",
        "_done",
        "_lock",
        "_now",
        "_parent",
        "_started",
        "_timer",
        "_wakeup",
        "stage",
    )

    def __init__(
        self,
        timeout: Optional[Duration] = None,
        *,
        deadline: Optional[float] = None,
        parent: Optional[Budget] = None,
        stage: Optional[str] = None,
        clock: ClockLike = time.monotonic,
    ) -> None:
        seconds = validate_duration(timeout, "timeout")
        absolute = _absolute(deadline)
        if parent is not None and clock is time.monotonic:
            self._clock: Clock = parent._clock
        else:
            self._clock = as_clock(clock)
        self._now = self._clock.now
        self._started = self._now()
        limits: List[float] = []
        if absolute is not None and not math.isinf(absolute):
            # A far deadline is clamped like a long timeout (see durations.MAX_SECONDS).
            limits.append(min(absolute, self._started + MAX_SECONDS))
        if parent is not None and parent.deadline is not None:
            limits.append(parent.deadline)
        if seconds is not None:
            limits.append(self._started + seconds)
        self._deadline: Optional[float] = min(limits) if limits else None
        self._parent = parent
        self.stage: Optional[str] = stage
        if stage is None and parent is not None:
            self.stage = parent.stage
        # Made when first needed: most budgets never have a child, a callback or a sleeper,
        # and a stream opens several budgets, each of whose objects the cyclic GC tracks.
        self._children: Optional[List[weakref.ref[Budget]]] = None  # see _adopt
        self._callbacks: Optional[List[Callable[[Budget], None]]] = None
        self._timer: Optional[Timer] = None
        self._done = False
        self._wakeup: Optional[threading.Event] = None
        self._cancel_reason: Optional[str] = None
        # Who was cancelled: this budget or an ancestor, held weakly (a budget that named
        # itself strongly would be a reference cycle, left to the cyclic GC; an ancestor is
        # alive anyway, through ``_parent``).
        self._cancel_origin: Optional[weakref.ref[Budget]] = None
        # Each budget guards its own cancellation state, children and callbacks: a lock
        # shared by every budget in the process became a convoy under many threads (a
        # thread preempted while holding it stalled every other call, the watchdog's too).
        self._lock = threading.Lock()
        if parent is not None:
            with parent._lock:
                parent._adopt(self)
                if parent._cancel_origin is not None:
                    self._cancel_reason = parent._cancel_reason
                    self._cancel_origin = parent._cancel_origin

    def _adopt(self, child: Budget) -> None:
        """With the lock held: hold ``child`` weakly, for :meth:`cancel` to reach it.

        A list of weak references, not a ``WeakSet`` (seven objects of its own): the dead
        are dropped whenever the list's length reaches a power of two from
        ``_PRUNE_FROM`` on, so a long-lived parent of many short-lived children keeps at
        most about twice its live children.
        """
        children = self._children
        if children is None:
            children = self._children = []
        else:
            count = len(children)
            if count >= _PRUNE_FROM and count & (count - 1) == 0:
                children[:] = [ref for ref in children if ref() is not None]
        children.append(weakref.ref(child))

    # -- reading -------------------------------------------------------------

    @property
    def deadline(self) -> Optional[float]:
        """The absolute deadline on the budget's clock; ``None`` when unbounded."""
        return self._deadline

    @property
    def parent(self) -> Optional[Budget]:
        return self._parent

    @property
    def clock(self) -> Clock:
        """The clock the budget runs on (a plain callable given as ``clock`` is wrapped)."""
        return self._clock

    @property
    def started(self) -> float:
        """When the budget was created, on its clock."""
        return self._started

    def remaining(self) -> float:
        """Seconds left: ``>= 0.0``; ``0.0`` once cancelled; ``math.inf`` when unbounded."""
        if self._cancel_origin is not None:
            return 0.0
        if self._deadline is None:
            return math.inf
        return max(0.0, self._deadline - self._now())

    @property
    def expired(self) -> bool:
        """True once the deadline (own or inherited) has passed."""
        return self._deadline is not None and self._now() >= self._deadline

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called on this budget or an ancestor."""
        return self._cancel_origin is not None

    @property
    def ended(self) -> bool:
        """True once the budget expired or was cancelled."""
        return self._cancel_origin is not None or self.expired

    def elapsed(self) -> float:
        """Seconds since the budget was created."""
        return self._now() - self._started

    def end_cause(self) -> Optional[Tuple[Budget, str]]:
        """The outermost ended budget in this budget's chain and why, or ``None``.

        The outermost wins, so a ``Cancelled`` travels to the scope that owns
        the budget that really ran out, past inner scopes.
        """
        cause: Optional[Tuple[Budget, str]] = None
        node: Optional[Budget] = self
        now = self._now()
        while node is not None:
            if node._cancel_origin is not None and node._cancel_origin() is node:
                cause = (node, node._cancel_reason or "cancelled")
            elif (
                node._deadline is not None and now >= node._deadline and node._cancel_origin is None
            ):
                cause = (node, "deadline_exceeded")
            node = node._parent
        return cause

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else ("expired" if self.expired else "live")
        left = self.remaining()
        left_text = "unbounded" if math.isinf(left) else f"{left:.3f}s left"
        stage = f" stage={self.stage!r}" if self.stage else ""
        return f"<Budget {state} {left_text}{stage}>"

    # -- deriving --------------------------------------------------------------

    def child(self, cap: Optional[Duration] = None, *, stage: Optional[str] = None) -> Budget:
        """A budget with ``min(self.remaining(), cap)`` that ends with this one.

        ``cap`` can only shrink the time: a child of a 2 s budget with cap 10 has 2 s.
        """
        return Budget(cap, parent=self, stage=stage)

    # -- ending ----------------------------------------------------------------

    def cancel(self, reason: str = "cancelled") -> None:
        """End this budget and every descendant now. Thread-safe and idempotent.

        Waits in ``sleep()`` wake at once and raise :class:`Cancelled`;
        ``on_done`` callbacks run on the watchdog thread.
        """
        with self._lock:
            if self._cancel_origin is not None:
                return
            origin = weakref.ref(self)
            self._cancel_reason = reason
            self._cancel_origin = origin
        pending = [self]
        while pending:
            node = pending.pop()
            with node._lock:
                if node._cancel_origin is None:
                    node._cancel_reason = reason
                    node._cancel_origin = origin
                if node._wakeup is not None:
                    node._wakeup.set()
                ended = node._end_locked()
                if node._children is not None:
                    pending.extend(c for c in (ref() for ref in node._children) if c is not None)
            node._run_ended(ended)

    def on_done(self, callback: Callable[[Budget], None]) -> Callable[[], None]:
        """Run ``callback(budget)`` once, on the watchdog thread, when this budget ends.

        If it has already ended, the callback is scheduled at once. Returns a
        function that unregisters the callback (harmless after it ran).
        """
        with self._lock:
            ended = self._done or self._cancel_origin is not None
            arm = not ended and self._timer is None and self._deadline is not None
            if arm:
                self._timer = _ARMING
            if not ended:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
        if ended:
            self._dispatch(callback)
            return _noop
        if arm:
            self._arm()

        def unregister() -> None:
            with self._lock:
                if self._callbacks and callback in self._callbacks:
                    self._callbacks.remove(callback)
                timer = None
                if not self._callbacks:
                    timer, self._timer = self._timer, None
            if timer is not None:
                timer.cancel()

        return unregister

    def _arm(self) -> None:
        """Schedule the expiry timer, outside the lock: a test clock runs a due timer at once."""
        assert self._deadline is not None
        timer = self._clock.call_at(self._deadline, self._on_deadline)
        with self._lock:
            keep = self._timer is _ARMING
            if keep:
                self._timer = timer
        if not keep:  # the budget ended, or its callbacks were unregistered, meanwhile
            timer.cancel()

    def _on_deadline(self) -> None:
        ended: _Ended = None
        rearm = False
        with self._lock:
            self._timer = None
            if self.expired:
                ended = self._end_locked()
            elif self._callbacks and not self._done:
                self._timer = _ARMING  # fired early (clock skew): again
                rearm = True
        if rearm:
            self._arm()
        self._run_ended(ended)

    def _end_locked(self) -> _Ended:
        """Mark the budget done (lock held); returns its callbacks and timer, for
        :meth:`_run_ended` to handle once the lock is released, or None if already done."""
        if self._done:
            return None
        self._done = True
        callbacks, self._callbacks = self._callbacks or [], None
        timer, self._timer = self._timer, None
        return callbacks, timer

    def _run_ended(self, ended: _Ended) -> None:
        if ended is None:
            return
        callbacks, timer = ended
        if timer is not None:
            timer.cancel()
        for callback in callbacks:
            self._dispatch(callback)

    def _dispatch(self, callback: Callable[[Budget], None]) -> None:
        """Run ``callback(self)`` as soon as the clock can: on the watchdog thread for
        real time; at once, in order, for a test clock (inside the ``advance()`` that
        reached the deadline, or the ``cancel()`` that ended the budget)."""
        self._clock.call_at(self._now(), functools.partial(callback, self))

    # -- waiting ---------------------------------------------------------------

    def check(self) -> None:
        """Raise :class:`Cancelled` if this budget (or an ancestor) has ended."""
        if self._cancel_origin is not None or self.expired:
            self._raise_cancelled()

    def _raise_cancelled(self) -> None:
        cause = self.end_cause() or (self, "deadline_exceeded")
        raise Cancelled(cause[0], cause[1])

    def sleep(self, seconds: Duration) -> None:
        """Sleep ``seconds``, or less if the budget ends first.

        Raises :class:`Cancelled` if the budget ends before the sleep is over
        (a sleep longer than what remains sleeps until the deadline, then
        raises). ``cancel()`` from another thread wakes it at once.
        """
        wanted = validate_duration(seconds, "seconds", allow_none=False)
        assert wanted is not None
        self.check()
        left = self.remaining()
        self._clock.sleep(min(wanted, left), self._wakeup_event())
        if wanted >= left:
            self._raise_cancelled()
        self.check()  # cancelled (or out of time) while asleep

    def _wakeup_event(self) -> threading.Event:
        """The event a ``sleep`` waits on, which ``cancel()`` sets (made on the first sleep)."""
        with self._lock:
            if self._wakeup is None:
                self._wakeup = threading.Event()
                if self._cancel_origin is not None:
                    self._wakeup.set()
            return self._wakeup


def _absolute(deadline: Optional[float]) -> Optional[float]:
    """``deadline=`` as a float: ``TypeError`` for a non-number, ``ValueError`` for NaN or overflow."""
    if deadline is None:
        return None
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        raise TypeError(f"deadline must be a number on the budget's clock, got {deadline!r}")
    try:
        value = float(deadline)
    except OverflowError:
        raise ValueError("deadline is too large to be a time on the budget's clock") from None
    if math.isnan(value):
        raise ValueError(
            f"deadline must be a number on the budget's clock (or None for no deadline), "
            f"got {deadline!r}"
        )
    return value


def _noop() -> None:
    return None
