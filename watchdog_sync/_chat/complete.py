"""One attempt of a non-streaming chat completion, hard-bounded by the budget through Session.

The ``Session`` bounds connect, the wait for headers and every body read, and
shuts the socket from outside when the budget ends, so a server that never
answers, or drip-feeds its body, stops at the deadline. The body is capped in
size and must be one JSON object.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple, Type

import requests
from urllib3.exceptions import DecodeError

from .._core.errors import StreamProtocolError
from .._core.redact import excerpt
from .._http.decode import BodyDecoder, UnknownEncoding
from .._http.json_object import json_object
from .._http.redirect import is_redirect
from .._http.streamed import raw_content
from .._http.translate import REQUESTS_ERRORS, Translator
from .._stream.sse import DEFAULT_MAX_EVENT_BYTES
from .call import ChatCall
from .errors import error_object

__all__ = ["MAX_RESPONSE_BYTES", "complete_once"]

MAX_RESPONSE_BYTES = DEFAULT_MAX_EVENT_BYTES
_ERROR_BODY_BYTES = 65536
_READ_SIZE = 65536
#: The codings asked for, all that ``BodyDecoder`` undoes (requests would add ``br`` and
#: ``zstd`` when their packages are installed).
_ACCEPT_ENCODING = "gzip, deflate"
# A body read fails with requests' types, or with urllib3's when it cannot be decoded.
_READ_ERRORS: Tuple[Type[BaseException], ...] = (*REQUESTS_ERRORS, DecodeError)


def complete_once(call: ChatCall) -> Dict[str, Any]:
    """Send the request once and return the parsed completion.

    Raises ``TransportError`` (connection failed or broke before the whole
    body arrived: retryable), ``HTTPStatusError`` (non-2xx, or an error
    object in a 200 body; a redirect is not followed: ``reason='redirect'``) and
    ``StreamProtocolError`` (``malformed_response``: not a JSON object, however it
    fails to decode; ``response_too_large``, counted after the Content-Encoding is
    undone; ``unexpected_content_encoding``: a coding other than gzip or deflate). The
    budget's end raises ``Cancelled`` for the boundary above.
    """
    errors = call.translator()
    try:
        response = call.session.post(
            call.url,
            json=call.body,
            headers={"Accept-Encoding": _ACCEPT_ENCODING, **call.headers},  # the caller's wins
            stream=True,
            timeout=(call.connect_timeout, None),
            allow_redirects=False,  # a POST is never replayed elsewhere, nor turned into a GET
        )
    except REQUESTS_ERRORS as exc:
        raise errors.error(exc) from exc
    try:
        status = response.status_code
        if is_redirect(response):
            raise errors.redirect_error(response, "POST")
        if not 200 <= status < 300:
            text = _read(response, _ERROR_BODY_BYTES, errors, partial=True)
            body = _text(text)
            raise errors.status_error(status, response.reason or "", body, response.headers)
        data = _read(response, MAX_RESPONSE_BYTES, errors, partial=False)
    finally:
        response.close()
    result = json_object(data)
    if result is None:
        raise StreamProtocolError(
            f"the completion is not a JSON object ({len(data)} bytes, starting "
            f"{_start(data, call)!r}); check that base_url points at an OpenAI-compatible API",
            reason="malformed_response",
            **errors.fields(),
        )
    if result.get("error") is not None:
        raise error_object(result, _text(data), 0, call.secrets, **errors.fields())
    return result


def _start(data: bytes, call: ChatCall) -> str:
    return excerpt(_text(data[:4096]), 60, call.secrets)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _read(response: requests.Response, limit: int, errors: Translator, *, partial: bool) -> bytes:
    """The decoded body, at most ``limit`` bytes: cut there (``partial``) or refused.

    Read as sent and decoded here, step by step within the limit: urllib3 1.26
    decodes a whole read at once, a gzip bomb's hundreds of MiB included.
    """
    pieces: List[bytes] = []
    try:
        decoder = _decoder(response.headers.get("Content-Encoding", ""), limit, errors, partial)
        for piece in raw_content(response, _READ_SIZE):
            pieces.extend(decoder.feed(piece))
            if decoder.over:
                if partial:
                    break
                raise StreamProtocolError(
                    f"the completion is larger than {limit} bytes; stopped reading to bound memory",
                    reason="response_too_large",
                    **errors.fields(),
                )
        decoder.finish()
    except _READ_ERRORS as exc:
        if not partial:
            raise errors.error(exc) from exc
        # An error body cut short still has its status; what arrived is enough.
    return b"".join(pieces)


def _decoder(encoding: str, limit: int, errors: Translator, partial: bool) -> BodyDecoder:
    """The body's decoder. A coding it cannot undo is refused; an error body, which is
    only shown, is then read as sent."""
    try:
        return BodyDecoder(encoding, limit)
    except UnknownEncoding as exc:
        if partial:
            return BodyDecoder("identity", limit)
        raise StreamProtocolError(
            f"the completion is encoded as {excerpt(encoding, 100, errors.secrets)!r}, which "
            f"cannot be decoded ({exc.coding[:40]!r}; {_ACCEPT_ENCODING} were asked for); "
            "check the server, or the proxy in front of it",
            reason="unexpected_content_encoding",
            **errors.fields(),
        ) from exc
