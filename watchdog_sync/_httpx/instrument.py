"""instrument(): the deadline() scope binds the HTTP clients a process already has.

Each option is a patch set built by its own module: urllib3 (``_http/instrument_urllib3.py``,
its event streams ``urllib3_streams.py``), httpx2 and httpx (``instrument_httpx.py``),
``sockets`` and ``threads`` (``_http/instrument_sockets.py``, ``_http/instrument_threads.py``).
``request_timeout`` and the stream limits are limits those patches read per request
(``_http/request_timeout.py``, ``_stream/instrument_limits.py``). Calls are counted: a patch
set comes out when the last undo that took it has run.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Optional

from .._core.config import (
    INSTRUMENT_FIRST_EVENT_TIMEOUT_UNSET,
    INSTRUMENT_IDLE_TIMEOUT_UNSET,
    INSTRUMENT_REQUEST_TIMEOUT_UNSET,
    INSTRUMENT_SOCKETS_UNSET,
    INSTRUMENT_THREADS_UNSET,
    instrument_flag,
    instrument_seconds,
)
from .._core.durations import Duration
from .._http.instrument_sockets import sockets_patches
from .._http.instrument_threads import threads_patches
from .._http.instrument_urllib3 import urllib3_patches
from .._http.patches import PatchSet
from .._http.request_timeout import add_request_timeout
from .._stream.instrument_limits import add_instrument_limits, instrument_limits
from .instrument_httpx import httpx_patches
from .urllib3_streams import watch_stream

__all__ = ["instrument"]

_BUILDERS: Dict[str, Callable[[], Optional[PatchSet]]] = {
    "urllib3": lambda: urllib3_patches(watch_stream),
    "httpx": httpx_patches,
    "sockets": sockets_patches,
    "threads": threads_patches,
}
_LOCK = threading.Lock()
_USERS: Dict[str, int] = {}
_INSTALLED: Dict[str, PatchSet] = {}


def instrument(
    *,
    urllib3: bool = True,
    httpx: bool = True,
    sockets: bool = INSTRUMENT_SOCKETS_UNSET,
    threads: bool = INSTRUMENT_THREADS_UNSET,
    request_timeout: Optional[Duration] = INSTRUMENT_REQUEST_TIMEOUT_UNSET,
    idle_timeout: Optional[Duration] = INSTRUMENT_IDLE_TIMEOUT_UNSET,
    first_event_timeout: Optional[Duration] = INSTRUMENT_FIRST_EVENT_TIMEOUT_UNSET,
) -> Callable[[], None]:
    """Bound every urllib3 and httpx connection in the process by the current ``deadline()`` scope.

    After ``instrument()``, inside a ``deadline()`` scope every request that urllib3 makes
    (``requests``, botocore, ``urllib3.PoolManager``, ...) and every request through an httpx2
    or httpx ``HTTPTransport`` (the default of their clients, so ``openai.OpenAI()`` and
    ``anthropic.Anthropic()`` as they are) runs under the scope's budget like a
    :class:`Session` request: name resolution, connect, the proxy tunnel and every read are
    clipped to the time left, and the connection's socket is shut from outside when the budget
    ends, so even a body that drips one byte a second stops at the deadline. A connection is
    bound only while a request has it checked out: one back in the pool is never shut.
    :class:`Session`'s own pools and :func:`httpx_client`'s transport are left to their own
    budgets and limits: none of the options below applies to them. With the options left out
    (and their environment variables unset), nothing changes outside any scope.

    :func:`guard_stream` over a body read through such a connection
    (``guard_stream(response.iter_lines(), idle_timeout=30)``, or over an SDK stream) shuts
    that socket when the stream ends early (idle timeout, the budget's end, ``close()``), so
    its reader thread exits, in a scope or not.

    ``request_timeout``: every request through urllib3 or httpx, in a scope or not, gets a time
    limit of its own (the tighter of it and the scope's) for name resolution, connect, TLS,
    sending, the response head and a body that is not an event stream, read to its end (an
    event stream, ``text/event-stream``, is bound up to its head, then left to the scope). At
    its end the connection is shut and the request fails with the timeout error its caller
    already handles, which is also ours (``reason='request_timeout'``, retryable):
    ``requests.ReadTimeout`` through requests, urllib3's ``ReadTimeoutError`` through urllib3
    alone, httpx's ``TimeoutException`` through httpx2 or httpx, so an SDK maps it to its own
    timeout error and retries it within the scope.

    ``idle_timeout`` / ``first_event_timeout``: every event stream (``text/event-stream``) read
    through httpx2, httpx or urllib3 (requests: a streamed response), in a scope or not, is
    read by the stream rules, as under :func:`httpx_client`. One silent ``first_event_timeout``
    seconds before its first data event (through httpx the head included; through urllib3
    from the head on) is sent again, at most twice and within the budget, when the request is
    replayable and outside a ``retry_call`` attempt (there it raises :class:`StreamIdleTimeout`
    for the retry owner); one silent ``idle_timeout`` seconds between data events raises
    :class:`StreamIdleTimeout`; one that ends without its terminal event
    ``StreamProtocolError('no_finish_reason')``; an event over 8 MiB
    ``StreamProtocolError('event_too_large')``. The SDKs and requests' ``iter_content`` /
    ``iter_lines`` pass these errors to their caller (anthropic >= 2.17 wraps them in
    ``APIConnectionError``, ours as its ``__cause__``).

    For every limit, the tightest of the calls not yet undone applies.

    On timeout or cancel: when the scope's budget ends, the request (or the body read) raises
    :class:`Cancelled`, a ``BaseException``, so neither requests' nor botocore's retry loops
    nor a caller's ``except Exception`` can swallow it and no retry starts after it; the
    ``deadline()`` scope converts it into :class:`DeadlineExceeded` (or
    :class:`OperationCancelled` after ``budget.cancel()``) at its boundary. Read a streamed
    body inside the scope: outside it, a read after the budget's end raises the ``Cancelled``
    unconverted. Work handed to other threads is bound only when it carries the scope
    (:func:`carry_budget`).

    Args:
        urllib3: patch urllib3 (requests, botocore, ...).
        httpx: patch httpx2 and httpx, whichever are installed (imported now if they are).
            Async transports are not patched.
        sockets: bind every other socket too: inside a scope, a socket connected through
            Python's ``socket`` module (http.client, urllib.request, a client with HTTP code
            of its own) has its timeout clipped to the time left when it connects and is shut
            from outside at the budget's end; a read or write that then ends with nothing or
            fails raises ``Cancelled``. The socket belongs to that scope even if used after
            it. Sockets that urllib3's and httpx's request guards bound, and non-blocking
            ones, are left alone. Left out: ``WATCHDOG_SYNC_INSTRUMENT_SOCKETS``, else off
            (it adds a Python call to every socket read).
        threads: carry the scope into threads: a ``threading.Thread`` (a subclass's own
            ``run()`` too) started inside a scope runs inside its budget, and so does each
            task submitted to a ``concurrent.futures.ThreadPoolExecutor`` (the pool's workers
            carry nothing of their own). In a thread, the budget's end raises ``Cancelled``
            in library waits; one that leaves a thread's ``run()`` ends the thread quietly,
            one in a pool task reaches ``future.result()``, and the scope converts it. Left
            out: ``WATCHDOG_SYNC_INSTRUMENT_THREADS``, else off.
        request_timeout: seconds (float or ``timedelta``, ``> 0``) each request may take;
            ``None`` or ``inf``: no limit of its own. Left out:
            ``WATCHDOG_SYNC_INSTRUMENT_REQUEST_TIMEOUT``, else none.
        idle_timeout: the longest gap between data events of an event stream (seconds or
            ``timedelta``); ``None``, ``inf`` or ``<= 0``: off. Left out:
            ``WATCHDOG_SYNC_INSTRUMENT_IDLE_TIMEOUT``, else off.
        first_event_timeout: the longest wait for an event stream's first data event, from
            sending the request; ``None``, ``inf`` or ``<= 0``: off. Left out:
            ``WATCHDOG_SYNC_INSTRUMENT_FIRST_EVENT_TIMEOUT``, else ``idle_timeout``.

    Returns:
        ``undo``: removes this call's patches and limits. Idempotent; calls and undos may
        come from any thread. After ``instrument()`` twice, the patches stay until both
        undos ran; the last one restores the original methods exactly. urllib3 requests in
        flight then stop being bounded; an httpx response already returned stays bounded
        until it is closed.

    Raises:
        TypeError: ``urllib3``, ``httpx``, ``sockets`` or ``threads`` is not a bool, or a
            timeout not a number of seconds.
        ValueError: ``request_timeout`` is ``<= 0`` or NaN, a stream limit NaN, or one of the
            environment variables above is malformed (the message names it).

    Example::

        undo = watchdog_sync.instrument()
        with watchdog_sync.deadline(10):
            requests.post(url, json=payload)   # DeadlineExceeded after 10 s, whatever the server does
            openai.OpenAI().chat.completions.create(...)   # the same
        undo()
    """
    sockets = instrument_flag(sockets, "sockets")
    threads = instrument_flag(threads, "threads")
    limit = instrument_seconds(request_timeout, "request_timeout")
    streams = instrument_limits(idle_timeout, first_event_timeout)
    options = (("urllib3", urllib3), ("httpx", httpx), ("sockets", sockets), ("threads", threads))
    for name, value in options:
        if not isinstance(value, bool):
            raise TypeError(f"instrument({name}=...) takes True or False, not {value!r}")
    wanted = [name for name, on in options if on]
    taken: List[str] = []
    with _LOCK:
        for library in wanted:
            if _USERS.get(library, 0) == 0:
                patches = _BUILDERS[library]()
                if patches is None:
                    continue  # not installed, or nothing to patch for it
                patches.install()
                _INSTALLED[library] = patches
            _USERS[library] = _USERS.get(library, 0) + 1
            taken.append(library)
    clients = [name for name in taken if name in ("urllib3", "httpx")]
    removers = [] if limit is None or not clients else [add_request_timeout(limit)]
    if streams is not None and clients:
        removers.append(add_instrument_limits(streams))
    return _Undo(taken, removers)


class _Undo:
    """The undo of one instrument() call: releases its share of each library's patches."""

    def __init__(self, libraries: List[str], removers: List[Callable[[], None]]) -> None:
        self._libraries = libraries
        self._removers = removers
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            libraries, self._libraries = self._libraries, []
            removers, self._removers = self._removers, []
        for remove in removers:
            remove()
        with _LOCK:
            for library in libraries:
                _USERS[library] -= 1
                if _USERS[library] == 0:
                    _INSTALLED.pop(library).remove()

    def __repr__(self) -> str:
        state = "undone" if not self._libraries else "for " + ", ".join(self._libraries)
        return f"<watchdog_sync.instrument undo {state}>"
