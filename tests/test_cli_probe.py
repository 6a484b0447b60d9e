"""watchdog-sync probe: a timeline of one streamed completion, against the FaultGateway."""

from __future__ import annotations

import json
import time
from typing import Dict, List

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


# -- the library's vocabulary: environment variables and the defaults --help shows --------

URL = "http://127.0.0.1:1/v1"


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("WATCHDOG_SYNC_TIMEOUT", "WATCHDOG_SYNC_IDLE_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# -- the CLI -------------------------------------------------------------------------------


def test_probe_honours_the_idle_timeout_variable(
    fault_gateway: FaultGateway,
    clean_environment: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """watchdog-sync probe without --idle-timeout uses WATCHDOG_SYNC_IDLE_TIMEOUT (not its own 120 s)."""
    clean_environment.setenv("WATCHDOG_SYNC_IDLE_TIMEOUT", "0.3")
    url = fault_gateway.base_url("silent_after_200")
    started = time.monotonic()
    assert main(["probe", "--base-url", url, "--model", "m", "--json"]) == 1
    assert time.monotonic() - started < 5
    assert json.loads(capsys.readouterr().out)["reason"] == "stream_idle_timeout"


def test_probe_honours_the_timeout_variable(
    fault_gateway: FaultGateway,
    clean_environment: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """WATCHDOG_SYNC_TIMEOUT bounds the whole probe; WATCHDOG_SYNC_IDLE_TIMEOUT=0 turns idle off."""
    clean_environment.setenv("WATCHDOG_SYNC_TIMEOUT", "0.4")
    clean_environment.setenv("WATCHDOG_SYNC_IDLE_TIMEOUT", "0")
    url = fault_gateway.base_url("silent_after_200")
    started = time.monotonic()
    assert main(["probe", "--base-url", url, "--model", "m", "--json"]) == 1
    assert time.monotonic() - started < 5
    assert json.loads(capsys.readouterr().out)["reason"] == "deadline_exceeded"


def test_probe_names_a_malformed_variable_and_exits_2(
    clean_environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed WATCHDOG_SYNC_TIMEOUT is a one-line error naming it, exit code 2."""
    clean_environment.setenv("WATCHDOG_SYNC_TIMEOUT", "10m")
    assert main(["probe", "--base-url", URL, "--model", "m"]) == 2
    assert "WATCHDOG_SYNC_TIMEOUT='10m'" in capsys.readouterr().err


def _help(argv: List[str], capsys: pytest.CaptureFixture[str]) -> Dict[str, str]:
    """Each option of ``argv --help`` and its help text, on one line."""
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    blocks: Dict[str, str] = {}
    name = ""
    for line in capsys.readouterr().out.split("options:", 1)[1].splitlines():
        if line.startswith("  -"):
            name = line.split()[0].rstrip(",")
            blocks[name] = line
        elif name:
            blocks[name] += " " + line.strip()
    return blocks


def test_help_shows_each_effective_default_and_where_it_comes_from(
    clean_environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--help says 'built-in; $VAR overrides' or 'from $VAR' beside the effective value."""
    shown = _help(["probe"], capsys)
    assert "(default: 600 s, built-in; $WATCHDOG_SYNC_TIMEOUT overrides)" in shown["--timeout"]
    assert (
        "(default: 120 s, built-in; $WATCHDOG_SYNC_IDLE_TIMEOUT overrides)"
        in shown["--idle-timeout"]
    )
    clean_environment.setenv("WATCHDOG_SYNC_TIMEOUT", "30")
    assert "(default: 30 s, from $WATCHDOG_SYNC_TIMEOUT)" in _help(["probe"], capsys)["--timeout"]
    for argv in (["probe"], ["gateway"]):
        for option, text in _help(argv, capsys).items():
            if option not in ("-h", "--base-url", "--model"):  # help, and the required ones
                assert "(default:" in " ".join(text.split()), option
