"""Environment overrides: strict decimals, clear errors naming the variable."""

from __future__ import annotations

import pytest

from .internals import env_int, env_seconds, validate_duration

pytestmark = pytest.mark.timeout(10)


def test_unset_or_empty_variable_gives_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WS_TEST", raising=False)
    assert env_seconds("WS_TEST", 120.0) == 120.0
    monkeypatch.setenv("WS_TEST", "  ")
    assert env_seconds("WS_TEST", 120.0) == 120.0


@pytest.mark.parametrize(
    ("raw", "value"), [("240", 240.0), ("0", 0.0), ("0.5", 0.5), (" 30 ", 30.0)]
)
def test_plain_decimals_are_accepted(
    monkeypatch: pytest.MonkeyPatch, raw: str, value: float
) -> None:
    monkeypatch.setenv("WS_TEST", raw)
    assert env_seconds("WS_TEST", 1.0) == value


@pytest.mark.parametrize(
    "raw", ["-1", "+5", "0x10", "1e3", "inf", "nan", "abc", "1.", "99999999999999"]
)
def test_malformed_or_oversized_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("WS_TEST", raw)
    with pytest.raises(ValueError, match="WS_TEST") as info:
        env_seconds("WS_TEST", 1.0)
    assert repr(raw) in str(info.value)


@pytest.mark.parametrize("raw", ["0", "1.5", "-2", "5000"])
def test_attempt_counts_must_be_whole_numbers_in_range(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("WS_ATTEMPTS", raw)
    with pytest.raises(ValueError, match="WS_ATTEMPTS"):
        env_int("WS_ATTEMPTS", 3)


def test_validate_duration_names_the_parameter() -> None:
    with pytest.raises(TypeError, match="idle_timeout"):
        validate_duration(True, "idle_timeout")
    with pytest.raises(ValueError, match="idle_timeout"):
        validate_duration(0, "idle_timeout", allow_zero=False)
    assert validate_duration(float("inf"), "x") is None
