"""watchdog_sync: keep blocking code from waiting forever.

One absolute deadline shared by every stage (:class:`Budget`, :func:`deadline`),
cancellation that ``except Exception`` cannot swallow (:class:`Cancelled`),
and errors that say exactly what happened (:class:`WatchdogError`).

``HTTPXTransport`` and ``httpx_client`` are resolved on first use, so that
``import watchdog_sync`` imports neither httpx2 nor httpx.
"""

import importlib
from typing import TYPE_CHECKING, Any, List

from ._chat.client import ChatClient
from ._chat.stream import ChatStream
from ._core.budget import Budget
from ._core.errors import (
    Cancelled,
    DeadlineExceeded,
    HTTPStatusError,
    OperationCancelled,
    OperationTimeout,
    RetryExhausted,
    StreamIdleTimeout,
    StreamProtocolError,
    TransportError,
    WatchdogError,
)
from ._core.events import Event, add_listener
from ._core.scope import carry_budget, current_budget, deadline
from ._http.http import Session
from ._httpx.instrument import instrument
from ._propagate.headers import budget_from_headers, deadline_headers
from ._retry.budget import RetryBudget
from ._retry.classify import Classification, classify
from ._retry.loop import retry_call, retrying
from ._retry.policy import RetryPolicy
from ._sample.run import SampleResult, abandoned_workers, run_sample
from ._stream.sse import SSEStream, stream_sse
from ._stream.stream import GuardedStream, StreamStats, guard_stream
from ._version import __version__

if TYPE_CHECKING:
    from ._httpx.client import httpx_client
    from ._httpx.transport import HTTPXTransport

__all__ = [
    "Budget",
    "Cancelled",
    "ChatClient",
    "ChatStream",
    "Classification",
    "DeadlineExceeded",
    "Event",
    "GuardedStream",
    "HTTPStatusError",
    "HTTPXTransport",
    "OperationCancelled",
    "OperationTimeout",
    "RetryBudget",
    "RetryExhausted",
    "RetryPolicy",
    "SSEStream",
    "SampleResult",
    "Session",
    "StreamIdleTimeout",
    "StreamProtocolError",
    "StreamStats",
    "TransportError",
    "WatchdogError",
    "__version__",
    "abandoned_workers",
    "add_listener",
    "budget_from_headers",
    "carry_budget",
    "classify",
    "current_budget",
    "deadline",
    "deadline_headers",
    "guard_stream",
    "httpx_client",
    "instrument",
    "retry_call",
    "retrying",
    "run_sample",
    "stream_sse",
]

# Names whose modules are imported on first use (their libraries are optional extras).
_LAZY = {
    "HTTPXTransport": "._httpx.transport",
    "httpx_client": "._httpx.client",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'watchdog_sync' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
