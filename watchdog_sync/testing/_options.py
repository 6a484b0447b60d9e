"""Validation of the FaultGateway's scenario options: one checker per option name."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Mapping

__all__ = ["check_options"]

_MIB = 1024 * 1024


def _count(minimum: int, maximum: float = math.inf) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"option {name!r} must be an int, not {type(value).__name__}")
        if not minimum <= value <= maximum:
            bound = f">= {minimum}" if maximum == math.inf else f"between {minimum} and {maximum}"
            raise ValueError(f"option {name!r} must be {bound}, got {value!r}")
        return value

    return check


def _seconds(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"option {name!r} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"option {name!r} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    def optional(name: str, value: Any) -> Any:
        return None if value is None else check(name, value)

    return optional


def _text(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        raise TypeError(f"option {name!r} must be a str, not {type(value).__name__}")
    return value


def _flag(name: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise TypeError(f"option {name!r} must be True or False, not {type(value).__name__}")
    return value


def _framing(name: str, value: Any) -> Any:
    if value not in ("chunked", "close"):
        raise ValueError(f"option {name!r} must be 'chunked' or 'close', got {value!r}")
    return value


def _retry_after(name: str, value: Any) -> Any:
    if isinstance(value, str):
        if not value or "\r" in value or "\n" in value:
            raise ValueError(f"option {name!r} must be a one-line header value, got {value!r}")
        return value
    seconds = _seconds(name, value)
    return str(int(seconds)) if seconds.is_integer() else str(seconds)


def _request_numbers(name: str, value: Any) -> Any:
    """A non-empty tuple (or list, set) of 1-based request numbers, as a sorted tuple."""
    if not isinstance(value, (tuple, list, set, frozenset)):
        raise TypeError(
            f"option {name!r} must be a tuple of request numbers such as (3,), "
            f"not {type(value).__name__}"
        )
    if not value:
        raise ValueError(
            f"option {name!r} must name at least one request (1-based); "
            "for no fault at all use the scenario 'ok'"
        )
    for number in value:
        if isinstance(number, bool) or not isinstance(number, int):
            raise TypeError(
                f"option {name!r} must hold ints (1-based request numbers), "
                f"not {type(number).__name__}"
            )
        if number < 1:
            raise ValueError(f"option {name!r} holds {number!r}: requests are numbered from 1")
    return tuple(sorted(set(value)))


_CHECKS: Dict[str, Callable[[str, Any], Any]] = {
    "chunks": _count(0, 10_000),
    "interval": _seconds,
    "duration": _seconds,
    "text": _text,
    "usage": _flag,
    "framing": _framing,
    "fail_first": _optional(_count(0)),
    "fault_on": _optional(_request_numbers),
    "retry_after": _optional(_retry_after),
    "retry_after_ms": _optional(_count(0)),
    "message": _text,
    "type": _text,
    "code": _optional(_text),
    "echo": _flag,
    "status": _count(400, 599),
    "size": _count(1),
    "piece": _count(1, _MIB),
}


def check_options(
    scenario: str, accepted: Mapping[str, Any], given: Mapping[str, Any]
) -> Dict[str, Any]:
    """Return ``accepted`` (the defaults) updated with ``given``, each value checked.

    Raises ``ValueError`` naming the valid options for an unknown one, and
    ``TypeError`` / ``ValueError`` naming the option for a bad value.
    """
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown option {unknown[0]!r} for scenario {scenario!r}; "
            f"valid options: {', '.join(sorted(accepted))}"
        )
    resolved = dict(accepted)
    for name, value in given.items():
        resolved[name] = _CHECKS[name](name, value)
    return resolved
