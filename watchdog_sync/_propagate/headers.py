"""Deadline headers: the remaining time a request carries out, and the one read when it comes in.

Out: ``grpc-timeout`` (at most 8 digits and a unit) and
``x-envoy-upstream-rq-timeout-ms``, from the transport part's formatter (the
same one ``Session(propagate=True)`` uses). In: ``grpc-timeout`` and
``x-envoy-expected-rq-timeout-ms`` (what an Envoy sends upstream); the
tightest valid value wins, each malformed one is ignored with one log line.
There is no header of our own: the two standard ones say it all.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union

from .._core.budget import Budget
from .._core.durations import MAX_SECONDS, Duration, validate_duration
from .._core.redact import excerpt
from .._core.scope import entry_scope
from .._http.propagation import GRPC_TIMEOUT, headers_for

__all__ = [
    "ENVOY_EXPECTED_TIMEOUT",
    "Headers",
    "budget_from_headers",
    "deadline_headers",
    "incoming_timeout",
]

ENVOY_EXPECTED_TIMEOUT = "x-envoy-expected-rq-timeout-ms"

Headers = Union[Mapping[str, Any], Iterable[Tuple[str, Any]]]

_log = logging.getLogger("watchdog_sync")
_GRPC_VALUE = re.compile(r"([0-9]{1,8})([HMSmun])")
_MILLIS_VALUE = re.compile(r"[0-9]{1,15}")
_SECONDS_PER_UNIT = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_GRPC_HINT = "at most 8 digits and a unit H, M, S, m, u or n, like '1500m'"
_MILLIS_HINT = "a whole number of milliseconds, like '1500'"


def deadline_headers(budget: Optional[Budget] = None) -> Dict[str, str]:
    """The headers that tell the next hop how much time is left, for clients of your own.

    ``{'grpc-timeout': '1500000u', 'x-envoy-upstream-rq-timeout-ms': '1500'}``
    for 1.5 s left: gRPC's format (at most 8 digits and a unit, the finest
    unit that fits) and Envoy's route timeout in milliseconds, both rounded
    down, so never more than what is left. Computed now: call it just before
    each request is sent (each retry too). ``Session(propagate=True)`` and
    ``ChatClient(propagate=True)`` do that for you.

    Args:
        budget: the budget to read; by default the current ``deadline()``
            scope's (joined with ``budget`` when both are given: the tighter wins).

    Returns:
        The headers; empty when no budget is bounded. With less than 1 ms left
        the Envoy header is left out (Envoy reads ``0`` as "no timeout").

    Raises:
        DeadlineExceeded, OperationCancelled: ``budget`` has ended (expired or
            cancelled). Inside an ended ``deadline()`` scope: ``Cancelled``,
            which the scope turns into ``DeadlineExceeded``. A request whose
            budget has ended is not worth sending.
        TypeError: ``budget`` is not a :class:`Budget`.
    """
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(
            f"budget must be a watchdog_sync.Budget or None, not {type(budget).__name__}"
        )
    with entry_scope(budget, stage="propagate") as active:
        active.check()
        return headers_for(active.remaining())


def budget_from_headers(
    headers: Headers, *, max_timeout: Optional[Duration] = None
) -> Optional[Budget]:
    """A budget for an incoming request, from the deadline its caller sent.

    Reads ``grpc-timeout`` (gRPC's format) and ``x-envoy-expected-rq-timeout-ms``
    (what Envoy sends upstream: ``0`` there means no limit); names in any case.
    When several are present, the tightest valid one wins. A malformed value
    (wrong format, more than 8 digits, repeated values joined by commas, ...)
    is ignored with one ``WARNING`` log record on the ``watchdog_sync`` logger,
    never an error: a bad header from a caller must not fail the request.

    The time counts from now (this call): time the request spent queued
    before it reached you is not known and not counted.

    Args:
        headers: the request headers: anything with ``.items()`` (a dict,
            requests', Flask's or Django's ``request.headers``, an
            ``http.client`` message), ``(name, value)`` pairs, or a WSGI
            environ (``HTTP_GRPC_TIMEOUT``).
        max_timeout: the longest budget a caller may ask for (seconds); a
            larger value is clipped to it. Set it: callers are not trusted.

    Returns:
        A new :class:`Budget` with the caller's remaining time (``0`` when the
        caller has none left: it has already ended), or ``None`` when no valid
        deadline header is present.

    Raises:
        TypeError, ValueError: a bad ``max_timeout`` (``0`` or less, NaN, ...),
            or ``headers`` that are neither a mapping nor pairs.
    """
    cap = validate_duration(max_timeout, "max_timeout", allow_zero=False)
    seconds = incoming_timeout(headers)
    if seconds is None:
        return None
    return Budget(seconds if cap is None else min(seconds, cap), stage="incoming")


def incoming_timeout(headers: Headers) -> Optional[float]:
    """The tightest valid deadline in ``headers``, in seconds, or ``None``."""
    found: Optional[float] = None
    items = headers.items() if callable(getattr(headers, "items", None)) else headers  # type: ignore[union-attr]
    for pair in items:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(
                "headers must be a mapping (or have .items()) or (name, value) pairs, "
                f"got an item {type(pair).__name__}"
            )
        raw_name, value = pair
        name = _header_name(raw_name)
        if name == GRPC_TIMEOUT:
            seconds = _parse(name, value, _GRPC_VALUE, _GRPC_HINT)
        elif name == ENVOY_EXPECTED_TIMEOUT:
            seconds = _parse(name, value, _MILLIS_VALUE, _MILLIS_HINT)
            if seconds == 0:
                seconds = None  # Envoy's "no timeout"
        else:
            continue
        if seconds is not None and (found is None or seconds < found):
            found = seconds
    return found


def _header_name(name: Any) -> Optional[str]:
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    if not isinstance(name, str):
        return None
    lowered = name.lower()
    if lowered.startswith("http_"):  # a WSGI environ key: HTTP_GRPC_TIMEOUT
        lowered = lowered[5:].replace("_", "-")
    return lowered


def _parse(name: str, value: Any, pattern: re.Pattern[str], hint: str) -> Optional[float]:
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    match = pattern.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        shown = excerpt(text if isinstance(text, str) else repr(text), 40)
        _log.warning("ignoring a malformed %s header %r: expected %s", name, shown, hint)
        return None
    if name == GRPC_TIMEOUT:
        seconds = int(match.group(1)) * _SECONDS_PER_UNIT[match.group(2)]
    else:
        seconds = int(match.group(0)) / 1000.0
    return min(seconds, MAX_SECONDS)
