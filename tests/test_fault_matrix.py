"""The fault matrix benchmark still runs: its ChatClient column, in process, on fast rows;
its anthropic columns speak the Messages API and are judged on its events."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .benchload import load_benchmark

pytestmark = pytest.mark.timeout(30)

matrix = load_benchmark("fault_matrix")


@pytest.mark.parametrize("scenario", ["ok", "http401", "no_finish_reason", "reset_mid_stream"])
def test_chat_client_passes_its_row(scenario: str) -> None:
    with FaultGateway() as gateway:
        run = matrix.run_in_process(scenario, "ChatClient", gateway)
    passed, cell = matrix.judge(run)
    assert passed, cell
    assert cell.startswith("PASS ") and run.requests == 1


def test_the_matrix_has_the_peers_tables_rows_and_columns() -> None:
    assert [name for name, _ in matrix.SCENARIOS] == [
        "ok", "silent_after_200", "stall_after_chunks", "slow_drip", "keepalive_only",
        "no_headers", "reset_mid_stream", "silent_then_ok", "reset_then_ok", "http500_then_ok",
        "http429_then_ok", "http401", "http400", "no_finish_reason", "malformed_json", "huge_line",
    ]  # fmt: skip
    assert [name for name, _ in matrix.MORE_SCENARIOS] == [
        "reset_before_headers", "http429", "http503", "invalid_utf8", "oversized_event",
        "early_hints_flood", "header_drip",
    ]  # fmt: skip
    assert list(matrix.CLIENTS) == [
        "ChatClient", "requests_sseclient", "openai_sdk", "openai_sdk_defaults",
        "openai_sdk_instrument", "openai_sdk_instrument_idle", "httpx_sse", "tenacity_requests",
        "stamina_requests", "openai_sdk_httpx_client", "anthropic_sdk",
        "anthropic_sdk_httpx_client", "anthropic_sdk_instrument", "google_genai",
        "google_genai_httpx_client", "google_genai_instrument", "google_genai_instrument_idle",
        "litellm_sdk", "litellm_sdk_instrument", "litellm_sdk_instrument_idle",
    ]  # fmt: skip
    assert sorted(matrix.ANTHROPIC_CLIENTS) == [
        "anthropic_sdk", "anthropic_sdk_httpx_client", "anthropic_sdk_instrument",
    ]  # fmt: skip
    assert sorted(matrix.GEMINI_CLIENTS) == [
        "google_genai", "google_genai_httpx_client", "google_genai_instrument",
        "google_genai_instrument_idle",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "cell"),
    [
        ({"outcome": "hang", "elapsed": 10.0}, "HANG >10s"),
        ({"elapsed": 4.51}, "FAIL 4.51s, 1 req: overshoot +0.5s"),
        ({"requests": 3, "elapsed": 1.5}, "FAIL 1.50s, 3 req: retried (3 requests); slow (1.5s)"),
        ({"outcome": "returned", "chunks": 5}, "FAIL 0.02s, 1 req: silent truncation"),
    ],
)
def test_a_failure_says_why_as_the_peers_table_does(changes: Dict[str, Any], cell: str) -> None:
    fields = {"scenario": "http401", "client": "x", "outcome": "error", "elapsed": 0.02}
    run = matrix.Run(**{"requests": 1, **fields, **changes})
    passed, text = matrix.judge(run)
    assert not passed
    assert text.startswith(cell)


def test_a_huge_line_read_whole_fails_on_memory() -> None:
    run = matrix.Run("huge_line", "x", "error", 1.49, 1, error="E", rss_growth_mib=65.0)
    assert matrix.judge(run) == (False, "FAIL 1.49s, 1 req: RSS +65MiB")


def test_without_the_bench_extra_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(matrix, "PEER_MODULES", ("no_such_peer_module",))
    assert matrix.main(["--scenarios", "ok"]) == 2
    assert 'pip install -e ".[bench]"' in capsys.readouterr().err


def test_the_table_counts_the_surveys_rows_apart_from_the_others() -> None:
    rows = ["ok", "http401", "invalid_utf8"]
    runs = {
        (row, client): matrix.Run(row, client, "error", 0.5, 1, error="E")
        for row in rows
        for client in ("ChatClient", "other")
    }
    lines = matrix.table(runs, rows, ["ChatClient", "other"]).splitlines()
    assert lines[2] == "| ok (success) | FAIL 0.50s, 1 req: error E | FAIL 0.50s, 1 req: error E |"
    assert lines[-2:] == [
        "| **PASS count, the survey's rows** | 1/2 | 1/2 |",
        "| **PASS count, all rows** | 2/3 | 2/3 |",
    ]


def _event(kind: str, **delta: Any) -> SimpleNamespace:
    return SimpleNamespace(type=kind, delta=SimpleNamespace(**delta) if delta else None)


def test_an_anthropic_stream_read_whole_passes_the_ok_row() -> None:
    """Text comes from content_block_delta events, the stop reason from message_delta."""
    answer = matrix.Answer()
    for event in [
        _event("message_start"),
        _event("ping"),
        _event("content_block_delta", type="text_delta", text=matrix.TEXT[:5]),
        _event("content_block_delta", type="text_delta", text=matrix.TEXT[5:]),
        _event("message_delta", stop_reason="end_turn"),
        _event("message_stop"),
    ]:
        matrix.add_anthropic_event(answer, event)
    assert (answer.chunks, answer.finish_reason, "".join(answer.parts)) == (
        6,
        "end_turn",
        matrix.TEXT,
    )
    run = matrix.Run("ok", "anthropic_sdk", "returned", 0.1, 1, chunks=6,
                     finish_reason="end_turn", text_ok=True)  # fmt: skip
    assert matrix.judge(run) == (True, "PASS 0.10s, 1 req")


def test_an_sdk_error_caused_by_ours_is_named_with_its_cause() -> None:
    """An SDK error wrapping one of ours (anthropic's APIConnectionError): the cell names both."""
    error = ws.StreamProtocolError("cut", reason="no_finish_reason")
    wrapped = RuntimeError("Connection error.")
    wrapped.__cause__ = error
    name = matrix._name(wrapped)
    assert name == "RuntimeError from StreamProtocolError(no_finish_reason)"
    run = matrix.Run("ok", "anthropic_sdk_httpx_client", "error", 3.1, 3, error=name)
    assert matrix.judge(run) == (False, f"FAIL 3.10s, 3 req: error {name}")


@pytest.mark.parametrize(("scenario", "error"), [("ok", None), ("http401", "AuthenticationError")])
def test_the_anthropic_clients_speak_the_anthropic_api(scenario: str, error: Any) -> None:
    """Each anthropic column reaches the gateway's Messages API and passes a fast row."""
    with FaultGateway() as gateway:
        for client in sorted(matrix.ANTHROPIC_CLIENTS):
            run = matrix.run_in_process(scenario, client, gateway)
            assert matrix.judge(run) == (True, f"PASS {run.elapsed:.2f}s, 1 req")
            assert run.error == error
            assert [seen.api for seen in gateway.requests_seen()][-1] == "anthropic"


@pytest.mark.parametrize(("scenario", "error"), [("ok", None), ("http401", "ClientError")])
def test_the_gemini_clients_speak_the_gemini_api(scenario: str, error: Any) -> None:
    """Each google_genai column reaches the gateway's Gemini API and passes a fast row."""
    with FaultGateway() as gateway:
        for client in sorted(matrix.GEMINI_CLIENTS):
            run = matrix.run_in_process(scenario, client, gateway)
            assert matrix.judge(run) == (True, f"PASS {run.elapsed:.2f}s, 1 req")
            assert run.error == error
            assert [seen.api for seen in gateway.requests_seen()][-1] == "gemini"
