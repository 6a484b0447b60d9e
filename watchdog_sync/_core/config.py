"""Every limit's default, its environment override and its "off", resolved in one place.

Precedence: explicit argument > environment variable > built-in default. A
public entry point (``ChatClient``, ``stream_sse``, ``retry_call`` without a
policy, the CLI) reads the environment once, through this module, when it is
called (``ChatClient``: when it is built). Its signature shows a sentinel such
as ``$WATCHDOG_SYNC_TIMEOUT or 600`` for "not given".

"Off" follows one rule (``durations.py``): ``None`` or ``inf`` turns any limit
off; idle limits also treat ``<= 0`` as off; other limits reject negatives.
Old spellings that meant something else are kept, with a ``DeprecationWarning``.

Environment values are strict decimal numbers (``120``, ``0.5``): no sign,
no exponent, no hex, no ``inf``. A malformed or oversized value is a
``ValueError`` naming the variable and the value.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from typing import Any, Optional, Tuple

from .durations import MAX_SECONDS, idle_limit, validate_duration

__all__ = [
    "AS_IDLE",
    "CONNECT_TIMEOUT_UNSET",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_TIMEOUT",
    "ENV_CONNECT_TIMEOUT",
    "ENV_IDLE_TIMEOUT",
    "ENV_INSTRUMENT_FIRST_EVENT_TIMEOUT",
    "ENV_INSTRUMENT_IDLE_TIMEOUT",
    "ENV_INSTRUMENT_REQUEST_TIMEOUT",
    "ENV_INSTRUMENT_SOCKETS",
    "ENV_INSTRUMENT_THREADS",
    "ENV_MAX_ATTEMPTS",
    "ENV_TIMEOUT",
    "IDLE_TIMEOUT_UNSET",
    "INSTRUMENT_FIRST_EVENT_TIMEOUT_UNSET",
    "INSTRUMENT_IDLE_TIMEOUT_UNSET",
    "INSTRUMENT_REQUEST_TIMEOUT_UNSET",
    "INSTRUMENT_SOCKETS_UNSET",
    "INSTRUMENT_THREADS_UNSET",
    "TIMEOUT_UNSET",
    "Unset",
    "budget_limit",
    "deprecated",
    "env_flag",
    "env_int",
    "env_seconds",
    "first_limit",
    "idle_setting",
    "instrument_flag",
    "instrument_idle",
    "instrument_seconds",
    "max_attempts",
    "origin",
]

ENV_TIMEOUT = "WATCHDOG_SYNC_TIMEOUT"
ENV_IDLE_TIMEOUT = "WATCHDOG_SYNC_IDLE_TIMEOUT"
ENV_CONNECT_TIMEOUT = "WATCHDOG_SYNC_CONNECT_TIMEOUT"
ENV_MAX_ATTEMPTS = "WATCHDOG_SYNC_MAX_ATTEMPTS"
ENV_INSTRUMENT_REQUEST_TIMEOUT = "WATCHDOG_SYNC_INSTRUMENT_REQUEST_TIMEOUT"
ENV_INSTRUMENT_SOCKETS = "WATCHDOG_SYNC_INSTRUMENT_SOCKETS"
ENV_INSTRUMENT_IDLE_TIMEOUT = "WATCHDOG_SYNC_INSTRUMENT_IDLE_TIMEOUT"
ENV_INSTRUMENT_FIRST_EVENT_TIMEOUT = "WATCHDOG_SYNC_INSTRUMENT_FIRST_EVENT_TIMEOUT"
ENV_INSTRUMENT_THREADS = "WATCHDOG_SYNC_INSTRUMENT_THREADS"

DEFAULT_TIMEOUT = 600.0
DEFAULT_IDLE_TIMEOUT = 120.0
DEFAULT_CONNECT_TIMEOUT = 10.0
# Six attempts with backoff 1.5 * 2**n s (about 46 s of waits in all) ride out a
# gateway restart or a minute of 429s inside the 600 s default budget (DESIGN,
# incident 2). One default for retry_call and ChatClient: ChatClient retries only
# "open the stream and get its first chunk", so its retries never replay output.
DEFAULT_MAX_ATTEMPTS = 6

_MAX_ATTEMPTS = 1000
_PACKAGE = "watchdog_sync."
_DECIMAL = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,9})?$")
_INTEGER = re.compile(r"^[0-9]{1,6}$")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class Unset:
    """A signature default meaning "not given": the environment variable, else the default."""

    __slots__ = ("default", "env")

    def __init__(self, env: str, default: Any) -> None:
        self.env = env
        self.default = default

    def __repr__(self) -> str:  # what help() and the docs show
        shown = f"{self.default:g}" if isinstance(self.default, float) else repr(self.default)
        return f"${self.env} or {shown}"


class _AsIdle:
    """The default of ``first_event_timeout`` / ``first_item_timeout``: the idle limit."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "idle_timeout"


