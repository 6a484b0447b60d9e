"""The stream rules, written once: what is activity, what ends a stream, what an error event says.

Every guarded event stream (``stream_sse``, ``ChatClient``, the httpx transport's streams,
compressed or not) reads its events through this module, as the framer hands them on
(bytes ending in ``b"\\n\\n"``, line endings normalised to ``b"\\n"``):

- **Activity** (:func:`is_activity`): an event that carries data, unless it is Anthropic's
  keep-alive (``event: ping`` whose data is the JSON object ``{"type": "ping"}``); a generic
  server's event named ``ping`` with other data is the caller's data. Comments and
  data-less events are not activity.
- **Nothing is held back or dropped**: every event is handed on in order as soon as it is
  parsed (:class:`Gate`); one that is not activity only does not restart the idle clock
  (:class:`Activity`), so a gateway that only pings still times out.
- **An event's name** is its last ``event:`` line (the SSE spec, as sseclient-py and the
  SDKs read it).
- **The terminal event** is read from the parsed event, never by searching bytes
  (:class:`EventWatch`, asked by the transport and by ``ChatClient`` alike). OpenAI: every
  choice index that appeared has received a ``finish_reason``; ``[DONE]`` before that,
  ``[DONE]`` with no chunk, or an end without it is ``no_finish_reason``; a usage-only
  chunk with no choices is fine. Anthropic Messages: ``message_stop``; the OpenAI Responses
  API: ``response.completed`` (or ``.incomplete`` / ``.failed``); Gemini (no ``[DONE]``): a
  top-level ``candidates[].finishReason`` or ``promptFeedback.blockReason``. A stream in one
  of these formats that ends without it is ``StreamProtocolError('no_finish_reason')``
  (:func:`no_finish_reason`), retryable only while nothing was delivered.
- **Error events** (Anthropic's ``event: error``, an OpenAI ``{"error": ...}`` object sent
  inside a stream, a Gemini ``{"error": {"code", "message", "status"}}`` payload) become one
  error (:func:`error_event`).
- **Text**: an event that is not valid UTF-8 is ``StreamProtocolError('malformed_event')``
  (not retryable): no SDK gets to decode it with replacement characters.
- **The event cap** is the framer's (:class:`~.framing.EventFramer`), checked by the
  :class:`Gate`; a compressed stream is framed after it is decoded (:mod:`.coding`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .._core.errors import StreamProtocolError, WatchdogError
from .._core.redact import excerpt
from .._http.json_object import json_object
from .._http.translate import http_status_error
from .._retry.foreign import provider_error_status
from .framing import EventFramer

__all__ = [
    "Activity",
    "EventWatch",
    "Gate",
    "describe_error",
    "error_event",
    "is_activity",
    "is_done",
    "is_parsed_activity",
    "no_finish_reason",
]

_KEEPALIVE = {"type": "ping"}
_NAME_LINE = re.compile(r"^event(?:: ?(.*))?$", re.MULTILINE)
_DATA_LINE = re.compile(r"^data(?:: ?(.*))?$", re.MULTILINE)
_GRPC_STATUS = re.compile(r"^[A-Z][A-Z_]+$")
_ANTHROPIC_EVENTS = frozenset(
    {
        "message_start",
        "message_delta",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)
_RESPONSES_END = frozenset({"response.completed", "response.incomplete", "response.failed"})
_UNPARSED: Any = object()


def fields(event: bytes, delivered: int = 0) -> Tuple[Optional[str], Optional[str]]:
    """``(name, data)`` of one framed event: its last ``event:`` line (``None`` when it has
    none, or an empty one) and its ``data:`` lines joined with ``\\n`` (``None``: no data).

    Raises ``StreamProtocolError('malformed_event')`` when the event is not UTF-8
    (``delivered``: the chunks before it).
    """
    try:
        text = event.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StreamProtocolError(
            f"an SSE event is not valid UTF-8 ({exc.reason} at byte {exc.start})",
            reason="malformed_event",
            chunks_received=delivered,
        ) from None
    if text.startswith("data:") and text.find("\n") == len(text) - 2:
        value = text[5:-2]  # the common case: one data line
        return None, value[1:] if value[:1] == " " else value
    values = _DATA_LINE.findall(text)  # each without "data:" and one space after it
    data = "\n".join(values) if values else None
    if not text.startswith("event") and "\nevent" not in text:
        return None, data
    names = _NAME_LINE.findall(text)
    return (names[-1] or None) if names else None, data


def is_keepalive(name: Optional[str], data: Optional[str]) -> bool:
    """True for Anthropic's keep-alive: ``event: ping`` whose data is ``{"type": "ping"}``."""
    return name == "ping" and data is not None and json_object(data) == _KEEPALIVE


