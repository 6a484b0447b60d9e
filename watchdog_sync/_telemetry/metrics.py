"""The metric instruments: the three GenAI client histograms and our two counters."""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from opentelemetry.metrics import Meter

from . import names

__all__ = ["Instruments"]


class Instruments:
    """Histograms with the conventions' buckets, counters of timeouts and retries by reason.

    The histograms are recorded directly (``duration``, ``first_chunk``, ``per_chunk``);
    the counters' attribute sets are built once per reason and operation.
    """

    def __init__(self, meter: Meter) -> None:
        buckets = list(names.BUCKETS)
        self.duration = meter.create_histogram(
            names.DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self.first_chunk = meter.create_histogram(
            names.FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk, from the call to the first chunk.",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self.per_chunk = meter.create_histogram(
            names.PER_CHUNK,
            unit="s",
            description=(
                "Time per output chunk, recorded for each chunk after the first one: the time "
                "from the end of the previous chunk to the end of this one."
            ),
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
        self._by: Dict[Tuple[str, str], Mapping[str, str]] = {}

    def timeout(self, reason: str, operation: Optional[str]) -> None:
        self._timeouts.add(1, self._attributes(reason, operation))

    def retry(self, reason: Optional[str], operation: Optional[str]) -> None:
        self._retries.add(1, self._attributes(reason or "unknown", operation))

    def _attributes(self, reason: str, operation: Optional[str]) -> Mapping[str, str]:
        key = (reason, operation or "unknown")
        found = self._by.get(key)
        if found is None:
            found = {names.ERROR_TYPE: key[0], names.OPERATION_OURS: key[1]}
            if len(self._by) < _MAX_SETS:
                self._by[key] = found
        return found


_MAX_SETS = 1024  # (reason, operation) attribute sets remembered at most
