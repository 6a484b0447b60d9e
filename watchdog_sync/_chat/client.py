"""ChatClient: an OpenAI-compatible chat completions client that cannot hang.

Every call has one budget (``timeout``, joined with the current ``deadline()``
scope and ``budget=``) shared by all its attempts, backoffs and reads;
streams are guarded by the idle watchdog; one :class:`RetryPolicy` decides
retries, and only before any chunk was delivered.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .._core import scope as _scope
from .._core.budget import Budget
from .._core.calls import server_of
from .._core.durations import Duration
from .._core.events import event_fields
from .._core.redact import clean_headers, clean_secret, request_secrets, safe_url
from .._http.environment import proxy_urls
from .._http.http import Session
from .._http.propagation import check_propagate, propagating
from .._retry.loop import retry_call
from .._retry.policy import RetryPolicy
from .call import STAGE, ChatCall, run_in_call
from .complete import complete_once
from .config import (
    AS_IDLE,
    CLIENT_DEFAULT,
    CONNECT_TIMEOUT_UNSET,
    IDLE_TIMEOUT_UNSET,
    TIMEOUT_UNSET,
    call_first_event,
    call_timeout,
    resolve,
)
from .marks import chat_mark, finish_reason_of
from .stream import ChatStream, open_stream

__all__ = ["ChatClient"]

_ENDPOINT = "/chat/completions"
_RESERVED_PARAMS = ("stream",)


class ChatClient:
    """An OpenAI-compatible chat completions client whose every call ends in time.

    Args:
        base_url: the API root, ``http(s)://host[:port]/path`` (e.g.
            ``https://api.openai.com/v1``); requests go to
            ``{base_url}/chat/completions``. No credentials, query or fragment.
        api_key: sent as ``Authorization: Bearer <api_key>``; never shown in
            reprs, errors, events or logs. Surrounding whitespace and invisible
            characters (a newline from a file, a BOM, U+200B) are stripped; one
            left inside is a ``ValueError`` (which does not show the key). The
            same holds for credential headers in ``headers``.
        model: the default model; a call's ``model=`` overrides it.
        timeout: the whole call's budget in seconds, shared by every attempt,
            backoff and read (default ``WATCHDOG_SYNC_TIMEOUT`` or 600 s).
            ``None`` or ``inf``: off, no limit of its own (the current
            ``deadline()`` scope still applies); ``0`` or less: ``ValueError``.
            More than 7 days is clamped to 7 days.
        idle_timeout: the longest gap between stream chunks (default
            ``WATCHDOG_SYNC_IDLE_TIMEOUT`` or 120 s). An idle limit: ``None``,
            ``inf`` or any value ``<= 0`` turns the idle watchdog off (the
            budget still applies).
        connect_timeout: cap on establishing each connection (default
            ``WATCHDOG_SYNC_CONNECT_TIMEOUT`` or 10 s). ``None`` or ``inf``:
            off (the budget still applies); ``0`` or less: ``ValueError``.
        first_event_timeout: the longest wait from sending a streaming
            request to its first chunk, response headers included (default:
            ``idle_timeout``). An idle limit: ``<= 0`` or ``inf`` turns it off.
            ``None`` still means "as ``idle_timeout``" (deprecated: leave it out).
        retry: the :class:`RetryPolicy` (default: ``RetryPolicy()`` with
            ``WATCHDOG_SYNC_MAX_ATTEMPTS`` or 6 attempts, the same default as
            :func:`retry_call`; only opening the stream and getting its first
            chunk is ever retried).
        session: a :class:`Session` to send with (its pool is shared; the
            client does not close it); by default a private one, closed by
            :meth:`close`.
        headers: extra request headers, sent with every call (they override
            the client's own; an ``X-Request-ID`` here is used for every call).
        propagate: if true, every attempt carries the call's remaining time
            as ``grpc-timeout`` and ``x-envoy-upstream-rq-timeout-ms`` (see
            :func:`deadline_headers`), computed when that attempt is sent, so
            the gateway (or an Envoy in front of it) can stop in time too.
            Off by default; applies whatever the ``session``'s own setting.

    Redirects are not followed: a 3xx answer to the POST is an
    :class:`HTTPStatusError` (``reason='redirect'``, not retryable) naming the
    Location, since following it would send the prompt and the credentials
    elsewhere (307/308) or turn the POST into a GET (301/302/303).

    On timeout: a call whose own budget (``timeout``, ``budget=``) runs out
    raises :class:`DeadlineExceeded`; the end of an enclosing ``deadline()``
    scope passes through to that scope. On cancel (``budget.cancel()``):
    :class:`OperationCancelled`. Waits and reads stop at once in both cases.

    Precedence: explicit argument > environment variable > default. The
    environment is read once, here; a malformed value raises ``ValueError``
    naming the variable and the value.

    Thread safety: the client's settings never change after construction, and
    calls share the session's connection pool. ``requests.Session`` is shared
    across threads in practice but not documented thread-safe: one client per
    thread is the conservative choice.

    Raises:
        TypeError, ValueError: a bad argument (the message names it).
    """

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        model: Optional[str] = None,
        timeout: Optional[Duration] = TIMEOUT_UNSET,
        idle_timeout: Optional[Duration] = IDLE_TIMEOUT_UNSET,
        connect_timeout: Optional[Duration] = CONNECT_TIMEOUT_UNSET,
        first_event_timeout: Optional[Duration] = AS_IDLE,
        retry: Optional[RetryPolicy] = None,
        session: Optional[Session] = None,
        headers: Optional[Mapping[str, str]] = None,
        propagate: bool = False,
    ) -> None:
        self._propagate = check_propagate(propagate)
        self._base_url = _check_base_url(base_url)
        self._url = self._base_url + _ENDPOINT
        self._server = server_of(self._base_url)
        self._api_key = _check_api_key(api_key)
        self._model = _check_model(model)
        self._settings = resolve(
            timeout=timeout,
            idle_timeout=idle_timeout,
            first_event_timeout=first_event_timeout,
            connect_timeout=connect_timeout,
            retry=retry,
        )
        if session is not None and not isinstance(session, Session):
            raise TypeError(
                "session must be a watchdog_sync.Session (a plain requests.Session cannot be "
                f"shut from outside), not {type(session).__name__}"
            )
        self._headers = _check_headers(headers)
        self._own_session = session is None
        self._session = Session() if session is None else session
        self._closed = False

    # -- calls -------------------------------------------------------------------------

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: Optional[str] = None,
        timeout: Optional[Duration] = CLIENT_DEFAULT,
        budget: Optional[Budget] = None,
        first_event_timeout: Optional[Duration] = CLIENT_DEFAULT,
        **params: Any,
    ) -> ChatStream:
        """Stream a chat completion; returns once the first chunk has arrived.

        POSTs ``{"model", "messages", **params, "stream": true}``. Failures
        before the first chunk (200 then silence, resets, 429/5xx, an empty
        stream) are retried by the client's policy, each attempt on a new
        connection (the previous one is closed); afterwards nothing is retried.

        Args:
            messages: the chat messages, a non-empty list of dicts with a ``role``.
            model: the model for this call (default: the client's).
            timeout: this call's budget in seconds (default: the client's
                ``timeout``); counted from this call, shared by every attempt,
                backoff and read, and never longer than the current
                ``deadline()`` scope or ``budget`` allow. ``inf``: no limit of
                the call's own; ``0`` or less: ``ValueError``. ``None`` still
                means "the client's" (deprecated: leave it out).
            budget: a :class:`Budget` the call also runs under (the tighter wins).
            first_event_timeout: the longest wait for the first chunk of each
                attempt (default: the client's). An idle limit: ``<= 0`` or
                ``inf`` turns it off. ``None`` still means "the client's"
                (deprecated: leave it out).
            **params: more request body fields (``temperature``, ``max_tokens``,
                ``stream_options``, ...), sent as given.

        Returns:
            A :class:`ChatStream`: iterate it for chunk dicts; afterwards read
            ``.text``, ``.finish_reason``, ``.usage``, ``.stats``.

        Raises:
            RetryExhausted: every attempt failed before a chunk arrived
                (``.last_error`` says how).
            DeadlineExceeded: ``timeout`` or ``budget`` ran out (``.attempts``,
                ``.last_error``); an enclosing ``deadline()`` scope's end passes
                through to that scope, which raises it.
            OperationCancelled: ``budget`` was cancelled.
            HTTPStatusError: a status that retrying cannot fix (400, 401, 403,
                404, 422, quota used up), with the server's message.
            StreamProtocolError: a malformed event (not retried).
            TypeError, ValueError: a bad argument, or no model given.

        Every error carries ``request_id``; so do the events of the call.
        """
        call = self._call(messages, model, params, stream=True, first=first_event_timeout)
        active, owner, release = self._budget(timeout, budget)
        mark = chat_mark(call, active, self._server, self._settings.idle_timeout)
        with propagating(self._propagate):
            return open_stream(call, self._settings.retry, active, owner, release, mark)

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: Optional[str] = None,
        timeout: Optional[Duration] = CLIENT_DEFAULT,
        budget: Optional[Budget] = None,
        **params: Any,
    ) -> Dict[str, Any]:
        """Get a chat completion without streaming (``"stream": false``).

        The whole call, response headers and body included, is hard-bounded
        by the budget: a server that never answers or drip-feeds its body is
        stopped at the deadline, with the socket shut from outside. Transport
        failures, 408/429/5xx and the like are retried by the client's policy.

        Args:
            messages: the chat messages, a non-empty list of dicts with a ``role``.
            model: the model for this call (default: the client's).
            timeout: this call's budget in seconds (default: the client's
                ``timeout``), as for :meth:`stream`.
            budget: a :class:`Budget` the call also runs under (the tighter wins).
            **params: more request body fields, sent as given.

        Returns:
            The parsed ``chat.completion`` object.

        Raises:
            DeadlineExceeded, OperationCancelled, RetryExhausted, HTTPStatusError:
                as for :meth:`stream`.
            StreamProtocolError: the body is not a JSON object
                (``reason='malformed_response'``) or larger than 8 MiB
                (``'response_too_large'``).
            TypeError, ValueError: a bad argument, or no model given.
        """
        call = self._call(messages, model, params, stream=False, first=CLIENT_DEFAULT)
        active, owner, release = self._budget(timeout, budget)
        mark = chat_mark(call, active, self._server, self._settings.idle_timeout)
        try:
            with propagating(self._propagate), event_fields(**mark.fields()):
                result = run_in_call(
                    call,
                    active,
                    owner,
                    lambda: retry_call(
                        complete_once, call, policy=self._settings.retry, budget=active, stage=STAGE
                    ),
                )
        except BaseException as exc:
            mark.end(exc)
            raise
        finally:
            release()
        mark.end(finish_reason=finish_reason_of(result))
        return result

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the client's private session (a ``session=`` given is left open).

        Idempotent; calls afterwards raise ``RuntimeError``. Streams still
        open keep their connections until they end or are closed.
        """
        self._closed = True
        if self._own_session:
            self._session.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ChatClient(base_url={self._base_url!r}, model={self._model!r})"

    # -- helpers -------------------------------------------------------------------------

    def _budget(
        self, timeout: Any, budget: Optional[Budget]
    ) -> Tuple[Budget, Budget, Callable[[], None]]:
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(
                f"budget must be a watchdog_sync.Budget or None, not {type(budget).__name__}"
            )
        seconds = call_timeout(timeout, self._settings)
        return _scope.joined_budget(budget, seconds, stage=STAGE)

    def _call(
        self,
        messages: Any,
        model: Optional[str],
        params: Dict[str, Any],
        *,
        stream: bool,
        first: Any,
    ) -> ChatCall:
        if self._closed:
            raise RuntimeError("this ChatClient is closed; create a new one")
        chosen = _check_model(model) or self._model
        if chosen is None:
            raise ValueError("no model: pass model= to ChatClient(...) or to this call")
        for name in _RESERVED_PARAMS:
            if name in params:
                raise TypeError(
                    f"{name}= is not a request parameter here: use ChatClient.stream() for a "
                    "stream and ChatClient.complete() for a single answer"
                )
        body = {"model": chosen, "messages": _check_messages(messages), **params}
        body["stream"] = stream
        try:
            json.dumps(body, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"the request must be JSON-serializable: {exc}") from None
        headers, request_id = self._request_headers()
        settings = self._settings
        secrets = tuple(request_secrets(headers, self._url, proxy_urls(self._session)))
        secrets += (self._api_key,) if self._api_key else ()
        return ChatCall(
            url=self._url,
            body=body,
            headers=headers,
            secrets=secrets,
            session=self._session,
            request_id=request_id,
            model=chosen,
            idle_timeout=settings.idle_timeout,
            first_event_timeout=call_first_event(first, settings),
            connect_timeout=settings.connect_timeout,
        )

    def _request_headers(self) -> Tuple[Dict[str, str], str]:
        """The headers of one call and its request id (the caller's, or a new uuid4 hex)."""
        headers: Dict[str, str] = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        given = {name.lower(): name for name in self._headers}
        for name in list(headers):
            if name.lower() in given:
                del headers[name]  # the caller's own header wins
        headers.update(self._headers)
        if "x-request-id" in given:
            request_id = self._headers[given["x-request-id"]]
        else:
            request_id = uuid.uuid4().hex
            headers["X-Request-ID"] = request_id
        return headers, request_id


def _check_base_url(base_url: Any) -> str:
    if not isinstance(base_url, str):
        raise TypeError(f"base_url must be a str, not {type(base_url).__name__}")
    text = base_url.strip()
    example = "like https://api.example.com/v1"
    try:
        parts = urllib.parse.urlsplit(text)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if not port_ok or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"base_url must be an http:// or https:// URL {example}, got {safe_url(text)!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "base_url must not contain credentials (user:password@): pass the key as api_key="
        )
    if parts.query or parts.fragment:
        raise ValueError(
            f"base_url must not have a query string or fragment: give the API root, {example}"
        )
    text = text.rstrip("/")
    if text.endswith(_ENDPOINT):
        raise ValueError(
            f"base_url must stop before {_ENDPOINT} (the client adds it), {example}, "
            f"got {safe_url(text)!r}"
        )
    return text


def _check_api_key(api_key: Any) -> Optional[str]:
    if api_key is None:
        return None
    if not isinstance(api_key, str):
        raise TypeError(f"api_key must be a str or None, not {type(api_key).__name__}")
    return clean_secret(api_key, "api_key")


def _check_model(model: Any) -> Optional[str]:
    if model is None:
        return None
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"model must be a non-empty str or None, not {model!r}")
    return model


def _check_headers(headers: Any) -> Dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise TypeError(f"headers must be a mapping of str to str, not {type(headers).__name__}")
    checked: Dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"headers must map str to str; header {name!r} is not")
        checked[name] = value
    return clean_headers(checked)


def _check_messages(messages: Any) -> List[Dict[str, Any]]:
    hint = "like [{'role': 'user', 'content': 'Hello'}]"
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
        raise TypeError(f"messages must be a list of dicts {hint}, not {type(messages).__name__}")
    if not messages:
        raise ValueError(f"messages must not be empty: give at least one message {hint}")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(
                f"messages[{index}] must be a dict like {{'role': 'user', 'content': 'Hello'}}, "
                f"not {type(message).__name__}"
            )
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{index}] needs a 'role' ('system', 'user', ...)")
        checked.append(dict(message))
    return checked
