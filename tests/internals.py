"""The one place where tests reach past the public door.

Unit tests of internal pieces (the SSE framer, the body decoder, the
environment parsers, ...) import them from here, never from a private module
path, so that moving a module inside the package changes this file only.
"""

from typing import Any, Iterator, List

from watchdog_sync._chat.complete import MAX_RESPONSE_BYTES
from watchdog_sync._cli.demo import SCENARIOS, run_demo
from watchdog_sync._cli.probe import suggest_idle_timeout
from watchdog_sync._core import config as config_module
from watchdog_sync._core import redact as redact_module
from watchdog_sync._core import watchdog as _watchdog
from watchdog_sync._core.clock import MONOTONIC
from watchdog_sync._core.config import env_int, env_seconds
from watchdog_sync._core.durations import validate_duration
from watchdog_sync._core.errors import with_fields
from watchdog_sync._core.events import context_with_fields, emit, event_fields
from watchdog_sync._core.redact import excerpt
from watchdog_sync._core.scope import entry_scope
from watchdog_sync._http.decode import MAX_LAYERS, BodyDecoder, UnknownEncoding
from watchdog_sync._http.guard import GUARD_ATTR as _GUARD_ATTR
from watchdog_sync._http.guard import ConnectionGuard as _ConnectionGuard
from watchdog_sync._http.guard import clip_timeout
from watchdog_sync._http.json_object import json_object
from watchdog_sync._http.reads import READER_SOCKETS
from watchdog_sync._httpx import head as head_module
from watchdog_sync._httpx.call import request_model
from watchdog_sync._httpx.cores import ClassLookup
from watchdog_sync._httpx.http2 import shape_problems as h2_shape_problems
from watchdog_sync._httpx.httpcore_hooks import shapes as httpcore_shapes
from watchdog_sync._httpx.instrument_httpx import httpx_patches
from watchdog_sync._propagate.celery import HEADER_DEADLINE, HEADER_TIMEOUT, task_window
from watchdog_sync._propagate.wallclock import time_left
from watchdog_sync._ray.carry import carried_now, run_carried, seconds_left
from watchdog_sync._retry.classify import parse_retry_after
from watchdog_sync._retry.loop import _Loop
from watchdog_sync._retry.policy import default_policy
from watchdog_sync._sample import preload as sample_preload_module
from watchdog_sync._stream import pipeline as pipeline_module
from watchdog_sync._stream.framing import EventFramer
from watchdog_sync._stream.limits import StreamLimits
from watchdog_sync._stream.parse import parse_events
from watchdog_sync._stream.private_session import private_session
from watchdog_sync._stream.socket_read import KERNEL_MARGIN, SocketRead
from watchdog_sync._stream.sse import SSEStream
from watchdog_sync._stream.sse_feed import FramingDecoder, _http_response, body_pieces
from watchdog_sync._stream.stream import READER_THREAD_NAME
from watchdog_sync._stream.wire import Activity, EventWatch, error_event, is_activity


def _chunks(response: Any, framer: EventFramer, stream_ref: Any, abort: Any) -> Iterator[bytes]:
    """The complete events of ``response``'s body, as the body reader frames each read:
    the body decoder, then the framer (its held-back error right after the events before
    it), then, at the end, ``truncated`` set on the stream."""
    for piece in body_pieces(_http_response(response)):
        abort.check()
        yield from framer.feed(piece)
        framer.check()
    abort.check()
    stream = stream_ref()
    if stream is not None:
        stream.truncated = framer.truncated()


def buffered_events(stream: SSEStream) -> int:
    """How many events wait for the consumer of ``stream`` (those not from its own read)."""
    guarded = stream._guarded
    assert guarded is not None
    return len(guarded._feed._pending)


def buffered_body_events(response: Any) -> int:
    """How many events wait for their consumer in the guarded body of an httpx ``response``
    (read by its consumer: those not from its own read)."""
    body = response.stream
    body = getattr(body, "_stream", body)  # under httpx's BoundSyncStream
    body = getattr(body, "_inner", body)  # under the call's MarkedBody, when observed
    return len(body._guarded._feed._pending)


__all__ = [
    "KERNEL_MARGIN",
    "HEADER_DEADLINE",
    "HEADER_TIMEOUT",
    "MAX_LAYERS",
    "MONOTONIC",
    "MAX_RESPONSE_BYTES",
    "READER_THREAD_NAME",
    "SCENARIOS",
    "pipeline_module",
    "StreamLimits",
    "FramingDecoder",
    "_GUARD_ATTR",
    "BodyDecoder",
    "ClassLookup",
    "EventFramer",
    "SocketRead",
    "Activity",
    "EventWatch",
    "_ConnectionGuard",
    "_Loop",
    "_chunks",
    "body_pieces",
    "buffered_body_events",
    "buffered_events",
    "carried_now",
    "clip_timeout",
    "config_module",
    "context_with_fields",
    "default_policy",
    "emit",
    "entry_scope",
    "env_int",
    "env_seconds",
    "event_fields",
    "excerpt",
    "h2_shape_problems",
    "head_module",
    "httpcore_shapes",
    "httpx_patches",
    "parse_events",
    "parse_retry_after",
    "reader_sockets",
    "redact_module",
    "pooled_connections",
    "request_model",
    "run_carried",
    "run_demo",
    "sample_preload_module",
    "timers_held",
    "watchdog_call_at",
    "watchdog_lock",
    "seconds_left",
    "error_event",
    "is_activity",
    "json_object",
    "private_session",
    "suggest_idle_timeout",
    "UnknownEncoding",
    "task_window",
    "time_left",
    "validate_duration",
    "with_fields",
]


watchdog_call_at = _watchdog.call_at  # the watchdog's own timer (``TimerHandle``)


def reader_sockets() -> Any:
    """The current guarded stream reader's registered sockets (``None`` outside one)."""
    return READER_SOCKETS.get()


def watchdog_lock() -> Any:
    """The one lock of the watchdog thread's heap (``with watchdog_lock(): ...``)."""
    return _watchdog._WATCHDOG._lock


def timers_held() -> int:
    """How many timers the watchdog's heap holds, the cancelled ones not yet dropped too."""
    return len(_watchdog._WATCHDOG._heap)


def pooled_connections(client: Any) -> List[Any]:
    """The connections in httpcore's pool under an httpx client whose transport is an
    ``HTTPXTransport`` over httpx's ``HTTPTransport`` (``ConnectionPool.connections``)."""
    return list(client._transport._transport._pool.connections)
