"""watchdog-sync probe: a timeline of one streamed completion, against the FaultGateway."""

from __future__ import annotations

import json

import pytest

from watchdog_sync.cli import main
from watchdog_sync.testing import FaultGateway

from .internals import suggest_idle_timeout

pytestmark = pytest.mark.timeout(30)


def test_probe_prints_the_timeline_and_a_suggestion(
    fault_gateway: FaultGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    url = fault_gateway.base_url("ok", chunks=6, interval=0.05)
    assert main(["probe", "--base-url", url, "--model", "m"]) == 0
    out = capsys.readouterr().out
    for label in ("headers after", "first event after", "gaps", "median", "p90", "p99", "max"):
        assert label in out
    assert "finish_reason      stop" in out
    assert "suggested idle_timeout: 10s" in out


def test_probe_json_has_every_field(
    fault_gateway: FaultGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    url = fault_gateway.base_url("ok", chunks=4, interval=0.05)
    assert main(["probe", "--base-url", url, "--model", "m", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["status"] == 200
    assert report["events"] >= 4
    assert 0.03 < report["gap_max"] < 1.0
    assert report["headers_after"] <= report["first_event_after"] <= report["total"]
    assert report["finish_reason"] == "stop"


def test_probe_failure_exits_1_with_the_reason(
    fault_gateway: FaultGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    url = fault_gateway.base_url("http401")
    assert main(["probe", "--base-url", url, "--model", "m"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("probe failed: auth:")
    assert "Traceback" not in err


def test_probe_of_a_silent_stream_reports_the_idle_timeout(
    fault_gateway: FaultGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    url = fault_gateway.base_url("silent_after_200")
    code = main(["probe", "--base-url", url, "--model", "m", "--idle-timeout", "0.3", "--json"])
    assert code == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "stream_idle_timeout"


def test_probe_sends_the_key_from_the_named_variable_and_never_prints_it(
    fault_gateway: FaultGateway,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROBE_TEST_KEY", "sk-probe-secret-123456")
    url = fault_gateway.base_url("ok", chunks=2, interval=0.01)
    assert (
        main(["probe", "--base-url", url, "--model", "m", "--api-key-env", "PROBE_TEST_KEY"]) == 0
    )
    captured = capsys.readouterr()
    assert "sk-probe-secret" not in captured.out + captured.err
    seen = fault_gateway.requests_seen(url)
    assert seen and seen[0].headers.get("authorization") == "[REDACTED]"


def test_probe_argument_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--base-url", "ftp://x", "--model", "m"]) == 2
    assert "--base-url must start with" in capsys.readouterr().err
    assert (
        main(
            [
                "probe",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--api-key-env",
                "NOPE_NOT_SET_X",
            ]
        )
        == 2
    )
    assert "NOPE_NOT_SET_X is not set" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("first", "gaps", "expected"),
    [(0.2, [0.05, 0.1], 10.0), (2.0, [1.0, 5.5], 17.0), (None, [], 10.0)],
)
def test_the_suggestion_is_three_times_the_longest_wait(
    first: object, gaps: list, expected: float
) -> None:
    assert suggest_idle_timeout(first, gaps) == expected  # type: ignore[arg-type]
