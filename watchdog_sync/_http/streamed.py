"""A streamed body from :class:`Session`: bounded alike, read decoded or as sent.

``iter_content`` undoes the ``Content-Encoding`` inside urllib3, and urllib3 1.26
decodes each read whole: a small gzip bomb becomes hundreds of MiB before a
caller can count them. :func:`raw_content` reads the body as the server sent it,
for callers that decode it themselves within a limit (``decode.py``). Both raise
requests' own exception types, and both turn a read broken by the budget's end
into ``Cancelled``, so the caller's scope says "deadline", not "connection reset".
"""

from __future__ import annotations

import weakref
from typing import Any, Iterator

import requests
import requests.exceptions
from urllib3.exceptions import ProtocolError, ReadTimeoutError, SSLError

from .guard import ConnectionGuard, raise_budget_end

__all__ = ["bound_body", "raw_content"]

_BODY_GUARD_ATTR = "_watchdog_sync_body_guard"


def bound_body(response: requests.Response, guard: ConnectionGuard) -> None:
    """Make errors in ``response``'s streamed body say so when they come from the budget's end."""
    plain_iter_content = type(response).iter_content
    # Weakly: the response keeps this function, which must not keep the response.
    response_ref = weakref.ref(response)

    def iter_content(*args: Any, **kwargs: Any) -> Iterator[Any]:
        current = response_ref()
        if current is None:  # only a caller holding the response can call this
            return
        yield from _until_budget_end(plain_iter_content(current, *args, **kwargs), guard)

    response.iter_content = iter_content  # type: ignore[method-assign]
    setattr(response, _BODY_GUARD_ATTR, guard)


def raw_content(response: requests.Response, chunk_size: int) -> Iterator[bytes]:
    """``response``'s body as sent (its ``Content-Encoding`` not undone), ``chunk_size``
    bytes at most per piece.

    Raises what ``iter_content`` raises: requests' ``ChunkedEncodingError`` (the
    connection broke or the framing is wrong), ``ConnectionError`` (a read timed
    out) and ``SSLError``; through a :class:`Session`, ``Cancelled`` when the
    budget's end broke the read. A body read to its end is marked consumed, so
    closing the response returns the connection to the pool.
    """
    pieces = _raw_pieces(response, chunk_size)
    guard = getattr(response, _BODY_GUARD_ATTR, None)
    return pieces if guard is None else _until_budget_end(pieces, guard)


def _raw_pieces(response: requests.Response, chunk_size: int) -> Iterator[bytes]:
    try:
        yield from response.raw.stream(chunk_size, decode_content=False)
    except ProtocolError as exc:
        raise requests.exceptions.ChunkedEncodingError(exc) from exc
    except ReadTimeoutError as exc:
        raise requests.exceptions.ConnectionError(exc) from exc
    except SSLError as exc:
        raise requests.exceptions.SSLError(exc) from exc
    # What iter_content records at the end of the body: close() then keeps the connection.
    response._content_consumed = True  # type: ignore[attr-defined]


def _until_budget_end(pieces: Iterator[Any], guard: ConnectionGuard) -> Iterator[Any]:
    progress = guard.progress
    progress.count_body()
    try:
        for piece in pieces:
            progress.read(len(piece))
            yield piece
    except requests.RequestException:
        if guard.fired:
            raise_budget_end(guard)
        raise
    if guard.fired:
        raise_budget_end(guard)
