"""FaultGateway: an embedded LLM server (OpenAI, Anthropic and Gemini APIs) that misbehaves on
purpose."""

from __future__ import annotations

import itertools
import re
import select
import socket
import ssl
import threading
import time
import types
from typing import Any, Dict, List, Optional, Set, Type

from . import _anthropic, _gemini, _openai, _text_completion
from ._call import Call
from ._format import Rendering
from ._records import Record, Route, SeenRequest
from ._scenarios import describe, faults, resolve, run_ok
from ._wire import TICK, BadRequest, ClientGone, Connection, EndExchange, Exchange, Request, phrase

__all__ = ["FaultGateway", "SeenRequest"]

_ROUTE = re.compile(
    r"^/s/(?P<key>[A-Za-z0-9_.-]+)/v1/(?P<endpoint>chat/completions|completions|messages)/?$"
)
# The Gemini API (google-genai): {base}/{v1|v1beta}/models/{model}:streamGenerateContent?alt=sse
_GEMINI_ROUTE = re.compile(
    r"^/s/(?P<key>[A-Za-z0-9_.-]+)/(?P<version>v1|v1beta)/models/(?P<model>[A-Za-z0-9_.-]+)"
    r":(?P<endpoint>streamGenerateContent|generateContent)$"
)
_ENDPOINTS = {"openai": ("chat/completions", "completions"), "anthropic": ("messages",)}
_WHAT = {
    "chat/completions": "chat completions",
    "completions": "completions",
    "messages": "messages",
}
_GEMINI_PATH = "/{v1|v1beta}/models/{model}:streamGenerateContent?alt=sse (or :generateContent)"
_STOP_SECONDS = 2.0


