"""Call boundaries for observers: ``call_start`` when a public entry point begins, ``call_end``
once when it is over.

A :class:`CallMark` gives one call of ``retry_call``, ``ChatClient.stream`` /
``.complete`` or ``stream_sse`` an id. Events emitted inside the call carry
that ``call_id`` (through :func:`~.events.event_fields`, so the stream's reader
thread, which runs in a copy of the caller's context, carries it too), and a
call started inside another one names it as ``parent_id``. A tracer builds its
spans from these two events alone; the library never imports one.

A stream's call ends when the stream does, wherever that happens: completed,
failed, closed, or collected unclosed (a ``weakref.finalize``). Nothing is
emitted, and no id is taken, when nobody observes events (:func:`observed`).

A call may *absorb* the calls of one operation started inside it (a chat call
its own ``retry`` loop): those are inert, and the events inside them carry
the outer call's id. A streaming call also offers its chunk gaps to chunk
observers (:func:`add_chunk_observer`): a sink per call, called by the stream
with the seconds since the previous chunk, for each chunk after the first.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import urllib.parse
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

from .budget import Budget
from .errors import Cancelled, WatchdogError
from .events import Event, current_field, emit, observed

__all__ = ["ChunkSink", "CallMark", "add_chunk_observer", "error_type", "server_of"]

ChunkSink = Callable[[float], None]
"""Takes one chunk gap: seconds from the end of the previous chunk to the end of this one."""

_REPEATED = ("stage", "request_id", "model")
_ids = itertools.count(1)
_ids_lock = threading.Lock()
# Open calls that absorb the calls of an operation started inside them: call_id -> operation.
_absorbing: Dict[int, str] = {}
# Who wants a call's chunk gaps: each is asked once per call, with the call's id (a tuple,
# replaced under the lock, so that a call reads it without one).
_chunk_observers: Tuple[Callable[[int], Optional[ChunkSink]], ...] = ()


def add_chunk_observer(observer: Callable[[int], Optional[ChunkSink]]) -> Callable[[], None]:
    """Ask ``observer`` for a :data:`ChunkSink` at each call's start (after its ``call_start``).

    It returns ``None`` for a call whose chunks it does not want. Returns a
    function that unregisters it (sinks already handed out stay with their calls).
    """
    global _chunk_observers
    with _ids_lock:
        _chunk_observers = (*_chunk_observers, observer)

    def unregister() -> None:
        global _chunk_observers
        with _ids_lock:
            _chunk_observers = tuple(o for o in _chunk_observers if o is not observer)

    return unregister


def _sink_for(
    call_id: int, observers: Tuple[Callable[[int], Optional[ChunkSink]], ...]
) -> Optional[ChunkSink]:
    if len(observers) == 1:
        return observers[0](call_id)
    sinks = [s for s in (observer(call_id) for observer in observers) if s is not None]
    if len(sinks) < 2:
        return sinks[0] if sinks else None

    def each(gap: float) -> None:
        for sink in sinks:
            sink(gap)

    return each


def error_type(error: BaseException) -> str:
    """A low-cardinality name for how a call failed: our reason code, else the class name.

    ``Cancelled`` gives its reason (``deadline_exceeded`` / ``cancelled``); any other
    exception its qualified class name (``builtins.ValueError`` as ``ValueError``).
    """
    if isinstance(error, (WatchdogError, Cancelled)) and error.reason:
        return str(error.reason)
    cls = type(error)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def server_of(url: str) -> Tuple[Optional[str], Optional[int]]:
    """The host and port ``url`` names (the scheme's default port when it names none)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None, None
    default = {"https": 443, "http": 80}.get(parts.scheme)
    return parts.hostname, port or default


class CallMark:
    """One observed call: emits ``call_start`` now and ``call_end`` at most once.

    Inert (no events, ``call_id`` ``None``) when nobody observed events at the start,
    or when the call it runs inside absorbs its operation. ``absorbs``: the
    operation of the calls inside this one that are part of it. ``on_chunk``: the
    sink a streaming call hands each chunk gap to (``None``: nobody wants them).
    ``end`` is thread-safe and idempotent: the first caller reports the outcome.
    """

    __slots__ = (
        "_budget",
        "_ended",
        "_lock",
        "_names",
        "call_id",
        "on_chunk",
        "operation",
        "started",
    )

    def __init__(
        self,
        operation: str,
        *,
        budget: Optional[Budget] = None,
        absorbs: Optional[str] = None,
        **fields: Any,
    ) -> None:
        self.operation = operation
        self.started = time.monotonic()
        self._budget = budget
        self._lock = threading.Lock()
        self._ended = True
        self.call_id: Optional[int] = None
        self.on_chunk: Optional[ChunkSink] = None
        if not observed():
            return
        parent = current_field("call_id")
        if parent is not None and _absorbing.get(parent) == operation:
            return  # part of the enclosing call: events inside carry that call's id
        self._ended = False
        # Repeated on call_end, which may be emitted far from the call (a collected stream).
        self._names = {k: fields[k] for k in _REPEATED if fields.get(k) is not None}
        with _ids_lock:
            self.call_id = call_id = next(_ids)
        if absorbs is not None:
            _absorbing[call_id] = absorbs
        emit(
            Event(
                "call_start",
                call_id=call_id,
                parent_id=parent,
                operation=operation,
                remaining_ms=self._remaining_ms(),
                **fields,
            )
        )
        observers = _chunk_observers
        if observers:
            self.on_chunk = _sink_for(call_id, observers)

    def fields(self) -> dict[str, Any]:
        """The event fields that tie events emitted inside the call to it."""
        return {} if self.call_id is None else {"call_id": self.call_id}

    def end(self, error: Optional[BaseException] = None, **fields: Any) -> None:
        """Emit ``call_end``: ``reason`` / ``error_type`` (and ``phase``, a timeout's) from
        ``error`` when it failed.

        ``fields`` add what the caller knows at the end (``reason`` for how a
        stream ended without error, ``chunks_received``, ``finish_reason``, ...).
        """
        with self._lock:
            if self._ended:
                return
            self._ended = True
        _absorbing.pop(self.call_id, None)  # type: ignore[arg-type]  # (an int once started)
        self.on_chunk = None
        if error is not None:
            fields["error_type"] = kind = error_type(error)
            fields.setdefault("reason", kind)
            phase = getattr(error, "phase", None)
            if phase is not None:
                fields.setdefault("phase", phase)
        emit(
            Event(
                "call_end",
                call_id=self.call_id,
                operation=self.operation,
                **self._names,
                elapsed_ms=(time.monotonic() - self.started) * 1000.0,
                remaining_ms=self._remaining_ms(),
                **fields,
            )
        )

    def end_when_collected(self, owner: object) -> None:
        """End the call as ``abandoned`` when ``owner`` is collected before it ended."""
        if not self._ended:
            finalizer = weakref.finalize(owner, self.end, reason="abandoned")
            finalizer.atexit = False  # type: ignore[misc]  # (a property the stubs miss)

    def _remaining_ms(self) -> Optional[float]:
        if self._budget is None:
            return None
        remaining = self._budget.remaining()
        return None if math.isinf(remaining) else remaining * 1000.0
