"""The FaultGateway's named scenarios: what each one does to a request, in any of its APIs.

A behaviour writes to a :class:`~._call.Call` (its rendering spells the
answer in the route's API: OpenAI, Anthropic or Gemini) and may hold the connection
with ``call.wait()``; it ends when it returns, or when the client disconnects
or the gateway stops (``ClientGone`` / ``Stopping`` raised from a wait or a
send).
"""

from __future__ import annotations

import itertools
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from .._core.redact import CREDENTIAL_HEADERS
from ._anthropic import PING
from ._call import JSON, Call
from ._format import APIS, frame
from ._options import check_options

__all__ = ["Scenario", "describe", "faults", "resolve", "run_ok"]

_KEEPALIVE = b": keep-alive\n\n"
_MARKER = "\x00MARK\x00"
_MARKER_JSON = b"\\u0000MARK\\u0000"
_INVALID_UTF8 = b"bad \xff\xfe\xfd bytes"
DEFAULT_TEXT = "Hello from the watchdog_sync fault gateway."


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
        call.exchange.head(200, JSON, length=len(body))
    call.wait(None)


def _half_body(call: Call) -> None:
    body = call.completion(call.options["text"])
    call.exchange.head(200, JSON, length=len(body))
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
        call.exchange.head(200, JSON, length=len(body))
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
        call.send_events(call.render.text(word + " "))


def _beats(call: Call, beat: bytes) -> None:
    """Send ``beat`` every interval on an SSE stream (whitespace on a JSON body), forever."""
    if call.stream:
        call.open_stream()
    else:
        call.exchange.head(200, JSON)
        beat = b" "
    while True:
        call.exchange.write(beat)
        call.wait(call.options["interval"])


def _keepalive_only(call: Call) -> None:
    _beats(call, _KEEPALIVE)


def _pings_only(call: Call) -> None:
    _beats(call, frame(PING))


def _no_headers(call: Call) -> None:
    call.wait(None)


def _for_a_while(call: Call) -> Iterator[int]:
    """0, 1, 2, ... one step every ``interval`` (the first at once), for ``duration`` seconds.

    Then the scenario returns without a final response, and the gateway closes the
    connection: its thread ends by itself even if the client never gives up.
    """
    interval, give_up = call.options["interval"], time.monotonic() + call.options["duration"]
    for step in itertools.count():
        left = give_up - time.monotonic()
        if step and left <= 0:
            return
        if step:
            call.wait(min(interval, left))
        yield step


def _early_hints_flood(call: Call) -> None:
    for step in _for_a_while(call):
        call.exchange.informational(103, {"Link": f"</hint-{step}.css>; rel=preload"})


def _header_drip(call: Call) -> None:
    call.exchange.status_line(200)
    for step in _for_a_while(call):
        call.exchange.header_line(f"X-Drip-{step}", "1")


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


def _message(call: Call) -> str:
    """The error's message; with ``echo``, followed by the credentials the request carried,
    as a careless server quotes them back (each credential header, a ``key`` query value)."""
    message: str = call.options["message"]
    if not call.options["echo"]:
        return message
    request = call.exchange.request
    sent = [
        f"{value} (in {name})"
        for name, value in request.headers.items()
        if name.lower() in CREDENTIAL_HEADERS and name.lower() != "cookie"
    ]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.target).query)
    sent += [f"{value} (in the key parameter)" for value in query.get("key", ())]
    return f"{message} You sent {'; '.join(sent) or 'no credentials'}."


def _error_body(call: Call) -> bytes:
    options = call.options
    return call.render.error_body(_message(call), options["type"], options.get("code"))


def _http_error(call: Call) -> None:
    options = call.options
    body = _error_body(call)
    headers: Dict[str, str] = {}
    if options["retry_after"] is not None and not call.render.retry_in_body:
        headers["Retry-After"] = options["retry_after"]
    if options["retry_after_ms"] is not None:
        headers["retry-after-ms"] = str(options["retry_after_ms"])
    call.exchange.head(options["status"], JSON, length=len(body), headers=headers)
    call.exchange.write(body)
    call.exchange.finish()


