"""The stream rules, written once: what is activity, what ends a stream, what an error event says.

Every guarded event stream (``stream_sse``, ``ChatClient``, the httpx
transport's streams, in the consumer's thread, on the shared reader or on a reader
thread) reads its
whole events through this module, so the rules cannot drift apart:

- **Activity.** An event is activity when it carries data and is not an
  Anthropic ``ping``. SSE comments (``: keep-alive``), data-less events and
  pings are not: they never reset an idle limit, so a gateway that only pings
  still times out (:func:`is_activity`).
- **The terminal event** tells a whole stream from a cut one (:class:`EventWatch`):
  OpenAI chat completions end with ``[DONE]`` or a chunk with a ``finish_reason``;
  Anthropic Messages with ``message_stop``; the OpenAI Responses API with
  ``response.completed`` (or ``.incomplete`` / ``.failed``); the Gemini API
  (``:streamGenerateContent?alt=sse``, no ``[DONE]``) with a candidate whose
  ``finishReason`` is set (or a ``promptFeedback`` with a ``blockReason``: the
  prompt was refused). A stream in one of
  these formats that ends without it is ``StreamProtocolError('no_finish_reason')``
  (:func:`no_finish_reason`), retryable only while nothing was delivered.
- **Error events** (an Anthropic ``event: error``, an OpenAI ``{"error": ...}``
  object sent inside a stream, a Gemini ``{"error": {"code", "message",
  "status"}}`` payload) become one error (:func:`error_event`): an
  :class:`HTTPStatusError` with the status the provider means, retryable by the
  status table only while no event was delivered; else
  ``StreamProtocolError(reason='stream_error')``.
- **Text.** A data event that is not valid UTF-8 is
  ``StreamProtocolError('malformed_event')`` (not retryable), as ``stream_sse``
  says of one: no SDK gets to decode it with replacement characters.
- **The event cap** is the framer's (:class:`~.framing.EventFramer`), checked by the
  :class:`Gate` every path reads its payload through.

Events arrive here as the framer hands them on: bytes ending in ``b"\\n\\n"``,
line endings normalised to ``b"\\n"``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from .._core.errors import StreamProtocolError, WatchdogError
from .._core.redact import excerpt
from .._http.json_object import json_object
from .._http.translate import http_status_error
from .._retry.foreign import provider_error_status
from .framing import EventFramer

__all__ = [
    "PING",
    "EventWatch",
    "Gate",
    "describe_error",
    "error_event",
    "is_activity",
    "no_finish_reason",
]

PING = "ping"

_FINISH = re.compile(rb'"finish_reason"\s*:\s*"')
# Gemini: a candidate's finishReason, or a refused prompt's promptFeedback.blockReason.
_GEMINI_FINISH = re.compile(rb'"(?:finishReason|blockReason)"\s*:\s*"')
# A Gemini error payload in a data event: ``data: {"error": {... "status": "UNAVAILABLE"}}``.
_ERROR_DATA = re.compile(rb'^data: ?\{\s*"error"\s*:')
_GRPC_STATUS = re.compile(r"^[A-Z][A-Z_]+$")
_ANTHROPIC_EVENTS = frozenset(
    {
        b"message_start",
        b"message_delta",
        b"content_block_start",
        b"content_block_delta",
        b"content_block_stop",
    }
)
_RESPONSES_END = frozenset({b"response.completed", b"response.incomplete", b"response.failed"})


def _field(event: bytes, name: bytes) -> Optional[bytes]:
    """The value of the first ``name`` line (``name`` ends with the colon), or ``None``."""
    if event.startswith(name):
        start = 0
    else:
        start = event.find(b"\n" + name)
        if start < 0:
            return None
        start += 1
    end = event.find(b"\n", start)
    value = event[start + len(name) : end]
    return value[1:] if value.startswith(b" ") else value


def _has_data(event: bytes) -> bool:
    return event.startswith((b"data:", b"data\n")) or b"\ndata:" in event or b"\ndata\n" in event


def _name(event: bytes) -> Optional[bytes]:
    """The ``event:`` name, looked up only where one can be."""
    if event.startswith(b"event:") or b"\nevent:" in event:
        return _field(event, b"event:")
    return None


def is_activity(event: bytes) -> bool:
    """True when the whole event ``event`` carries data and is not a ``ping``."""
    return _has_data(event) and _name(event) != b"ping"


class Gate:
    """A body's payload in, the items to hand on out: framed, gated, bounded.

    ``framer`` splits the payload into whole events and bounds their size.
    Events that are not activity (by ``active``: :func:`is_activity`, or an
    :class:`EventWatch`'s ``note``) are held and handed on in front of the next
    data event, so a consumer still sees them but they never count as activity.
    What is held is bounded by the framer's limit (past it, older held events are
    dropped), so a flood of pings or comments costs no memory.
    """

    __slots__ = ("_active", "_check", "_frame", "_held", "_limit", "_plain")

    def __init__(self, framer: EventFramer, active: Callable[[bytes], bool]) -> None:
        self._frame = framer.feed
        self._check = framer.check
        self._limit = framer.limit
        self._active = active
        self._held = bytearray()
        self._plain = active is is_activity  # the rule alone, nothing else watches the events

    def pass_on(self, payload: bytes) -> Tuple[List[bytes], Optional[WatchdogError]]:
        """The items to hand on for the events ``payload`` completes, and the error to raise
        once they are handed on: an error event's, or the framer's for an event past the
        size limit (raised here when no event came before it)."""
        events = self._frame(payload)
        items, failure = self._gated(events)
        if failure is None:
            try:
                self._check()
            except StreamProtocolError as exc:
                failure = exc
        return items, failure

    def _gated(self, events: List[bytes]) -> Tuple[List[bytes], Optional[WatchdogError]]:
        held = self._held
        if self._plain and not held:
            for event in events:  # one data line each (what chat APIs send): activity, all of it
                if not (event.startswith(b"data:") and event.find(b"\n") == len(event) - 2):
                    break
            else:
                return events, None
        items: List[bytes] = []
        limit, active = self._limit, self._active
        for event in events:
            try:
                is_active = active(event)
            except WatchdogError as exc:
                return items, exc
            if is_active:
                if held:
                    event = bytes(held) + event
                    held.clear()
                items.append(event)
            elif len(held) + len(event) <= limit:
                held += event
            else:
                held[:] = event
        return items, None


class EventWatch:
    """Reads each whole event as it passes: is it activity, has the stream finished?

    One per stream attempt; used by one thread at a time (the one that frames).
    """

    __slots__ = ("delivered", "finished", "known", "secrets")

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        self.secrets = secrets  # the request's secret set, masked in an error event's error
        self.delivered = 0  # data events handed on
        self.finished = False  # the terminal event was seen
        self.known = False  # the format is one whose terminal event we know

    def note(self, event: bytes) -> bool:
        """True when ``event`` is activity. Raises the error an ``error`` event carries, and
        ``StreamProtocolError('malformed_event')`` for a data event that is not UTF-8."""
        if not _has_data(event):
            return False  # a comment, or an event without data
        if not event.isascii():
            _check_utf8(event, self.delivered)
        name = _name(event)
        if name is not None:
            if name == b"ping":
                return False
            if name == b"error":
                parsed = json_object(_field(event, b"data:") or b"")
                raise error_event(parsed, self.delivered, secrets=self.secrets)
            if name == b"message_stop" or name in _RESPONSES_END:
                self.known = self.finished = True
            elif name in _ANTHROPIC_EVENTS or name.startswith(b"response."):
                self.known = True
        elif not self.finished:
            if _ERROR_DATA.match(event):
                self._gemini_error(event)
            if event.startswith((b"data: [DONE]", b"data:[DONE]")) or _FINISH.search(event):
                self.known = self.finished = True
            elif b'"candidates"' in event or b'"promptFeedback"' in event:
                self.known = True  # Gemini: no [DONE]; the finishReason ends it
                self.finished = _GEMINI_FINISH.search(event) is not None
            elif not self.known and b'"choices"' in event:
                self.known = True
        self.delivered += 1
        return True

    def _gemini_error(self, event: bytes) -> None:
        """Raise the error of a Gemini error payload (its ``status`` a gRPC code name, such
        as ``RESOURCE_EXHAUSTED``); an OpenAI ``{"error": ...}`` is left to the SDK that
        reads it, as before."""
        parsed = json_object(_field(event, b"data:") or b"")
        error = parsed.get("error") if isinstance(parsed, dict) else None
        status = error.get("status") if isinstance(error, dict) else None
        if isinstance(status, str) and _GRPC_STATUS.match(status):
            raise error_event(parsed, self.delivered, secrets=self.secrets)

    def end(self) -> None:
        """At a clean end of the body: raise if a known format ended without finishing."""
        if self.finished or not self.known:
            return
        raise no_finish_reason(self.delivered, "without its terminal event")


def _check_utf8(event: bytes, delivered: int) -> None:
    try:
        event.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StreamProtocolError(
            f"an SSE event is not valid UTF-8 ({exc.reason} at byte {exc.start})",
            reason="malformed_event",
            chunks_received=delivered,
        ) from None


def no_finish_reason(chunks: int, how: str, **fields: Any) -> StreamProtocolError:
    """The stream ended (``how``) without its terminal event; retryable only before any chunk.

    ``fields`` (``request_id``, ``attempt``) go into the error.
    """
    if chunks:
        outcome = "the answer is incomplete (not retried: chunks were already delivered)"
    else:
        outcome = "nothing was generated (retried while attempts and the budget allowed)"
    return StreamProtocolError(
        f"the stream ended {how} after {chunks} chunks ([DONE], a finish_reason, "
        f"message_stop or a Gemini finishReason was expected): {outcome}",
        reason="no_finish_reason",
        chunks_received=chunks,
        retryable=chunks == 0,
        **fields,
    )


def error_event(
    parsed: Optional[Any],
    delivered: int,
    *,
    raw: str = "",
    secrets: Sequence[str] = (),
    advice: Optional[Mapping[int, str]] = None,
    **fields: Any,
) -> WatchdogError:
    """The error for an error event or an ``{"error": ...}`` object inside a stream.

    ``parsed`` is the event's JSON (``None`` when it is not a JSON object, as
    :func:`~.._http.json_object.json_object` returns for anything else, deep
    nesting included). The status comes from the error's ``code`` or ``status``
    (OpenAI-compatible servers), else from its ``type`` (Anthropic:
    ``overloaded_error`` -> 529, ``rate_limit_error`` -> 429, ...). With a
    status: an :class:`HTTPStatusError`, retryable by the status table and only
    while nothing was delivered (a replay would repeat it); otherwise
    ``StreamProtocolError(reason='stream_error')``. ``raw`` is the text shown
    when ``parsed`` says nothing; ``advice`` (by status) follows the message; ``fields``
    (``request_id``, ``attempt``) go into the error.
    """
    error = parsed.get("error") if isinstance(parsed, dict) else None
    status = None
    for holder in (error, parsed):
        if isinstance(holder, dict):
            status = (
                status or _http_status(holder.get("code")) or _http_status(holder.get("status"))
            )
    kind = error.get("type") if isinstance(error, dict) else None
    if status is None:
        status = provider_error_status(kind)
    if status is None and isinstance(error, dict):
        status = provider_error_status(error.get("status"))  # Google's: "UNAVAILABLE"
    body = raw or ("" if parsed is None else _shown_json(parsed))
    shown = excerpt(describe_error(error) or body or "(no detail)", 300, secrets)
    where = f"inside the stream after {delivered} chunks"
    if status is not None:
        return http_status_error(
            status,
            body,
            message=f"HTTP {status} (an error event {where}): {shown}"
            + (f"; {advice[status]}" if advice and status in advice else ""),
            secrets=secrets,
            retryable=False if delivered else None,
            **fields,
        )
    return StreamProtocolError(
        f"the server sent an error {where}: {shown}",
        reason="stream_error",
        chunks_received=delivered,
        **fields,
    )


def _shown_json(parsed: Any) -> str:
    try:
        return json.dumps(parsed, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):  # nested just below json's limit
        return ""


def describe_error(error: Any) -> Optional[str]:
    """``message (type, code)`` of an error object, or the error itself when it is text."""
    if isinstance(error, str):
        return error or None
    if not isinstance(error, dict):
        return None
    message = error.get("message")
    if not isinstance(message, str) or not message:
        return None
    kinds = [str(v) for v in (error.get("type"), error.get("code")) if v not in (None, "")]
    return f"{message} ({', '.join(kinds)})" if kinds else message


def _http_status(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and 400 <= value <= 599 else None
