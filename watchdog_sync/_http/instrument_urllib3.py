"""instrument()'s patches of urllib3 (1.26 and 2.x): every pool, every connection, every read.

The points patched, each a thin wrapper around urllib3's own method that
calls the steps of ``guard.py`` (the ones :class:`Session`'s subclasses call):

* ``HTTPConnectionPool.urlopen``, the one entry of every request of every pool
  (requests, botocore, ``PoolManager``): inside a ``deadline()`` scope it
  checks the budget, clips the connect, read and pool timeouts to what
  remains, opens a guard for the request (``ACTIVE_GUARD``), and turns a
  failure the budget's end caused into ``Cancelled``; urllib3's own retries and
  redirects go through it again, so none starts after the budget's end;
* ``_get_conn`` / ``_put_conn``: the connection is registered with the guard
  while checked out, and one that was shut is discarded;
* ``HTTPConnection._new_conn`` / ``_tunnel`` / ``connect`` (and
  ``HTTPSConnection.connect``): bounded name resolution and proxy tunnel, each
  socket told to the guard as soon as it exists;
* ``HTTPConnection.request`` / ``getresponse``: the request's phase moves to
  ``head`` once it is sent whole, then ``body`` (what a timeout says about where
  it was);
* ``HTTPResponse.read`` / ``read1`` / ``read_chunked``: a body read after the
  budget's end raises ``Cancelled`` (a shut close-delimited body would
  otherwise look complete), and a read in a :func:`guard_stream` reader
  thread registers its socket so the stream can shut it on idle.

With ``instrument(request_timeout=...)`` each ``urlopen`` (in a scope or not)
runs under a :class:`~.request_timeout.RequestTimer` of its own, whose end
raises :class:`~.request_timeout.Urllib3RequestTimeout` from the request or
its body read; requests' wrapping of it is undone in ``instrument_requests.py``.

A top-level request of a streamed response (``preload_content=False``, as
requests sends every one) goes through the ``watch_stream`` hook the layer above
gives (``_httpx/urllib3_streams.py``: ``instrument(idle_timeout=...)``'s stream rules).

Outside any scope (and with no request timeout) each wrapper costs a check or
two of a ``ContextVar`` and calls the original. Pools and connections of :class:`Session` are left to
their own subclasses (``_watchdog_sync_guarded``).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import math
from typing import Any, Callable, Dict, Iterator, NoReturn, Optional, Tuple

from urllib3 import connection as _connection
from urllib3 import connectionpool as _pool
from urllib3 import response as _response
from urllib3.exceptions import TimeoutStateError
from urllib3.util import Timeout

from .._core.budget import Budget, _noop
from .._core.errors import Cancelled
from .._core.events import observed
from .._core.scope import scoped_budget
from . import guard as _guard
from .guard import ACTIVE_GUARD, FLOOR, GUARD_ATTR, ConnectionGuard, raise_budget_end
from .instrument_requests import requests_patches
from .patches import PatchSet
from .reads import READER_SOCKETS, reading
from .request_call import RequestCall
from .request_timeout import (
    TIMER_ATTR,
    RequestTimer,
    Urllib3RequestTimeout,
    is_request_timeout,
    request_limit,
    request_timeout_message,
)

__all__ = ["urllib3_patches"]

_Fn = Callable[..., Any]
StreamHook = Callable[[Callable[[], Any], Any, Any, str], Any]
# urlopen(self, method, url, body, headers, retries, redirect, assert_same_host, timeout, ...):
# the arguments after self up to here are never the timeouts (urllib3 1.26 and 2.x alike).
_TIMEOUT_POSITION = 7


def urllib3_patches(watch_stream: Optional[StreamHook] = None) -> PatchSet:
    """The patches for urllib3, planned (not yet installed); the entry point goes last.

    ``watch_stream(send, body, headers, url)``: sends each top-level request of a streamed response
    (``preload_content=False``) and guards its event stream (a higher layer's).
    """
    patches = PatchSet("urllib3")
    response = _response.HTTPResponse
    for name in ("read", "read1"):
        if name in vars(response):  # read1: urllib3 2.x only
            patches.wrap(response, name, functools.partial(_read, patches))
    patches.wrap(response, "read_chunked", functools.partial(_read_chunked, patches))
    conn = _connection.HTTPConnection
    patches.wrap(conn, "_new_conn", functools.partial(_new_conn, patches))
    patches.wrap(conn, "_tunnel", functools.partial(_tunnel, patches))
    patches.wrap(conn, "connect", functools.partial(_connect, patches))
    patches.wrap(_connection.HTTPSConnection, "connect", functools.partial(_connect, patches))
    patches.wrap(conn, "request", functools.partial(_request, patches))
    patches.wrap(conn, "getresponse", functools.partial(_getresponse, patches))
    pool = _pool.HTTPConnectionPool
    patches.wrap(pool, "_put_conn", functools.partial(_put_conn, patches))
    patches.wrap(pool, "_get_conn", functools.partial(_get_conn, patches))
    requests_patches(patches)
    patches.wrap(pool, "urlopen", functools.partial(_urlopen, patches, watch_stream))
    return patches


def _guarded_by_session(obj: Any) -> bool:
    return bool(getattr(type(obj), "_watchdog_sync_guarded", False))


def _guard_of(conn: Any) -> Optional[ConnectionGuard]:
    guard: Optional[ConnectionGuard] = getattr(conn, GUARD_ATTR, None)
    return guard


# -- the pool ------------------------------------------------------------------------


def _urlopen(patches: PatchSet, watch_stream: Optional[StreamHook], original: _Fn) -> _Fn:
    signature = inspect.signature(original)

    def urlopen(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not patches.active or _guarded_by_session(self):
            return original(self, *args, **kwargs)
        active = ACTIVE_GUARD.get()
        if active is not None:  # urllib3's own retry or redirect, inside the request
            active.budget.check()
            args, kwargs = _clipped(signature, self, args, kwargs, _left(active.budget))
            return _send(original, self, args, kwargs, active)
        if watch_stream is not None and kwargs.get("preload_content") is False:
            body = kwargs.get("body", args[2] if len(args) > 2 else None)
            headers = kwargs.get("headers", args[3] if len(args) > 3 else None)
            url = kwargs.get("url", args[1] if len(args) > 1 else "")
            return watch_stream(lambda: top(self, args, kwargs), body, headers, str(url))
        return top(self, args, kwargs)

    def top(self: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        scope = scoped_budget()
        limit = request_limit()
        if scope is None and limit is None:
            return original(self, *args, **kwargs)
        if scope is not None:
            scope.check()
        timer = None if limit is None else RequestTimer(limit, scope)
        budget = scope if timer is None else timer.budget
        assert budget is not None
        args, kwargs = _clipped(
            signature,
            self,
            args,
            kwargs,
            budget.remaining() if timer is None else timer.remaining(),
        )
        call = _call(signature, self, args, kwargs, budget) if observed() else None
        guard = _new_guard(budget, timer, call)
        patches.track(guard)
        token = ACTIVE_GUARD.set(guard)
        timer_token = _TIMER.set(timer)
        answered = False
        try:
            response = _send(original, self, args, kwargs, guard)
            answered = True
        except BaseException as exc:
            if timer is None or not (is_request_timeout(exc) or _timed_out(exc, timer)):
                if call is not None:
                    call.failed(exc)
                raise
            url = kwargs.get("url", args[1] if len(args) > 1 else None)
            phase, message = guard.progress.phase, _timeout_message(timer.budget, guard)
            error = Urllib3RequestTimeout(message, phase=phase, pool=self, url=url)
            if call is not None:
                call.failed(error)
            raise error from None
        finally:
            _TIMER.reset(timer_token)
            ACTIVE_GUARD.reset(token)
            guard.request_finished(answered=answered)
        if call is not None:
            call.answered(response)
        if timer is not None:
            if _is_event_stream(response):
                timer.stop()  # the stream is left to the scope (and its own idle rules)
            else:
                setattr(response, TIMER_ATTR, timer)
        return response

    return urlopen


# The request timer of the request in progress (its retries and redirects share it).
_TIMER: contextvars.ContextVar[Optional[RequestTimer]] = contextvars.ContextVar(
    "watchdog_sync_request_timer", default=None
)


def _call(
    signature: inspect.Signature,
    pool: Any,
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    budget: Budget,
) -> Optional[RequestCall]:
    """The request's call for observers (``None`` when nobody observes events)."""
    given = signature.bind_partial(pool, *args, **kwargs).arguments
    method, url, body = given.get("method", ""), given.get("url", ""), given.get("body")
    call = RequestCall(pool, method, url, body, budget)
    return None if call.mark.call_id is None else call


def _new_guard(
    budget: Budget, timer: Optional[RequestTimer], call: Optional[RequestCall]
) -> ConnectionGuard:
    """The request's guard; once the request is over its timer stops and its call ends."""
    if call is None:
        return ConnectionGuard(budget, None, _noop if timer is None else timer.stop)

    def over() -> None:
        if timer is not None:
            timer.stop()
        call.over(guard.fired, guard.check)

    guard = ConnectionGuard(budget, None, over)
    guard.call = call
    return guard


def _timed_out(exc: BaseException, timer: RequestTimer) -> bool:
    """A failure of urllib3's own that the request's limit caused: a read clipped to the
    same moment can time out just before the timer's cancel comes."""
    return isinstance(exc, Exception) and timer.due


def _left(budget: Budget) -> float:
    timer = _TIMER.get()
    return budget.remaining() if timer is None else timer.remaining()


def _clipped(
    signature: inspect.Signature,
    pool: Any,
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    remaining: float,
) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """``urlopen``'s arguments with its timeouts capped at ``remaining`` seconds."""
    if len(args) > _TIMEOUT_POSITION:  # the timeouts were given by position
        args, kwargs = (), _by_name(signature, pool, args, kwargs)
    else:
        kwargs = dict(kwargs)
    _clip(pool, kwargs, remaining)
    return args, kwargs


def _is_event_stream(response: Any) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return 200 <= response.status < 300 and content_type.lower().startswith("text/event-stream")


def _by_name(
    signature: inspect.Signature, pool: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]
) -> Dict[str, Any]:
    """Every argument of a ``urlopen`` call by its name (``response_kw`` spread out)."""
    named: Dict[str, Any] = {}
    for name, value in list(signature.bind(pool, *args, **kwargs).arguments.items())[1:]:
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def _send(
    original: _Fn, pool: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], guard: ConnectionGuard
) -> Any:
    try:
        response = original(pool, *args, **kwargs)
    except Exception:
        if guard.fired or guard.budget.ended:
            raise_budget_end(guard)  # the budget's end caused it: say so
        raise
    if guard.fired:  # a preloaded body may have been cut short
        response.close()
        response.release_conn()
        raise_budget_end(guard)
    setattr(response, GUARD_ATTR, guard)
    return response


