"""The Gemini API wire format of the FaultGateway: stream events, responses, errors.

google-genai posts ``{base_url}/{v1|v1beta}/models/{model}:streamGenerateContent?alt=sse``
for a stream and ``...:generateContent`` for one answer. Each stream event is a
``GenerateContentResponse`` on one ``data:`` line (no ``event:`` names, no
``[DONE]``); the last one carries the candidate's ``finishReason`` and the
``usageMetadata``::

    data: {"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"},
           "index": 0}], "modelVersion": ..., "responseId": ...}
    ...
    data: {"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"},
           "finishReason": "STOP", "index": 0}], "usageMetadata": {...}, ...}

Errors have Google's shape, ``{"error": {"code": 429, "message": ...,
"status": "RESOURCE_EXHAUSTED"}}``; a 429 given a ``retry_after`` carries it as
``RetryInfo.retryDelay`` in ``details`` (``"1s"``), as the Gemini API does,
not as a header.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._format import Event, dumps

__all__ = ["GeminiRendering", "error_body", "grpc_status_for", "input_tokens"]

_MALFORMED = b'data: {"candidates": [{"content": {"parts": [\n\n'
_GRPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_CODES = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ABORTED": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "INTERNAL": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def grpc_status_for(status: int) -> str:
    """The Google ``error.status`` name of an HTTP status (``UNAVAILABLE`` for other 5xx)."""
    return _GRPC_STATUS.get(status, "UNAVAILABLE" if status >= 500 else "FAILED_PRECONDITION")


def error_body(
    message: str, status_name: str, code: Optional[int] = None, retry_delay: Optional[str] = None
) -> bytes:
    """``{"error": {"code", "message", "status"}}`` (``details`` with a ``RetryInfo``
    when ``retry_delay`` is given, e.g. ``"1s"``)."""
    error: Dict[str, Any] = {
        "code": code if code is not None else _CODES.get(status_name, 500),
        "message": message,
        "status": status_name,
    }
    if retry_delay is not None:
        error["details"] = [{"@type": _RETRY_INFO, "retryDelay": retry_delay}]
    return dumps({"error": error})


def _words(contents: Any) -> int:
    if isinstance(contents, str):
        return len(contents.split())
    if isinstance(contents, dict):
        return _words(contents.get("text")) + _words(contents.get("parts"))
    if isinstance(contents, list):
        return sum(_words(item) for item in contents)
    return 0


def input_tokens(body: Any) -> int:
    """Words in the request's ``contents`` (and ``systemInstruction``): a deterministic count."""
    if not isinstance(body, dict):
        return 0
    return _words(body.get("contents")) + _words(body.get("systemInstruction"))


def _duration(retry_after: Optional[str]) -> Optional[str]:
    """``"1"`` -> ``"1s"`` (a protobuf Duration); an HTTP date has no such form: None."""
    if retry_after is None:
        return None
    try:
        seconds = float(retry_after)
    except ValueError:
        return None
    return f"{seconds:g}s"


class GeminiRendering:
    """``GenerateContentResponse`` events, the last with ``finishReason``; errors in
    Google's shape (``status``: the HTTP status of the scenario's error answers).

    ``usage=False`` sends no ``usageMetadata``.
    """

    retry_in_body = True  # a 429's retry_after is RetryInfo.retryDelay, not a header

    def __init__(
        self,
        ident: str,
        model: str,
        body: Any,
        *,
        usage: bool,
        status: Optional[int] = None,
        retry_after: Optional[str] = None,
    ) -> None:
        self._ident = ident
        self._model = model
        self._input = input_tokens(body) if usage else 0
        self._usage = usage
        self._status = status
        self._retry_delay = _duration(retry_after) if status == 429 else None

    def _response(self, text: str, finish: Optional[str], total: Optional[str]) -> Any:
        candidate: Dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}}
        if finish is not None:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        response: Dict[str, Any] = {"candidates": [candidate]}
        if total is not None and self._usage:
            output = len(total.split())
            response["usageMetadata"] = {
                "promptTokenCount": self._input,
                "candidatesTokenCount": output,
                "totalTokenCount": self._input + output,
            }
        response["modelVersion"] = self._model
        response["responseId"] = self._ident
        return response

    def text(self, piece: str) -> List[Event]:
        return [(None, dumps(self._response(piece, None, None)))]

    def finish(self, text: str) -> List[Event]:
        return [(None, dumps(self._response("", "STOP", text)))]

    def completion(self, content: str, *, finished: bool = True) -> bytes:
        return dumps(self._response(content, "STOP" if finished else None, content))

    def error_body(self, message: str, error_type: str, code: Optional[str]) -> bytes:
        return error_body(message, error_type, self._status, self._retry_delay)

    def error_event(self, message: str, error_type: str, code: Optional[str]) -> Event:
        """``data: {"error": {...}}``: how the Gemini API fails inside a stream."""
        return (None, error_body(message, error_type))

    def malformed(self) -> bytes:
        return _MALFORMED