class FaultGateway:
    """An LLM server on loopback that misbehaves on purpose, in the OpenAI, Anthropic or Gemini API.

    Each ``base_url(scenario, **options)`` is a fresh route with its own
    attempt count; POST ``{base_url}/chat/completions`` to it (OpenAI chat
    completions), or ``{base_url}/completions`` (OpenAI's legacy text
    completions, as lm-evaluation-harness's ``local-completions`` model
    sends them). ``base_url(scenario, api="anthropic")`` speaks the Anthropic
    Messages API: the anthropic SDK takes that URL as its ``base_url`` and
    POSTs ``{base_url}/v1/messages``. ``base_url(scenario, api="gemini")``
    speaks the Gemini API: google-genai takes that URL as
    ``HttpOptions(base_url=...)`` and POSTs
    ``{base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`` (``v1``
    too). Everything the
    server does is bounded: it polls its sockets every 50 ms, so a held
    connection ends within a tick of the client disconnecting or of
    ``stop()``; ``stop()`` closes every connection and joins every thread.

    Args:
        host: the address to listen on (keep it loopback).
        port: the port; 0 picks a free one (read it from ``.port``).
        certfile: a PEM certificate chain: serve HTTPS instead of HTTP.
        keyfile: the certificate's private key (if not inside ``certfile``).
        max_connections: connections served at once; more get a 503 and are closed.
        max_body_bytes: a larger request body gets a 413.
        request_timeout: seconds to receive a whole request (head and body);
            a slower request gets a 408 (an idle kept-alive connection is closed).
        keep_alive: False to answer every request with ``Connection: close``
            and close the connection after the response, so no client keeps
            an idle pooled socket to the gateway.

    Timeouts and cancellation: the gateway never waits on a client longer
    than ``request_timeout`` to read a request; it holds a misbehaving
    response until the client disconnects or ``stop()`` is called, except
    the heads that never end (``early_hints_flood``, ``header_drip``), which
    it closes itself after their ``duration`` option (60 s by default).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        certfile: Optional[str] = None,
        keyfile: Optional[str] = None,
        max_connections: int = 64,
        max_body_bytes: int = 1024 * 1024,
        request_timeout: float = 10.0,
        keep_alive: bool = True,
    ) -> None:
        if keyfile is not None and certfile is None:
            raise ValueError("keyfile needs certfile: pass the certificate chain too")
        for name, value in (
            ("max_connections", max_connections),
            ("max_body_bytes", max_body_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if isinstance(request_timeout, bool) or not request_timeout > 0:
            raise ValueError(f"request_timeout must be > 0 seconds, got {request_timeout!r}")
        self._host = host
        self._requested_port = port
        self._tls: Optional[ssl.SSLContext] = None
        if certfile is not None:
            self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._tls.load_cert_chain(certfile, keyfile)
        self._max_connections = max_connections
        self._max_body_bytes = max_body_bytes
        self._request_timeout = float(request_timeout)
        self._keep_alive = keep_alive
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listener: Optional[socket.socket] = None
        self._acceptor: Optional[threading.Thread] = None
        self._workers: Set[threading.Thread] = set()
        self._routes: Dict[str, Route] = {}
        self._records: List[Record] = []
        self._conn_ids = itertools.count(1)
        self._names = itertools.count(1)
        self._port: Optional[int] = None
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> FaultGateway:
        """Bind, listen and start serving in background threads; returns self.

        Raises ``RuntimeError`` if called twice, ``OSError`` if the port cannot be bound.
        """
        if self._started:
            raise RuntimeError("this FaultGateway was already started; create a new one")
        self._started = True
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self._host, self._requested_port))
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._port = listener.getsockname()[1]
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="watchdog-sync-gateway-accept", daemon=True
        )
        self._acceptor.start()
        return self

    def stop(self) -> None:
        """Stop serving: end every held connection, join every thread (idempotent).

        Takes about one 50 ms tick; a thread that does not end within 2 s is
        reported with ``RuntimeError``.
        """
        self._stop.set()
        give_up = time.monotonic() + _STOP_SECONDS
        if self._acceptor is not None:
            self._acceptor.join(max(0.0, give_up - time.monotonic()))
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join(max(0.0, give_up - time.monotonic()))
        alive = [t.name for t in [self._acceptor, *workers] if t is not None and t.is_alive()]
        if alive:
            raise RuntimeError(f"FaultGateway threads did not stop in time: {alive}")

    def __enter__(self) -> FaultGateway:
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[types.TracebackType],
    ) -> None:
        self.stop()

    # -- addresses -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the gateway listens on (``RuntimeError`` before ``start()``)."""
        if self._port is None:
            raise RuntimeError("the FaultGateway is not started: call start() or use `with`")
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (``https`` with a certificate), without a path."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    def base_url(self, scenario: str, *, api: str = "openai", **options: Any) -> str:
        """Register a fresh route for ``scenario`` and return its base URL.

        ``api="openai"`` (the default): the URL ends in ``/v1``; POST
        ``{base_url}/chat/completions`` with an OpenAI chat body;
        ``"stream": true`` gets SSE ``chat.completion.chunk`` events, otherwise
        a ``chat.completion`` JSON; POST ``{base_url}/completions`` with a
        legacy completions body (``prompt``) for ``text_completion`` events
        ending in ``data: [DONE]``, or one ``text_completion`` JSON (one choice
        per prompt; ``logprobs`` and ``echo`` honoured). ``api="anthropic"``: the URL has no
        ``/v1`` (as the anthropic SDK's ``base_url`` expects); POST
        ``{base_url}/v1/messages`` with a Messages API body; ``"stream": true``
        gets ``message_start`` ... ``message_stop`` events, otherwise a
        ``message`` JSON; errors have Anthropic's shape. ``api="gemini"``: the
        URL has no version (google-genai's ``HttpOptions(base_url=...)``); POST
        ``{base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`` (or
        ``/v1/...``) for ``GenerateContentResponse`` events, the last with a
        ``finishReason``, or ``...:generateContent`` for one response; errors
        are ``{"error": {"code", "message", "status"}}``. Each call makes a new
        route with its own attempt count (for ``fail_first`` and ``fault_on``:
        the requests to a route are numbered 1, 2, ... across its endpoints)
        and its own ``requests_seen``.

        Raises:
            ValueError: unknown scenario, API or option (the message lists the
                valid ones), or a bad option value.
            TypeError: an option of the wrong type.
            RuntimeError: the gateway is not started.
        """
        found, resolved, ok_options = resolve(scenario, options, api)
        url = self.url
        if self._stop.is_set():
            raise RuntimeError("the FaultGateway is stopped: create a new one")
        key = f"{scenario}-{next(self._names)}"
        with self._lock:
            self._routes[key] = Route(key, found, resolved, ok_options, api)
        return f"{url}/s/{key}/v1" if api == "openai" else f"{url}/s/{key}"

    @staticmethod
    def scenarios() -> Dict[str, str]:
        """Every scenario name with a one-line summary, in documentation order."""
        return describe()

    def requests_seen(self, base_url_or_key: Optional[str] = None) -> List[SeenRequest]:
        """Snapshots of the requests received on routes (any API), in arrival order.

        Args:
            base_url_or_key: a URL returned by ``base_url`` (or its key) to see
                only that route's requests; None for all of them.

        Raises:
            ValueError: the URL or key is not one of this gateway's routes.
        """
        with self._lock:
            if base_url_or_key is None:
                return [record.snapshot() for record in self._records]
            key = _key_of(base_url_or_key)
            if key not in self._routes:
                raise ValueError(f"{base_url_or_key!r} is not a base_url of this FaultGateway")
            return [record.snapshot() for record in self._records if record.route.key == key]

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not started"
        return f"<FaultGateway {where}>"

    # -- serving -------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stop.is_set():
            if not select.select([listener], [], [], TICK)[0]:
                continue
            try:
                sock, _ = listener.accept()
            except OSError:
                continue  # the client left before we accepted it
            with self._lock:
                full = len(self._workers) >= self._max_connections
                if not full:
                    worker = threading.Thread(
                        target=self._serve,
                        args=(sock,),
                        name=f"watchdog-sync-gateway-conn-{next(self._conn_ids)}",
                        daemon=True,
                    )
                    self._workers.add(worker)
            if full:
                _refuse(sock)
            else:
                worker.start()

    def _serve(self, sock: socket.socket) -> None:
        conn = Connection(sock, self._stop)
        try:
            if self._tls is not None:
                conn.handshake(self._tls, self._request_timeout)
            first = True
            while not conn.closed:
                try:
                    request = conn.read_request(
                        self._request_timeout, self._max_body_bytes, first=first
                    )
                except BadRequest as exc:
                    _answer_error(conn, exc.status, exc.message)
                    return
                first = False
                if not self._answer(conn, request):
                    return
        except EndExchange:
            pass  # the client left or the gateway is stopping: close below
        finally:
            conn.close()
            with self._lock:
                self._workers.discard(threading.current_thread())

    def _answer(self, conn: Connection, request: Request) -> bool:
        """Serve one request; True if the connection may carry another one."""
        path = request.target.split("?", 1)[0]
        if path.startswith(("http://", "https://")):  # absolute form: sent as to a proxy
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        match = _ROUTE.match(path)
        gemini = None if match else _GEMINI_ROUTE.match(path)
        found = match or gemini
        with self._lock:
            route = self._routes.get(found.group("key")) if found else None
        if gemini:
            api = "gemini"
        else:
            api = "anthropic" if match and match.group("endpoint") == "messages" else "openai"
        keep = self._keep_alive
        if route is None:
            message = f"no route {request.target!r}: use FaultGateway.base_url(scenario)"
            return _answer_error(conn, 404, message, request, keep_alive=keep, api=api)
        assert found is not None
        if api != route.api and (api == "gemini" or route.api == "gemini"):
            message = f"this route speaks api={route.api!r}: POST {{base_url}}{_path_of(route.api)}"
            return _answer_error(conn, 404, message, request, keep_alive=keep, api=api)
        endpoint = found.group("endpoint")
        if match and endpoint not in _ENDPOINTS[route.api]:
            message = f"this route speaks api={route.api!r}: POST {{base_url}}{_path_of(route.api)}"
            return _answer_error(conn, 404, message, request, keep_alive=keep, api=api)
        if request.method != "POST":
            message = f"use POST for {_WHAT.get(endpoint, 'generateContent')}"
            return _answer_error(conn, 405, message, request, keep_alive=keep, api=api)
        stream = endpoint == "streamGenerateContent" if gemini else None
        with self._lock:
            attempt = next(route.attempts)
            faulted = faults(route.scenario, route.options, attempt)
            record = Record(route, attempt, faulted, request, stream)
            self._records.append(record)
        request_id = request.headers.get("x-request-id") or f"req-{route.key}-{attempt}"
        options = route.options if faulted else route.ok_options
        exchange = Exchange(
            conn, options["framing"], request, request_id, keep_alive=self._keep_alive
        )
        try:
            if not isinstance(record.body, dict):
                exchange.status = 400
                message = "the body is not a JSON object"
                return _answer_error(conn, 400, message, request, keep_alive=keep, api=api)
            model = gemini.group("model") if gemini else None
            call = Call(
                exchange=exchange,
                stream=record.stream,
                options=options,
                body=record.body,
                render=_rendering(route, endpoint, attempt, record.body, options, model),
            )
            (route.scenario.behavior if faulted else run_ok)(call)
        except ClientGone:
            with self._lock:
                record.client_disconnected = True
            raise
        finally:
            with self._lock:
                record.ended_at = time.monotonic()
                record.status = exchange.status
        return exchange.reusable


