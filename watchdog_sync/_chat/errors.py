"""The errors ChatClient raises for what a server said: statuses, error objects, broken bodies.

Every message shown is redacted with the call's secrets (the API key, credential
headers and their bare tokens) and with the key-shaped patterns of ``_redact``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Sequence

from .._core.errors import HTTPStatusError, StreamProtocolError, TransportError, WatchdogError
from .._core.redact import excerpt, scrub_exception
from .._retry.classify import classify, transport_advice

__all__ = [
    "error_object",
    "no_finish_reason",
    "status_error",
    "tag",
    "transport_error",
]

_ADVICE = {
    400: "the server rejected the request: check messages and parameters",
    401: "check the API key (api_key=)",
    403: "the key may not use this model or endpoint",
    404: "check base_url (the part before /chat/completions, e.g. https://host/v1) "
    "and the model name",
    413: "the request is too large: shorten the messages",
    422: "the server rejected the request: check messages and parameters",
    429: "rate limited; retried while the budget allows",
}


def server_message(body: str) -> Optional[str]:
    """The error text of an OpenAI-style body (``{"error": {"message": ...}}``), if any."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return _describe_error(parsed.get("error", parsed)) if isinstance(parsed, dict) else None


def _describe_error(error: Any) -> Optional[str]:
    if isinstance(error, str):
        return error or None
    if not isinstance(error, dict):
        return None
    message = error.get("message")
    if not isinstance(message, str) or not message:
        return None
    kinds = [str(v) for v in (error.get("type"), error.get("code")) if v not in (None, "")]
    return f"{message} ({', '.join(kinds)})" if kinds else message


def status_error(
    status: int,
    body: str,
    secrets: Sequence[Optional[str]],
    *,
    retry_after: Optional[float] = None,
    retryable: Optional[bool] = None,
    where: str = "",
) -> HTTPStatusError:
    """An :class:`HTTPStatusError` whose message is the server's own error text."""
    shown = excerpt(server_message(body) or body, 300, secrets) or "(empty body)"
    advice = _ADVICE.get(status)
    return HTTPStatusError(
        f"HTTP {status}{where}: {shown}" + (f"; {advice}" if advice else ""),
        status=status,
        retry_after=retry_after,
        body=excerpt(body, 1000, secrets),
        retryable=retryable,
    )


def error_object(
    chunk: Dict[str, Any], chunks: int, secrets: Sequence[Optional[str]]
) -> WatchdogError:
    """The error for an ``{"error": ...}`` object sent inside a stream (or a 200 body).

    With an HTTP status in its ``code`` or ``status``: an :class:`HTTPStatusError`
    (retryable by the status table, and only if no chunk was delivered yet);
    otherwise ``StreamProtocolError(reason="stream_error")``.
    """
    error = chunk.get("error")
    body = json.dumps(chunk, ensure_ascii=False, default=str)
    status = None
    for holder in (error, chunk):
        if isinstance(holder, dict):
            status = (
                status or _http_status(holder.get("code")) or _http_status(holder.get("status"))
            )
    if status is not None:
        verdict = status_error(status, body, secrets, where=" (an error event in the stream)")
        if chunks:
            verdict.retryable = False  # chunks were delivered: a replay would duplicate them
        return verdict
    shown = excerpt(_describe_error(error) or body, 300, secrets)
    return StreamProtocolError(
        f"the server sent an error inside the stream after {chunks} chunks: {shown}",
        reason="stream_error",
        chunks_received=chunks,
    )


def _http_status(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and 400 <= value <= 599 else None


def no_finish_reason(chunks: int, how: str) -> StreamProtocolError:
    """The stream ended (``how``) without ``finish_reason``; retryable only before any chunk."""
    if chunks:
        outcome = "the answer is incomplete (not retried: chunks were already delivered)"
    else:
        outcome = "nothing was generated (retried while attempts and the budget allowed)"
    return StreamProtocolError(
        f"the stream ended {how} after {chunks} chunks and no finish_reason: {outcome}",
        reason="no_finish_reason",
        chunks_received=chunks,
        retryable=chunks == 0,
    )


def transport_error(exc: BaseException, secrets: Sequence[Optional[str]]) -> TransportError:
    """A :class:`TransportError` for a requests/urllib3 failure (``exc`` is its cause).

    ``exc`` is scrubbed first: it stays reachable as ``__cause__``, so its request's
    credential headers and any secret in its message are masked in place.
    """
    scrub_exception(exc, secrets)
    verdict = classify(exc)  # the error says what classify() says about its cause
    code = verdict.transport_code
    return TransportError(
        f"transport failure ({code or type(exc).__name__}): {excerpt(str(exc), 300, secrets)}"
        + transport_advice(exc, verdict),
        transport_code=code,
        reason=verdict.reason if verdict.kind == "transport" else None,
        retryable=verdict.retryable,
    )


def tag(error: WatchdogError, request_id: str, attempt: Optional[int] = None) -> WatchdogError:
    """Fill the call's ``request_id`` (and ``attempt``) into ``error`` where it has none."""
    if error.request_id is None:
        error.request_id = request_id
    if error.attempt is None and attempt is not None:
        error.attempt = attempt
    return error
