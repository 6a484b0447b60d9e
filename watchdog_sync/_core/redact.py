"""The one redaction policy: what counts as a secret, and how text we show is made safe.

Every message, excerpt, repr and log text the library builds from outside data
(server bodies, reason phrases, header values, URLs, foreign exceptions) goes
through here. The policy, in order:

1. the call's own secrets (its secret set, :func:`request_secrets`: every credential the
   request carried), in their plain, JSON-escaped, repr-escaped and percent-encoded forms, and
   anything shaped like a credential (``Bearer ...``, ``sk-...``, ``AIza...``,
   ``api_key=...``, the userinfo of a URL) are replaced by :data:`MASK`;
2. control characters (ESC, NUL, C1, bidi overrides) are escaped, so a hostile
   body cannot drive the terminal that prints the message;
3. only then is the text cut; a secret cut at the end is masked too.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import unicodedata
import urllib.parse
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    MutableMapping,
    Optional,
    Sequence,
    Tuple,
)

__all__ = [
    "CREDENTIAL_HEADERS",
    "MASK",
    "SENSITIVE_HEADERS",
    "clean_headers",
    "clean_secret",
    "describe",
    "error_secrets",
    "excerpt",
    "header_secrets",
    "proxy_secrets",
    "query_secrets",
    "redact",
    "request_secrets",
    "safe_headers",
    "safe_url",
    "scrub_exception",
    "secret_forms",
    "url_secrets",
]

MASK = "[REDACTED]"
# Request headers that carry a credential: masked wherever shown, checked before sending,
# stripped on a cross-origin redirect. The docs (chat.md, "Secrets") list the same names.
CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "api-key",
        "x-api-key",
        "openai-api-key",
        "x-goog-api-key",  # google-genai's (the Gemini API)
        "cookie",
    }
)
SENSITIVE_HEADERS = CREDENTIAL_HEADERS | {"set-cookie"}  # and the response's own
# Query parameters that carry a credential (the Gemini REST API's ``?key=``, ...).
CREDENTIAL_PARAMETERS = frozenset({"key", "api_key", "api-key", "apikey", "access_token", "token"})

_MIN_SECRET = 4  # shorter values would mask ordinary words
_PATTERNS = (
    # the userinfo of a URL: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@"), r"\1" + MASK + "@"),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1" + MASK),
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?:[a-z]+\s+)?[^\s\"',;]+"
        ),
        r"\1" + MASK,
    ),
    (
        re.compile(
            r"(?i)\b((?:x-)?api[_-]?key|access[_-]?token|refresh[_-]?token|token|secret|password)"
            r"([\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED\])[^\s\"',;&})\]]{2,}"
        ),
        r"\1\2" + MASK,
    ),
    (re.compile(r"(?i)([?&](?:key|sig|signature|code)=)[^&#\s\"']+"), r"\1" + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"), MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{6,}"), MASK),  # a Google API key
)
# Characters escaped in anything shown: C0/C1 controls (newline and tab aside), DEL, bidi marks,
# overrides and isolates.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MAX_MESSAGE = 300


def secret_forms(secrets: Iterable[Optional[str]]) -> List[str]:
    """Every form in which ``secrets`` may appear in text, longest first."""
    forms = set()
    for secret in secrets:
        if not isinstance(secret, str):
            continue
        for value in (secret, _trim(secret)):
            if len(value) < _MIN_SECRET:
                continue
            forms.add(value)
            forms.add(json.dumps(value)[1:-1])
            forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
            forms.add(repr(value)[1:-1])
            forms.add(urllib.parse.quote(value, safe=""))
            forms.add(urllib.parse.quote_plus(value, safe=""))
    return sorted(forms, key=len, reverse=True)


def redact(text: str, secrets: Iterable[Optional[str]] = ()) -> str:
    """``text`` with the given secrets and anything shaped like a credential masked."""
    return _redact(text, secret_forms(secrets))


# What each of _PATTERNS needs in the lower-cased text before it can match (its literal
# part, or the characters every match holds). Checked only on ASCII text, where lower() is
# exactly what ``(?i)`` matches (elsewhere ``(?i)`` also matches, e.g., U+017F for ``s``).
# A substitution only puts MASK where text was, so it never makes a later trigger appear.
_TRIGGERS: Tuple[Callable[[str], bool], ...] = (
    lambda low: "@" in low and "://" in low,
    lambda low: "bearer" in low,
    lambda low: "authorization" in low,
    lambda low: "key" in low or "token" in low or "secret" in low or "password" in low,
    lambda low: "=" in low and ("?" in low or "&" in low),
    lambda low: "sk-" in low,
    lambda low: "aiza" in low,
)


def _redact(text: str, forms: Sequence[str]) -> str:
    for form in forms:
        text = text.replace(form, MASK)
    if text.isascii():  # the common case: skip the patterns that cannot match (~1.5 µs, not 23)
        low = text.lower()
        for (pattern, replacement), could_match in zip(_PATTERNS, _TRIGGERS):
            if could_match(low):
                text = pattern.sub(replacement, text)
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _escape(text: str) -> str:
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


def safe_text(text: str, secrets: Iterable[Optional[str]] = ()) -> str:
    """``text`` redacted with control characters escaped (newlines and tabs kept)."""
    forms = secret_forms(secrets)
    return _redact(_escape(_redact(text, forms)), forms)


def excerpt(text: str, limit: int = 500, secrets: Iterable[Optional[str]] = ()) -> str:
    """A redacted, escaped, single-line excerpt of about ``limit`` characters.

    Redacted first and cut afterwards; a secret cut at the end (by this cut, or
    because ``text`` itself was cut short) is masked as well, which may add a
    few characters past ``limit``.
    """
    forms = secret_forms(secrets)
    room = 2 * limit + (len(forms[0]) if forms else 0) + 64
    windowed = len(text) > room
    flat = " ".join(_redact(text[:room] if windowed else text, forms).split())
    flat = _redact(_escape(flat), forms)
    if len(flat) > limit or windowed:
        return _mask_tail(flat[: max(0, limit - 3)], forms) + "..."
    return _mask_tail(flat, forms)


def _mask_tail(text: str, forms: Sequence[str]) -> str:
    """Mask the end of ``text`` where it is the start of a secret (a secret cut short)."""
    for form in forms:
        for size in range(min(len(form) - 1, len(text)), _MIN_SECRET - 1, -1):
            if text.endswith(form[:size]):
                return text[: len(text) - size] + MASK
    return text


def describe(error: BaseException, secrets: Iterable[Optional[str]] = ()) -> str:
    """``Type: message`` of ``error`` as an excerpt; an error whose ``str()`` fails is named only.

    Masked with ``secrets`` and with the secret set of every request the error (or one
    chained to it) holds (:func:`error_secrets`): an SDK's error quoting the key it sent.
    """
    try:
        text = str(error)
    except Exception:  # a broken __str__ must not break the error that reports it
        text = "(its message could not be read)"
    shown = excerpt(text, _MAX_MESSAGE, [*secrets, *error_secrets(error)])
    return f"{type(error).__name__}: {shown}" if shown else type(error).__name__


def safe_url(url: Any, secrets: Iterable[Optional[str]] = ()) -> str:
    """``url`` for a message: userinfo and credentials masked, escaped, at most 200 characters."""
    text = url if isinstance(url, str) else repr(url)
    return excerpt(text, 200, [*secrets, *url_secrets(text)])


def url_secrets(url: Any) -> List[str]:
    """The user name and password in the userinfo of ``url`` (raw and decoded), if any."""
    userinfo = _userinfo(url)
    if userinfo is None:
        return []
    found = [userinfo, *userinfo.split(":", 1)]
    return [*found, *(urllib.parse.unquote(part) for part in found)]


def _userinfo(url: Any) -> Optional[str]:
    if not isinstance(url, str) or "@" not in url:
        return None
    authority = url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" not in authority:
        return None
    return authority.rsplit("@", 1)[0]


def query_secrets(url: Any) -> List[str]:
    """The values of ``url``'s credential query parameters (``?key=...``), raw and decoded."""
    if not isinstance(url, str) or "?" not in url:
        return []
    found: List[str] = []
    for pair in url.split("?", 1)[1].split("#", 1)[0].split("&"):
        name, equals, value = pair.partition("=")
        if equals and value and urllib.parse.unquote_plus(name).lower() in CREDENTIAL_PARAMETERS:
            found += [value, urllib.parse.unquote_plus(value)]
    return found


