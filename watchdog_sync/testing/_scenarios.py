"""The FaultGateway's named scenarios: what each one does to a chat completion request.

A behaviour writes to an :class:`~._wire.Exchange` and may hold the connection
with ``conn.wait()``; it ends when it returns, or when the client disconnects
or the gateway stops (``ClientGone`` / ``Stopping`` raised from a wait or a
send).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from . import _openai
from ._options import check_options
from ._wire import Exchange

__all__ = ["Call", "Scenario", "describe", "resolve", "run_ok"]

_EVENT_STREAM = "text/event-stream"
_JSON = "application/json"
_DONE = b"data: [DONE]\n\n"
_KEEPALIVE = b": keep-alive\n\n"
_MALFORMED = b'data: {"id": "malformed", "choices": [\n\n'
_MARKER = "\x00MARK\x00"
_MARKER_JSON = b"\\u0000MARK\\u0000"
_INVALID_UTF8 = b"bad \xff\xfe\xfd bytes"
DEFAULT_TEXT = "Hello from the watchdog_sync fault gateway."


@dataclass(frozen=True)
class Call:
    """One request being answered: where to write and what was asked."""

    exchange: Exchange
    stream: bool
    options: Mapping[str, Any]
    body: Any
    model: str
    ident: str
    created: int

    def wait(self, seconds: Optional[float]) -> None:
        """Hold the connection (``None``: until the client leaves or the gateway stops)."""
        self.exchange.conn.wait(seconds)

    def usage(self, text: str) -> Optional[Dict[str, int]]:
        """The ``usage`` object to send, or ``None`` if the ``usage`` option is off."""
        return _openai.usage_for(self.body, text) if self.options["usage"] else None

    def completion(self, content: str, finish_reason: Optional[str] = "stop") -> bytes:
        """The non-streaming body for ``content``."""
        return _openai.completion(
            self.ident,
            self.created,
            self.model,
            content,
            self.usage(content),
            finish_reason=finish_reason,
        )

    def open_stream(self) -> None:
        """Send 200 and the SSE headers."""
        self.exchange.head(200, _EVENT_STREAM)

    def send_chunks(self, count: int, interval: float) -> None:
        """Send ``count`` content chunks carrying the ``text`` option, ``interval`` apart."""
        for index, piece in enumerate(_openai.content_pieces(self.options["text"], count)):
            if index:
                self.wait(interval)
            chunk = _openai.text_chunk(
                self.ident, self.created, self.model, piece, first=index == 0
            )
            self.exchange.write(_openai.sse_data(chunk))

    def end_stream(self, chunks_sent: int) -> None:
        """Send the finish chunk (with ``usage``), ``[DONE]``, and end the body."""
        text = self.options["text"] if chunks_sent else ""
        last = _openai.finish_chunk(
            self.ident, self.created, self.model, self.usage(text), first=chunks_sent == 0
        )
        self.exchange.write(_openai.sse_data(last))
        self.exchange.write(_DONE)
        self.exchange.finish()

    def send_body(self, body: bytes) -> None:
        """Send a complete ``application/json`` body with Content-Length."""
        self.exchange.head(200, _JSON, length=len(body))
        self.exchange.write(body)
        self.exchange.finish()


Behavior = Callable[[Call], None]


@dataclass(frozen=True)
class Scenario:
    """A named behaviour, the options it accepts (with defaults) and fixed settings."""

    name: str
    summary: str
    behavior: Behavior
    defaults: Mapping[str, Any]
    fixed: Mapping[str, Any]


def run_ok(call: Call) -> None:
    """``ok``: a normal stream (or completion)."""
    options = call.options
    if not call.stream:
        call.send_body(call.completion(options["text"]))
        return
    call.open_stream()
    call.send_chunks(options["chunks"], options["interval"])
    call.end_stream(options["chunks"])


def _silent_after_200(call: Call) -> None:
    if call.stream:
        call.open_stream()
    else:
        body = call.completion(call.options["text"])
        call.exchange.head(200, _JSON, length=len(body))
    call.wait(None)


def _half_body(call: Call) -> None:
    body = call.completion(call.options["text"])
    call.exchange.head(200, _JSON, length=len(body))
    call.exchange.write(body[: len(body) // 2])


def _stall_after_chunks(call: Call) -> None:
    if call.stream:
        call.open_stream()
        call.send_chunks(call.options["chunks"], call.options["interval"])
    else:
        _half_body(call)
    call.wait(None)


def _slow_drip(call: Call) -> None:
    interval = call.options["interval"]
    if not call.stream:
        body = call.completion(call.options["text"])
        call.exchange.head(200, _JSON, length=len(body))
        for index in range(len(body)):
            call.exchange.write(body[index : index + 1])
            call.wait(interval)
        call.exchange.finish()
        return
    call.open_stream()
    words = call.options["text"].split() or ["drip"]
    for index, word in enumerate(itertools.cycle(words)):
        if index:
            call.wait(interval)
        chunk = _openai.text_chunk(
            call.ident, call.created, call.model, word + " ", first=index == 0
        )
        call.exchange.write(_openai.sse_data(chunk))


def _keepalive_only(call: Call) -> None:
    if call.stream:
        call.open_stream()
        beat = _KEEPALIVE
    else:
        call.exchange.head(200, _JSON)
        beat = b" "
    while True:
        call.exchange.write(beat)
        call.wait(call.options["interval"])


def _no_headers(call: Call) -> None:
    call.wait(None)


def _reset_before_headers(call: Call) -> None:
    call.exchange.conn.reset()


def _reset_mid_stream(call: Call) -> None:
    if call.stream:
        call.open_stream()
        call.send_chunks(call.options["chunks"], call.options["interval"])
        call.wait(call.options["interval"])
    else:
        _half_body(call)
    call.exchange.conn.reset()


def _http_error(call: Call) -> None:
    options = call.options
    body = _openai.error_body(options["message"], options["type"], options["code"])
    headers: Dict[str, str] = {}
    if options["retry_after"] is not None:
        headers["Retry-After"] = options["retry_after"]
    if options["retry_after_ms"] is not None:
        headers["retry-after-ms"] = str(options["retry_after_ms"])
    call.exchange.head(options["status"], _JSON, length=len(body), headers=headers)
    call.exchange.write(body)
    call.exchange.finish()


def _no_finish_reason(call: Call) -> None:
    if not call.stream:
        call.send_body(call.completion(call.options["text"], finish_reason=None))
        return
    call.open_stream()
    call.send_chunks(call.options["chunks"], call.options["interval"])
    call.exchange.finish()


def _malformed_json(call: Call) -> None:
    if not call.stream:
        body = call.completion(call.options["text"])
        call.send_body(body[: len(body) // 2])
        return
    call.open_stream()
    call.send_chunks(call.options["chunks"], call.options["interval"])
    call.exchange.write(_MALFORMED)
    call.end_stream(call.options["chunks"])


def _invalid_utf8(call: Call) -> None:
    if not call.stream:
        call.send_body(call.completion(_MARKER).replace(_MARKER_JSON, _INVALID_UTF8))
        return
    call.open_stream()
    chunks = call.options["chunks"]
    call.send_chunks(chunks, call.options["interval"])
    chunk = _openai.text_chunk(call.ident, call.created, call.model, _MARKER, first=chunks == 0)
    call.exchange.write(_openai.sse_data(chunk.replace(_MARKER_JSON, _INVALID_UTF8)))
    call.end_stream(chunks)


def _write_filler(
    call: Call, total: int, filler: bytes, before: bytes = b"", after: bytes = b""
) -> None:
    """Send ``total`` filler bytes, ``len(filler)`` at a time, each piece its own write.

    Only one piece exists at a time, whatever ``total`` is.
    """
    full, rest = divmod(total, len(filler))
    for _ in range(full):
        call.exchange.write(before + filler + after)
    if rest:
        call.exchange.write(before + filler[:rest] + after)


def _envelope(call: Call, first: bool) -> Tuple[bytes, bytes]:
    """The JSON before and after the content of a chunk (or completion when not streaming)."""
    if call.stream:
        payload = _openai.text_chunk(call.ident, call.created, call.model, _MARKER, first=first)
    else:
        payload = call.completion(_MARKER)
    before, _, after = payload.partition(_MARKER_JSON)
    return before, after


def _huge_line(call: Call) -> None:
    size, piece = call.options["size"], call.options["piece"]
    chunks = call.options["chunks"] if call.stream else 0
    before, after = _envelope(call, first=chunks == 0)
    filler = max(0, size - len(before) - len(after))
    if call.stream:
        call.open_stream()
        call.send_chunks(chunks, call.options["interval"])
        call.exchange.write(b"data: " + before)
    else:
        call.exchange.head(200, _JSON, length=len(before) + filler + len(after))
        call.exchange.write(before)
    _write_filler(call, filler, b"x" * piece)
    if not call.stream:
        call.exchange.write(after)
        call.exchange.finish()
        return
    call.exchange.write(after + b"\n\n")
    call.end_stream(chunks)


def _oversized_event(call: Call) -> None:
    if not call.stream:
        _huge_line(call)
        return
    size, piece, chunks = call.options["size"], call.options["piece"], call.options["chunks"]
    whole = _openai.text_chunk(call.ident, call.created, call.model, "", first=chunks == 0)
    call.open_stream()
    call.send_chunks(chunks, call.options["interval"])
    call.exchange.write(b"data: " + whole[:-1] + b"\n")
    # JSON allows whitespace between tokens: lines of spaces keep the event one valid JSON value.
    _write_filler(call, max(0, size - len(whole)), b" " * piece, b"data:", b"\n")
    call.exchange.write(b"data: }\n\n")
    call.end_stream(chunks)


_COMMON: Dict[str, Any] = {"framing": "chunked", "text": DEFAULT_TEXT, "usage": True}
_FAULT: Dict[str, Any] = {**_COMMON, "fail_first": None}
_CHUNKS = {"chunks": 2, "interval": 0.02}
_HTTP = {"retry_after": None, "retry_after_ms": None}
_BIG = {"size": 64 * 1024 * 1024, "piece": 64 * 1024, "chunks": 1, "interval": 0.02}


def _http(
    status: int, message: str, error_type: str, code: Optional[str], **extra: Any
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(defaults, fixed) of a status scenario: the body fields are options, the status is not."""
    defaults = {**_FAULT, **_HTTP, "message": message, "type": error_type, "code": code, **extra}
    return defaults, {"status": status}


