"""httpx_client(): an httpx2 (or httpx) Client whose every transport is an HTTPXTransport."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from .._core.budget import Budget
from .._core.config import AS_IDLE, IDLE_TIMEOUT_UNSET
from .._core.durations import Duration
from .._stream.sse import DEFAULT_MAX_EVENT_BYTES
from .cores import default_library, library_of
from .transport import HTTPXTransport

if TYPE_CHECKING:
    import httpx2

__all__ = ["httpx_client"]


def httpx_client(
    *,
    idle_timeout: Optional[Duration] = IDLE_TIMEOUT_UNSET,
    first_event_timeout: Optional[Duration] = AS_IDLE,
    budget: Optional[Budget] = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    propagate: bool = False,
    **client_kwargs: Any,
) -> httpx2.Client:
    """An ``httpx2.Client`` (``httpx.Client`` when only httpx is installed) on HTTPXTransport.

    Made for the SDKs' ``http_client=``::

        client = openai.OpenAI(http_client=watchdog_sync.httpx_client(), max_retries=0)
        with watchdog_sync.deadline(30):
            for chunk in client.chat.completions.create(..., stream=True):
                ...

    The client is built exactly as ``Client(**client_kwargs)`` would be (so
    ``verify``, ``cert``, ``limits``, ``http2``, ``mounts``, ``transport=`` and
    the proxies of ``proxy=`` or of the environment — ``HTTPS_PROXY``,
    ``NO_PROXY``, ... — all keep working), then every transport it routes to
    is wrapped in an :class:`HTTPXTransport` with every option of its own:
    ``idle_timeout``, ``first_event_timeout``, ``budget``, ``max_event_bytes``
    (an event over it ends the stream with ``StreamProtocolError('event_too_large')``)
    and ``propagate`` (``True``: each send,
    redirect hops included, carries the remaining budget as deadline headers,
    never to another origin than the call's first request's; an addition to
    the contract's signature). A ``transport=`` of the other
    library (an ``httpx`` transport) makes an ``httpx.Client``.

    On timeout or cancel: as :class:`HTTPXTransport` (``Cancelled`` for the
    enclosing ``deadline()`` scope, :class:`DeadlineExceeded` with ``budget=``,
    :class:`StreamIdleTimeout` for a silent stream).

    Raises:
        ImportError: neither httpx2 nor httpx is installed.
        TypeError, ValueError: a bad argument (the message names it).
    """
    given = client_kwargs.get("transport")
    lib = default_library() if given is None else library_of(given)
    options: Any = {
        "idle_timeout": idle_timeout,
        "first_event_timeout": first_event_timeout,
        "budget": budget,
        "max_event_bytes": max_event_bytes,
        "propagate": propagate,
    }
    client = lib.Client(**client_kwargs)
    # The client chose its transports (the proxies of the environment included: it only
    # looks for them when it is given no transport); wrap each one it can route to.
    mounts = getattr(client, "_mounts", None)
    if not isinstance(mounts, dict) or not hasattr(client, "_transport"):
        client.close()
        raise RuntimeError(
            f"this {lib.__name__} version keeps its transports elsewhere; "
            f"use {lib.__name__}.Client(transport=watchdog_sync.HTTPXTransport(...)) instead"
        )
    try:
        client._transport = _wrapped(client._transport, options)
        client._mounts = {
            pattern: None if transport is None else _wrapped(transport, options)
            for pattern, transport in mounts.items()
        }
    except BaseException:  # a bad option: its error, and no client left open
        client.close()
        raise
    return client  # type: ignore[no-any-return]


def _wrapped(transport: Any, options: Any) -> HTTPXTransport:
    if isinstance(transport, HTTPXTransport):
        return transport
    return HTTPXTransport(transport, **options)
