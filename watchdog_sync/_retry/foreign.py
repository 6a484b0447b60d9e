"""Foreign libraries' errors, recognised without importing the libraries.

A class is known by its name and the module it comes from, anywhere along an
exception's MRO (a library's own subclass of ``httpx2.ReadTimeout`` is still a
read timeout), so any version of requests, urllib3, httpx / httpx2, httpcore
or the openai and anthropic SDKs works. Providers' error objects (Anthropic's
``{"type": "error", "error": {"type": ...}}``) are known by their error type.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

__all__ = [
    "is_foreign",
    "is_foreign_transport",
    "name_code",
    "provider_error_status",
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
}


def provider_error_status(kind: object) -> Optional[int]:
    """The HTTP status a provider sends with an error object of type ``kind`` (or None)."""
    return PROVIDER_ERROR_STATUS.get(kind) if isinstance(kind, str) else None


def provider_status(body: Any) -> Optional[int]:
    """An SDK error raised for an error object in a 200 stream: the status of its type."""
    error = body.get("error") if isinstance(body, dict) else None
    return provider_error_status(error.get("type")) if isinstance(error, dict) else None


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