def proxy_secrets(proxy: Any) -> List[str]:
    """The credentials of a proxy URL, in every form a request carries them: its userinfo
    (raw and decoded) and the ``Basic`` token of the ``Proxy-Authorization`` header that
    requests and httpx make of it."""
    userinfo = _userinfo(proxy)
    if userinfo is None:
        return []
    user, _, password = (urllib.parse.unquote(part) for part in userinfo.partition(":"))
    token = base64.b64encode(f"{user}:{password}".encode("latin-1", "replace")).decode()
    return [*url_secrets(proxy), token]


def request_secrets(
    headers: Optional[Mapping[str, Any]], url: Any, proxies: Iterable[Any] = ()
) -> List[str]:
    """The secret set of one request: every credential it carried.

    Each credential header's value (``Authorization``, ``Proxy-Authorization``,
    ``x-api-key``, ``api-key``, ``x-goog-api-key``, ...; the bare token too, and a
    ``Basic`` value decoded), the userinfo of ``url`` and its credential query values
    (``?key=``), and the credentials of each proxy in ``proxies`` it may go through.
    """
    found = [*header_secrets(headers or {}), *url_secrets(url), *query_secrets(url)]
    for proxy in proxies:
        found += proxy_secrets(proxy)
    return found


def error_secrets(error: BaseException) -> List[str]:
    """The secret sets of the requests ``error`` and the errors chained to it hold
    (``.request``, ``.response.request``: requests', httpx's and the SDKs' errors)."""
    found: List[str] = []
    seen: List[int] = []
    pending: List[Any] = [error]
    while pending and len(seen) < 8:
        node = pending.pop()
        if not isinstance(node, BaseException) or id(node) in seen:
            continue
        seen.append(id(node))
        response = _attribute(node, "response")
        for request in (_attribute(node, "request"), _attribute(response, "request")):
            headers = _attribute(request, "headers")
            if isinstance(headers, Mapping):
                found += request_secrets(headers, str(_attribute(request, "url")))
        pending += [node.__cause__, node.__context__]
    return found