_E400 = _http(400, "Invalid request (FaultGateway http400).", "invalid_request_error", None)
_E401 = _http(
    401,
    "Incorrect API key provided (FaultGateway http401).",
    "invalid_request_error",
    "invalid_api_key",
)
_429 = (
    429,
    "Rate limit reached (FaultGateway http429), retry later.",
    "requests",
    "rate_limit_exceeded",
)
_E429 = _http(*_429, retry_after="1")
_500 = (500, "The server had an error processing your request.", "server_error", None)
_E500 = _http(*_500)
_E503 = _http(503, "The engine is currently overloaded, retry later.", "server_error", None)
_E502 = _http(502, "Bad gateway (FaultGateway http_error).", "server_error", None)
_ANY_STATUS: Tuple[Dict[str, Any], Dict[str, Any]] = ({**_E502[0], "status": 502}, {})

_TABLE: Tuple[Tuple[str, str, Behavior, Dict[str, Any], Dict[str, Any]], ...] = (
    ("ok", "a normal stream or completion", run_ok, {**_COMMON, "chunks": 5, "interval": 0.02}, {}),
    ("silent_after_200", "200 and headers, then nothing", _silent_after_200, _FAULT, {}),
    ("stall_after_chunks", "some chunks, then nothing", _stall_after_chunks, {**_FAULT, **_CHUNKS}, {}),
    ("slow_drip", "a chunk every interval, forever", _slow_drip, {**_FAULT, "interval": 0.5}, {}),
    ("keepalive_only", "SSE comments every interval, never data", _keepalive_only,
     {**_FAULT, "interval": 0.5}, {}),
    ("no_headers", "reads the request, never answers", _no_headers, _FAULT, {}),
    ("reset_before_headers", "reads the request, then TCP RST", _reset_before_headers, _FAULT, {}),
    ("reset_mid_stream", "some chunks, then TCP RST", _reset_mid_stream, {**_FAULT, **_CHUNKS}, {}),
    ("http400", "400 with an OpenAI error body", _http_error, *_E400),
    ("http401", "401 with an OpenAI error body", _http_error, *_E401),
    ("http429", "429 with Retry-After", _http_error, *_E429),
    ("http500", "500 with an OpenAI error body", _http_error, *_E500),
    ("http503", "503 with an OpenAI error body", _http_error, *_E503),
    ("http_error", "any status (option status)", _http_error, *_ANY_STATUS),
    ("no_finish_reason", "chunks, then a clean end without finish_reason or [DONE]",
     _no_finish_reason, {**_FAULT, **_CHUNKS, "chunks": 5}, {}),
    ("malformed_json", "a data: line that is not JSON", _malformed_json,
     {**_FAULT, **_CHUNKS, "chunks": 1}, {}),
    ("invalid_utf8", "a data: line with invalid UTF-8", _invalid_utf8,
     {**_FAULT, **_CHUNKS, "chunks": 1}, {}),
    ("huge_line", "one data: line of size bytes", _huge_line, {**_FAULT, **_BIG}, {}),
    ("oversized_event", "one event of size bytes in many data: lines", _oversized_event,
     {**_FAULT, **_BIG}, {}),
    ("silent_then_ok", "silent_after_200 once, then ok", _silent_after_200,
     {**_FAULT, "fail_first": 1}, {}),
    ("reset_then_ok", "reset_before_headers once, then ok", _reset_before_headers,
     {**_FAULT, "fail_first": 1}, {}),
    ("http500_then_ok", "http500 once, then ok", _http_error, *_http(*_500, fail_first=1)),
    ("http429_then_ok", "http429 once, then ok", _http_error,
     *_http(*_429, retry_after="1", fail_first=1)),
)  # fmt: skip