def _error_mid_stream(call: Call) -> None:
    if not call.stream:
        _http_error(call)
        return
    options = call.options
    call.open_stream()
    call.send_chunks(options["chunks"], options["interval"])
    error = call.render.error_event(_message(call), options["type"], options.get("code"))
    call.send_events([error])
    call.exchange.finish()


def _no_finish_reason(call: Call) -> None:
    if not call.stream:
        call.send_body(call.completion(call.options["text"], finished=False))
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
    call.exchange.write(call.render.malformed())
    call.end_stream(call.options["chunks"])


def _invalid_utf8(call: Call) -> None:
    if not call.stream:
        call.send_body(call.completion(_MARKER).replace(_MARKER_JSON, _INVALID_UTF8))
        return
    call.open_stream()
    chunks = call.options["chunks"]
    call.send_chunks(chunks, call.options["interval"])
    *opening, (name, payload) = call.render.text(_MARKER)
    call.send_events([*opening, (name, payload.replace(_MARKER_JSON, _INVALID_UTF8))])
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


def _event_head(name: Optional[str]) -> bytes:
    return b"" if name is None else b"event: " + name.encode("ascii") + b"\n"


def _huge_line(call: Call) -> None:
    size, piece = call.options["size"], call.options["piece"]
    if not call.stream:
        before, _, after = call.completion(_MARKER).partition(_MARKER_JSON)
        filler = max(0, size - len(before) - len(after))
        call.exchange.head(200, JSON, length=len(before) + filler + len(after))
        call.exchange.write(before)
        _write_filler(call, filler, b"x" * piece)
        call.exchange.write(after)
        call.exchange.finish()
        return
    chunks = call.options["chunks"]
    call.open_stream()
    call.send_chunks(chunks, call.options["interval"])
    *opening, (name, payload) = call.render.text(_MARKER)
    call.send_events(opening)
    before, _, after = payload.partition(_MARKER_JSON)
    call.exchange.write(_event_head(name) + b"data: " + before)
    _write_filler(call, max(0, size - len(before) - len(after)), b"x" * piece)
    call.exchange.write(after + b"\n\n")
    call.end_stream(chunks)


def _oversized_event(call: Call) -> None:
    if not call.stream:
        _huge_line(call)
        return
    size, piece, chunks = call.options["size"], call.options["piece"], call.options["chunks"]
    call.open_stream()
    call.send_chunks(chunks, call.options["interval"])
    *opening, (name, whole) = call.render.text("")
    call.send_events(opening)
    call.exchange.write(_event_head(name) + b"data: " + whole[:-1] + b"\n")
    # JSON allows whitespace between tokens: lines of spaces keep the event one valid JSON value.
    _write_filler(call, max(0, size - len(whole)), b" " * piece, b"data:", b"\n")
    call.exchange.write(b"data: }\n\n")
    call.end_stream(chunks)


_COMMON: Dict[str, Any] = {"framing": "chunked", "text": DEFAULT_TEXT, "usage": True}
_FAULT: Dict[str, Any] = {**_COMMON, "fail_first": None, "fault_on": None}
_CHUNKS = {"chunks": 2, "interval": 0.02}
_HTTP = {"retry_after": None, "retry_after_ms": None}
_HEAD_DRIP = {"interval": 0.3, "duration": 60.0}  # a head that never ends, for a minute at most
_BIG = {"size": 64 * 1024 * 1024, "piece": 64 * 1024, "chunks": 1, "interval": 0.02}


