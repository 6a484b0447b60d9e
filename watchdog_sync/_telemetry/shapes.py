"""What every call of one operation, model and server shares: built once, reused per call.

A span's name and kind, its GenAI attributes, the metrics' attribute set (and
that set with each ``error.type`` seen) depend only on the call's operation,
model, server and, for ``retry_call``, its stage. A busy client makes the same
few calls over and over: their :class:`Shape` is looked up, not rebuilt. The
cache is bounded (a process with very many models or servers just builds the
rest each time).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from opentelemetry.trace import SpanKind

from .._core.events import Event
from . import names

__all__ = ["Shape", "Shapes"]

_MAX_SHAPES = 1024  # distinct (operation, model, server) remembered at most
_MAX_ERRORS = 64  # distinct error types per shape whose attribute set is remembered

_Key = Tuple[str, Optional[str], Optional[str], Optional[int]]


class Shape:
    """The parts of a call's span and metrics that its operation, model and server decide."""

    __slots__ = (
        "_failed",
        "_name",
        "chat",
        "http",
        "kind",
        "metric_attributes",
        "operation",
        "span_attributes",
        "streaming",
        "unattempted",
    )

    def __init__(self, key: _Key) -> None:
        operation, model, address, port = key
        self.operation = operation
        self.chat = operation in names.CHAT_OPERATIONS
        self.streaming = names.CHAT_OPERATIONS.get(operation) is True
        self.unattempted = operation in names.UNATTEMPTED
        self.http = self.unattempted and operation != "sse"  # an HTTPXTransport call
        self.kind = SpanKind.INTERNAL if operation == "retry" else SpanKind.CLIENT
        attributes: Dict[str, Any] = {}
        if address is not None:
            attributes[names.SERVER_ADDRESS] = address
        if port is not None:
            attributes[names.SERVER_PORT] = port
        if self.chat:
            attributes[names.OPERATION] = "chat"
            attributes[names.PROVIDER] = names.PROVIDERS.get(operation, names.PROVIDER_NAME)
            if model:
                attributes[names.REQUEST_MODEL] = model
            attributes[names.REQUEST_STREAM] = self.streaming
            self._name = f"chat {model}" if model else "chat"
        else:
            self._name = names.SPAN_NAMES.get(operation, operation)
        self.span_attributes: Mapping[str, Any] = attributes
        # Never mutated: the SDK copies what it keeps, so one set serves every record.
        self.metric_attributes: Mapping[str, Any] = {
            k: v for k, v in attributes.items() if k in _METRIC_KEYS
        }
        self._failed: Dict[str, Mapping[str, Any]] = {}

    def name_with(self, stage: Optional[str]) -> str:
        """``chat {model}`` as the conventions say; ``retry_call [stage]``; ``stream_sse``."""
        return f"{self._name} {stage}" if stage and self.operation == "retry" else self._name

    def failed(self, error: str) -> Mapping[str, Any]:
        """The metrics' attribute set with ``error.type`` = ``error``."""
        found = self._failed.get(error)
        if found is None:
            found = {**self.metric_attributes, names.ERROR_TYPE: error}
            if len(self._failed) < _MAX_ERRORS:
                self._failed[error] = found
        return found


class Shapes:
    """A bounded cache of :class:`Shape` by the call's operation, model and server."""

    def __init__(self) -> None:
        self._shapes: Dict[_Key, Shape] = {}

    def get(self, event: Event) -> Shape:
        """The shape of the call ``event`` (its ``call_start``) begins."""
        operation = event.operation or "call"
        key = (
            operation,
            event.model if operation in names.CHAT_OPERATIONS else None,
            event.server_address,
            event.server_port,
        )
        shape = self._shapes.get(key)
        if shape is None:
            shape = Shape(key)
            if len(self._shapes) < _MAX_SHAPES:
                self._shapes[key] = shape
        return shape


_METRIC_KEYS = frozenset(
    {names.OPERATION, names.PROVIDER, names.REQUEST_MODEL, names.SERVER_ADDRESS, names.SERVER_PORT}
)
