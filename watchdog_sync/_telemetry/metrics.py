"""The metric instruments: the three GenAI client histograms and our two counters."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from opentelemetry.metrics import Meter

from . import names

__all__ = ["Instruments"]


class Instruments:
    """Histograms with the conventions' buckets, counters of timeouts and retries by reason."""

    def __init__(self, meter: Meter) -> None:
        buckets = list(names.BUCKETS)
        self._duration = meter.create_histogram(
            names.DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self._first_chunk = meter.create_histogram(
            names.FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk, from the call to the first chunk.",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self._per_chunk = meter.create_histogram(
            names.PER_CHUNK,
            unit="s",
            description="Time per output chunk after the first one (one point per stream: the mean).",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self._timeouts = meter.create_counter(
            names.TIMEOUTS,
            unit="{timeout}",
            description="Timeouts (idle, deadline, a stage's cap) by reason.",
        )
        self._retries = meter.create_counter(
            names.RETRIES,
            unit="{retry}",
            description="Retries (a backoff before another attempt) by the failure's reason.",
        )

    def chat_ended(
        self,
        attributes: Mapping[str, Any],
        seconds: float,
        *,
        first_chunk: Optional[float],
        per_chunk: Optional[float],
    ) -> None:
        """One GenAI call ended: its duration and, for a stream, its chunk timings."""
        self._duration.record(seconds, attributes)
        shared = {k: v for k, v in attributes.items() if k != names.ERROR_TYPE}
        if first_chunk is not None:
            self._first_chunk.record(first_chunk, shared)
        if per_chunk is not None:
            self._per_chunk.record(per_chunk, shared)

    def timeout(self, reason: str, operation: Optional[str]) -> None:
        self._timeouts.add(1, _by(reason, operation))

    def retry(self, reason: Optional[str], operation: Optional[str]) -> None:
        self._retries.add(1, _by(reason or "unknown", operation))


def _by(reason: str, operation: Optional[str]) -> Mapping[str, str]:
    return {names.ERROR_TYPE: reason, names.OPERATION_OURS: operation or "unknown"}
