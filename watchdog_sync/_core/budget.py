"""Budget: one absolute monotonic deadline plus cancellation, shared by every stage.

Budgets form a tree: a child ends no later than its parent (its deadline is
the parent's, capped, never extended) and ends at once when the parent is
cancelled. Expiry callbacks (``on_done``) run on the one shared watchdog
thread (see ``_watchdog``); waits (``sleep``) wake on ``cancel()`` at once.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from typing import Callable, List, Optional, Protocol, Tuple

from . import watchdog as _watchdog
from .durations import MAX_SECONDS, Duration, validate_duration
from .errors import Cancelled

__all__ = ["Budget", "Clock"]


# What ending a budget leaves to do outside its lock: the callbacks and the expiry timer.
_Ended = Optional[Tuple[List[Callable[["Budget"], None]], Optional[object]]]


class Clock(Protocol):
    """A monotonic clock: calling it returns seconds. ``time.monotonic`` is one."""

    def __call__(self) -> float: ...


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
        clock: the monotonic clock (injectable for tests); a child uses its parent's.

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
        clock: Clock = time.monotonic,
    ) -> None:
        seconds = validate_duration(timeout, "timeout")
        absolute = _absolute(deadline)
        if parent is not None and clock is time.monotonic:
            clock = parent.clock
        self._clock: Clock = clock
        self._started = clock()
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
        self._children: weakref.WeakSet[Budget] = weakref.WeakSet()
        self._callbacks: List[Callable[[Budget], None]] = []
        self._timer: Optional[object] = None
        self._done = False
        self._wakeup = threading.Event()
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
                parent._children.add(self)
                if parent._cancel_origin is not None:
                    self._cancel_reason = parent._cancel_reason
                    self._cancel_origin = parent._cancel_origin
                    self._wakeup.set()

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
        return max(0.0, self._deadline - self._clock())

    @property
    def expired(self) -> bool:
        """True once the deadline (own or inherited) has passed."""
        return self._deadline is not None and self._clock() >= self._deadline

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
        return self._clock() - self._started

    def end_cause(self) -> Optional[Tuple[Budget, str]]:
        """The outermost ended budget in this budget's chain and why, or ``None``.

        The outermost wins, so a ``Cancelled`` travels to the scope that owns
        the budget that really ran out, past inner scopes.
        """
        cause: Optional[Tuple[Budget, str]] = None
        node: Optional[Budget] = self
        now = self._clock()
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
                node._wakeup.set()
                ended = node._end_locked()
                pending.extend(node._children)
            node._run_ended(ended)

    def on_done(self, callback: Callable[[Budget], None]) -> Callable[[], None]:
        """Run ``callback(budget)`` once, on the watchdog thread, when this budget ends.

        If it has already ended, the callback is scheduled at once. Returns a
        function that unregisters the callback (harmless after it ran).
        """
        with self._lock:
            if self._done or self._cancel_origin is not None:
                _watchdog.call_soon(lambda: callback(self))
                return _noop
            self._callbacks.append(callback)
            if self._timer is None and self._deadline is not None:
                self._timer = self._schedule_expiry()

        def unregister() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)
                timer = None
                if not self._callbacks:
                    timer, self._timer = self._timer, None
            if timer is not None:
                timer.cancel()  # type: ignore[attr-defined]

        return unregister

    def _schedule_expiry(self) -> object:
        assert self._deadline is not None
        call_at = getattr(self._clock, "call_at", None)
        if call_at is not None:  # a test clock schedules on its own time
            return call_at(self._deadline, self._on_deadline)
        real_when = time.monotonic() + (self._deadline - self._clock())
        return _watchdog.call_at(real_when, self._on_deadline)

    def _on_deadline(self) -> None:
        ended: _Ended = None
        with self._lock:
            self._timer = None
            if self.expired:
                ended = self._end_locked()
            elif self._callbacks and self._deadline is not None:
                self._timer = self._schedule_expiry()  # fired early (clock skew): again
        self._run_ended(ended)

    def _end_locked(self) -> _Ended:
        """Mark the budget done (lock held); returns its callbacks and timer, for
        :meth:`_run_ended` to handle once the lock is released, or None if already done."""
        if self._done:
            return None
        self._done = True
        callbacks, self._callbacks = self._callbacks, []
        timer, self._timer = self._timer, None
        return callbacks, timer

    def _run_ended(self, ended: _Ended) -> None:
        if ended is None:
            return
        callbacks, timer = ended
        if timer is not None:
            timer.cancel()  # type: ignore[attr-defined]
        for callback in callbacks:
            self._dispatch(callback)

    def _dispatch(self, callback: Callable[[Budget], None]) -> None:
        run_now = getattr(self._clock, "call_at", None) is not None
        if run_now and threading.current_thread().name != _watchdog.THREAD_NAME:
            # A test clock fires from advance(); run the callback there, in order.
            callback(self)
        else:
            _watchdog.call_soon(lambda: callback(self))

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
        fake_sleep = getattr(self._clock, "sleep", None)
        if fake_sleep is not None:
            fake_sleep(min(wanted, left))
        elif self._wakeup.wait(min(wanted, left)):
            self._raise_cancelled()
        if wanted >= left:
            self._raise_cancelled()
        self.check()


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
