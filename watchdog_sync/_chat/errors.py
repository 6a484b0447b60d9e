"""The errors ChatClient raises for what a server said: statuses, error objects, broken bodies.

Every message shown is redacted with the call's secrets (the API key, credential
headers and their bare tokens) and with the key-shaped patterns of ``_redact``.
Errors are built once, with the call's fields; an error raised below the chat
layer leaves it as a copy with the call's fields added (:func:`for_call`).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Sequence, TypeVar

from .._core.errors import StreamProtocolError, WatchdogError, with_fields
from .._core.redact import excerpt
from .._http.json_object import json_object
from .._http.translate import http_status_error

__all__ = [
    "error_object",
    "for_call",
    "no_finish_reason",
    "status_wording",
]

E = TypeVar("E", bound=WatchdogError)

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
    parsed = json_object(body)
    return None if parsed is None else _describe_error(parsed.get("error", parsed))


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


def status_wording(
    status: int, phrase: str, body: str, secrets: Sequence[str], where: str = ""
) -> str:
    """The message of a status error: the server's own error text, and what to do."""
    shown = excerpt(server_message(body) or body, 300, secrets) or "(empty body)"
    advice = _ADVICE.get(status)
    return f"HTTP {status}{where}: {shown}" + (f"; {advice}" if advice else "")


def error_object(
    chunk: Dict[str, Any], raw: str, chunks: int, secrets: Sequence[str], **fields: Any
) -> WatchdogError:
    """The error for an ``{"error": ...}`` object sent inside a stream (or a 200 body).

    With an HTTP status in its ``code`` or ``status``: an :class:`HTTPStatusError`
    (retryable by the status table, and only if no chunk was delivered yet);
    otherwise ``StreamProtocolError(reason="stream_error")``. ``raw`` is the text
    ``chunk`` was decoded from; ``fields`` (``request_id``, ``attempt``) go into the error.
    """
    error = chunk.get("error")
    try:
        body = json.dumps(chunk, ensure_ascii=False, default=str)
    except RecursionError:  # nested just below json's limit: shown as it arrived
        body = raw
    status = None
    for holder in (error, chunk):
        if isinstance(holder, dict):
            status = (
                status or _http_status(holder.get("code")) or _http_status(holder.get("status"))
            )
    if status is not None:
        where = " (an error event in the stream)"
        return http_status_error(
            status,
            body,
            message=status_wording(status, "", body, secrets, where),
            secrets=secrets,
            retryable=False if chunks else None,  # delivered chunks: a replay would repeat them
            **fields,
        )
    shown = excerpt(_describe_error(error) or body, 300, secrets)
    return StreamProtocolError(
        f"the server sent an error inside the stream after {chunks} chunks: {shown}",
        reason="stream_error",
        chunks_received=chunks,
        **fields,
    )


def _http_status(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and 400 <= value <= 599 else None


def no_finish_reason(chunks: int, how: str, **fields: Any) -> StreamProtocolError:
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
        **fields,
    )


def for_call(error: E, request_id: str, attempt: Optional[int] = None, **fields: Any) -> E:
    """``error`` as the call reports it, with ``fields`` set.

    ``request_id`` and ``attempt`` fill in only where the error has none. A copy
    when anything changes: errors are immutable once raised.
    """
    changes = dict(fields)
    if error.request_id is None:
        changes["request_id"] = request_id
    if error.attempt is None and attempt is not None:
        changes["attempt"] = attempt
    return with_fields(error, **changes)
