"""Structured events: one frozen record per attempt start/end, failure, backoff, give-up,
first byte and stream end, sent to the ``watchdog_sync`` logger and to listeners.

Events never carry secrets: they hold ids, names, numbers and reason codes only.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol

__all__ = [
    "Event",
    "Listener",
    "add_listener",
    "context_with_fields",
    "current_field",
    "emit",
    "emit_observed",
    "event_fields",
    "observed",
]

_log = logging.getLogger("watchdog_sync")


@dataclasses.dataclass(frozen=True)
class Event:
    """One thing that happened to a call. ``event`` names it (``attempt_start``, ``backoff``, ...)."""

    event: str
    request_id: Optional[str] = None
    stage: Optional[str] = None
    reason: Optional[str] = None
    attempt: Optional[int] = None
    elapsed_ms: Optional[float] = None
    remaining_ms: Optional[float] = None
    model: Optional[str] = None
    status: Optional[int] = None
    transport_code: Optional[str] = None
    chunks_received: Optional[int] = None
    first_byte_ms: Optional[float] = None
    delay_ms: Optional[float] = None
    # Call boundaries (``call_start`` / ``call_end``, see :mod:`.calls`) and what they report.
    call_id: Optional[int] = None
    parent_id: Optional[int] = None
    operation: Optional[str] = None
    server_address: Optional[str] = None
    server_port: Optional[int] = None
    idle_timeout_ms: Optional[float] = None
    finish_reason: Optional[str] = None
    last_chunk_ms: Optional[float] = None
    error_type: Optional[str] = None
    # Where a timeout found the work (``DeadlineExceeded.phase``): ``call_end``, ``attempt_failed``.
    phase: Optional[str] = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Listener(Protocol):
    """Receives every :class:`Event`; must be quick and must not block."""

    def __call__(self, event: Event) -> None: ...


_listeners: List[Listener] = []
_lock = threading.Lock()
_FIELDS: contextvars.ContextVar[Optional[Dict[str, Any]]] = contextvars.ContextVar(
    "watchdog_sync_event_fields", default=None
)


@contextlib.contextmanager
def event_fields(**fields: Any) -> Iterator[None]:
    """Fill these fields (``request_id``, ``model``, ...) into events emitted inside the block.

    A field the event sets itself wins; inner blocks add to outer ones.
    """
    token = _FIELDS.set({**(_FIELDS.get() or {}), **fields})
    try:
        yield
    finally:
        _FIELDS.reset(token)


def context_with_fields(**fields: Any) -> contextvars.Context:
    """A copy of the current context in which events carry ``fields`` (as :func:`event_fields`).

    For hot paths: ``context.run(fn)`` costs far less than entering
    ``event_fields`` each time. A context can be entered by one thread at a time.
    """
    context = contextvars.copy_context()
    context.run(_FIELDS.set, {**(_FIELDS.get() or {}), **fields})
    return context


def current_field(name: str) -> Any:
    """The value an enclosing :func:`event_fields` block gives ``name``, or ``None``."""
    fields = _FIELDS.get()
    return None if fields is None else fields.get(name)


def observed() -> bool:
    """Whether anyone would see an event now: a listener, or the logger at DEBUG.

    Lets optional events (call boundaries) cost nothing when nobody watches.
    """
    return bool(_listeners) or _log.isEnabledFor(logging.DEBUG)


def add_listener(callback: Listener) -> Callable[[], None]:
    """Send every event to ``callback``; returns a function that unregisters it.

    A listener that raises is logged and skipped; it never breaks the call.
    """
    with _lock:
        _listeners.append(callback)

    def unregister() -> None:
        with _lock:
            if callback in _listeners:
                _listeners.remove(callback)

    return unregister


def emit_observed(name: str, **fields: Any) -> None:
    """Make the event ``name`` with ``fields`` and :func:`emit` it, only when somebody would
    see it (:func:`observed`): an event of 24 fields costs its making, on every stream."""
    if observed():
        emit(Event(name, **fields))


def emit(event: Event) -> None:
    """Log ``event`` (fields as ``extra``) and hand it to each listener.

    Fields set by an enclosing :func:`event_fields` block fill the ones ``event`` left empty.
    """
    defaults = _FIELDS.get()
    if defaults:
        missing = {k: v for k, v in defaults.items() if getattr(event, k, None) is None}
        if missing:
            event = dataclasses.replace(event, **missing)
    if _log.isEnabledFor(logging.DEBUG):
        fields = {k: v for k, v in event.as_dict().items() if v is not None}
        summary = " ".join(f"{k}={v}" for k, v in fields.items() if k != "event")
        _log.debug("%s %s", event.event, summary, extra={**fields, "event": event.event})
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(event)
        except Exception:
            _log.exception("watchdog_sync: an event listener raised; it is skipped")