TIMEOUT_UNSET: Any = Unset(ENV_TIMEOUT, DEFAULT_TIMEOUT)
IDLE_TIMEOUT_UNSET: Any = Unset(ENV_IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT)
CONNECT_TIMEOUT_UNSET: Any = Unset(ENV_CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT)
AS_IDLE: Any = _AsIdle()
INSTRUMENT_REQUEST_TIMEOUT_UNSET: Any = Unset(ENV_INSTRUMENT_REQUEST_TIMEOUT, None)
INSTRUMENT_SOCKETS_UNSET: Any = Unset(ENV_INSTRUMENT_SOCKETS, False)
INSTRUMENT_THREADS_UNSET: Any = Unset(ENV_INSTRUMENT_THREADS, False)
INSTRUMENT_IDLE_TIMEOUT_UNSET: Any = Unset(ENV_INSTRUMENT_IDLE_TIMEOUT, None)
INSTRUMENT_FIRST_EVENT_TIMEOUT_UNSET: Any = Unset(ENV_INSTRUMENT_FIRST_EVENT_TIMEOUT, AS_IDLE)


def deprecated(message: str) -> None:
    """Warn that an old spelling still works but will change (``DeprecationWarning``).

    The warning points at the caller's code: the first frame outside this package.
    """
    level = 2
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def budget_limit(value: Any, name: str) -> Optional[float]:
    """A limit that is part of a budget (``timeout``, ``connect_timeout``): seconds ``> 0``.

    ``Unset``: the environment variable (which must be ``> 0``), else the
    default. ``None`` or ``inf``: off. ``0`` or less: ``ValueError``.
    """
    if isinstance(value, Unset):
        seconds = env_seconds(value.env, value.default)
        if seconds <= 0:
            raise ValueError(
                f"environment variable {value.env}={os.environ.get(value.env)!r} must be more "
                "than 0 seconds; fix or unset it"
            )
        return seconds
    return validate_duration(value, name, allow_zero=False)


def idle_setting(value: Any, name: str = "idle_timeout") -> Optional[float]:
    """An idle limit: ``Unset`` reads ``WATCHDOG_SYNC_IDLE_TIMEOUT``; ``None``, ``<= 0``, ``inf``: off."""
    if isinstance(value, Unset):
        seconds = env_seconds(value.env, value.default)
        return seconds if seconds > 0 else None
    return idle_limit(value, name)


def first_limit(value: Any, idle: Optional[float], name: str) -> Optional[float]:
    """The first-event limit: ``AS_IDLE`` (not given) is ``idle``; ``None``, ``<= 0``, ``inf``: off.

    An explicit ``None`` keeps its old meaning, "the idle limit", with a
    ``DeprecationWarning``: leave the argument out for that, pass ``0`` to turn it off.
    """
    if value is AS_IDLE:
        return idle
    if value is None:
        deprecated(
            f"{name}=None means 'the same as idle_timeout' and will mean 'off', as None does "
            f"for every other limit: leave {name} out for the idle limit, pass 0 to turn it off"
        )
        return idle
    return idle_limit(value, name)


def instrument_seconds(value: Any, name: str) -> Optional[float]:
    """A limit of ``instrument()`` (``> 0``; ``None``/``inf``: none); ``Unset`` reads its
    environment variable (unset or empty: none)."""
    if isinstance(value, Unset) and not os.environ.get(value.env, "").strip():
        return None
    return budget_limit(value, name)


def instrument_idle(value: Any, name: str) -> Any:
    """An idle limit of ``instrument()``: seconds, or ``None`` when off (``None``, ``inf``,
    ``<= 0``); ``Unset`` reads its environment variable (unset or empty: its default,
    which may be ``AS_IDLE``; ``0``: off)."""
    if isinstance(value, Unset) and not os.environ.get(value.env, "").strip():
        return value.default
    return idle_setting(value, name)


def instrument_flag(value: Any, name: str) -> bool:
    """An on/off option of ``instrument()``; ``Unset`` reads its environment variable."""
    if isinstance(value, Unset):
        return env_flag(value.env, bool(value.default))
    if not isinstance(value, bool):
        raise TypeError(f"instrument({name}=...) takes True or False, not {value!r}")
    return value


def env_flag(name: str, default: bool) -> bool:
    """On or off from environment variable ``name`` (``1/true/yes/on``, ``0/false/no/off``)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(
        f"environment variable {name}={raw!r} must be 1, true, yes or on (or 0, false, no, "
        "off); fix or unset it"
    )


def max_attempts() -> int:
    """Attempts of the default ``RetryPolicy``: ``WATCHDOG_SYNC_MAX_ATTEMPTS``, else 6."""
    return env_int(ENV_MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS)


def origin(setting: Unset) -> Tuple[str, str]:
    """``(raw value, where it comes from)`` of a setting, for help texts; never raises."""
    raw = os.environ.get(setting.env, "").strip()
    if raw:
        return raw, f"from ${setting.env}"
    return f"{setting.default:g}", f"built-in; ${setting.env} overrides"


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
    if value > MAX_SECONDS:
        raise ValueError(
            f"environment variable {name}={raw!r} is too large (at most {MAX_SECONDS:.0f} s); "
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
