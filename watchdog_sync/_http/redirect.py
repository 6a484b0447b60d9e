"""Redirects: what a cross-origin hop strips, and the error for a redirect not followed.

``Session`` follows redirects as requests does (it is a drop-in), but strips
every credential header of :data:`CREDENTIAL_HEADERS` when a hop changes the
origin (scheme, host or port), where requests strips ``Authorization`` only.
A POST that is answered with a redirect is not followed by ``stream_sse`` and
``ChatClient``: 307/308 would send the prompt to the new place, and
301/302/303 would turn it into a body-less GET whose answer passes for the
completion. They fail with :func:`refused_redirect` instead.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, MutableMapping, Optional, Sequence, Tuple

import requests

from .._core.errors import HTTPStatusError
from .._core.redact import CREDENTIAL_HEADERS, safe_url

__all__ = [
    "FOLLOWED_METHODS",
    "is_redirect",
    "refused_redirect",
    "same_origin",
    "strip_credentials",
]

# Methods whose redirects are followed by stream_sse: a replay of them sends no body.
FOLLOWED_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# requests rebuilds these itself for the new target after a hop (cookies from the jar by
# domain, Proxy-Authorization from the proxy settings), so stripping them would only lose them.
_REBUILT_BY_REQUESTS = frozenset({"cookie", "proxy-authorization"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> Tuple[str, Optional[str], Optional[int]]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1  # unparsable: never the same origin as anything
    return scheme, (parts.hostname or "").lower() or None, port or _DEFAULT_PORTS.get(scheme)


def same_origin(old_url: str, new_url: str) -> bool:
    """True when both URLs have the same scheme, host and (effective) port."""
    old, new = _origin(old_url), _origin(new_url)
    return old == new and old[2] != -1


def strip_credentials(headers: MutableMapping[str, Any]) -> None:
    """Remove every credential header that would go to the new origin of a redirect."""
    for name in list(headers):
        lowered = name.lower()
        if lowered in CREDENTIAL_HEADERS and lowered not in _REBUILT_BY_REQUESTS:
            del headers[name]


def is_redirect(response: requests.Response) -> bool:
    """A 3xx answer that names where to go (``Location``)."""
    return 300 <= response.status_code < 400 and bool(response.headers.get("Location"))


def refused_redirect(
    response: requests.Response, method: str, secrets: Sequence[Optional[str]], **fields: Any
) -> HTTPStatusError:
    """The error for a redirect of ``method`` that is not followed (not retryable).

    ``fields`` (the call's ``request_id`` and ``attempt``) go into the error.
    """
    status = response.status_code
    target = urllib.parse.urljoin(response.url or "", response.headers.get("Location", ""))
    return HTTPStatusError(
        f"HTTP {status}: the server redirected this {method} to {safe_url(target, secrets)}, "
        "and it is not followed: a redirect would send the request (and its credentials) "
        "somewhere else, or turn it into a GET whose answer is not the completion. "
        "Point the URL (base_url) at the final address",
        status=status,
        reason="redirect",
        retryable=False,
        **fields,
    )
