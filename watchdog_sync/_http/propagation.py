"""The deadline headers a request carries out, computed from its budget when it is sent.

``grpc-timeout`` (gRPC's format: at most 8 digits and a unit, ``H M S m u n``;
the finest unit whose value fits is chosen) and
``x-envoy-upstream-rq-timeout-ms`` (Envoy's route timeout, in whole
milliseconds). Both are rounded down, so they never say more than the budget
has left. Envoy reads ``0`` as "no timeout": when less than 1 ms is left the
Envoy header is left out rather than sent as ``0``.

This lives in the transport part because :class:`Session` (and through it
``ChatClient``) adds these headers at send time; ``deadline_headers`` and the
incoming side build on it from the propagate part.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Any, Dict, Iterator, MutableMapping, Optional

from .._core.budget import Budget
from .._core.scope import entry_scope
from .redirect import same_origin

__all__ = [
    "ENVOY_UPSTREAM_TIMEOUT",
    "GRPC_TIMEOUT",
    "OUTGOING",
    "allowed_origin",
    "begin_request",
    "check_propagate",
    "end_request",
    "forced",
    "format_grpc_timeout",
    "headers_for",
    "mark_request",
    "propagating",
    "set_deadline_headers",
    "strip_deadline_headers",
]

GRPC_TIMEOUT = "grpc-timeout"
ENVOY_UPSTREAM_TIMEOUT = "x-envoy-upstream-rq-timeout-ms"
OUTGOING = frozenset({GRPC_TIMEOUT, ENVOY_UPSTREAM_TIMEOUT})

_MAX_VALUE = 99_999_999  # 8 digits
# Finest first; each as (unit letter, nanoseconds per unit).
_UNITS = (
    ("n", 1),
    ("u", 1_000),
    ("m", 1_000_000),
    ("S", 1_000_000_000),
    ("M", 60_000_000_000),
    ("H", 3_600_000_000_000),
)

_FORCED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "watchdog_sync_propagate", default=False
)
# The URL the caller asked for, while its request and redirect hops are sent: the one
# origin that deadline headers may go to.
_ALLOWED_URL: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "watchdog_sync_allowed_url", default=None
)


def format_grpc_timeout(seconds: float) -> str:
    """``seconds`` (> 0, finite) in gRPC's ``grpc-timeout`` format, rounded down."""
    nanos = math.floor(seconds * 1e9)
    for unit, size in _UNITS:
        value = nanos // size
        if value <= _MAX_VALUE:
            return f"{value}{unit}"
    return f"{_MAX_VALUE}H"  # unreachable below 11,000 years; budgets are clamped to 7 days


def headers_for(remaining: float) -> Dict[str, str]:
    """The headers that say ``remaining`` seconds are left; none when unbounded or ended."""
    if math.isinf(remaining) or math.isnan(remaining) or remaining <= 0:
        return {}
    headers = {GRPC_TIMEOUT: format_grpc_timeout(remaining)}
    millis = math.floor(remaining * 1000)
    if millis >= 1:  # Envoy reads 0 as "no timeout"
        headers[ENVOY_UPSTREAM_TIMEOUT] = str(millis)
    return headers


def strip_deadline_headers(headers: MutableMapping[str, str]) -> None:
    """Remove every outgoing deadline header (any spelling of the name)."""
    for name in list(headers):
        if name.lower() in OUTGOING:
            del headers[name]


def set_deadline_headers(headers: MutableMapping[str, str], budget: Budget) -> None:
    """Replace the deadline headers with what ``budget`` has left now (unbounded: leave them)."""
    fresh = headers_for(budget.remaining())
    if fresh:
        strip_deadline_headers(headers)
        headers.update(fresh)


def check_propagate(value: Any) -> bool:
    """``propagate=`` as given, or a ``TypeError`` if it is not a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"propagate must be True or False, not {value!r}")
    return value


def begin_request() -> contextvars.Token[Optional[str]]:
    """A new ``Session.request()``: its first send names the allowed origin."""
    return _ALLOWED_URL.set(None)


def end_request(token: contextvars.Token[Optional[str]]) -> None:
    _ALLOWED_URL.reset(token)


@contextlib.contextmanager
def allowed_origin(url: Any) -> Iterator[Optional[str]]:
    """Around one send: the URL whose origin may get the headers (``url``, on a first send)."""
    allowed = _ALLOWED_URL.get()
    if allowed is not None or not isinstance(url, str):
        yield allowed
        return
    token = _ALLOWED_URL.set(url)
    try:
        yield url
    finally:
        _ALLOWED_URL.reset(token)


def mark_request(
    request: Any, allowed: Optional[str], budget: Optional[Budget], explicit: Optional[Budget]
) -> None:
    """Set the deadline headers of a prepared request about to be sent, if it may carry them.

    Only a request to the origin of ``allowed`` (the URL the caller asked for) carries
    them; a redirect hop elsewhere has them stripped. ``budget``: the request's (from
    ``Session.request``), or ``None`` for a ``send()`` called directly, which joins the
    current scope with ``explicit`` (the session's). An ended budget raises (as on
    timeout): the request is not sent.
    """
    url = request.url
    if not (isinstance(url, str) and allowed is not None and same_origin(allowed, url)):
        strip_deadline_headers(request.headers)
        return
    if budget is not None:  # Session.request() converts its end
        budget.check()
        set_deadline_headers(request.headers, budget)
        return
    with entry_scope(explicit, stage="http") as own:
        own.check()
        set_deadline_headers(request.headers, own)


@contextlib.contextmanager
def propagating(on: bool = True) -> Iterator[None]:
    """Inside the block, every :class:`Session` request carries the deadline headers."""
    if not on:
        yield
        return
    token = _FORCED.set(True)
    try:
        yield
    finally:
        _FORCED.reset(token)


def forced() -> bool:
    """True inside :func:`propagating` (a ``ChatClient(propagate=True)`` call)."""
    return _FORCED.get()
