"""The names telemetry uses: OpenTelemetry GenAI semantic conventions, and ours.

Followed: OpenTelemetry semantic conventions v1.41.0 (the GenAI client span
and metrics, as in the ``opentelemetry-semantic-conventions`` 0.66b2 package;
the GenAI conventions have since moved to their own repository,
semantic-conventions-genai, whose ``model/gen-ai/metrics.yaml`` keeps these
metrics: ``time_per_output_chunk`` "recorded for each chunk received after the
first one, measured as the time elapsed from the end of the previous chunk to
the end of the current chunk", for streaming calls only). Our own
attributes are under ``watchdog_sync.*``. Nothing here names a prompt, a
completion, a header or a key: no value that could hold one is ever recorded.
"""

from __future__ import annotations

from typing import Dict, Tuple

__all__ = [
    "BUCKETS",
    "CHAT_OPERATIONS",
    "PROVIDERS",
    "SCHEMA_URL",
    "SPAN_NAMES",
    "TIMEOUT_REASONS",
    "UNATTEMPTED",
]

SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"

# -- semantic conventions -------------------------------------------------------------
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_STREAM = "gen_ai.request.stream"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"

DURATION = "gen_ai.client.operation.duration"
FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
PER_CHUNK = "gen_ai.client.operation.time_per_output_chunk"
# The conventions' ExplicitBucketBoundaries, the same for the three histograms (seconds).
BUCKETS: Tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip

# -- ours -----------------------------------------------------------------------------
ATTEMPTS = "watchdog_sync.attempts"
IDLE_TIMEOUT = "watchdog_sync.idle_timeout"
REMAINING = "watchdog_sync.budget.remaining"
CHUNKS = "watchdog_sync.chunks_received"
STAGE = "watchdog_sync.stage"
REQUEST_ID = "watchdog_sync.request_id"
ENDED_BY = "watchdog_sync.ended_by"
PHASE = "watchdog_sync.phase"
OPERATION_OURS = "watchdog_sync.operation"
TIMEOUTS = "watchdog_sync.timeouts"
RETRIES = "watchdog_sync.retries"

# The call operations of the events (CallMark) that are GenAI chat calls: streaming or not.
# ``http_*``: an SDK's request through HTTPXTransport to a chat path.
CHAT_OPERATIONS: Dict[str, bool] = {
    "chat": False,
    "chat_stream": True,
    "http_chat": False,
    "http_chat_stream": True,
    "http_messages": False,
    "http_messages_stream": True,
}
# Any other HTTPXTransport request is an HTTP client span, named ``HTTP`` (the conventions'
# name when the method is not known).
SPAN_NAMES = {"retry": "retry_call", "sse": "stream_sse", "http": "HTTP"}
PROVIDER_NAME = "openai"  # ChatClient speaks the OpenAI chat completions format
PROVIDERS = {"http_messages": "anthropic", "http_messages_stream": "anthropic"}
# Calls that emit no attempt events: a timeout that ends one is counted at its end.
UNATTEMPTED = frozenset({"sse", "http"} | {op for op in CHAT_OPERATIONS if op.startswith("http")})
# Reasons that are timeouts, counted by watchdog_sync.timeouts.
TIMEOUT_REASONS = frozenset({"stream_idle_timeout", "deadline_exceeded", "operation_timeout"})
