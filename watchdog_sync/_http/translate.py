"""The translation boundary: foreign exceptions and non-2xx answers become our errors here.

requests, urllib3, http.client, socket and ssl raise their own types; ``stream_sse``
and ``ChatClient`` raise only :class:`WatchdogError` subclasses. Every call into those
libraries that can fail is translated by one ordered table (the first row whose type
matches wins, as in httpx's ``map_httpcore_exceptions``), written
``raise translator.error(exc) from exc`` so the foreign error stays the ``__cause__``.
A non-2xx answer becomes an :class:`HTTPStatusError` built once, with its reason and
retryable from the status table (``_core/status.py``) and its message worded by the
layer that owns the call (:class:`Translator` ``wording``); so does a redirect that is
not followed (``redirect.py``).

``Session`` is not behind this boundary: it stays a drop-in ``requests.Session`` and
raises requests' own types.
"""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Type

import requests
import urllib3.exceptions

from .._core.errors import HTTPStatusError, StreamProtocolError, TransportError, WatchdogError
from .._core.redact import excerpt, scrub_exception
from .._core.status import status_verdict
from .._retry.classify import classify, parse_retry_after, transport_advice
from .redirect import refused_redirect

__all__ = [
    "RAW_READ_ERRORS",
    "REQUESTS_ERRORS",
    "MalformedFraming",
    "StatusWording",
    "Translator",
    "http_status_error",
]

#: ``(status, reason phrase, body, secrets) -> message`` of a status error.
StatusWording = Callable[[int, str, str, Sequence[str]], str]

#: What a request or a body read through requests raises when the exchange fails:
#: requests wraps urllib3's and the socket's errors in its own. (A ``UnicodeEncodeError``
#: for a header value, say, is the caller's mistake and is not translated.)
REQUESTS_ERRORS: Tuple[Type[BaseException], ...] = (requests.RequestException,)


class MalformedFraming(http.client.HTTPException):
    """A body's chunked framing breaks HTTP/1.1: a chunk size that is not hex digits (``-5``,
    ``zz``), no CRLF after a chunk's data, an endless chunk-size line.

    Raised by our own body decoder (``_stream/sse_feed.py``) as http.client's kind of error, so
    every reader that catches those catches it too; the table below makes it a
    :class:`StreamProtocolError` (``'malformed_framing'``, not retryable: the same bytes
    would break the same way), not a transport failure.
    """


def _plain_wording(status: int, phrase: str, body: str, secrets: Sequence[str]) -> str:
    shown = excerpt(body, 300, secrets) or "(empty body)"
    return f"HTTP {status} {excerpt(phrase, 100, secrets)}".rstrip() + f": {shown}"


@dataclass(frozen=True, repr=False)
class Translator:
    """How the failures of one request become our errors.

    ``secrets`` are redacted from every message; ``wording`` words a status error's
    message; ``request_id`` and ``attempt`` are filled into every error built here.
    """

    secrets: Tuple[str, ...] = ()
    wording: StatusWording = _plain_wording
    request_id: Optional[str] = None
    attempt: Optional[int] = None

    def __repr__(self) -> str:  # the secrets stay out of reprs
        return f"<Translator request_id={self.request_id!r} attempt={self.attempt!r}>"

    def error(self, exc: BaseException) -> WatchdogError:
        """Our error for the foreign ``exc`` (one of :data:`RAW_READ_ERRORS`), by the table."""
        if isinstance(exc, WatchdogError):
            raise TypeError(f"{type(exc).__name__} is ours already: catch foreign errors only")
        for kind, make in _TABLE:
            if isinstance(exc, kind):
                return make(self, exc)
        raise TypeError(f"no translation for {type(exc).__name__}: catch RAW_READ_ERRORS only")

    def status_error(
        self, status: int, phrase: str, body: str, headers: Mapping[str, str]
    ) -> HTTPStatusError:
        """The :class:`HTTPStatusError` for a non-2xx answer with this (unredacted) body."""
        return http_status_error(
            status,
            body,
            message=self.wording(status, phrase, body, self.secrets),
            retry_after=parse_retry_after(headers),
            secrets=self.secrets,
            **self.fields(),
        )

    def redirect_error(self, response: requests.Response, method: str) -> HTTPStatusError:
        """The :class:`HTTPStatusError` for a redirect of ``method`` that is not followed."""
        return refused_redirect(response, method, self.secrets, **self.fields())

    def fields(self) -> Dict[str, Any]:
        """The call's fields for errors built elsewhere on its behalf."""
        return {"request_id": self.request_id, "attempt": self.attempt}


