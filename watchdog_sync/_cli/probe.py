"""probe: stream one short completion from a real endpoint and time every stage of it.

What it measures, all from the moment the request is sent: the response
headers, the first data event, every gap between data events (SSE comments
are not events), the total, and the ``finish_reason``. From the gaps it
suggests an ``idle_timeout`` with room to spare; one probe sees one answer,
so thinking models and busy queues deserve more room than it shows.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Dict, List, Mapping, Optional

from .._core.budget import Budget
from .._core.config import IDLE_TIMEOUT_UNSET, TIMEOUT_UNSET, budget_limit, idle_setting
from .._core.durations import Duration, off
from .._http.json_object import json_object
from .._stream.sse import stream_sse

__all__ = ["ProbeReport", "probe", "suggest_idle_timeout"]

_MIN_SUGGESTION = 10.0


@dataclasses.dataclass(frozen=True)
class ProbeReport:
    """The timeline of one streamed completion (seconds; ``None`` when not reached)."""

    url: str
    model: str
    headers_after: Optional[float]
    first_event_after: Optional[float]
    events: int
    gap_median: Optional[float]
    gap_p90: Optional[float]
    gap_p99: Optional[float]
    gap_max: Optional[float]
    total: float
    finish_reason: Optional[str]
    suggested_idle_timeout: float
    status: Optional[int]
    server_request_id: Optional[str]

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def _quantile(values: List[float], fraction: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def suggest_idle_timeout(first_event_after: Optional[float], gaps: List[float]) -> float:
    """An ``idle_timeout`` with room: 3x the longest wait seen, at least 10 s, whole seconds."""
    longest = max([first_event_after or 0.0, *gaps])
    return float(max(_MIN_SUGGESTION, math.ceil(3 * longest)))


def probe(
    base_url: str,
    model: str,
    *,
    api_key: Optional[str] = None,
    prompt: str = "Count from 1 to 20, one number per line.",
    max_tokens: int = 128,
    timeout: Optional[Duration] = TIMEOUT_UNSET,
    idle_timeout: Optional[Duration] = IDLE_TIMEOUT_UNSET,
) -> ProbeReport:
    """Stream one completion and return its timeline.

    The whole probe is bounded by ``timeout`` (default ``WATCHDOG_SYNC_TIMEOUT``
    or 600 s, as for ChatClient; ``None`` or ``inf``: off; ``<= 0``:
    ``ValueError``); a gap longer than ``idle_timeout`` (default
    ``WATCHDOG_SYNC_IDLE_TIMEOUT`` or 120 s; ``None`` or ``<= 0``: off) ends it
    with :class:`StreamIdleTimeout`. Failures raise the usual
    :class:`WatchdogError` subclasses.
    """
    total = budget_limit(timeout, "timeout")
    idle = idle_setting(idle_timeout)
    url = base_url.rstrip("/") + "/chat/completions"
    headers: Dict[str, str] = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "max_tokens": max_tokens,
    }
    started = time.monotonic()
    arrivals: List[float] = []
    finish_reason: Optional[str] = None
    stream = stream_sse(
        url, json=body, headers=headers, idle_timeout=off(idle), budget=Budget(total)
    )
    with stream:
        for event in stream:
            if event.data.strip() == "[DONE]":
                break
            arrivals.append(time.monotonic())
            finish_reason = _finish_reason(event.data) or finish_reason
    took = time.monotonic() - started
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
    first = arrivals[0] - started if arrivals else None
    return ProbeReport(
        url=url,
        model=model,
        headers_after=None if stream.headers_at is None else stream.headers_at - started,
        first_event_after=first,
        events=len(arrivals),
        gap_median=statistics.median(gaps) if gaps else None,
        gap_p90=_quantile(gaps, 0.90),
        gap_p99=_quantile(gaps, 0.99),
        gap_max=max(gaps) if gaps else None,
        total=took,
        finish_reason=finish_reason,
        suggested_idle_timeout=suggest_idle_timeout(first, gaps),
        status=stream.status,
        server_request_id=_server_request_id(stream.headers),
    )


def _finish_reason(data: str) -> Optional[str]:
    chunk = json_object(data)
    choices = chunk.get("choices") if chunk is not None else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    return None


def _server_request_id(headers: Mapping[str, str]) -> Optional[str]:
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in ("x-request-id", "openai-request-id", "request-id"):
        if name in lowered:
            return lowered[name]
    return None
