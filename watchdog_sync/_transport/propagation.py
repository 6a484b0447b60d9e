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
from .redirect import same_origin

__all__ = [
    "ENVOY_UPSTREAM_TIMEOUT",
    "GRPC_TIMEOUT",
    "OUTGOING",
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


def mark_request(request: Any, allowed: Optional[str], budget: Budget) -> None:
    """Set the deadline headers of a prepared request about to be sent, if it may carry them.

    Only a request to the origin of ``allowed`` (the URL the caller asked for) carries
    them; a redirect hop elsewhere has them stripped. Raises :class:`Cancelled` if
    ``budget`` has ended: the request is not sent.
    """
    url = request.url
    if not (isinstance(url, str) and allowed is not None and same_origin(allowed, url)):
        strip_deadline_headers(request.headers)
        return
    budget.check()
    set_deadline_headers(request.headers, budget)


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
