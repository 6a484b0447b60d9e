"""Defaults and their environment overrides: explicit argument > environment > default.

Environment values are strict decimal numbers (``120``, ``0.5``): no sign,
no exponent, no hex, no ``inf``. A malformed or oversized value is a
``ValueError`` naming the variable and the value.
"""

from __future__ import annotations

import os
import re
from typing import Optional

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_TIMEOUT",
    "ENV_CONNECT_TIMEOUT",
    "ENV_IDLE_TIMEOUT",
    "ENV_MAX_ATTEMPTS",
    "ENV_TIMEOUT",
    "env_int",
    "env_seconds",
]

ENV_TIMEOUT = "WATCHDOG_SYNC_TIMEOUT"
ENV_IDLE_TIMEOUT = "WATCHDOG_SYNC_IDLE_TIMEOUT"
ENV_CONNECT_TIMEOUT = "WATCHDOG_SYNC_CONNECT_TIMEOUT"
ENV_MAX_ATTEMPTS = "WATCHDOG_SYNC_MAX_ATTEMPTS"

DEFAULT_TIMEOUT = 600.0
DEFAULT_IDLE_TIMEOUT = 120.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_MAX_ATTEMPTS = 6

_MAX_SECONDS = 7 * 24 * 3600.0
_MAX_ATTEMPTS = 1000
_DECIMAL = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,9})?$")
_INTEGER = re.compile(r"^[0-9]{1,6}$")


def env_seconds(name: str, default: float) -> float:
    """Seconds from environment variable ``name``, or ``default`` when it is unset or empty."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if not _DECIMAL.match(text):
        raise ValueError(
            f"environment variable {name}={raw!r} is not a plain decimal number of seconds "
            f"(like 120 or 0.5); fix or unset it"
        )
    value = float(text)
    if value > _MAX_SECONDS:
        raise ValueError(
            f"environment variable {name}={raw!r} is too large (at most {_MAX_SECONDS:.0f} s); "
            "fix or unset it"
        )
    return value


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    """A whole number from environment variable ``name``, or ``default``."""
    raw: Optional[str] = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if not _INTEGER.match(text) or not minimum <= int(text) <= _MAX_ATTEMPTS:
        raise ValueError(
            f"environment variable {name}={raw!r} must be a whole number from {minimum} "
            f"to {_MAX_ATTEMPTS}; fix or unset it"
        )
    return int(text)
