"""Deadline headers out (deadline_headers) and in (budget_from_headers): formats and rules."""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

import watchdog_sync as ws
from watchdog_sync.testing import FakeClock

pytestmark = pytest.mark.timeout(30)

GRPC = re.compile(r"[0-9]{1,8}[HMSmun]")
UNIT = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def budget(seconds: float) -> ws.Budget:
    """A budget of exactly ``seconds`` left (a fake clock at 0: no float noise, no time passes)."""
    return ws.Budget(seconds, clock=FakeClock())


def grpc_seconds(value: str) -> float:
    return int(value[:-1]) * UNIT[value[-1]]


@pytest.mark.parametrize(
    ("seconds", "grpc", "envoy"),
    [
        (1.5, "1500000u", "1500"),
        (0.05, "50000000n", "50"),
        (0.0005, "500000n", None),  # under 1 ms: no Envoy header (0 would mean no timeout)
        (99.0, "99000000u", "99000"),
        (100.0, "100000m", "100000"),
        (3 * 86400.0, "259200S", "259200000"),
    ],
)
def test_the_finest_unit_that_fits_in_8_digits(
    seconds: float, grpc: str, envoy: Optional[str]
) -> None:
    headers = ws.deadline_headers(budget(seconds))
    expected = {"grpc-timeout": grpc}
    if envoy is not None:
        expected["x-envoy-upstream-rq-timeout-ms"] = envoy
    assert headers == expected


@given(st.floats(min_value=1e-9, max_value=7 * 86400.0))
def test_never_more_than_the_budget_and_at_most_8_digits(seconds: float) -> None:
    headers = ws.deadline_headers(budget(seconds))
    value = headers["grpc-timeout"]
    assert GRPC.fullmatch(value)
    assert grpc_seconds(value) <= seconds * (1 + 1e-12)
    assert grpc_seconds(value) >= seconds * (1 - 1e-5) - 1e-9  # the finest unit: close
    envoy = headers.get("x-envoy-upstream-rq-timeout-ms")
    assert envoy is None if seconds < 1e-3 else 0 < int(envoy) <= seconds * 1000


@given(st.floats(min_value=1e-6, max_value=7 * 86400.0))
def test_what_goes_out_comes_back_in(seconds: float) -> None:
    """budget_from_headers(deadline_headers(b)) has b's time, never more."""
    incoming = ws.budget_from_headers(ws.deadline_headers(budget(seconds)))
    assert incoming is not None and incoming.deadline is not None
    sent = incoming.deadline - incoming.started
    # (the incoming budget's own deadline arithmetic on the real clock adds < 1e-9 s of noise)
    assert seconds * (1 - 1e-5) - 1e-9 <= sent <= seconds + 1e-9


def test_nothing_without_a_bounded_budget() -> None:
    assert ws.deadline_headers() == {}
    assert ws.deadline_headers(ws.Budget()) == {}


def test_the_current_scope_is_read_by_default() -> None:
    with ws.deadline(2.0):
        value = ws.deadline_headers()["grpc-timeout"]
    assert 1.5 < grpc_seconds(value) <= 2.0


def test_an_ended_budget_raises_instead_of_saying_zero() -> None:
    ended = budget(1.0)
    ended.cancel()
    with pytest.raises(ws.OperationCancelled):
        ws.deadline_headers(ended)
    clock = FakeClock()
    expired = ws.Budget(1.0, clock=clock)
    clock.advance(2.0)
    with pytest.raises(ws.DeadlineExceeded):
        ws.deadline_headers(expired)
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(0):
        ws.deadline_headers()


def test_deadline_headers_rejects_a_non_budget() -> None:
    with pytest.raises(TypeError, match="Budget"):
        ws.deadline_headers(5)  # type: ignore[arg-type]


# -- in ---------------------------------------------------------------------------------------