def _clip(pool: Any, arguments: Any, remaining: float) -> None:
    """Cap ``urlopen``'s timeouts (connect, read, total, pool) at ``remaining`` seconds."""
    if math.isinf(remaining):
        return
    timeout = pool._get_timeout(arguments["timeout"]) if "timeout" in arguments else pool.timeout
    arguments["timeout"] = _clipped_timeout(timeout, remaining)
    arguments["pool_timeout"] = _cap(arguments.get("pool_timeout"), remaining)


def _clipped_timeout(timeout: Timeout, remaining: float) -> Timeout:
    connect = timeout.connect_timeout
    try:
        read = timeout.read_timeout
    except TimeoutStateError:  # a total without a read limit: urllib3 derives it at connect
        read = None
    total = timeout.total
    return Timeout(
        connect=_cap(connect, remaining),
        read=_cap(read, remaining),
        total=_cap(total, remaining) if _is_number(total) else None,
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cap(value: Any, remaining: float) -> float:
    """``value`` seconds (``None`` or urllib3's default sentinel: no limit) capped."""
    limit = remaining if not _is_number(value) else min(float(value), remaining)
    return max(FLOOR, limit)


def _get_conn(patches: PatchSet, original: _Fn) -> _Fn:
    def _get_conn(self: Any, *args: Any, **kwargs: Any) -> Any:
        conn = original(self, *args, **kwargs)
        if patches.active and not _guarded_by_session(self):
            _guard.checked_out(conn)
        return conn

    return _get_conn


def _put_conn(patches: PatchSet, original: _Fn) -> _Fn:
    def _put_conn(self: Any, conn: Any) -> None:
        if patches.active and not _guarded_by_session(self):
            conn = _guard.checked_in(conn)
        original(self, conn)

    return _put_conn


# -- the connection ------------------------------------------------------------------


def _new_conn(patches: PatchSet, original: _Fn) -> _Fn:
    def _new_conn(self: Any) -> Any:
        if not patches.active or _guard_of(self) is None or _guarded_by_session(self):
            return original(self)
        return _guard.open_socket(self, functools.partial(original, self))

    return _new_conn


def _tunnel(patches: PatchSet, original: _Fn) -> _Fn:
    def _tunnel(self: Any) -> None:
        if not patches.active or _guard_of(self) is None or _guarded_by_session(self):
            original(self)
            return
        _guard.tunnel(self, functools.partial(original, self))

    return _tunnel


def _connect(patches: PatchSet, original: _Fn) -> _Fn:
    def connect(self: Any) -> None:
        original(self)
        if patches.active and _guard_of(self) is not None and not _guarded_by_session(self):
            _guard.connected(self)

    return connect


def _request(patches: PatchSet, original: _Fn) -> _Fn:
    def request(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if patches.active and _guard_of(self) is not None and not _guarded_by_session(self):
            _guard.awaiting_head(self)  # sent whole: a cut send leaves the phase at "send"
        return result

    return request


def _getresponse(patches: PatchSet, original: _Fn) -> _Fn:
    def getresponse(self: Any, *args: Any, **kwargs: Any) -> Any:
        response = original(self, *args, **kwargs)
        if patches.active and _guard_of(self) is not None and not _guarded_by_session(self):
            _guard.head_received(self)
        return response

    return getresponse


# -- the response --------------------------------------------------------------------


def _socket_of(response: Any) -> Any:
    """The socket a urllib3 response reads from (http.client's file, else the connection's)."""
    fp = getattr(getattr(response, "_fp", None), "fp", None)
    sock = getattr(getattr(fp, "raw", None), "_sock", None)
    if sock is None:
        sock = getattr(getattr(response, "_connection", None), "sock", None)
    return sock


def _read(patches: PatchSet, original: _Fn) -> _Fn:
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        guard = _guard_of(self)
        if not patches.active or (guard is None and READER_SOCKETS.get() is None):
            return original(self, *args, **kwargs)
        remove = reading(_socket_of(self))
        try:
            data = original(self, *args, **kwargs)
        except Exception as exc:
            if guard is not None and guard.fired:
                _raise_end(guard)
            _raise_if_timed_out(self, exc)
            raise
        finally:
            remove()
        if guard is not None and guard.fired:  # a shut body can look like a clean end
            _raise_end(guard)
        return data

    return read


def _read_chunked(patches: PatchSet, original: _Fn) -> _Fn:
    def read_chunked(self: Any, *args: Any, **kwargs: Any) -> Any:
        chunks = original(self, *args, **kwargs)
        if not patches.active or (_guard_of(self) is None and READER_SOCKETS.get() is None):
            return chunks
        return _guarded_chunks(self, chunks)

    return read_chunked


def _guarded_chunks(response: Any, chunks: Iterator[bytes]) -> Iterator[bytes]:
    guard = _guard_of(response)
    remove = reading(_socket_of(response))
    try:
        yield from chunks
    except Exception as exc:
        if guard is not None and guard.fired:
            _raise_end(guard)
        _raise_if_timed_out(response, exc)
        raise
    finally:
        remove()
    if guard is not None and guard.fired:
        _raise_end(guard)


def _raise_end(guard: ConnectionGuard) -> NoReturn:
    """What the budget's end means for a body read: the request timeout's own error, or
    ``Cancelled`` for the enclosing scope."""
    try:
        raise_budget_end(guard)
    except Cancelled as exc:
        if not is_request_timeout(exc):
            _failed(guard, exc)
            raise
        message = request_timeout_message(exc.budget, exc.progress)
        error = Urllib3RequestTimeout(message, phase=exc.phase)
    _failed(guard, error)
    raise error from None


def _raise_if_timed_out(response: Any, exc: Exception) -> None:
    """A body read that failed once its request's limit had passed ends with the request
    timeout's own error."""
    timer: Optional[RequestTimer] = getattr(response, TIMER_ATTR, None)
    if timer is not None and _timed_out(exc, timer):
        guard = _guard_of(response)
        error = Urllib3RequestTimeout(_timeout_message(timer.budget, guard), phase="body")
        if guard is not None:
            _failed(guard, error)
        raise error from None


def _failed(guard: ConnectionGuard, error: BaseException) -> None:
    """The request's body read failed with ``error``: its call (if observed) says so."""
    if guard.call is not None:
        guard.call.failed(error)


def _timeout_message(budget: Budget, guard: Optional[ConnectionGuard]) -> str:
    """The request timeout's words, with how far the request got when its guard knows."""
    return request_timeout_message(budget, None if guard is None else guard.progress.words())
