"""instrument()'s patches of requests: a request's own timeout reaches a requests user as requests'.

requests wraps urllib3's errors in its own: the :class:`Urllib3RequestTimeout` that
ends a request (``instrument(request_timeout=...)``) comes out of
``HTTPAdapter.send`` as a plain ``requests.ReadTimeout``, and out of a body read
(``Response.iter_content``, so ``.content``, ``.text``, ``.json()``) as a
``requests.ConnectionError``. Both are turned here into
:class:`RequestsRequestTimeout`: requests' ``ReadTimeout`` family, and ours
(``reason='request_timeout'``). Every other error passes unchanged.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterator, Optional

from requests import adapters as _adapters
from requests import models as _models
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import ReadTimeout

from .patches import PatchSet
from .request_timeout import RequestsRequestTimeout, Urllib3RequestTimeout, request_limit

__all__ = ["requests_patches"]

_Fn = Callable[..., Any]


def requests_patches(patches: PatchSet) -> None:
    """Plan the patches of requests into ``patches`` (urllib3's set: they go and come together)."""
    patches.wrap(_adapters.HTTPAdapter, "send", functools.partial(_send, patches))
    patches.wrap(_models.Response, "iter_content", functools.partial(_iter_content, patches))


def _ours(exc: BaseException) -> Optional[Urllib3RequestTimeout]:
    """The request timeout requests wrapped in ``exc`` (its argument), if it did."""
    args = getattr(exc, "args", ())
    inner = args[0] if args else None
    return inner if isinstance(inner, Urllib3RequestTimeout) else None


def _send(patches: PatchSet, original: _Fn) -> _Fn:
    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, request, *args, **kwargs)
        except ReadTimeout as exc:
            ours = _ours(exc) if patches.active else None
            if ours is None:
                raise
            raise RequestsRequestTimeout(ours.message, phase=ours.phase, request=request) from None

    return send


def _iter_content(patches: PatchSet, original: _Fn) -> _Fn:
    def iter_content(self: Any, *args: Any, **kwargs: Any) -> Any:
        chunks = original(self, *args, **kwargs)
        if not patches.active or request_limit() is None:
            return chunks
        return _translated(chunks, self.request)

    return iter_content


def _translated(chunks: Iterator[Any], request: Any) -> Iterator[Any]:
    try:
        yield from chunks
        return
    except RequestsConnectionError as exc:
        ours = _ours(exc)
        if ours is None:
            raise
        error = RequestsRequestTimeout(ours.message, phase=ours.phase, request=request)
    raise error from None