def seconds_of(found: Optional[ws.Budget]) -> Optional[float]:
    if found is None:
        return None
    assert found.deadline is not None
    return round(found.deadline - found.started, 9)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"grpc-timeout": "1500m"}, 1.5),
        ({"Grpc-Timeout": " 2S "}, 2.0),
        ({"grpc-timeout": "1H"}, 3600.0),
        ({"grpc-timeout": "2M"}, 120.0),
        ({"grpc-timeout": "250000u"}, 0.25),
        ({"grpc-timeout": "99999999n"}, 0.099999999),
        ({"grpc-timeout": "0n"}, 0.0),  # the caller has no time left: already ended
        ({"x-envoy-expected-rq-timeout-ms": "1200"}, 1.2),
        ({"grpc-timeout": "3S", "x-envoy-expected-rq-timeout-ms": "1200"}, 1.2),  # the tightest
        ({"HTTP_GRPC_TIMEOUT": "700m", "wsgi.input": object()}, 0.7),  # a WSGI environ
        ([("grpc-timeout", "4S"), ("grpc-timeout", "1S")], 1.0),  # pairs, repeated
        ({b"grpc-timeout": b"5S"}, 5.0),
        ({"grpc-timeout": "99999999H"}, 7 * 86400.0),  # clamped like every budget
        ({"x-envoy-expected-rq-timeout-ms": "0"}, None),  # Envoy's "no timeout"
        ({"content-type": "application/json"}, None),
        ({}, None),
    ],
)
def test_incoming_headers(headers: Any, expected: Optional[float]) -> None:
    assert seconds_of(ws.budget_from_headers(headers)) == expected


@pytest.mark.parametrize(
    "value",
    ["", "soon", "1.5S", "-1S", "123456789m", "10s", "10 S", "1S, 2S", "\uff11S", "0x10S", "1e3m"],
)
def test_a_malformed_grpc_timeout_is_ignored_with_one_log_record(
    value: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="watchdog_sync"):
        assert ws.budget_from_headers({"grpc-timeout": value}) is None
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "grpc-timeout" in record.getMessage()


@pytest.mark.parametrize("value", ["1.5", "-5", "1500ms", "9" * 16, None, 12])
def test_a_malformed_envoy_timeout_is_ignored_and_a_valid_one_beside_it_used(
    value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    headers: Dict[str, Any] = {"x-envoy-expected-rq-timeout-ms": value, "grpc-timeout": "2S"}
    with caplog.at_level(logging.WARNING, logger="watchdog_sync"):
        assert seconds_of(ws.budget_from_headers(headers)) == 2.0
    (record,) = caplog.records
    assert "x-envoy-expected-rq-timeout-ms" in record.getMessage()


def test_a_hostile_value_is_logged_escaped_and_cut(caplog: pytest.LogCaptureFixture) -> None:
    value = "\x1b[31m" + "A" * 5000
    with caplog.at_level(logging.WARNING, logger="watchdog_sync"):
        ws.budget_from_headers({"grpc-timeout": value})
    message = caplog.records[0].getMessage()
    assert "\x1b" not in message and len(message) < 300


def test_max_timeout_clips_the_callers_value() -> None:
    assert seconds_of(ws.budget_from_headers({"grpc-timeout": "1H"}, max_timeout=30)) == 30.0
    assert seconds_of(ws.budget_from_headers({"grpc-timeout": "1S"}, max_timeout=30)) == 1.0
    assert ws.budget_from_headers({}, max_timeout=30) is None


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "30", True])
def test_a_bad_max_timeout_is_rejected(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="max_timeout"):
        ws.budget_from_headers({}, max_timeout=bad)


def test_an_http_client_message_is_read_through_its_items() -> None:
    """http.client / email messages are not mappings: their items() are read."""
    import email.parser

    message = email.parser.Parser().parsestr("Grpc-Timeout: 3S\r\nHost: x\r\n\r\n")
    assert seconds_of(ws.budget_from_headers(message)) == 3.0


@pytest.mark.parametrize("bad", [["grpc-timeout"], [("a", "b", "c")], [1]])
def test_headers_that_are_not_pairs_are_a_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match=r"\(name, value\) pairs"):
        ws.budget_from_headers(bad)
