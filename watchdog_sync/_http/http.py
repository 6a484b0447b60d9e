"""Session: a requests.Session whose every request is hard-bounded by the budget.

Three mechanisms bound every phase of a request:

* timeouts passed to urllib3 are clipped to the budget's remaining time
  (connect, and each socket read);
* name resolution of a host name runs in a short-lived helper thread whose
  wait is clipped the same way (``getaddrinfo`` has no timeout of its own);
* a proxy tunnel's reply to ``CONNECT`` is read within the connect timeout as
  a whole (http.client's own reads restart the timeout on every line);
* the live connection is registered with the budget for the lifetime of the
  request (until urllib3 returns it to the pool), its socket from the moment
  it exists (before any proxy tunnel or TLS handshake), and when the budget ends
  the shared watchdog thread shuts that socket down from outside
  (``shutdown(SHUT_RDWR)``, which wakes a blocked ``recv``; ``close()`` alone
  does not). A connection that was shut down is discarded, never pooled.

The registration lives exactly as long as the connection is checked out of
the pool, so a shutdown can never hit a connection that another request
reuses (urllib3 issue 3581). The guard and its steps live in ``guard.py``,
shared with :func:`instrument`'s patches of urllib3 itself.
"""

from __future__ import annotations

import http.client
import os
from typing import TYPE_CHECKING, Any, Callable, Optional, Type, cast

import requests
import requests.adapters
from requests.sessions import merge_setting
from urllib3 import connection as _connection
from urllib3 import connectionpool as _pool

from .._core.budget import Budget
from .._core.scope import boundary, joined_budget
from . import guard as _guard
from . import propagation as _propagation
from .environment import may_name_a_proxy
from .guard import ACTIVE_GUARD, HEAD_UNTIL, ConnectionGuard, clip_timeout
from .interim import FinalResponse
from .redirect import same_origin, strip_credentials
from .streamed import bound_body

if TYPE_CHECKING:
    from requests.sessions import _Settings

__all__ = ["Session"]

_merge_setting = cast(Callable[[Any, Any], Any], merge_setting)  # untyped in requests' stubs


class _GuardedConnectionMixin:
    """Resolves names within the connect timeout, bounds a proxy tunnel's reply by it,
    tells the guard about each socket as soon as it exists (the steps of ``guard.py``), and
    reads past interim (1xx) responses to the final one (``interim.py``)."""

    _watchdog_sync_guarded = True  # instrument()'s patches leave these classes to themselves
    response_class: Type[http.client.HTTPResponse] = FinalResponse

    def _new_conn(self) -> Any:
        return _guard.open_socket(self, super()._new_conn)  # type: ignore[misc]

    def _tunnel(self) -> None:
        _guard.tunnel(self, super()._tunnel)  # type: ignore[misc]

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _guard.connected(self)

    def request(self, *args: Any, **kwargs: Any) -> Any:
        result = super().request(*args, **kwargs)  # type: ignore[misc]
        _guard.awaiting_head(self)  # sent whole (urllib3 reads an answer after a cut send too)
        return result

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        response = super().getresponse(*args, **kwargs)  # type: ignore[misc]
        _guard.head_received(self)
        return response


class _HTTPConnection(_GuardedConnectionMixin, _connection.HTTPConnection):
    pass


class _HTTPSConnection(_GuardedConnectionMixin, _connection.HTTPSConnection):
    pass


