"""Redaction of secrets (API keys, bearer tokens) from text we show: bodies, messages, reprs."""

from __future__ import annotations

import re
from typing import Iterable, List, Mapping, Optional

__all__ = ["SENSITIVE_HEADERS", "excerpt", "header_secrets", "redact", "safe_headers"]

SENSITIVE_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie", "set-cookie"}
)
_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"),
    re.compile(r"(?i)((?:api[_-]?key|authorization|token)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
)
_MASK = "[REDACTED]"


def redact(text: str, secrets: Iterable[Optional[str]] = ()) -> str:
    """``text`` with the given secrets and anything shaped like a key or token masked."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, _MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + _MASK, text)
    return text


def excerpt(text: str, limit: int = 500, secrets: Iterable[Optional[str]] = ()) -> str:
    """A redacted, single-line excerpt of at most ``limit`` characters."""
    flat = " ".join(redact(text, secrets).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def safe_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``headers`` with credentials masked (for reprs and logs)."""
    return {k: (_MASK if k.lower() in SENSITIVE_HEADERS else v) for k, v in headers.items()}


def header_secrets(headers: Mapping[str, str]) -> List[str]:
    """The secrets in ``headers``: each credential header's value and its bare token.

    ``Authorization: Bearer abc123`` gives ``["Bearer abc123", "abc123"]``, so a
    server that echoes the bare key in an error body is redacted too.
    """
    found: List[str] = []
    for name, value in headers.items():
        if name.lower() in SENSITIVE_HEADERS and isinstance(value, str) and value:
            found.append(value)
            token = value.split()[-1] if value.split() else ""
            if token and token != value:
                found.append(token)
    return found