def is_activity(event: bytes) -> bool:
    """True when the framed event ``event`` carries data and is not Anthropic's keep-alive."""
    if event.startswith(b"data:") and b"\nevent" not in event:
        return True  # data, and no name: the common case, decided without parsing
    try:
        name, data = fields(event)
    except StreamProtocolError:
        return True  # a consumer that reads it raises; it never counts as silence
    return data is not None and not is_keepalive(name, data)


def is_parsed_activity(event: Any) -> bool:
    """:func:`is_activity` of a parsed ``sseclient.Event`` (dispatched: it carries data)."""
    return not is_keepalive(event.event, event.data)


def is_done(data: str) -> bool:
    """True for OpenAI's ``[DONE]`` data."""
    return data.startswith("[DONE]")


class Gate:
    """A body's payload in, its events out: split into whole events and bounded by
    ``framer``, each read by ``note`` (an :class:`EventWatch`'s, or :func:`is_activity`
    when only the consumer's side reads the rules), which may raise the error it carries.
    """

    __slots__ = ("_check", "_frame", "_note")

    def __init__(self, framer: EventFramer, note: Callable[[bytes], object]) -> None:
        self._frame = framer.feed
        self._check = framer.check
        # is_activity raises nothing and ends nothing: no need to call it here
        self._note: Optional[Callable[[bytes], object]] = None if note is is_activity else note

    def pass_on(self, payload: bytes) -> Tuple[List[bytes], Optional[WatchdogError]]:
        """The events ``payload`` completes, and the error to raise once they are handed
        on: an error event's (the events before it are handed on, not it), or the
        framer's for an event past the size limit (raised here when no event came before
        it)."""
        events = self._frame(payload)
        note = self._note
        if note is not None:
            for index, event in enumerate(events):
                try:
                    note(event)
                except WatchdogError as exc:
                    return events[:index], exc
        try:
            self._check()
        except StreamProtocolError as exc:
            return events, exc
        return events, None


class Activity:
    """A stream's idle clock, as its consumer takes the items: only activity restarts it.

    ``active`` tells an item that is activity (``None``: every item is, as for
    ``guard_stream`` over any iterator). ``chunks`` counts those (the first-event limit
    holds until the first); ``quiet_since`` is when the consumer began to wait while only
    items that are not activity came since (``None``: the next wait starts it afresh).
    """

    __slots__ = ("_active", "chunks", "quiet_since")

    def __init__(self, active: Optional[Callable[[Any], bool]] = None) -> None:
        self._active = active
        self.chunks = 0
        self.quiet_since: Optional[float] = None

    def took(self, batch: Sequence[Any], waited_from: Optional[float], now: float) -> None:
        """The consumer took ``batch``, having waited since ``waited_from`` (``None``: it
        found them buffered), at ``now``."""
        active = self._active
        count = len(batch) if active is None else sum(map(active, batch))
        if count:
            self.chunks += count
            self.quiet_since = None
        elif self.quiet_since is None:
            self.quiet_since = now if waited_from is None else waited_from


