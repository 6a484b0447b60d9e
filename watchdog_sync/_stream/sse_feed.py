"""stream_sse's request and body: the opener of a socket feed, and its body's framing.

The request is bounded by the connect limit, the first-event limit (the whole response
head included) and the stream's budget, whose end (a stop, the deadline) shuts the
connection from outside. Its body, the bytes buffered with the headers first, is read by
:class:`~.pipeline.BodyFeed` through the :class:`Opener`'s framing.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import math
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional

import requests

from .._core.budget import Budget
from .._core.errors import StreamProtocolError, WatchdogError
from .._core.redact import excerpt
from .._core.scope import using_budget
from .._http.guard import head_until
from .._http.http import Session
from .._http.redirect import FOLLOWED_METHODS, is_redirect
from .._http.translate import RAW_READ_ERRORS, REQUESTS_ERRORS, Translator
from .body import FramingDecoder, body_pieces
from .framing import EventFramer
from .parse import parse_events
from .pipeline import BodyFeed
from .private_session import private_session
from .socket_feed import OpenTimedOut, SocketFeed
from .socket_read import READ_SIZE
from .wire import is_activity

_ERROR_BODY_LIMIT = 4096
_FIRST_READ = max(READ_SIZE, io.DEFAULT_BUFFER_SIZE)  # http.client's buffer, whole

__all__ = ["Opener"]


def _check_response(response: requests.Response, method: str, translator: Translator) -> None:
    status = response.status_code
    if is_redirect(response):
        raise translator.redirect_error(response, str(method).upper())
    if not 200 <= status < 300:
        body = _read_error_body(response)
        raise translator.status_error(status, response.reason or "", body, response.headers)
    content_type = response.headers.get("Content-Type", "")
    if not content_type.lower().startswith("text/event-stream"):
        raise StreamProtocolError(
            f"expected an event stream (text/event-stream) but the server answered "
            f"{excerpt(content_type, 100, translator.secrets) or 'with no Content-Type'}; check the URL and "
            "that the request asks for streaming",
            reason="unexpected_content_type",
            **translator.fields(),
        )
    encoding = response.headers.get("Content-Encoding", "identity").lower()
    if encoding not in ("", "identity"):
        raise StreamProtocolError(
            f"the event stream is compressed ({excerpt(encoding, 100, translator.secrets)}) although "
            "identity was asked for",
            reason="unexpected_content_encoding",
            **translator.fields(),
        )


def _read_error_body(response: requests.Response) -> str:
    data = b""
    with contextlib.suppress(*RAW_READ_ERRORS):
        for piece in body_pieces(_http_response(response)):
            data += piece
            if len(data) >= _ERROR_BODY_LIMIT:
                break
    return data[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")  # redacted where it is shown


def _http_response(response: requests.Response) -> http.client.HTTPResponse:
    """The http.client response under urllib3, whose body we read ourselves."""
    raw = getattr(response.raw, "_fp", None)
    if not isinstance(raw, http.client.HTTPResponse):
        raise WatchdogError(
            "this urllib3 version hides the raw response; watchdog_sync needs urllib3 1.26 or 2.x",
            reason="unsupported_urllib3",
        )
    return raw


def _buffered(raw: http.client.HTTPResponse, opener: Opener) -> Iterator[bytes]:
    """The bytes that arrived with the headers, from http.client's buffer: each read asks
    for at least the buffer's size, so none is left behind in it, and at most one read's
    worth is taken (a flood from the first byte goes on in the consumer's reads, between
    which the first-event limit is checked)."""
    given = 0
    while not opener.done and given < READ_SIZE:
        try:
            data = raw.fp.read1(_FIRST_READ)
        except (BlockingIOError, ssl.SSLWantReadError):
            return
        if not data:
            return
        given += len(data)
        yield data


@dataclass(eq=False, repr=False)
class Opener:
    """``stream_sse``'s request (see the module's docstring; ``abort``: the stream's budget),
    then the :class:`~.pipeline.Framing` of its body: chunked, sized or close-delimited."""

    session: Optional[Session]
    method: str
    url: str
    body: Any
    headers: Mapping[str, str]
    connect: Optional[float]
    errors: Translator
    framer: EventFramer
    stream_ref: Callable[[], Any]
    abort: Budget
    _session_release: Optional[Callable[[bool], None]] = field(default=None, init=False)
    _response: Optional[requests.Response] = field(default=None, init=False)
    _decoder: Optional[FramingDecoder] = field(default=None, init=False)

    def __call__(self, feed: SocketFeed[Any]) -> None:
        watch = feed.watch
        response = self._response = self._send(watch.idle_left(watch.created, watch.now()))
        current = self.stream_ref()
        if current is not None:
            current.headers_at = time.monotonic()
            current.status = response.status_code
            current.headers = dict(response.headers)
        del current
        try:
            _check_response(response, self.method, self.errors)
            raw = _http_response(response)
            sock = getattr(getattr(raw.fp, "raw", None), "_sock", None)
            if sock is not None:
                sock.settimeout(0)  # for the buffered bytes; the body reader sets it as it reads
            self._decoder = FramingDecoder(chunked=bool(raw.chunked), length=raw.length)
            body: BodyFeed[Any] = BodyFeed(sock, self, self.framer, is_activity, parse_events)
            body.start(feed, _buffered(raw, self))  # on an error, the body ends itself
        except BaseException:
            self.release(clean=False)
            raise

    def _send(self, left: float) -> requests.Response:
        """The request, up to its response's head. ``left``: seconds of the first-event
        limit (``inf``: none), which bounds the connect and the whole head too (a head that
        drips, or interim responses that keep coming): the consumer must be back by then."""
        read = None if math.isinf(left) else max(0.001, left)
        connect = self.connect
        first_cuts_connect = read is not None and (connect is None or read < connect)
        session, own = self.session, False
        if session is None:  # the thread's, held until the stream's end (release)
            session, self._session_release = private_session()
            own = self._session_release is None  # a new one of its own: closed once the head is in
        response = None
        try:
            with (
                using_budget(self.abort),
                head_until(None if read is None else time.monotonic() + read),
            ):
                response = session.request(
                    self.method,
                    self.url,
                    json=self.body,
                    headers=self.headers,
                    stream=True,
                    timeout=(read if first_cuts_connect else connect, read),
                    allow_redirects=str(self.method).upper() in FOLLOWED_METHODS,
                )
            return response
        except requests.ReadTimeout:
            raise OpenTimedOut() from None
        except requests.ConnectTimeout as exc:
            if first_cuts_connect:
                raise OpenTimedOut() from None
            raise self.errors.error(exc) from exc
        except REQUESTS_ERRORS as exc:
            raise self.errors.error(exc) from exc
        finally:
            if own:  # as requests.post: the response holds its connection (closed at its end)
                session.close()
            if response is None:  # no response holds the connection: let the session go now
                self._let_session_go(reusable=False)

    # -- the body's Framing -------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._decoder is not None and self._decoder.done

    def payload(self, data: Optional[bytes]) -> bytes:
        assert data is not None and self._decoder is not None
        return self._decoder.feed(data)  # broken framing: an HTTPException, see outcome()

    def outcome(self, error: Optional[BaseException], eof: bool) -> Optional[BaseException]:
        if isinstance(
            error, (OSError, http.client.HTTPException, UnicodeDecodeError)
        ) and not isinstance(error, WatchdogError):
            # A foreign read, framing or decoding error (ours, a TransportError, is an
            # OSError too).
            self.abort.check()  # our own shutdown caused it: the budget's end, not a reset
            cause, error = error, self.errors.error(error)
            error.__cause__ = cause
        elif error is None:
            self.abort.check()  # an EOF caused by our own shutdown is not a clean end
            if eof and self._decoder is not None:
                try:
                    self._decoder.eof()
                except http.client.HTTPException as exc:
                    return self.errors.error(exc)
            current = self.stream_ref()
            if current is not None:
                current.truncated = self.framer.truncated()
        return error

    def release(self, clean: bool) -> None:
        """Close the response and its connection: requests and urllib3 see none of the body
        we read, so the pool gets the connection back closed (whatever its socket's timeout
        was left at), and the next request opens a new one."""
        response = self._response
        if response is not None:
            response.close()
            self._let_session_go(reusable=not response.history)

    def _let_session_go(self, reusable: bool) -> None:
        release, self._session_release = self._session_release, None
        if release is not None:
            release(reusable)
