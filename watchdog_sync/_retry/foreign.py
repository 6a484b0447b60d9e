"""Foreign libraries' errors, recognised without importing the libraries.

A class is known by its name and the module it comes from, anywhere along an
exception's MRO (a library's own subclass of ``httpx2.ReadTimeout`` is still a
read timeout), so any version of requests, urllib3, httpx / httpx2, httpcore
or the openai, anthropic and google-genai SDKs works. Providers' error objects
(Anthropic's ``{"type": "error", "error": {"type": ...}}``) are known by their
error type; Google's (``{"error": {"code", "message", "status", "details"}}``)
by their ``details``: a ``google.rpc.RetryInfo`` gives the delay to wait, a
``google.rpc.QuotaFailure`` says which quota was hit.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional

__all__ = [
    "is_foreign",
    "is_foreign_transport",
    "name_code",
    "provider_error_status",
    "provider_quota_used_up",
    "provider_retry_delay",
    "provider_status",
]

# Foreign wrappers recognised by the names along their MRO, so versions differ harmlessly.
# ``None`` stops the walk: that error (and what it derives from) is no transport failure.
NAME_CODES: Dict[str, Optional[str]] = {
    "ReadTimeout": "ETIMEDOUT",
    "ReadTimeoutError": "ETIMEDOUT",
    "ConnectTimeout": "ETIMEDOUT",
    "ConnectTimeoutError": "ETIMEDOUT",
    "Timeout": "ETIMEDOUT",
    "TimeoutError": "ETIMEDOUT",
    "NameResolutionError": "EAI_FAIL",
    "NewConnectionError": "ECONNREFUSED",
    "ChunkedEncodingError": "EINCOMPLETE",
    "IncompleteRead": "EINCOMPLETE",
    "ProtocolError": "EPROTO",
    "InvalidChunkLength": "EINCOMPLETE",
    "RemoteDisconnected": "EREMOTECLOSED",
    "ConnectionError": "ECONNERROR",
    "SSLError": "ETLS",
    # httpx / httpx2 (and httpcore / httpcore2 underneath)
    "WriteTimeout": "ETIMEDOUT",
    "PoolTimeout": "ETIMEDOUT",
    "TimeoutException": "ETIMEDOUT",
    "ConnectError": "ECONNERROR",
    "ReadError": "ECONNERROR",
    "WriteError": "ECONNERROR",
    "NetworkError": "ECONNERROR",
    "RemoteProtocolError": "EPROTO",
    "LocalProtocolError": None,  # our side broke the protocol: a bug, not the network
    "ProxyError": "EPROXY",
    # the openai and anthropic SDKs (their wrappers of the errors above)
    "APITimeoutError": "ETIMEDOUT",
    "APIConnectionError": "ECONNERROR",
}
FOREIGN_MODULES = (
    "requests",
    "urllib3",
    "http.client",
    "ssl",
    "httpx",
    "httpcore",
    "openai",
    "anthropic",
    "google.genai",
)
# The error types of a provider's error object (Anthropic's ``{"type": "error", "error":
# {"type": ...}}``) and the HTTP status the provider sends them with.
PROVIDER_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
    # Google's error statuses (google.rpc.Code names), when an error object has no code
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ABORTED": 409,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNKNOWN": 500,
    "DATA_LOSS": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
_DURATION = re.compile(r"^\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)s\s*$")  # a protobuf Duration: "3s"


def provider_error_status(kind: object) -> Optional[int]:
    """The HTTP status a provider sends with an error object of type ``kind`` (or None)."""
    return PROVIDER_ERROR_STATUS.get(kind) if isinstance(kind, str) else None


def provider_status(body: Any) -> Optional[int]:
    """An SDK error raised for an error object in a 200 stream: the status of its type."""
    error = body.get("error") if isinstance(body, dict) else None
    return provider_error_status(error.get("type")) if isinstance(error, dict) else None


def _google_error(text: str) -> Optional[Dict[str, Any]]:
    """The ``error`` object of a Google error body that has ``details``, else None."""
    if '"details"' not in text:
        return None
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, cut, or nested too deep
        return None
    if isinstance(parsed, list) and len(parsed) == 1:  # some Google APIs wrap it in a list
        parsed = parsed[0]
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, dict) else None


def _details(error: Dict[str, Any], kind: str) -> List[Dict[str, Any]]:
    details = error.get("details")
    if not isinstance(details, list):
        return []
    return [
        d
        for d in details
        if isinstance(d, dict) and str(d.get("@type", "")).endswith("google.rpc." + kind)
    ]


def provider_retry_delay(text: str) -> Optional[float]:
    """Seconds from a Google error body's ``RetryInfo.retryDelay`` (``"3s"``), else None."""
    error = _google_error(text)
    for info in [] if error is None else _details(error, "RetryInfo"):
        delay = info.get("retryDelay")
        match = _DURATION.match(delay) if isinstance(delay, str) else None
        if match:
            return float(match.group(1))
    return None


def provider_quota_used_up(text: str) -> Optional[bool]:
    """For a Google 429 body: True when its ``QuotaFailure`` names a quota that waiting a
    little cannot restore (a per-day quota, or a limit of 0: no quota on this plan), False
    when it names only shorter ones (per minute: a rate limit, retried after its
    ``retryDelay``), None when the body says neither."""
    error = _google_error(text)
    if error is None:
        return None
    message = error.get("message")
    if isinstance(message, str) and "limit: 0" in message:
        return True
    violations = [
        v
        for failure in _details(error, "QuotaFailure")
        for v in (failure.get("violations") or [])
        if isinstance(v, dict)
    ]
    if not violations:
        return None
    for violation in violations:
        named = " ".join(str(violation.get(k, "")) for k in ("quotaId", "quotaMetric")).lower()
        if "perday" in named or "per_day" in named or str(violation.get("quotaValue")) == "0":
            return True
    return False


def name_code(cls: type) -> Optional[str]:
    """The code of the first foreign class along ``cls``'s MRO whose name we know."""
    for klass in cls.__mro__:
        if klass.__name__ in NAME_CODES and (klass.__module__ or "").startswith(FOREIGN_MODULES):
            return NAME_CODES[klass.__name__]
    return None


def is_foreign_transport(node: BaseException) -> bool:
    """``node``'s own class comes from one of the libraries we read."""
    module = type(node).__module__ or ""
    return module.startswith(FOREIGN_MODULES)


def is_foreign(node: BaseException) -> bool:
    """Some class along ``node``'s MRO comes from one of the libraries we read."""
    return any((klass.__module__ or "").startswith(FOREIGN_MODULES) for klass in type(node).__mro__)