class EventWatch:
    """Reads each whole event as it passes: is it activity, has the stream finished?

    One per stream attempt; used by one thread at a time (the one that frames,
    or ``ChatClient``'s consumer). ``fields`` (``request_id``, ``attempt``) go into
    the errors it raises.
    """

    __slots__ = ("_choices", "_fields", "_secrets", "delivered", "finished", "known")

    def __init__(self, secrets: Sequence[str] = (), **fields: Any) -> None:
        self._secrets = secrets  # the request's secret set, masked in an error event's error
        self.delivered = 0  # data events read (keep-alives aside)
        self.finished = False  # the terminal event was seen
        self.known = False  # the format is one whose terminal event we know
        self._choices: Dict[Any, bool] = {}  # OpenAI: each choice index, has it finished?
        self._fields = fields

    def note(self, event: bytes) -> bool:
        """True when the framed ``event`` is activity (see :meth:`read`); raises
        ``StreamProtocolError('malformed_event')`` for an event that is not UTF-8."""
        name, data = fields(event, self.delivered)
        if data is None:
            return False  # a comment, or an event without data
        return self.read(name, data)

    def read(self, name: Optional[str], data: str, parsed: Any = _UNPARSED) -> bool:
        """True when the event ``name`` (``None``: unnamed) with ``data`` is activity.

        ``parsed``: the data's JSON object if the caller parsed it already (``None``:
        not one). Raises the error an ``error`` event or a Gemini error payload
        carries, and ``no_finish_reason`` for an OpenAI ``[DONE]`` that comes before
        every choice finished.
        """
        if name is not None and name != "message":
            if is_keepalive(name, data):
                return False
            if name == "error":
                raise error_event(
                    json_object(data), self.delivered, secrets=self._secrets, **self._fields
                )
            if name == "message_stop" or name in _RESPONSES_END:
                self.known = self.finished = True
            elif name in _ANTHROPIC_EVENTS or name.startswith("response."):
                self.known = True
        elif is_done(data):
            self.known = True
            if not (self.finished or self._all_choices_finished()):
                how = "with [DONE] before every choice had a finish_reason"
                if not self.delivered:
                    how = "with [DONE] before any chunk"
                raise no_finish_reason(self.delivered, how, **self._fields)
            self.finished = True
            return True
        else:
            self._read_object(json_object(data) if parsed is _UNPARSED else parsed)
        self.delivered += 1
        return True

    def _read_object(self, chunk: Any) -> None:
        """An unnamed data event's JSON object: an OpenAI chunk, a Gemini response."""
        if not isinstance(chunk, dict):
            return
        choices = chunk.get("choices")
        if isinstance(choices, list):
            self.known = True
            for choice in choices:
                if isinstance(choice, dict):
                    self._choice(choice)
            self.finished = self._all_choices_finished()  # a choice may appear after another ended
            return
        error = chunk.get("error")
        if isinstance(error, dict):
            status = error.get("status")
            if isinstance(status, str) and _GRPC_STATUS.match(status):
                # a Gemini error payload (its status a gRPC code name, such as
                # RESOURCE_EXHAUSTED); an OpenAI {"error": ...} is left to the SDK that reads it
                raise error_event(chunk, self.delivered, secrets=self._secrets, **self._fields)
        candidates = chunk.get("candidates")
        feedback = chunk.get("promptFeedback")
        if candidates is not None or feedback is not None:
            self.known = True  # Gemini: no [DONE]; the finishReason ends it
            if isinstance(candidates, list) and any(
                isinstance(c, dict) and c.get("finishReason") for c in candidates
            ):
                self.finished = True
            if isinstance(feedback, dict) and feedback.get("blockReason"):
                self.finished = True

    def _choice(self, choice: Mapping[str, Any]) -> None:
        index = choice.get("index", 0)
        if not isinstance(index, (int, str)):
            index = repr(index)
        if choice.get("finish_reason"):
            self._choices[index] = True
        else:
            self._choices.setdefault(index, False)

    def _all_choices_finished(self) -> bool:
        return bool(self._choices) and all(self._choices.values())

    def end(self) -> None:
        """At a clean end of the body: raise if a known format ended without finishing."""
        if self.finished or not self.known:
            return
        raise no_finish_reason(self.delivered, "without its terminal event", **self._fields)


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

    ``parsed``: the event's JSON object (``None``: not one, as
    :func:`~.._http.json_object.json_object` says). The status comes from the error's
    ``code`` or ``status`` (OpenAI-compatible servers), else from its ``type`` (Anthropic:
    ``overloaded_error`` -> 529, ...) or its status name (Google's ``"UNAVAILABLE"``). With
    a status: an :class:`HTTPStatusError`, retryable by the status table and only while
    nothing was delivered (a replay would repeat it); otherwise
    ``StreamProtocolError(reason='stream_error')``. ``raw``: the text shown when ``parsed``
    says nothing; ``advice`` (by status) follows the message; ``fields`` (``request_id``,
    ``attempt``) go into the error.
    """
    error = parsed.get("error") if isinstance(parsed, dict) else None
    status = None
    for holder in (error, parsed):
        if status is None and isinstance(holder, dict):
            status = _http_status(holder.get("code")) or _http_status(holder.get("status"))
    if status is None and isinstance(error, dict):
        kind, name = error.get("type"), error.get("status")
        status = provider_error_status(kind) or provider_error_status(name)
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