def _attribute(holder: Any, name: str) -> Any:
    """``holder.name``, or ``None`` (httpx's ``.request``, of an error or a response, raises
    ``RuntimeError`` when it was never set)."""
    try:
        return getattr(holder, name, None)
    except RuntimeError:
        return None


def safe_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``headers`` with credentials masked (for reprs and logs)."""
    return {k: (MASK if k.lower() in SENSITIVE_HEADERS else v) for k, v in headers.items()}


def header_secrets(headers: Mapping[str, Any]) -> List[str]:
    """The secrets in ``headers``: each credential header's value and its bare token.

    ``Authorization: Bearer abc123`` gives ``["Bearer abc123", "abc123"]``, so a
    server that echoes the bare key in an error body is redacted too.
    """
    found: List[str] = []
    for name, value in headers.items():
        sensitive = isinstance(name, str) and name.lower() in SENSITIVE_HEADERS
        if sensitive and isinstance(value, str) and value:
            found.append(value)
            token = value.split()[-1] if value.split() else ""
            if token and token != value:
                found.append(token)
                if value.split()[0].lower() == "basic":
                    found += _basic_credentials(token)
    return found


def _basic_credentials(token: str) -> List[str]:
    """``user:password`` and the password of a ``Basic`` token, as a server may echo them."""
    try:
        decoded = base64.b64decode(token, validate=True).decode("latin-1")
    except (binascii.Error, ValueError):
        return []
    return [decoded, decoded.partition(":")[2]]


def clean_secret(value: str, what: str, *, spaces: bool = False) -> str:
    """``value`` (a key or credential header value) without surrounding whitespace or invisible
    characters (a key read from a file ends with a newline; one pasted may carry a BOM or a
    zero-width space).

    Raises ``ValueError`` naming ``what`` and the offending character (never the value) when
    one is left inside, or the value is empty; ``spaces`` allows single inner spaces
    (``Bearer <key>``).
    """
    cleaned = _trim(value)
    if not cleaned:
        raise ValueError(f"{what} is empty (or only whitespace): give the key itself")
    for index, char in enumerate(cleaned):
        if char == " " and spaces:
            continue
        if _invisible(char) or char.isspace() or not " " < char <= "~":
            name = unicodedata.name(char, "a control character")
            allowed = "spaces but no" if spaces else "no spaces,"
            raise ValueError(
                f"{what} must be printable ASCII, with {allowed} control or invisible "
                f"characters inside it (it is sent in an HTTP header); it has U+{ord(char):04X} "
                f"({name}) at position {index}: check how the key was read or pasted "
                "(the key itself is not shown)"
            )
    return cleaned


def clean_headers(headers: Mapping[str, str]) -> Dict[str, str]:
    """A copy of ``headers`` whose credential values went through :func:`clean_secret`
    (an empty value, which carries no secret, is left as it is)."""
    return {
        name: (
            clean_secret(value, f"the {name} header", spaces=True)
            if isinstance(name, str) and name.lower() in CREDENTIAL_HEADERS and _is_text(value)
            else value
        )
        for name, value in headers.items()
    }


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _trim(value: str) -> str:
    """``value`` without surrounding whitespace and invisible characters."""
    start, end = 0, len(value)
    while start < end and _invisible(value[start]):
        start += 1
    while end > start and _invisible(value[end - 1]):
        end -= 1
    return value[start:end]


def _invisible(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zs", "Zl", "Zp")


def scrub_exception(exc: BaseException, secrets: Iterable[Optional[str]] = ()) -> None:
    """Remove credentials from ``exc`` and everything chained to it, in place.

    For a foreign exception kept as the ``__cause__`` of one of ours: the
    credential headers of the request it carries (``exc.request``, and those of
    its response and redirect history) are masked, its URL's userinfo too, and
    string arguments are redacted, so neither ``traceback.format_exception`` nor
    ``exc.__cause__.request.headers`` shows a key. Bounded in depth.
    """
    forms = secret_forms(secrets)
    seen: List[int] = []
    pending: List[Any] = [exc]
    while pending and len(seen) < 32:
        node = pending.pop()
        if not isinstance(node, BaseException) or id(node) in seen:
            continue
        seen.append(id(node))
        response = getattr(node, "response", None)
        for request in (
            getattr(node, "request", None),
            getattr(response, "request", None),
            *(getattr(hop, "request", None) for hop in getattr(response, "history", None) or ()),
        ):
            _scrub_request(request, forms)
        args = getattr(node, "args", ())
        if isinstance(args, tuple) and any(isinstance(a, str) for a in args):
            with contextlib.suppress(AttributeError, TypeError):  # read-only args: left alone
                node.args = tuple(_redact(a, forms) if isinstance(a, str) else a for a in args)
        url = getattr(node, "url", None)
        if isinstance(url, str):
            _set(node, "url", _redact(url, [*forms, *secret_forms(url_secrets(url))]))
        pending.extend(a for a in (args if isinstance(args, tuple) else ()))
        pending.extend((node.__cause__, node.__context__, getattr(node, "reason", None)))


def _scrub_request(request: Any, forms: Sequence[str]) -> None:
    headers = getattr(request, "headers", None)
    if isinstance(headers, MutableMapping):
        for name in list(headers):
            if isinstance(name, str) and name.lower() in SENSITIVE_HEADERS:
                headers[name] = MASK
    url = getattr(request, "url", None)
    if isinstance(url, str):
        _set(request, "url", _redact(url, [*forms, *secret_forms(url_secrets(url))]))


def _set(holder: Any, name: str, value: str) -> None:
    with contextlib.suppress(AttributeError, TypeError):  # read-only: nothing we can change
        setattr(holder, name, value)
