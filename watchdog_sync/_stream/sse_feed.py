"""stream_sse's request and body: the opener of a socket feed, and its body's framing.

The request is bounded by the connect limit, the first-event limit (the whole response
head included) and the stream's budget, whose end (a stop, the deadline) shuts the
connection from outside. Its body, the bytes buffered with the headers first, is read by
:class:`~.pipeline.BodyFeed` through the :class:`Opener`'s framing, whose
:class:`FramingDecoder` decodes the HTTP/1.1 framing (chunked, sized or close-delimited)
of whatever bytes one read took (http.client's ``read1`` stops at one chunk): each read
yields every event that has arrived and never waits for more.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import math
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Mapping, Optional

import requests

from .._core.budget import Budget
from .._core.errors import StreamProtocolError, WatchdogError
from .._core.redact import excerpt
from .._core.scope import using_budget
from .._http.guard import head_until
from .._http.http import Session
from .._http.redirect import FOLLOWED_METHODS, is_redirect
from .._http.translate import RAW_READ_ERRORS, REQUESTS_ERRORS, MalformedFraming, Translator
from .framing import EventFramer
from .parse import parse_events
from .pipeline import BodyFeed
from .private_session import private_session
from .socket_feed import SocketFeed
from .socket_read import READ_SIZE
from .wire import is_activity

_ERROR_BODY_LIMIT = 4096
_FIRST_READ = max(READ_SIZE, io.DEFAULT_BUFFER_SIZE)  # http.client's buffer, whole
_MAX_SIZE_LINE = 1024
_HEX = b"0123456789abcdefABCDEF"

__all__ = ["FramingDecoder", "Opener", "body_pieces"]


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
        if response is None:  # the first-event limit ran out: the consumer's idle check says so
            return
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

    def _send(self, left: float) -> Optional[requests.Response]:
        """The request, up to its response's head; ``None`` when ``left``, the seconds left
        of the first-event limit (``inf``: none), ran out first. That limit bounds the connect
        and the whole head too (a head that drips, or interim responses that keep coming):
        the consumer must be back by then."""
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
            return None
        except requests.ConnectTimeout as exc:
            if first_cuts_connect:
                return None
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


class FramingDecoder:
    """Incremental decoder of one body's framing: ``feed`` raw bytes, get payload bytes.

    ``done`` turns true at the body's end (the last chunk, or ``length`` bytes);
    bytes fed after it are ignored. :meth:`eof` says whether the connection may
    end here.
    """

    __slots__ = ("_buffer", "_chunk_left", "_chunked", "_left", "_need_crlf", "done")

    def __init__(self, *, chunked: bool, length: Optional[int]) -> None:
        self._chunked = chunked
        self._left = None if chunked else length  # sized: bytes still to come
        self._buffer = b""
        self._chunk_left = 0  # chunked: bytes of chunk data still to come
        self._need_crlf = False  # chunked: the CRLF after a chunk's data
        self.done = self._left == 0

    def wanted(self) -> int:
        """How many bytes to read next without reading past a sized body."""
        return READ_SIZE if self._left is None else min(self._left, READ_SIZE)

    def feed(self, data: bytes) -> bytes:
        """The payload that ``data`` completes (possibly ``b""``).

        Raises:
            MalformedFraming: the chunked framing is malformed (an ``HTTPException``).
        """
        if self.done:
            return b""
        if not self._chunked:
            if self._left is None:
                return data
            data = data[: self._left]
            self._left -= len(data)
            self.done = self._left == 0
            return data
        if not (self._buffer or self._chunk_left or self._need_crlf):
            whole = _whole_chunk(data)
            if whole is not None:
                return whole
        buf = self._buffer + data if self._buffer else data
        pos, end_of = 0, len(buf)
        chunk_left, need_crlf = self._chunk_left, self._need_crlf
        out: List[bytes] = []
        while True:
            if chunk_left:
                take = min(chunk_left, end_of - pos)
                if not take:
                    break
                out.append(buf[pos : pos + take])
                pos += take
                chunk_left -= take
                need_crlf = not chunk_left
            elif need_crlf:
                if end_of - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise MalformedFraming("chunked body: missing CRLF after a chunk")
                pos += 2
                need_crlf = False
            else:
                end = buf.find(b"\n", pos)
                if end < 0:
                    if end_of - pos > _MAX_SIZE_LINE:
                        raise MalformedFraming("chunked body: chunk-size line too long")
                    break
                line = buf[pos:end].split(b";", 1)[0].strip()
                pos = end + 1
                size = _chunk_size(line)
                if size is None:  # int() alone takes "-5", "+5", "0x5", "5_0"
                    raise MalformedFraming(f"chunked body: bad chunk size {line[:20]!r}")
                if size == 0:  # last chunk; trailers are not needed for events
                    self.done = True
                    pos = end_of
                    break
                chunk_left = size
        self._buffer = buf[pos:]  # at most a chunk-size line or a CRLF
        self._chunk_left, self._need_crlf = chunk_left, need_crlf
        return b"".join(out)

    def eof(self) -> None:
        """The connection ended: fine for a close-delimited or finished body.

        Raises:
            http.client.IncompleteRead: the body was cut short.
        """
        if self.done or (not self._chunked and self._left is None):
            return
        left = self._chunk_left if self._chunked else self._left
        raise http.client.IncompleteRead(b"", left)


def _whole_chunk(data: bytes) -> Optional[bytes]:
    """The data of ``data`` if it is exactly one whole, non-empty chunk (size line, data,
    CRLF), the common read of an event stream; else ``None`` (the general loop decides,
    and raises what is malformed). The same result and state as the loop's."""
    end = data.find(b"\n")
    if end < 0:
        return None
    size = _chunk_size(data[:end].split(b";", 1)[0].strip())
    start = end + 1
    if size is None or size == 0 or len(data) != start + size + 2 or not data.endswith(b"\r\n"):
        return None
    return data[start : start + size]


def _chunk_size(line: bytes) -> Optional[int]:
    """A chunk-size line's value (hex digits only, as HTTP/1.1 has it), else ``None``."""
    if not line or line.strip(_HEX):
        return None
    return int(line, 16)


def body_pieces(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The decoded body of ``response`` (headers already read), piece by piece.

    Raises:
        http.client.IncompleteRead: the connection ended before the body did.
        MalformedFraming: the chunked framing is malformed (an ``HTTPException``).
    """
    fp: Optional[Any] = response.fp
    if fp is None:
        return
    decoder = FramingDecoder(chunked=bool(response.chunked), length=response.length)
    while not decoder.done:
        data = fp.read1(decoder.wanted())
        if not data:
            decoder.eof()
            return
        piece = decoder.feed(data)
        if piece:
            yield piece
