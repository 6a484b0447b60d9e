"""stream_sse's request and body on the shared reader (``engine``): the opener of a fed stream.

The request runs in the consumer's thread at its first ``next()`` (bounded by the
connect limit, the first-event limit and the budget); then the bytes that
http.client already buffered with the headers are decoded, and the socket,
made non-blocking, goes to the shared reader, which decodes, frames and parses
every later read and offers the events to the stream.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import ssl
import time
from typing import Any, Callable, List, Mapping, Optional

import requests

from .._core.budget import Budget
from .._core.errors import Cancelled, StreamProtocolError, WatchdogError
from .._core.redact import excerpt
from .._core.scope import using_budget
from .._http.http import Session
from .._http.redirect import FOLLOWED_METHODS, is_redirect
from .._http.translate import RAW_READ_ERRORS, REQUESTS_ERRORS, Translator
from . import engine
from .body import body_pieces, decoder_for
from .fed import FedChannel, OpenTimedOut
from .framing import EventFramer
from .parse import parse_events
from .wire import Gate, is_activity

_ERROR_BODY_LIMIT = 4096
_FIRST_READ = max(engine.TURN_BYTES, io.DEFAULT_BUFFER_SIZE)  # http.client's buffer, whole
_PLAIN = Translator()

__all__ = ["opener"]


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


def opener(
    *,
    session: Optional[Session],
    method: str,
    url: str,
    body: Any,
    headers: Mapping[str, str],
    connect: Optional[float],
    errors: Any,
    framer: EventFramer,
    stream_ref: Callable[[], Any],
    abort: Budget,
    feeds: List[engine.Feed],
) -> Callable[[FedChannel[Any]], None]:
    def open_(channel: FedChannel[Any]) -> None:
        own = session is None
        active = Session() if session is None else session
        follow = str(method).upper() in FOLLOWED_METHODS
        # The first-event limit bounds the connect and the wait for the headers too: this
        # runs in the consumer's thread, which must be back by then.
        left = channel.first_item_left()
        read = None if left is None else max(0.001, left)
        first_cuts_connect = read is not None and (connect is None or read < connect)
        connect_limit = read if first_cuts_connect else connect
        try:
            with using_budget(abort):
                try:
                    response = active.request(
                        method,
                        url,
                        json=body,
                        headers=headers,
                        stream=True,
                        timeout=(connect_limit, read),
                        allow_redirects=follow,
                    )
                except requests.ReadTimeout:
                    raise OpenTimedOut() from None
                except requests.ConnectTimeout as exc:
                    if first_cuts_connect:
                        raise OpenTimedOut() from None
                    raise errors.error(exc) from exc
                except REQUESTS_ERRORS as exc:
                    raise errors.error(exc) from exc
        except BaseException:
            if own:
                active.close()
            raise
        current = stream_ref()
        if current is not None:
            current.headers_at = time.monotonic()
            current.status = response.status_code
            current.headers = dict(response.headers)
        del current

        made_non_blocking: List[Any] = []

        def release() -> None:
            for sock in made_non_blocking:  # blocking again, as urllib3 pools its sockets
                with contextlib.suppress(OSError):
                    sock.settimeout(None)
            response.close()
            if own:
                active.close()

        try:
            _check_response(response, method, errors)
            raw = _http_response(response)
            sock = getattr(getattr(raw.fp, "raw", None), "_sock", None)
            decoder = decoder_for(raw)
            gate = Gate(framer.limit, is_activity)  # pings are no activity: held back
            state: List[engine.Feed] = []

            def take(data: bytes) -> bool:
                abort.check()  # stopped from outside: do not parse what was already queued
                try:
                    payload = decoder.feed(data)
                except http.client.HTTPException as exc:
                    raise errors.error(exc) from exc
                events: List[Any] = []
                if payload:
                    try:
                        events = parse_events(gate.pass_on(framer.feed(payload))[0])
                    except UnicodeDecodeError as exc:
                        raise errors.error(exc) from exc
                room = channel.offer(events) if events else True
                framer.check()
                if state:
                    state[0].finished = decoder.done
                return room

            def end(error: Optional[BaseException], eof: bool) -> None:
                try:
                    if isinstance(error, (OSError, http.client.HTTPException)):
                        abort.check()
                        cause, error = error, errors.error(error)
                        error.__cause__ = cause
                    elif error is None:
                        abort.check()  # an EOF caused by our own shutdown is not a clean end
                        if eof:
                            try:
                                decoder.eof()
                            except http.client.HTTPException as exc:
                                error = errors.error(exc)
                        if error is None:
                            current = stream_ref()
                            if current is not None:
                                current.truncated = framer.truncated()
                except Cancelled as exc:
                    error = exc
                finally:
                    release()
                    # No cycle stays behind (feed -> take -> state -> feed, stop -> feeds):
                    state.clear()
                    feeds.clear()
                    channel.set_resume(None)
                    channel.fed_end(error, completed=error is None)
                    error = None

            if sock is None:
                end(None, True)
                return
            sock.settimeout(0)
            made_non_blocking.append(sock)
            # The bytes that arrived with the headers sit in http.client's buffer; each read
            # asks for at least the buffer's size, so none is left where select() cannot see
            # it. At most one reader turn's worth is taken here: a flood from the first byte
            # goes on on the reader, and the first-event limit holds.
            try:
                given = 0
                while not decoder.done and given < engine.TURN_BYTES:
                    try:
                        data = raw.fp.read1(_FIRST_READ)
                    except (BlockingIOError, ssl.SSLWantReadError):
                        break
                    given += len(data)
                    if not data or not take(data):  # a full buffer: the reader goes on later
                        break
            except (Exception, Cancelled) as exc:
                end(exc, False)
                return
            feed = engine.Feed(sock, take, end, channel.flush)
            state.append(feed)
            feeds.append(feed)
            if decoder.done:
                end(None, False)
                return
            channel.set_resume(lambda: engine.kick(feed))
            engine.add(feed)
        except BaseException:
            release()
            raise

    return open_
