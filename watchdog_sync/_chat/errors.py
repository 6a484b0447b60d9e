"""The errors ChatClient raises for what a server said: statuses, error objects, broken bodies.

Every message shown is redacted with the call's secrets (the API key, credential
headers and their bare tokens) and with the key-shaped patterns of ``_redact``.
Errors are built once, with the call's fields; an error raised below the chat
layer leaves it as a copy with the call's fields added (:func:`for_call`).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, TypeVar

from .._core.errors import WatchdogError, with_fields
from .._core.redact import excerpt
from .._http.json_object import json_object
from .._stream.wire import describe_error, error_event

__all__ = [
    "error_object",
    "for_call",
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
    return None if parsed is None else describe_error(parsed.get("error", parsed))


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
    """The error for an ``{"error": ...}`` object sent inside a stream (or a 200 body),
    as every stream maps it (:func:`~.._stream.wire.error_event`), with ChatClient's advice."""
    return error_event(chunk, chunks, raw=raw, secrets=secrets, advice=_ADVICE, **fields)


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
