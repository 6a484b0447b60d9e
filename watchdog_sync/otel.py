"""OpenTelemetry for watchdog_sync: spans and GenAI metrics from every guarded call.

::

    from watchdog_sync.otel import WatchdogSyncInstrumentor

    WatchdogSyncInstrumentor().instrument()   # or: opentelemetry-instrument python app.py

Needs the ``otel`` extra (``pip install 'watchdog-sync[otel]'``); ``import
watchdog_sync`` alone never imports OpenTelemetry. See docs/howto-opentelemetry.md
for the spans, attributes and metrics.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Optional, Tuple

try:
    from opentelemetry import metrics, trace
    from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
        BaseInstrumentor,
    )
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "watchdog_sync.otel needs OpenTelemetry: pip install 'watchdog-sync[otel]' "
        "(opentelemetry-api and opentelemetry-instrumentation)"
    ) from exc

from ._core.calls import add_chunk_observer
from ._core.events import add_listener
from ._telemetry.metrics import Instruments
from ._telemetry.names import SCHEMA_URL
from ._telemetry.spans import SpanListener
from ._version import __version__

__all__ = ["WatchdogSyncInstrumentor"]


class WatchdogSyncInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """An OpenTelemetry instrumentor: one span per call, the GenAI client metrics.

    ``instrument(tracer_provider=None, meter_provider=None)`` starts (the global
    providers by default); ``uninstrument()`` stops everything: no span, event
    or data point afterwards, and spans still open end there. Registered under
    the ``opentelemetry_instrumentor`` entry point, so ``opentelemetry-instrument``
    enables it. Spans: ``ChatClient.stream`` / ``.complete`` (``chat {model}``),
    ``retry_call`` and ``stream_sse``; a call that times out or is cancelled ends
    its span with error status and ``error.type`` = the reason
    (``stream_idle_timeout``, ``deadline_exceeded``, ``cancelled``, ...). Nothing
    recorded holds a prompt, a completion, a header or a key.
    """

    _listener: Optional[SpanListener] = None
    _unregister: Tuple[Callable[[], None], ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        """None: watchdog_sync instruments itself, whatever its version."""
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        tracer = trace.get_tracer(
            "watchdog_sync", __version__, kwargs.get("tracer_provider"), schema_url=SCHEMA_URL
        )
        meter = metrics.get_meter(
            "watchdog_sync", __version__, kwargs.get("meter_provider"), schema_url=SCHEMA_URL
        )
        listener = SpanListener(tracer, Instruments(meter))
        self._listener = listener
        self._unregister = (add_listener(listener), add_chunk_observer(listener.chunk_sink))

    def _uninstrument(self, **kwargs: Any) -> None:
        unregister, listener = self._unregister, self._listener
        self._unregister, self._listener = (), None
        for each in unregister:
            each()
        if listener is not None:
            listener.close()