def _path_of(api: str) -> str:
    """The path a client of ``api`` posts to below its base URL."""
    paths = {"openai": "/chat/completions (or /completions)", "anthropic": "/v1/messages"}
    return paths.get(api, _GEMINI_PATH)


def _rendering(
    route: Route,
    endpoint: str,
    attempt: int,
    body: Any,
    options: Dict[str, Any],
    path_model: Optional[str],
) -> Rendering:
    """The wire format of ``route``'s answer to one request on ``endpoint`` (Gemini: the model
    of the path)."""
    usage = options["usage"]
    if route.api == "gemini":
        return _gemini.GeminiRendering(
            f"resp-{route.key}-{attempt}",
            path_model or "fault-gateway",
            body,
            usage=usage,
            status=options.get("status"),
            retry_after=options.get("retry_after"),
        )
    model = body.get("model") if isinstance(body, dict) else None
    name = model if isinstance(model, str) else "fault-gateway"
    if route.api == "anthropic":
        return _anthropic.AnthropicRendering(f"msg_{route.key}-{attempt}", name, body, usage=usage)
    if endpoint == "completions":
        ident = f"cmpl-{route.key}-{attempt}"
        return _text_completion.TextCompletionRendering(
            ident, int(time.time()), name, body, usage=usage
        )
    ident = f"chatcmpl-{route.key}-{attempt}"
    return _openai.OpenAIRendering(ident, int(time.time()), name, body, usage=usage)