class _GuardedPoolMixin:
    """Registers each checked-out connection with the request's guard; drops shut ones."""

    _watchdog_sync_guarded = True

    def _get_conn(self, timeout: Optional[float] = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        _guard.checked_out(conn)
        return conn

    def _put_conn(self, conn: Any) -> None:
        super()._put_conn(_guard.checked_in(conn))  # type: ignore[misc]


class _HTTPPool(_GuardedPoolMixin, _pool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(_GuardedPoolMixin, _pool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_POOL_CLASSES = {"http": _HTTPPool, "https": _HTTPSPool}


class _GuardedAdapter(requests.adapters.HTTPAdapter):
    """An HTTPAdapter whose pools register connections with the request's budget."""

    def __init__(self) -> None:
        super().__init__(max_retries=0)  # retries belong to retry_call

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOL_CLASSES)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = dict(_POOL_CLASSES)
        return manager

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        """Send one hop; a body requests reads at once (``stream=False``) is read through the
        guard, which counts its bytes and says when the budget's end cut it."""
        response = super().send(request, stream, timeout, verify, cert, proxies)
        guard = ACTIVE_GUARD.get()
        if not stream and guard is not None:
            bound_body(response, guard)
        return response


class Session(requests.Session):
    """A ``requests.Session`` whose every request is hard-bounded by a budget.

    Each request runs under the current ``deadline()`` scope's budget and, if
    given, ``budget`` (the tighter wins). Name resolution, connect, TLS,
    sending, waiting for headers and every body read are bounded: timeouts
    are clipped to the time left, and when the budget ends the socket is shut
    down from outside, so even a body that drips one byte a second stops at
    the deadline. urllib3-level retries are off (retries belong to
    :func:`retry_call`). Interim responses (``103 Early Hints``, ``102``) are read
    past to the final one, as ``100 Continue`` always was.

    On timeout or cancel: inside a ``deadline()`` scope the request raises
    :class:`Cancelled`, which the scope turns into :class:`DeadlineExceeded`
    (or :class:`OperationCancelled`); with ``Session(budget=...)`` and no
    scope, the request raises :class:`DeadlineExceeded` /
    :class:`OperationCancelled` itself. Transport failures keep requests' own
    exception types, so the session is a drop-in replacement.

    A streamed body (``stream=True``) stays bounded while it is read; the
    connection is released to the pool (or discarded, if it was shut) when
    the body is consumed or the response closed.

    Redirects are followed as requests follows them, except that a hop to
    another origin (scheme, host or port) strips every credential header
    (``Authorization``, ``Api-Key``, ``X-Api-Key``, ...), not only
    ``Authorization``.

    ``propagate=True``: every send (each retry and redirect hop) carries the
    time left as ``grpc-timeout`` and ``x-envoy-upstream-rq-timeout-ms`` (see
    :func:`deadline_headers`), computed then; none with no bounded budget, and
    none to another origin than the URL asked for. Off by default.
    """

    def __init__(self, budget: Optional[Budget] = None, *, propagate: bool = False) -> None:
        super().__init__()
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"budget must be a watchdog_sync.Budget, not {type(budget).__name__}")
        self.budget = budget
        self.propagate = _propagation.check_propagate(propagate)
        adapter = _GuardedAdapter()
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    def __repr__(self) -> str:
        shown = " propagate=True" if self.propagate else ""
        return f"<watchdog_sync.Session budget={self.budget!r}{shown}>"

    def should_strip_auth(self, old_url: str, new_url: str) -> bool:
        """True when a redirect changes the origin (scheme, host or port): credentials stay."""
        return not same_origin(old_url, new_url)

    def rebuild_auth(
        self, prepared_request: requests.PreparedRequest, response: requests.Response
    ) -> None:
        """On a cross-origin redirect, strip every credential header (not only Authorization)."""
        old_url, new_url = getattr(response.request, "url", None), prepared_request.url
        if not (isinstance(old_url, str) and isinstance(new_url, str)) or self.should_strip_auth(
            old_url, new_url
        ):
            strip_credentials(prepared_request.headers)
        super().rebuild_auth(prepared_request, response)  # type: ignore[no-untyped-call]  # netrc

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> _Settings:
        """requests' own merge, less its two scans of the environment for proxies when no
        variable can name one (``environment.py``): the same settings, about 150 µs sooner.
        The environment is ``os.environ`` as it is now, as requests reads it (a mapping that
        replaced it included)."""
        if not self.trust_env or may_name_a_proxy():
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        if verify is True or verify is None:
            verify = (
                os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or verify
            )
        return {
            "proxies": _merge_setting(proxies, self.proxies),
            "stream": _merge_setting(stream, self.stream),
            "verify": _merge_setting(verify, self.verify),
            "cert": _merge_setting(cert, self.cert),
        }

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
        budget, owner, release = joined_budget(self.budget, stage="http")
        guard = ConnectionGuard(budget, owner, release)
        answered = False
        try:
            with boundary(budget, owner):
                budget.check()
                kwargs["timeout"] = clip_timeout(kwargs.get("timeout"), budget.remaining())
                token = ACTIVE_GUARD.set(guard)
                first_send = _propagation.begin_request()  # which origin its hops may tell
                until = HEAD_UNTIL.get()
                if until is not None:
                    guard.bound_head(until)
                try:
                    response = super().request(method, url, *args, **kwargs)
                    answered = True
                except requests.RequestException:
                    if guard.fired or budget.expired:
                        guard.check()  # the budget's end caused it: say so, and where
                        _raise_if_head_late(guard)
                    raise
                finally:
                    guard.head_in()
                    _propagation.end_request(first_send)
                    ACTIVE_GUARD.reset(token)
                if guard.fired:
                    response.close()
                    guard.check()
                    _raise_if_head_late(guard)
        finally:
            guard.request_finished(answered=answered)
        if kwargs.get("stream"):
            bound_body(response, guard)
        return response

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        """Send one prepared request (the first or a redirect hop), deadline headers set now."""
        with _propagation.allowed_origin(request.url) as allowed:
            if self.propagate or _propagation.forced():
                guard = ACTIVE_GUARD.get()  # None: send() called directly, not by request()
                _propagation.mark_request(
                    request, allowed, None if guard is None else guard.budget, self.budget
                )
            return super().send(request, **kwargs)


def _raise_if_head_late(guard: ConnectionGuard) -> None:
    if guard.head_timed_out:
        raise requests.ReadTimeout(
            "the response head did not come within the stream's first-event limit"
        ) from None
