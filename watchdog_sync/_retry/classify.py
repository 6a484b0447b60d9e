"""classify(exc): what happened, and whether another attempt could help.

The order is the design's (DESIGN.md, "Classification, in order"); the first
rule that matches wins. Foreign exceptions (requests, urllib3, socket,
http.client, httpx / httpx2 and httpcore, the openai, anthropic and
google-genai SDKs) are
read through ``__cause__`` / ``__context__`` chains and the wrappers' own
fields (``response.status_code``, ``response.headers``, ``body``), to a
bounded depth, without importing those libraries (``foreign.py``).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import errno
import http.client
import json
import math
import re
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Iterator, List, Mapping, Optional, Tuple

from .._core.errors import (
    Cancelled,
    DeadlineExceeded,
    HTTPStatusError,
    OperationCancelled,
    RetryExhausted,
    StreamIdleTimeout,
    StreamProtocolError,
    TransportError,
    WatchdogError,
)
from .._core.status import RETRYABLE_STATUS, status_verdict
from .foreign import (
    is_foreign,
    is_foreign_transport,
    name_code,
    provider_quota_used_up,
    provider_retry_delay,
    provider_status,
)

__all__ = ["Classification", "classify", "parse_retry_after", "transport_advice"]

_MAX_DEPTH = 8


@dataclass(frozen=True)
class Classification:
    """What an exception means for a retry loop.

    ``kind`` is one of ``'cancelled'``, ``'deadline'``, ``'timeout'``,
    ``'transport'``, ``'http'``, ``'protocol'``, ``'exhausted'``,
    ``'programming'``, ``'unknown'``; ``reason`` a stable code; ``retryable`` whether another
    attempt (within the same budget) could help; ``phase`` where a timeout found the work
    (``DeadlineExceeded.phase`` / ``OperationTimeout.phase``, a request timeout's ``phase``),
    else ``None``.
    """

    kind: str
    reason: str
    retryable: bool
    transport_code: Optional[str] = None
    status: Optional[int] = None
    retry_after: Optional[float] = None
    phase: Optional[str] = None


_ERRNO_CODES = {
    errno.ECONNRESET: "ECONNRESET",
    errno.ECONNREFUSED: "ECONNREFUSED",
    errno.ETIMEDOUT: "ETIMEDOUT",
    errno.EPIPE: "EPIPE",
    errno.ECONNABORTED: "ECONNABORTED",
    errno.EHOSTUNREACH: "EHOSTUNREACH",
    errno.ENETUNREACH: "ENETUNREACH",
    errno.ENETDOWN: "ENETDOWN",
    errno.ENETRESET: "ENETRESET",
    errno.EHOSTDOWN: "EHOSTDOWN",
}
_TYPE_CODES: Tuple[Tuple[type, str], ...] = (
    (socket.gaierror, "EAI_FAIL"),
    (ConnectionResetError, "ECONNRESET"),
    (ConnectionRefusedError, "ECONNREFUSED"),
    (ConnectionAbortedError, "ECONNABORTED"),
    (BrokenPipeError, "EPIPE"),
    (TimeoutError, "ETIMEDOUT"),
    (http.client.RemoteDisconnected, "EREMOTECLOSED"),
    (http.client.IncompleteRead, "EINCOMPLETE"),
)
# Foreign failures that retrying cannot fix, by name as above: (transport_code, reason).
_PERMANENT_NAMES = {
    "TooManyRedirects": ("EREDIRECTS", "too_many_redirects"),
    "ContentDecodingError": ("EDECODE", "content_decoding"),
    "DecodeError": ("EDECODE", "content_decoding"),
    "DecodingError": ("EDECODE", "content_decoding"),  # httpx's
}
_PERMANENT_ADVICE = {
    "tls": "the server's TLS certificate was refused{detail}; check the host name in the "
    "URL, the certificate (self-signed, expired, issued for another host?) and the CA bundle "
    "(REQUESTS_CA_BUNDLE, Session.verify)",
    "too_many_redirects": "the server redirects in a loop; check the URL",
    "content_decoding": "the body cannot be decoded as its Content-Encoding says; the "
    "server sends it the same way every time",
    "too_many_headers": "the response has more header lines than http.client accepts (100)",
    "line_too_long": "a line of the response head is longer than http.client accepts (64 KiB)",
}
_PROGRAMMING = (
    TypeError,
    AttributeError,
    NameError,
    NotImplementedError,
    AssertionError,
    ImportError,
    SyntaxError,
    ValueError,
)


def classify(exc: BaseException) -> Classification:
    """Classify ``exc`` for a retry decision, following DESIGN.md's order.

    1. cancellation and user aborts; 2. the shared deadline; 3. a stream idle
    timeout (retryable only before the first chunk); 4/5. HTTP status (a
    definitive 4xx wins over a nested transport code) and transport errors
    found anywhere in the cause chain; 6. stream protocol errors; 7.
    programming errors; 8. anything else: not retryable.

    A foreign error raised ``from`` one of ours (an SDK's ``APIConnectionError``
    wrapping a :class:`DeadlineExceeded`, say), or raised while handling one
    (LiteLLM's wrappers: its ``original_exception``, its ``__context__``), is
    classified as ours. A foreign error that says chunks were already delivered
    (LiteLLM's ``MidStreamFallbackError`` with ``is_pre_first_chunk=False``) is
    never retryable: a replay would repeat them.
    """
    verdict = _classify(exc)
    if verdict.retryable and is_foreign(exc) and _attr(exc, "is_pre_first_chunk") is False:
        return dataclasses.replace(verdict, retryable=False)
    return verdict


def _classify(exc: BaseException) -> Classification:
    own = _wrapped_own(exc)
    if own is not None:
        return classify(own)
    if isinstance(exc, (Cancelled, OperationCancelled, KeyboardInterrupt, SystemExit)):
        return Classification("cancelled", "cancelled", False)
    if isinstance(exc, DeadlineExceeded):
        return Classification("deadline", "deadline_exceeded", False, phase=exc.phase)
    if isinstance(exc, StreamIdleTimeout):
        return Classification(
            "timeout",
            exc.reason,
            exc.chunks_received == 0 and exc.retryable,
            "ETIMEDOUT",
            phase=exc.phase,
        )
    status = _find_status(exc)
    if status is not None and status[0] not in RETRYABLE_STATUS:
        return _http(exc, *status)
    if isinstance(exc, WatchdogError) and not isinstance(exc, (HTTPStatusError, TransportError)):
        return _own(exc)
    found = _find_transport(exc)
    if isinstance(exc, TransportError):  # its fields were decided from its cause when raised
        code = exc.transport_code or (found[0] if found is not None else None)
        return Classification("transport", exc.reason, bool(exc.retryable), code)
    if found is not None:
        code, reason, retryable = found
        decided = isinstance(exc, WatchdogError) and exc.retryable is False  # an inner layer's say
        return Classification("transport", reason, retryable and not decided, code)
    if status is not None:
        return _http(exc, *status)
    if isinstance(exc, _PROGRAMMING):
        return Classification("programming", "programming_error", False)
    return Classification("unknown", "unknown", False)


def _wrapped_own(exc: BaseException) -> Optional[BaseException]:
    """Ours, when ``exc`` is a foreign error that wraps it: ``raise ... from ours``, or a
    foreign wrapper raised while handling ours (LiteLLM re-raises the SDK's error as its
    own, without ``from``; its ``MidStreamFallbackError`` keeps ``original_exception``)."""
    if isinstance(exc, (WatchdogError, Cancelled)):
        return None
    node: Optional[BaseException] = exc
    for _ in range(_MAX_DEPTH):
        if node is None:
            return None
        if isinstance(node, (WatchdogError, Cancelled)):
            return node
        nxt = node.__cause__
        if nxt is None and is_foreign(node):
            original = _attr(node, "original_exception")
            if isinstance(original, BaseException):
                nxt = original
            elif not node.__suppress_context__:
                nxt = node.__context__
        node = nxt
    return None


def _own(exc: WatchdogError) -> Classification:
    if isinstance(exc, StreamProtocolError):
        kind = "protocol"
    elif isinstance(exc, RetryExhausted):
        kind = "exhausted"
    else:
        # A request's own timeout is also urllib3's or requests' timeout, not a TimeoutError.
        timeout = isinstance(exc, TimeoutError) or exc.reason == "request_timeout"
        kind = "timeout" if timeout else "unknown"
    phase = getattr(exc, "phase", None)  # the timeouts': a request timeout's too
    return Classification(kind, exc.reason, bool(exc.retryable), phase=phase)


def _http(exc: BaseException, status: int, body: str, headers: Mapping[str, str]) -> Classification:
    retry_after = parse_retry_after(headers)
    if isinstance(exc, HTTPStatusError) and exc.retry_after is not None:
        retry_after = exc.retry_after
    if retry_after is None:
        retry_after = provider_retry_delay(body)  # Google's RetryInfo.retryDelay
    reason, retryable = status_verdict(status, body)
    used_up = provider_quota_used_up(body) if status == 429 else None
    if used_up is not None:  # Google's QuotaFailure says which quota: per day, or per minute
        reason, retryable = ("quota_exceeded", False) if used_up else ("rate_limited", True)
    if isinstance(exc, WatchdogError) and exc.retryable is False:
        retryable = False  # an inner layer already decided
    return Classification("http", reason, retryable, None, status, retry_after)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: causes, contexts, ``.reason`` and exception args."""
    seen: List[int] = []
    frontier: List[Tuple[BaseException, int]] = [(exc, 0)]
    while frontier:
        node, depth = frontier.pop(0)
        if id(node) in seen:
            continue
        seen.append(id(node))
        yield node
        if depth >= _MAX_DEPTH:
            continue
        context = None if node.__suppress_context__ else node.__context__
        linked: List[Any] = [node.__cause__, context, _attr(node, "reason")]
        args = _attr(node, "args")
        linked.extend(args[:3] if isinstance(args, tuple) else ())
        for item in linked:
            if isinstance(item, BaseException):
                frontier.append((item, depth + 1))


def _find_status(exc: BaseException) -> Optional[Tuple[int, str, Mapping[str, str]]]:
    for node in _chain(exc):
        if isinstance(node, HTTPStatusError):
            retry_after = {} if node.retry_after is None else {"retry-after": str(node.retry_after)}
            return node.status, node.body, retry_after
        response = _attr(node, "response")
        status = _attr(response, "status_code")
        if not _is_status(status) and is_foreign(node):
            status = provider_status(_attr(node, "body")) or status
            if not _is_status(status):
                status = _attr(node, "code")  # google-genai's APIError (an error in a stream)
        if _is_status(status):
            headers = _attr(response, "headers")
            return (
                status,
                _status_text(node, response),
                headers if isinstance(headers, Mapping) else {},
            )
    return None


def _is_status(status: Any) -> bool:
    """An HTTP error status (``>= 400``)."""
    return isinstance(status, int) and not isinstance(status, bool) and status >= 400


def _status_text(node: BaseException, response: Any) -> str:
    """The response's text, or the SDK error's parsed ``body`` (quota and context hints)."""
    text = _response_text(response)
    body = _attr(node, "body")
    if body is None and is_foreign(node):
        body = _attr(node, "details")  # google-genai's APIError: the parsed error body
    if not text and body is not None and is_foreign(node):
        try:
            text = body if isinstance(body, str) else json.dumps(body, default=str)
        except (TypeError, ValueError):
            text = ""
    return text[:4096]


def _response_text(response: Any) -> str:
    try:
        if _attr(response, "_content_consumed") is False:
            return ""  # a streamed body not read yet: do not block on it here
        text = response.text
    except Exception:  # a body that cannot be decoded tells us nothing more
        return ""
    return text[:4096] if isinstance(text, str) else ""


def _find_transport(exc: BaseException) -> Optional[Tuple[str, str, bool]]:
    """``(transport_code, reason, retryable)`` of the first transport failure in the chain."""
    fallback: Optional[str] = None
    for node in _chain(exc):
        if isinstance(node, TransportError) and node.transport_code:
            return node.transport_code, node.reason, bool(node.retryable)
        permanent = _permanent_failure(node)
        if permanent is not None:
            return permanent[0], permanent[1], False
        number = _attr(node, "errno")
        if isinstance(node, OSError) and isinstance(number, int) and number in _ERRNO_CODES:
            return _ERRNO_CODES[number], "transport", True
        for kind, code in _TYPE_CODES:
            if isinstance(node, kind):
                return code, "transport", True
        if fallback is None:
            fallback = name_code(type(node))
    return None if fallback is None else (fallback, "transport", True)


def _permanent_failure(node: BaseException) -> Optional[Tuple[str, str]]:
    """``(transport_code, reason)`` when ``node`` is a transport failure that another
    attempt cannot fix: the server, or its certificate, will answer the same again."""
    name = type(node).__name__
    if isinstance(node, ssl.SSLCertVerificationError) or (
        name == "CertificateError" and is_foreign_transport(node)  # urllib3 1.26's own
    ):
        return "ETLS", "tls"
    if isinstance(node, http.client.LineTooLong):
        return "ELINETOOLONG", "line_too_long"
    if type(node) is http.client.HTTPException and _text(node).startswith("got more than"):
        return "EHEADERS", "too_many_headers"  # http.client's limit on header lines (100)
    if name in _PERMANENT_NAMES and is_foreign_transport(node):
        return _PERMANENT_NAMES[name]
    return None


def transport_advice(exc: BaseException, verdict: Classification) -> str:
    """Why the transport failure ``exc`` (classified as ``verdict``) is not retried, and
    what to check; empty when it is retried."""
    advice = _PERMANENT_ADVICE.get(verdict.reason, "") if verdict.kind == "transport" else ""
    if not advice:
        return ""
    if verdict.reason == "tls":
        detail = next((_cert_problem(node) for node in _chain(exc) if _cert_problem(node)), "")
        advice = advice.format(detail=f" ({detail})" if detail else "")
    return f"; not retried: {advice}"


def _cert_problem(node: BaseException) -> str:
    """What OpenSSL (or urllib3 1.26's host name check) said about the certificate."""
    if isinstance(node, ssl.SSLError):
        message = _attr(node, "verify_message")
        return message if isinstance(message, str) else ""
    if type(node).__name__ == "CertificateError" and is_foreign_transport(node):
        return _text(node)
    return ""


def _attr(obj: Any, name: str) -> Any:
    """``obj.name``, or ``None`` when it is missing or its property raises."""
    try:
        return getattr(obj, name, None)
    except Exception:  # a broken property tells us nothing; classify() must still answer
        return None


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ raises
        return ""


def parse_retry_after(headers: Optional[Mapping[str, str]]) -> Optional[float]:
    """Seconds to wait from ``retry-after-ms``, ``Retry-After`` seconds or an HTTP date.

    Garbage, negative values and dates in the past give ``None``.
    """
    if not headers:
        return None
    lowered = {str(k).lower(): str(v).strip() for k, v in headers.items()}
    milliseconds = _decimal(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000.0
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _decimal(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    delta = (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    return delta if delta > 0 else None


_DECIMAL = re.compile(r"^[0-9]+(\.[0-9]+)?$")


def _decimal(value: Optional[str]) -> Optional[float]:
    if value is None or not _DECIMAL.match(value):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
