"""instrument(request_timeout=...): one request's own time limit, and the errors its end raises.

A :class:`RequestTimer` gives one request (urllib3's ``urlopen``, httpx's
``handle_request``) a budget of its own: a child of the enclosing scope's
(an unbounded one outside any scope) that the shared watchdog thread cancels
with reason ``'request_timeout'`` when the limit passes. The enclosing
scope's end stays the scope's (its ``Cancelled`` names the outer budget and
passes through); the request's end is converted, where the request returns
to its caller, into the timeout error that caller already handles:

* :class:`Urllib3RequestTimeout`, urllib3's ``ReadTimeoutError`` (botocore and
  urllib3's own callers read it as a read timeout; not an ``OSError``, so
  requests' adapter maps it to ``requests.ReadTimeout``);
* :class:`RequestsRequestTimeout`, requests' ``ReadTimeout``, what a requests
  user gets (``instrument_requests.py`` turns requests' wrapping of the
  urllib3 one into it);
* httpx's ``TimeoutException`` family, made when httpx is in use
  (``_httpx/request_timeout.py``).

Each is also a :class:`WatchdogError` with ``reason='request_timeout'``,
retryable, which ``classify()`` reads as a timeout, and says where the request was
(``phase``, as ``DeadlineExceeded.phase``; how far it got in its message).

The timer is stopped once the request is over: its body read to its end or
closed, or, for an event stream (``text/event-stream``), its head in, the
stream being left to the enclosing scope.

The limit in force is the tightest of the live ``instrument()`` calls'
``request_timeout`` (:func:`add_request_timeout`), read per request.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, Tuple

from requests.exceptions import ReadTimeout
from urllib3.exceptions import ReadTimeoutError

from .._core.budget import Budget
from .._core.clock import MONOTONIC
from .._core.errors import Cancelled, WatchdogError, checked_phase
from .._core.tightest import Tightest

__all__ = [
    "REQUEST_TIMEOUT",
    "TIMER_ATTR",
    "RequestTimer",
    "RequestsRequestTimeout",
    "Urllib3RequestTimeout",
    "add_request_timeout",
    "is_request_timeout",
    "request_limit",
    "request_timeout_message",
]

REQUEST_TIMEOUT = "request_timeout"  # the reason of the cancel, and of the errors
TIMER_ATTR = "_watchdog_sync_request_timer"  # on a urllib3 response: its request's timer

_LIMITS: Tightest[float] = Tightest(min)


def add_request_timeout(seconds: float) -> Callable[[], None]:
    """Put ``seconds`` among the live limits; returns the function that takes it out."""
    return _LIMITS.add(seconds)


def request_limit() -> Optional[float]:
    """The request timeout in force: the tightest of the live ones, ``None`` for none."""
    return _LIMITS.current


class RequestTimer:
    """One request's budget, cancelled with reason ``'request_timeout'`` when its limit passes."""

    __slots__ = ("_lock", "_stopped_at", "_timer", "_until", "budget", "limit")

    def __init__(self, limit: float, scope: Optional[Budget]) -> None:
        self.limit = limit
        self.budget = scope.child() if scope is not None else Budget()
        self._until = time.monotonic() + limit
        self._lock = threading.Lock()
        self._stopped_at: Optional[float] = None
        self._timer: Any = MONOTONIC.call_at(self._until, self._due)

    def _due(self) -> None:
        with self._lock:
            if self._timer is None:
                return  # stopped meanwhile
            self._timer = None
        self.budget.cancel(REQUEST_TIMEOUT)

    @property
    def due(self) -> bool:
        """The limit passed before the request was over (its cancel may still be on its way:
        a read timeout clipped to the same moment can come first)."""
        stopped_at = self._stopped_at
        return (time.monotonic() if stopped_at is None else stopped_at) >= self._until

    def remaining(self) -> float:
        """Seconds left: the request's own, or the enclosing scope's when that is less."""
        return min(self.budget.remaining(), max(0.0, self._until - time.monotonic()))

    def stop(self) -> None:
        """The request is over (or left to the scope): its limit no longer applies. Idempotent."""
        with self._lock:
            timer, self._timer = self._timer, None
            if self._stopped_at is None:
                self._stopped_at = time.monotonic()
        if timer is not None:
            timer.cancel()


def is_request_timeout(exc: BaseException) -> bool:
    """True for the ``Cancelled`` a request timer's end raises (not an enclosing scope's)."""
    return isinstance(exc, Cancelled) and exc.reason == REQUEST_TIMEOUT


def request_timeout_message(budget: Budget, progress: Optional[str] = None) -> str:
    """What a request's own timeout says (``budget``: the request's): how long it ran, how
    far it got (``progress``, when known), and how to give it more."""
    got = "" if progress is None else f", {progress}"
    return (
        f"the request did not finish within its request timeout ({budget.elapsed():.2f}s{got}); "
        "raise instrument(request_timeout=...) (or WATCHDOG_SYNC_INSTRUMENT_REQUEST_TIMEOUT, "
        "or watchdog-sync run --request-timeout) if the server is legitimately this slow"
    )


class Urllib3RequestTimeout(WatchdogError, ReadTimeoutError):
    """A request's own timeout (instrument(request_timeout=...)), as urllib3 raises a read timeout.

    Retryable; ``pool`` and ``url`` as urllib3 sets them on its own timeouts; ``phase``
    where the request was (as ``DeadlineExceeded.phase``).
    """

    default_reason = REQUEST_TIMEOUT
    default_retryable = True
    phase: Optional[str] = None  # class default: errors pickled before the field existed

    def __init__(
        self,
        message: str,
        *,
        phase: Optional[str] = None,
        pool: Any = None,
        url: Optional[str] = None,
    ) -> None:
        WatchdogError.__init__(self, message)
        self.phase = checked_phase(phase)
        self.pool = pool
        self.url = url

    def __reduce__(self) -> Tuple[Any, ...]:
        rebuild, (cls, message, state) = super().__reduce__()
        return rebuild, (cls, message, {**state, "pool": None})  # a pool holds locks: as urllib3


class RequestsRequestTimeout(WatchdogError, ReadTimeout):
    """A request's own timeout (instrument(request_timeout=...)), as requests raises a read timeout.

    Retryable; ``request`` and ``response`` as requests sets them on its own errors;
    ``phase`` where the request was (as ``DeadlineExceeded.phase``).
    """

    default_reason = REQUEST_TIMEOUT
    default_retryable = True
    phase: Optional[str] = None  # class default: errors pickled before the field existed

    def __init__(self, message: str, *, phase: Optional[str] = None, request: Any = None) -> None:
        WatchdogError.__init__(self, message)
        self.phase = checked_phase(phase)
        self.request = request
        self.response = None

    def __reduce__(self) -> Tuple[Any, ...]:
        rebuild, (cls, message, state) = super().__reduce__()
        # A copy carries our fields, not the request (its headers may hold a credential).
        return rebuild, (cls, message, {**state, "request": None, "response": None})