_SCENARIOS: Dict[str, Scenario] = {
    name: Scenario(name, summary, behavior, defaults, fixed)
    for name, summary, behavior, defaults, fixed in _TABLE
}
_OK_INHERITS = ("framing", "text", "usage")


def describe() -> Dict[str, str]:
    """Scenario name -> one-line summary, in documentation order."""
    return {name: scenario.summary for name, scenario in _SCENARIOS.items()}


def resolve(name: str, given: Mapping[str, Any]) -> Tuple[Scenario, Dict[str, Any], Dict[str, Any]]:
    """Check a scenario name and its options.

    Returns the scenario, its resolved options (fixed settings included) and
    the options of the ``ok`` behaviour used once ``fail_first`` is reached.
    Raises ``ValueError`` listing the valid names or options, ``TypeError`` /
    ``ValueError`` for a bad option value.
    """
    if not isinstance(name, str):
        raise TypeError(f"scenario must be a str, not {type(name).__name__}")
    scenario = _SCENARIOS.get(name)
    if scenario is None:
        raise ValueError(f"unknown scenario {name!r}; valid scenarios: {', '.join(_SCENARIOS)}")
    options = check_options(name, scenario.defaults, given)
    if name == "ok":
        return scenario, options, options
    base = _SCENARIOS["ok"].defaults
    ok_options = {**base, **{key: options[key] for key in _OK_INHERITS}}
    return scenario, {**options, **scenario.fixed}, ok_options