def _http(
    status: int, message: str, error_type: str, code: Optional[str], **extra: Any
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(defaults, fixed) of a status scenario: the body fields are options, the status is not."""
    defaults = {
        **_FAULT,
        **_HTTP,
        "message": message,
        "type": error_type,
        "code": code,
        "echo": False,
        **extra,
    }
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
_E529 = _http(
    529, "The server is overloaded (FaultGateway http529), retry later.", "server_error", None
)
_MID = _http(
    529, "The server had an error while streaming (FaultGateway error_mid_stream).",
    "server_error", None, **_CHUNKS,
)  # fmt: skip

_TABLE: Tuple[Tuple[str, str, Behavior, Dict[str, Any], Dict[str, Any]], ...] = (
    ("ok", "a normal stream or completion", run_ok, {**_COMMON, "chunks": 5, "interval": 0.02}, {}),
    ("silent_after_200", "200 and headers, then nothing", _silent_after_200, _FAULT, {}),
    ("stall_after_chunks", "some chunks, then nothing", _stall_after_chunks, {**_FAULT, **_CHUNKS}, {}),
    ("slow_drip", "a chunk every interval, forever", _slow_drip, {**_FAULT, "interval": 0.5}, {}),
    ("keepalive_only", "SSE comments every interval, never data", _keepalive_only,
     {**_FAULT, "interval": 0.5}, {}),
    ("pings_only", "event: ping every interval, never data", _pings_only,
     {**_FAULT, "interval": 0.5}, {}),
    ("no_headers", "reads the request, never answers", _no_headers, _FAULT, {}),
    ("reset_before_headers", "reads the request, then TCP RST", _reset_before_headers, _FAULT, {}),
    ("early_hints_flood", "a 103 Early Hints every interval, never a final response",
     _early_hints_flood, {**_FAULT, **_HEAD_DRIP}, {}),
    ("header_drip", "the status line, then a header line every interval, never the end",
     _header_drip, {**_FAULT, **_HEAD_DRIP}, {}),
    ("reset_mid_stream", "some chunks, then TCP RST", _reset_mid_stream, {**_FAULT, **_CHUNKS}, {}),
    ("error_mid_stream", "some chunks, then an error event", _error_mid_stream, *_MID),
    ("http400", "400 with an error body", _http_error, *_E400),
    ("http401", "401 with an error body", _http_error, *_E401),
    ("http429", "429 with Retry-After", _http_error, *_E429),
    ("http500", "500 with an error body", _http_error, *_E500),
    ("http503", "503 with an error body", _http_error, *_E503),
    ("http529", "529 overloaded", _http_error, *_E529),
    ("http_error", "any status (option status)", _http_error, *_ANY_STATUS),
    ("no_finish_reason", "chunks, then a clean end without the terminal event",
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

# The Anthropic spelling of the error fields (Anthropic errors have no ``code``).
_ANTHROPIC_ERRORS: Dict[str, Tuple[str, str]] = {
    "error_mid_stream": ("Overloaded (FaultGateway error_mid_stream).", "overloaded_error"),
    "http400": ("Invalid request (FaultGateway http400).", "invalid_request_error"),
    "http401": ("invalid x-api-key (FaultGateway http401).", "authentication_error"),
    "http429": ("Rate limit reached (FaultGateway http429), retry later.", "rate_limit_error"),
    "http500": ("Internal server error (FaultGateway http500).", "api_error"),
    "http503": ("Service unavailable (FaultGateway http503).", "api_error"),
    "http529": ("Overloaded (FaultGateway http529).", "overloaded_error"),
    "http_error": ("Bad gateway (FaultGateway http_error).", "api_error"),
    "http500_then_ok": ("Internal server error (FaultGateway http500).", "api_error"),
    "http429_then_ok": (
        "Rate limit reached (FaultGateway http429), retry later.",
        "rate_limit_error",
    ),
}

# The Gemini spelling (google.rpc status names as the type; the code is the HTTP status).
_GEMINI_ERRORS: Dict[str, Tuple[str, str]] = {
    "error_mid_stream": (
        "The model is overloaded. Please try again later. (FaultGateway error_mid_stream)",
        "UNAVAILABLE",
    ),
    "http400": ("Request contains an invalid argument. (FaultGateway http400)", "INVALID_ARGUMENT"),
    "http401": ("API key not valid. Please pass a valid API key. (FaultGateway http401)",
                "UNAUTHENTICATED"),
    "http429": ("Resource has been exhausted, retry later. (FaultGateway http429)",
                "RESOURCE_EXHAUSTED"),
    "http500": ("An internal error has occurred. (FaultGateway http500)", "INTERNAL"),
    "http503": ("The model is overloaded. Please try again later. (FaultGateway http503)",
                "UNAVAILABLE"),
    "http529": ("Overloaded (FaultGateway http529).", "UNAVAILABLE"),
    "http_error": ("Bad gateway (FaultGateway http_error).", "UNAVAILABLE"),
    "http500_then_ok": ("An internal error has occurred. (FaultGateway http500)", "INTERNAL"),
    "http429_then_ok": (
        "Resource has been exhausted, retry later. (FaultGateway http429)",
        "RESOURCE_EXHAUSTED",
    ),
}  # fmt: skip

_SCENARIOS: Dict[str, Scenario] = {
    name: Scenario(name, summary, behavior, defaults, fixed)
    for name, summary, behavior, defaults, fixed in _TABLE
}
_OK_INHERITS = ("framing", "text", "usage")


def describe() -> Dict[str, str]:
    """Scenario name -> one-line summary, in documentation order."""
    return {name: scenario.summary for name, scenario in _SCENARIOS.items()}


def faults(scenario: Scenario, options: Mapping[str, Any], attempt: int) -> bool:
    """Whether request number ``attempt`` (1-based) of a route gets the fault, not ``ok``.

    ``fault_on``: only the listed requests; else ``fail_first``: the first N; else all.
    """
    if scenario.name == "ok":
        return False
    fault_on = options.get("fault_on")
    if fault_on is not None:
        return attempt in fault_on
    fail_first = options.get("fail_first")
    return fail_first is None or attempt <= fail_first


def _defaults(scenario: Scenario, api: str) -> Dict[str, Any]:
    """The options ``scenario`` accepts in ``api``, with their defaults."""
    defaults = dict(scenario.defaults)
    if api == "anthropic" and scenario.name in _ANTHROPIC_ERRORS:
        del defaults["code"]
        defaults["message"], defaults["type"] = _ANTHROPIC_ERRORS[scenario.name]
    elif api == "gemini" and scenario.name in _GEMINI_ERRORS:
        del defaults["code"]
        defaults["message"], defaults["type"] = _GEMINI_ERRORS[scenario.name]
    return defaults


def resolve(
    name: str, given: Mapping[str, Any], api: str = "openai"
) -> Tuple[Scenario, Dict[str, Any], Dict[str, Any]]:
    """Check a scenario name, the API and the options.

    Returns the scenario, its resolved options (fixed settings included) and
    the options of the ``ok`` behaviour used once ``fail_first`` is reached (or
    on the requests ``fault_on`` does not list). Raises ``ValueError`` listing
    the valid names, APIs or options, or when ``fail_first`` and ``fault_on``
    are both given,
    ``TypeError`` / ``ValueError`` for a bad option value.
    """
    if not isinstance(name, str):
        raise TypeError(f"scenario must be a str, not {type(name).__name__}")
    if api not in APIS:
        raise ValueError(f"unknown api {api!r}; valid apis: {', '.join(map(repr, APIS))}")
    scenario = _SCENARIOS.get(name)
    if scenario is None:
        raise ValueError(f"unknown scenario {name!r}; valid scenarios: {', '.join(_SCENARIOS)}")
    if given.get("fail_first") is not None and given.get("fault_on") is not None:
        raise ValueError(
            "give fail_first (the first N requests misbehave) or fault_on (the listed "
            "requests misbehave), not both"
        )
    options = check_options(name, _defaults(scenario, api), given)
    if options.get("fault_on") is not None:
        options["fail_first"] = None  # a scenario's own fail_first (silent_then_ok) gives way
    if name == "ok":
        return scenario, options, options
    base = _SCENARIOS["ok"].defaults
    ok_options = {**base, **{key: options[key] for key in _OK_INHERITS}}
    return scenario, {**options, **scenario.fixed}, ok_options
