"""One attempt of a non-streaming chat completion, hard-bounded by the budget through Session.

The ``Session`` bounds connect, the wait for headers and every body read, and
shuts the socket from outside when the budget ends, so a server that never
answers, or drip-feeds its body, stops at the deadline. The body is capped in
size and must be one JSON object.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

import requests

from .._core.errors import StreamProtocolError
from .._core.redact import excerpt
from .._retry.classify import parse_retry_after
from .._transport.redirect import is_redirect, refused_redirect
from .._transport.sse import DEFAULT_MAX_EVENT_BYTES
from .call import ChatCall
from .errors import error_object, status_error, transport_error

__all__ = ["MAX_RESPONSE_BYTES", "complete_once"]

MAX_RESPONSE_BYTES = DEFAULT_MAX_EVENT_BYTES
_ERROR_BODY_BYTES = 65536
_READ_SIZE = 65536


def complete_once(call: ChatCall) -> Dict[str, Any]:
    """Send the request once and return the parsed completion.

    Raises ``TransportError`` (connection failed or broke before the whole
    body arrived: retryable), ``HTTPStatusError`` (non-2xx, or an error
    object in a 200 body; a redirect is not followed: ``reason='redirect'``) and ``StreamProtocolError`` (``malformed_response``:
    not a JSON object; ``response_too_large``). The budget's end raises
    ``Cancelled`` for the boundary above.
    """
    try:
        response = call.session.post(
            call.url,
            json=call.body,
            headers=call.headers,
            stream=True,
            timeout=(call.connect_timeout, None),
            allow_redirects=False,  # a POST is never replayed elsewhere, nor turned into a GET
        )
    except requests.RequestException as exc:
        raise transport_error(exc, call.secrets) from exc
    try:
        status = response.status_code
        if is_redirect(response):
            raise refused_redirect(response, "POST", call.secrets)
        if not 200 <= status < 300:
            text = _read(response, _ERROR_BODY_BYTES, call, partial=True)
            raise status_error(
                status,
                text.decode("utf-8", "replace"),
                call.secrets,
                retry_after=parse_retry_after(response.headers),
            )
        data = _read(response, MAX_RESPONSE_BYTES, call, partial=False)
    finally:
        response.close()
    try:
        result = json.loads(data)
    except ValueError:
        result = None
    if not isinstance(result, dict):
        raise StreamProtocolError(
            f"the completion is not a JSON object ({len(data)} bytes, starting "
            f"{_start(data, call)!r}); check that base_url points at an OpenAI-compatible API",
            reason="malformed_response",
        )
    if result.get("error") is not None:
        raise error_object(result, 0, call.secrets)
    return result


def _start(data: bytes, call: ChatCall) -> str:
    return excerpt(data[:4096].decode("utf-8", "replace"), 60, call.secrets)


def _read(response: requests.Response, limit: int, call: ChatCall, *, partial: bool) -> bytes:
    """The body, at most ``limit`` bytes: cut there (``partial``) or refused."""
    pieces: List[bytes] = []
    size = 0
    try:
        for piece in response.iter_content(_READ_SIZE):
            size += len(piece)
            if size > limit:
                if partial:
                    pieces.append(piece[: len(piece) - (size - limit)])
                    break
                raise StreamProtocolError(
                    f"the completion is larger than {limit} bytes; stopped reading to bound memory",
                    reason="response_too_large",
                )
            pieces.append(piece)
    except requests.RequestException as exc:
        if not partial:
            raise transport_error(exc, call.secrets) from exc
        # An error body cut short still has its status; what arrived is enough.
    return b"".join(pieces)
