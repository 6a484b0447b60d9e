"""An HTTP request as a call for observers: its operation and model, read from its path and body.

Shared by :class:`HTTPXTransport` (``_httpx/call.py``) and the instrumented urllib3
requests (:class:`RequestCall`), so a request reads the same to an event listener or a
span whichever client sent it. ``http`` for any request; a path ending with
``/chat/completions`` (OpenAI) or ``/v1/messages`` (Anthropic) is a GenAI chat call
(``http_chat`` / ``http_messages``, ``_stream`` when it asks for a stream). The model
is the top-level ``"model"`` string of a JSON body in memory of at most 64 KiB; nothing
else of the body is kept, nor the path, the query or a header: an event holds the
server's host and port.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any, Callable, Optional

from .._core.budget import Budget
from .._core.calls import CallMark
from .._core.errors import Cancelled

__all__ = ["RequestCall", "model_of", "operation_of", "STREAM_FLAG"]

STREAM_FLAG = re.compile(rb'"stream"\s*:\s*true')
_CHAT_PATHS = (("/chat/completions", "http_chat"), ("/v1/messages", "http_messages"))
_MODEL_BODY_MAX = 64 * 1024  # the largest request body parsed for its model (bytes)
_MODEL_MAX = 256  # a longer "model" value is not a model's name: left out


def operation_of(path: str, streaming: bool) -> str:
    """The call's operation for a request to ``path`` (asking for a stream or not)."""
    path = path.rstrip("/")
    operation = next((op for suffix, op in _CHAT_PATHS if path.endswith(suffix)), "http")
    return operation + "_stream" if operation != "http" and streaming else operation


def model_of(body: Optional[bytes]) -> Optional[str]:
    """The top-level ``"model"`` of a JSON body (at most 64 KiB), else ``None``."""
    if body is None or len(body) > _MODEL_BODY_MAX or b'"model"' not in body:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), or nested too deep
        return None
    model = data.get("model") if type(data) is dict else None
    return model if type(model) is str and 0 < len(model) <= _MODEL_MAX else None


class RequestCall:
    """One instrumented urllib3 request's call: ``call_start`` now, ``call_end`` once, when the
    request failed (with its error's phase) or is over (its body read or closed) and
    ``urlopen`` returned (a preloaded body is over before it does)."""

    __slots__ = ("_over", "_returned", "mark", "status")

    def __init__(self, pool: Any, method: str, url: str, body: Any, budget: Budget) -> None:
        raw = body if isinstance(body, bytes) else None
        path = urllib.parse.urlsplit(str(url)).path
        operation = operation_of(path, raw is not None and STREAM_FLAG.search(raw) is not None)
        self.status: Optional[int] = None
        self._over = self._returned = False
        self.mark = CallMark(
            operation,
            budget=budget,
            stage="http",
            model=None if operation == "http" or str(method).upper() != "POST" else model_of(raw),
            server_address=getattr(pool, "host", None) or None,
            server_port=getattr(pool, "port", None),
        )

    def answered(self, response: Any) -> None:
        """``urlopen`` returned ``response`` (collected unclosed: the call ends ``abandoned``)."""
        self.status = getattr(response, "status", None)
        self._returned = True
        if self._over:
            self.mark.end(None, status=self.status)
        else:
            self.mark.end_when_collected(response)

    def failed(self, error: BaseException) -> None:
        """The request failed with ``error`` (the first word on the call's end wins)."""
        self.mark.end(error, status=self.status)

    def over(self, fired: bool, check: Callable[[], None]) -> None:
        """The request let its connections go; ``fired``: its budget's end shut them first
        (urllib3 lets a connection go on the read error before the reader sees it), then
        the ``Cancelled`` of ``check()`` (which says where the request was) ends the call."""
        if fired:
            try:
                check()
            except Cancelled as exc:
                self.failed(exc)
                return
        self._over = True
        if self._returned:
            self.mark.end(None, status=self.status)