def _key_of(base_url_or_key: str) -> str:
    marker = "/s/"
    if marker in base_url_or_key:
        return base_url_or_key.split(marker, 1)[1].split("/", 1)[0]
    return base_url_or_key


def _answer_error(
    conn: Connection,
    status: int,
    message: str,
    request: Optional[Request] = None,
    *,
    keep_alive: bool = False,
    api: str = "openai",
) -> bool:
    """Send an error in ``api``'s shape; keep the connection only for a well-formed request."""
    if api == "anthropic":
        body = _anthropic.error_body(message, _anthropic.error_type_for(status))
    elif api == "gemini":
        body = _gemini.error_body(message, _gemini.grpc_status_for(status), status)
    else:
        body = _openai.error_body(message, "invalid_request_error", None)
    if request is not None:
        exchange = Exchange(conn, "chunked", request, "req-gateway", keep_alive=keep_alive)
        exchange.head(status, "application/json", length=len(body))
        exchange.write(body)
        exchange.finish()
        if exchange.reusable:
            return True
    else:
        head = (
            f"HTTP/1.1 {status} {phrase(status)}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        conn.send(head.encode("ascii") + body)
    conn.linger_close()
    return False


def _refuse(sock: socket.socket) -> None:
    """Best effort 503 to a connection over ``max_connections``, then close."""
    body = _openai.error_body("too many connections to the FaultGateway", "server_error", None)
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    try:
        sock.setblocking(False)
        sock.send(head.encode("ascii") + body)
    except OSError:
        pass  # best effort: the client sees a reset or a close instead
    finally:
        sock.close()