def http_status_error(
    status: int,
    body: str,
    *,
    message: str,
    secrets: Sequence[str],
    retry_after: Optional[float] = None,
    retryable: Optional[bool] = None,
    **fields: Any,
) -> HTTPStatusError:
    """An :class:`HTTPStatusError`, reason and retryable from the status table.

    ``retryable=False`` overrides the table (an inner decision, e.g. chunks were
    already delivered). The body kept is a redacted excerpt, and the table reads
    that excerpt, so the error and a later ``classify()`` of it agree.
    """
    kept = excerpt(body, 1000, secrets)
    reason, verdict = status_verdict(status, kept)  # what classify() reads later, too
    return HTTPStatusError(
        message,
        status=status,
        retry_after=retry_after,
        body=kept,
        reason=reason,
        retryable=verdict and retryable is not False,
        **fields,
    )


def _transport(translator: Translator, exc: BaseException) -> WatchdogError:
    scrub_exception(exc, translator.secrets)  # it stays our __cause__: no credential in it
    verdict = classify(exc)  # the error says what classify() says about its cause
    code = verdict.transport_code
    return TransportError(
        f"transport failure ({code or type(exc).__name__}): "
        f"{excerpt(str(exc), 300, translator.secrets)}" + transport_advice(exc, verdict),
        transport_code=code,
        reason=verdict.reason if verdict.kind == "transport" else None,
        retryable=verdict.retryable,
        **translator.fields(),
    )


def _not_utf8(translator: Translator, exc: BaseException) -> WatchdogError:
    assert isinstance(exc, UnicodeDecodeError)
    return StreamProtocolError(
        f"an SSE event is not valid UTF-8 ({exc.reason} at byte {exc.start})",
        reason="malformed_event",
        **translator.fields(),
    )


def _malformed_framing(translator: Translator, exc: BaseException) -> WatchdogError:
    return StreamProtocolError(
        f"the response body's chunked framing is malformed ({exc}): the server, or a proxy "
        "in between, broke HTTP/1.1 framing; not retried",
        reason="malformed_framing",
        retryable=False,
        **translator.fields(),
    )


# The first row whose type matches wins: a more specific type comes before its base.
_TABLE: Tuple[
    Tuple[Type[BaseException], Callable[[Translator, BaseException], WatchdogError]], ...
] = (
    (UnicodeDecodeError, _not_utf8),  # a ValueError: the bytes were read, they are not text
    (requests.RequestException, _transport),  # requests' wrappers (some are also ValueError)
    (urllib3.exceptions.HTTPError, _transport),
    (MalformedFraming, _malformed_framing),  # our own decoder's, before http.client's base
    (http.client.HTTPException, _transport),
    (OSError, _transport),  # socket and ssl: reset, refused, timed out, certificate
    (ValueError, _transport),  # http.client: a chunk-size line that is not hex
)

#: What reading a body from http.client directly raises (as the SSE reader does): every
#: type the table knows. ``OSError`` (reset, timed out), ``HTTPException``
#: (``IncompleteRead``), ``ValueError`` (a chunk-size line that is not hex). For raw reads
#: only: our own ``DeadlineExceeded`` is an ``OSError`` too (a raw read never raises it).
RAW_READ_ERRORS: Tuple[Type[BaseException], ...] = tuple(kind for kind, _ in _TABLE)
