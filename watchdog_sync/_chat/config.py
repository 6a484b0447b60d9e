"""ChatClient settings: explicit argument > environment variable > default, resolved once.

The environment is read by ``_core/config.py``, as for every entry point; this
module only gathers a client's settings into one frozen value. Each setting's
signature default is a sentinel (shown as ``$WATCHDOG_SYNC_TIMEOUT or 600``),
so "not given" can be told apart from an explicit value, ``None`` included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .._core.config import (
    AS_IDLE,
    CONNECT_TIMEOUT_UNSET,
    IDLE_TIMEOUT_UNSET,
    TIMEOUT_UNSET,
    budget_limit,
    deprecated,
    first_limit,
    idle_setting,
)
from .._retry.policy import RetryPolicy, default_policy

__all__ = [
    "AS_IDLE",
    "CLIENT_DEFAULT",
    "CONNECT_TIMEOUT_UNSET",
    "IDLE_TIMEOUT_UNSET",
    "TIMEOUT_UNSET",
    "ChatSettings",
    "call_first_event",
    "call_timeout",
    "resolve",
]


class _ClientDefault:
    """The default of a per-call limit: the client's setting."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "the client's"


CLIENT_DEFAULT: Any = _ClientDefault()


@dataclass(frozen=True)
class ChatSettings:
    """A client's resolved limits, in seconds; ``None`` means "off" (no limit of its own)."""

    timeout: Optional[float]
    idle_timeout: Optional[float]
    first_event_timeout: Optional[float]
    connect_timeout: Optional[float]
    retry: RetryPolicy


def resolve(
    *,
    timeout: Any,
    idle_timeout: Any,
    first_event_timeout: Any,
    connect_timeout: Any,
    retry: Any,
) -> ChatSettings:
    """Resolve every setting; raise ``TypeError`` / ``ValueError`` naming a bad one.

    A malformed environment value raises ``ValueError`` naming the variable and the value.
    """
    if retry is None:
        retry = default_policy()
    elif not isinstance(retry, RetryPolicy):
        raise TypeError(
            f"retry must be a watchdog_sync.RetryPolicy or None, not {type(retry).__name__} "
            "(RetryPolicy(max_attempts=1) turns retries off)"
        )
    idle = idle_setting(idle_timeout)
    return ChatSettings(
        timeout=budget_limit(timeout, "timeout"),
        idle_timeout=idle,
        first_event_timeout=first_limit(first_event_timeout, idle, "first_event_timeout"),
        connect_timeout=budget_limit(connect_timeout, "connect_timeout"),
        retry=retry,
    )


def call_timeout(value: Any, settings: ChatSettings) -> Optional[float]:
    """A call's ``timeout=``: not given (or, deprecated, ``None``) is the client's."""
    if value is CLIENT_DEFAULT:
        return settings.timeout
    if value is None:
        deprecated(
            "timeout=None on a call means 'the client's timeout' and will mean 'off', as "
            "None does for every other limit: leave timeout out for the client's, pass "
            "math.inf for no limit of the call's own"
        )
        return settings.timeout
    return budget_limit(value, "timeout")


def call_first_event(value: Any, settings: ChatSettings) -> Optional[float]:
    """A call's ``first_event_timeout=``: not given (or, deprecated, ``None``) is the client's."""
    if value is CLIENT_DEFAULT:
        return settings.first_event_timeout
    if value is None:
        deprecated(
            "first_event_timeout=None on a call means 'the client's' and will mean 'off', as "
            "None does for every other limit: leave it out for the client's, pass 0 to turn "
            "it off"
        )
        return settings.first_event_timeout
    return first_limit(value, settings.idle_timeout, "first_event_timeout")
