"""The HTTP status table: a reason code for each status, and whether retrying can help.

A leaf: it imports nothing, so the error tree, ``classify()`` and the translation
boundary can all read it without importing each other.
"""

from __future__ import annotations

from typing import Tuple

__all__ = ["RETRYABLE_STATUS", "status_reason", "status_verdict"]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})

_STATUS_REASONS = {
    400: "invalid_request",
    401: "auth",
    403: "forbidden",
    404: "not_found",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    422: "invalid_request",
    425: "too_early",
    429: "rate_limited",
    500: "server_error",
    502: "bad_gateway",
    503: "unavailable",
    504: "gateway_timeout",
    529: "overloaded",
}

_QUOTA_MARKERS = (
    "insufficient_quota",
    "billing_hard_limit_reached",
    "billing_not_active",
    "exceeded your current quota",
    "quota exceeded",
    "quota_exceeded",
    "check your plan and billing",
)
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "exceeds the maximum number of tokens",  # Gemini: "The input token count (N) exceeds ..."
)


def status_verdict(status: int, body: str = "") -> Tuple[str, bool]:
    """The reason code for an HTTP status and whether another attempt could help."""
    reason = status_reason(status, body)
    return reason, status in RETRYABLE_STATUS and reason != "quota_exceeded"


def status_reason(status: int, body: str = "") -> str:
    """The reason code for an HTTP status, reading quota and context hints in ``body``."""
    lowered = body.lower()
    if status == 429 and any(marker in lowered for marker in _QUOTA_MARKERS):
        return "quota_exceeded"
    if status in (400, 413, 422) and any(marker in lowered for marker in _CONTEXT_MARKERS):
        return "context_length"
    if status in _STATUS_REASONS:
        return _STATUS_REASONS[status]
    if 300 <= status < 400:
        return "redirect"  # one that was not followed
    return "server_error" if status >= 500 else "http_status"
