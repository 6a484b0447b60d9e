"""ChatClient settings: explicit argument > environment variable > default, resolved once.

Each setting's signature default is a private sentinel (shown as
``$WATCHDOG_SYNC_TIMEOUT or 600``), so "not given" (read the environment, then
the default) can be told apart from an explicit value, ``None`` included.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any, Optional

from .._core.config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_TIMEOUT,
    ENV_CONNECT_TIMEOUT,
    ENV_IDLE_TIMEOUT,
    ENV_MAX_ATTEMPTS,
    ENV_TIMEOUT,
    env_int,
    env_seconds,
)
from .._core.durations import validate_duration
from .._retry.policy import RetryPolicy

__all__ = [
    "CONNECT_TIMEOUT_UNSET",
    "DEFAULT_CHAT_MAX_ATTEMPTS",
    "IDLE_TIMEOUT_UNSET",
    "TIMEOUT_UNSET",
    "ChatSettings",
    "first_event_limit",
    "resolve",
]

DEFAULT_CHAT_MAX_ATTEMPTS = 3


class _Unset:
    """A signature default meaning "not given": the environment variable, else the default."""

    __slots__ = ("_text",)

    def __init__(self, env: str, default: float) -> None:
        self._text = f"${env} or {default:g}"

    def __repr__(self) -> str:
        return self._text  # what help() and the docs show as the default


TIMEOUT_UNSET: Any = _Unset(ENV_TIMEOUT, DEFAULT_TIMEOUT)
IDLE_TIMEOUT_UNSET: Any = _Unset(ENV_IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT)
CONNECT_TIMEOUT_UNSET: Any = _Unset(ENV_CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT)


@dataclass(frozen=True)
class ChatSettings:
    """A client's resolved limits, in seconds; ``None`` means "no limit of its own".

    ``first_event_timeout`` is ``None`` for "the idle limit" and ``0.0`` when disabled.
    """

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
        retry = RetryPolicy(max_attempts=env_int(ENV_MAX_ATTEMPTS, DEFAULT_CHAT_MAX_ATTEMPTS))
    elif not isinstance(retry, RetryPolicy):
        raise TypeError(
            f"retry must be a watchdog_sync.RetryPolicy or None, not {type(retry).__name__} "
            "(RetryPolicy(max_attempts=1) turns retries off)"
        )
    return ChatSettings(
        timeout=_positive(timeout, "timeout", ENV_TIMEOUT, DEFAULT_TIMEOUT),
        idle_timeout=_idle(idle_timeout),
        first_event_timeout=first_event_limit(first_event_timeout),
        connect_timeout=_positive(
            connect_timeout, "connect_timeout", ENV_CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT
        ),
        retry=retry,
    )


def first_event_limit(value: Any) -> Optional[float]:
    """``first_event_timeout``: ``None`` (the idle limit), ``0.0`` (disabled) or seconds."""
    if value is None:
        return None
    seconds = _disabling(value, "first_event_timeout")
    return 0.0 if seconds is None else seconds


def _positive(value: Any, name: str, env: str, default: float) -> Optional[float]:
    """A limit that must be > 0; ``None`` or ``inf`` means no limit of its own."""
    if isinstance(value, _Unset):
        seconds = env_seconds(env, default)
        if seconds <= 0:
            raise ValueError(
                f"environment variable {env}={os.environ.get(env)!r} must be more than 0 "
                "seconds; fix or unset it"
            )
        return seconds
    return validate_duration(value, name, allow_zero=False)


def _idle(value: Any) -> Optional[float]:
    """The idle limit: ``None``, ``0`` or less (also from the environment) disables it."""
    if isinstance(value, _Unset):
        seconds = env_seconds(ENV_IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT)
        return seconds if seconds > 0 else None
    if value is None:
        return None
    return _disabling(value, "idle_timeout")


def _disabling(value: Any, name: str) -> Optional[float]:
    """Seconds, or ``None`` when ``value`` is ``<= 0`` or ``inf`` (the limit is off)."""
    if isinstance(value, datetime.timedelta) and value <= datetime.timedelta(0):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
        return None
    return validate_duration(value, name)
