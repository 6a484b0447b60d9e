"""FaultGateway: the bytes on the wire of every scenario, from a plain client's point of view."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import tracemalloc
from typing import Any, Dict, List, Optional, Tuple

import pytest
import requests
import trustme

from watchdog_sync.testing import FaultGateway

from .rawclient import Raw, http_chunks, split_response

pytestmark = pytest.mark.timeout(30)

CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "say hello"}]}
STREAM = {**CHAT, "stream": True}
SILENCE = 0.3  # how long a test listens to a silent connection


# -- helpers -------------------------------------------------------------------------------


def post(
    base: str, body: Dict[str, Any], *, read: float = 2.0, headers: Optional[Dict[str, str]] = None
) -> requests.Response:
    """POST a chat completion with requests (stream=True: headers only, body left unread).

    ``Connection: close``: a kept-alive socket would stay in urllib3's pool
    until the garbage collector frees the pool (urllib3 2 does not close pools
    on ``Session.close()``), and the leak check would see it.
    """
    return requests.post(
        base + "/chat/completions",
        json=body,
        stream=True,
        timeout=(2, read),
        headers={"Connection": "close", **(headers or {})},
    )


def sse_data(raw: bytes) -> List[str]:
    """The ``data:`` values of the SSE events in ``raw`` (comments dropped)."""
    values = []
    for block in raw.decode("utf-8").split("\n\n"):
        lines = [line[len("data: ") :] for line in block.split("\n") if line.startswith("data: ")]
        if lines:
            values.append("\n".join(lines))
    return values


def chunks_of(raw: bytes) -> List[Dict[str, Any]]:
    """The JSON chunks of an SSE body, [DONE] excluded."""
    return [json.loads(value) for value in sse_data(raw) if value != "[DONE]"]


def text_of(chunks: List[Dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


def assert_silent(response: requests.Response) -> None:
    """The body sends nothing before the read timeout."""
    with pytest.raises(requests.exceptions.ConnectionError, match="Read timed out"):
        next(response.iter_content(1))


def wait_for(predicate: Any, timeout: float = 2.0) -> None:
    """Poll ``predicate`` (every 10 ms) until true; fail after ``timeout``."""
    give_up = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < give_up, "condition not met in time"
        time.sleep(0.01)


def last_record(gw: FaultGateway, base: str, ended: bool = True) -> Any:
    if ended:
        wait_for(lambda: gw.requests_seen(base) and gw.requests_seen(base)[-1].ended_at)
    return gw.requests_seen(base)[-1]


# -- basics --------------------------------------------------------------------------------


def test_base_url_ends_in_v1_on_loopback(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("silent_after_200")
    assert base.startswith(f"http://127.0.0.1:{fault_gateway.port}/")
    assert base.endswith("/v1")
    assert fault_gateway.url == f"http://127.0.0.1:{fault_gateway.port}"
    assert base != fault_gateway.base_url("silent_after_200")


def test_unknown_scenario_lists_the_valid_ones(fault_gateway: FaultGateway) -> None:
    with pytest.raises(ValueError, match=r"unknown scenario 'nope'.*silent_after_200"):
        fault_gateway.base_url("nope")


def test_unknown_option_lists_the_valid_ones(fault_gateway: FaultGateway) -> None:
    with pytest.raises(ValueError, match=r"unknown option 'chunks'.*fail_first"):
        fault_gateway.base_url("silent_after_200", chunks=3)
    with pytest.raises(ValueError, match="unknown option 'fail_first' for scenario 'ok'"):
        fault_gateway.base_url("ok", fail_first=1)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"chunks": -1}, ValueError),
        ({"chunks": True}, TypeError),
        ({"interval": float("nan")}, ValueError),
        ({"interval": "1"}, TypeError),
        ({"framing": "gzip"}, ValueError),
        ({"usage": 1}, TypeError),
    ],
)
def test_bad_option_values_are_rejected(
    fault_gateway: FaultGateway, options: Dict[str, Any], error: type
) -> None:
    with pytest.raises(error, match=next(iter(options))):
        fault_gateway.base_url("ok", **options)


def test_base_url_needs_a_started_gateway() -> None:
    gateway = FaultGateway()
    with pytest.raises(RuntimeError, match="not started"):
        gateway.base_url("ok")
    gateway.stop()


def test_scenarios_lists_every_name_with_a_summary() -> None:
    names = FaultGateway.scenarios()
    assert {"ok", "silent_after_200", "huge_line", "http429_then_ok"} <= set(names)
    assert all(names.values())


# -- ok ------------------------------------------------------------------------------------


def test_ok_stream_is_sse_with_finish_reason_usage_and_done(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    with post(base, STREAM) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        raw = response.raw.read()
    values = sse_data(raw)
    assert values[-1] == "[DONE]"
    chunks = chunks_of(raw)
    assert len(chunks) == 6
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["model"] == "test-model"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 5 + ["stop"]
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert text_of(chunks) == "Hello from the watchdog_sync fault gateway."


def test_ok_options_set_chunks_text_and_usage(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok", chunks=2, text="abcd", usage=False, interval=0)
    with post(base, STREAM) as response:
        chunks = chunks_of(response.raw.read())
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["ab", "cd", None]
    assert "usage" not in chunks[-1]


def test_chunked_framing_sends_each_event_as_its_own_http_chunk(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("ok", chunks=3), STREAM)
    raw.append(client)
    status, headers, body = split_response(client.read_all())
    assert status == "HTTP/1.1 200 OK"
    assert headers["transfer-encoding"] == "chunked"
    assert "content-length" not in headers
    pieces, terminated = http_chunks(body)
    assert terminated
    assert len(pieces) == 5  # 3 content chunks, the finish chunk, [DONE]
    assert all(p.startswith(b"data: ") and p.endswith(b"\n\n") for p in pieces)


def test_close_framing_has_no_length_and_ends_with_the_socket(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("ok", framing="close"), STREAM, close=False)
    raw.append(client)
    _, headers, body = split_response(client.read_all())
    assert headers["connection"] == "close"
    assert "content-length" not in headers
    assert "transfer-encoding" not in headers
    assert sse_data(body)[-1] == "[DONE]"
    assert text_of(chunks_of(body)) == "Hello from the watchdog_sync fault gateway."


def test_close_framing_delivers_events_before_the_socket_closes(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("stall_after_chunks", framing="close"), STREAM)
    raw.append(client)
    data, closed = client.read_for(SILENCE)
    assert not closed
    assert len(chunks_of(split_response(data)[2])) == 2


def test_ok_completion_is_json_with_content_length(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    with post(base, CHAT) as response:
        assert response.headers["Content-Type"] == "application/json"
        assert int(response.headers["Content-Length"]) == len(response.content)
        payload = response.json()
    assert payload["object"] == "chat.completion"
    assert (
        payload["choices"][0]["message"]["content"] == "Hello from the watchdog_sync fault gateway."
    )
    assert payload["choices"][0]["finish_reason"] == "stop"
    assert payload["usage"]["prompt_tokens"] == 2


def test_a_kept_alive_connection_serves_several_requests(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    base = fault_gateway.base_url("http500_then_ok", text="again")
    client = Raw(base, CHAT, close=False)
    raw.append(client)
    client.sock.sendall(client.request)  # a second request on the same connection
    data, closed = client.read_for(SILENCE)
    assert not closed
    assert data.count(b"HTTP/1.1 ") == 2
    assert b"HTTP/1.1 500 Internal Server Error" in data
    assert data.rstrip().endswith(b"}")
    assert b'"content":"again"' in data
    assert [r.attempt for r in fault_gateway.requests_seen(base)] == [1, 2]


# -- silence -------------------------------------------------------------------------------


def test_silent_after_200_sends_headers_then_nothing(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("silent_after_200")
    with post(base, STREAM, read=SILENCE) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert_silent(response)
    record = last_record(fault_gateway, base)
    assert record.client_disconnected
    assert record.status == 200


def test_silent_after_200_without_stream_sends_headers_but_no_body(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("silent_after_200")
    with post(base, CHAT, read=SILENCE) as response:
        assert response.headers["Content-Type"] == "application/json"
        assert int(response.headers["Content-Length"]) > 0
        assert_silent(response)


def test_stall_after_chunks_sends_n_chunks_then_nothing(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("stall_after_chunks", chunks=3), STREAM)
    raw.append(client)
    data, closed = client.read_for(SILENCE)
    assert not closed
    pieces, terminated = http_chunks(split_response(data)[2])
    assert len(pieces) == 3
    assert not terminated
    assert all(b'"finish_reason":null' in p for p in pieces)


def test_no_headers_times_out_before_the_status_line(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("no_headers")
    with pytest.raises(requests.exceptions.ReadTimeout):
        post(base, STREAM, read=SILENCE)
    record = last_record(fault_gateway, base)
    assert record.status is None
    assert record.client_disconnected


def test_reset_before_headers_is_a_connection_reset(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("reset_before_headers")
    with pytest.raises(requests.exceptions.ConnectionError, match="reset"):
        post(base, STREAM)
    assert last_record(fault_gateway, base).status is None


# -- statuses and fail_first ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "status", "error_type", "code"),
    [
        ("http400", 400, "invalid_request_error", None),
        ("http401", 401, "invalid_request_error", "invalid_api_key"),
        ("http429", 429, "requests", "rate_limit_exceeded"),
        ("http500", 500, "server_error", None),
        ("http503", 503, "server_error", None),
    ],
)
def test_http_statuses_carry_openai_error_bodies(
    fault_gateway: FaultGateway, scenario: str, status: int, error_type: str, code: Optional[str]
) -> None:
    for body in (STREAM, CHAT):
        with post(fault_gateway.base_url(scenario), body) as response:
            assert response.status_code == status
            assert response.headers["Content-Type"] == "application/json"
            error = response.json()["error"]
        assert error["type"] == error_type
        assert error["code"] == code
        assert error["message"]


def test_http429_sends_retry_after(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("http429"), STREAM) as response:
        assert response.headers["Retry-After"] == "1"
    base = fault_gateway.base_url(
        "http429", retry_after=0.25, retry_after_ms=250, code="insufficient_quota"
    )
    with post(base, STREAM) as response:
        assert response.headers["Retry-After"] == "0.25"
        assert response.headers["retry-after-ms"] == "250"
        assert response.json()["error"]["code"] == "insufficient_quota"
    with post(fault_gateway.base_url("http503", retry_after=None), STREAM) as response:
        assert "Retry-After" not in response.headers


def test_http_error_sends_any_status(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("http_error", status=529), STREAM) as response:
        assert response.status_code == 529
    with pytest.raises(ValueError, match="status"):
        fault_gateway.base_url("http_error", status=200)


def test_fail_first_counts_per_base_url(fault_gateway: FaultGateway) -> None:
    first = fault_gateway.base_url("http500", fail_first=2)
    second = fault_gateway.base_url("http500", fail_first=2)
    statuses = []
    for base in (first, first, second, first):
        with post(base, STREAM) as response:
            statuses.append(response.status_code)
    assert statuses == [500, 500, 500, 200]
    assert [r.faulted for r in fault_gateway.requests_seen(first)] == [True, True, False]


@pytest.mark.parametrize(
    ("scenario", "failure"),
    [
        ("http500_then_ok", "500"),
        ("http429_then_ok", "429"),
        ("reset_then_ok", "reset"),
        ("silent_then_ok", "timeout"),
    ],
)
def test_then_ok_shortcuts_fail_once_then_stream(
    fault_gateway: FaultGateway, scenario: str, failure: str
) -> None:
    base = fault_gateway.base_url(scenario)
    try:
        with post(base, STREAM, read=SILENCE) as response:
            outcome = str(response.status_code)
            response.content  # noqa: B018 - read the body (the silent one times out)
    except requests.exceptions.ConnectionError as exc:
        outcome = "timeout" if "timed out" in str(exc) else "reset"
    assert outcome == failure
    with post(base, STREAM) as response:
        assert response.status_code == 200
        assert sse_data(response.raw.read())[-1] == "[DONE]"
    assert [r.attempt for r in fault_gateway.requests_seen(base)] == [1, 2]


def test_fail_first_zero_behaves_like_ok(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("no_headers", fail_first=0, text="fine"), STREAM) as response:
        assert text_of(chunks_of(response.raw.read())) == "fine"


# -- records -------------------------------------------------------------------------------


def test_requests_seen_records_body_request_id_and_redacts_secrets(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("ok")
    headers = {"Authorization": "Bearer sk-secret", "X-Request-ID": "rid-1"}
    with post(base, STREAM, headers=headers) as response:
        assert response.headers["X-Request-ID"] == "rid-1"
        response.raw.read()
    record = last_record(fault_gateway, base)
    assert len(fault_gateway.requests_seen(base)) == 1
    assert record.scenario == "ok"
    assert record.attempt == 1
    assert record.stream
    assert record.body == STREAM
    assert record.request_id == "rid-1"
    assert record.path.endswith("/v1/chat/completions")
    assert record.headers["authorization"] == "[REDACTED]"
    assert "sk-secret" not in repr(record)
    assert record.arrived_at <= (record.ended_at or 0)
    assert not record.client_disconnected
    assert fault_gateway.requests_seen(base.split("/s/")[1].split("/")[0]) == [record]
    assert record in fault_gateway.requests_seen()


def test_requests_seen_rejects_a_foreign_url(fault_gateway: FaultGateway) -> None:
    with pytest.raises(ValueError, match="not a base_url"):
        fault_gateway.requests_seen("http://127.0.0.1:1/s/other-1/v1")


# -- lifecycle and limits ------------------------------------------------------------------


def test_stop_ends_held_connections_quickly() -> None:
    gateway = FaultGateway().start()
    clients = [
        Raw(gateway.base_url(scenario), STREAM)
        for scenario in ("silent_after_200", "no_headers", "keepalive_only", "slow_drip")
    ]
    try:
        wait_for(lambda: len(gateway.requests_seen()) == 4)
        started = time.monotonic()
        gateway.stop()
        assert time.monotonic() - started < 1.0
        for client in clients:
            client.read_all(timeout=1.0)  # the server closed every connection
    finally:
        for client in clients:
            client.close()
    assert not any(record.client_disconnected for record in gateway.requests_seen())


def test_a_body_over_one_mib_gets_413(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    body = {"messages": [{"role": "user", "content": "x" * (1024 * 1024)}]}
    with post(base, body) as response:
        assert response.status_code == 413
        assert "limit" in response.json()["error"]["message"]
    assert fault_gateway.requests_seen(base) == []


def test_unknown_path_gets_404(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.url + "/v1", CHAT) as response:
        assert response.status_code == 404
        assert "base_url" in response.json()["error"]["message"]


# -- slow and chatty -----------------------------------------------------------------------


def test_slow_drip_sends_a_chunk_every_interval(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("slow_drip", interval=0.1), STREAM)
    raw.append(client)
    data, closed = client.read_for(0.5)
    assert not closed
    pieces, terminated = http_chunks(split_response(data)[2])
    assert not terminated
    assert 2 <= len(pieces) <= 7  # about one every 0.1 s (slack for a loaded machine)
    assert all(b'"finish_reason":null' in p for p in pieces)


def test_slow_drip_without_stream_drips_the_json_body(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("slow_drip", interval=0.05), CHAT)
    raw.append(client)
    data, closed = client.read_for(SILENCE)
    _, headers, body = split_response(data)
    assert not closed
    assert 1 <= len(body) <= 10  # about one byte every 0.05 s
    assert int(headers["content-length"]) > 100


def test_keepalive_only_sends_comments_and_never_data(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("keepalive_only", interval=0.1, framing="close"), STREAM)
    raw.append(client)
    data, closed = client.read_for(0.35)
    body = split_response(data)[2]
    assert not closed
    assert body.count(b": keep-alive\n\n") >= 2
    assert body.replace(b": keep-alive\n\n", b"") == b""


def test_keepalive_only_without_stream_sends_whitespace(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("keepalive_only", interval=0.1, framing="close"), CHAT)
    raw.append(client)
    data, _ = client.read_for(0.25)
    status, headers, body = split_response(data)
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"] == "application/json"
    assert body and body.strip() == b""


def test_pings_only_sends_named_ping_events_and_never_data(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    """The OpenAI form sends the same ``event: ping`` events as the Anthropic one."""
    client = Raw(fault_gateway.base_url("pings_only", interval=0.1, framing="close"), STREAM)
    raw.append(client)
    data, closed = client.read_for(0.35)
    body = split_response(data)[2]
    ping = b'event: ping\ndata: {"type": "ping"}\n\n'
    assert not closed
    assert body.count(ping) >= 2
    assert body.replace(ping, b"") == b""


# -- a head that never ends ----------------------------------------------------------------


PATHS = {
    "openai": "/chat/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/m:streamGenerateContent?alt=sse",
}


@pytest.mark.parametrize(
    ("api", "body"), [("openai", STREAM), ("anthropic", CHAT), ("gemini", CHAT)]
)
def test_early_hints_flood_sends_103s_and_never_a_final_response(
    fault_gateway: FaultGateway, raw: List[Raw], api: str, body: Dict[str, Any]
) -> None:
    base = fault_gateway.base_url("early_hints_flood", api=api, interval=0.05, duration=0.2)
    client = Raw(base, body, path=PATHS[api])
    raw.append(client)
    data = client.read_all(timeout=3)  # the gateway gives up by itself after `duration`
    heads = data.split(b"\r\n\r\n")
    assert heads[-1] == b""  # nothing but whole interim heads
    assert 3 <= len(heads) - 1 <= 6  # one at once, then about one every 0.05 s for 0.2 s
    assert all(h.startswith(b"HTTP/1.1 103 Early Hints\r\nLink: </hint-") for h in heads[:-1])
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.status == 103 and seen.ended_at is not None


@pytest.mark.parametrize("api", ["openai", "anthropic", "gemini"])
def test_header_drip_sends_a_status_line_then_one_header_line_per_interval(
    fault_gateway: FaultGateway, raw: List[Raw], api: str
) -> None:
    base = fault_gateway.base_url("header_drip", api=api, interval=0.05, duration=0.2)
    client = Raw(base, STREAM, path=PATHS[api])
    raw.append(client)
    data = client.read_all(timeout=3)
    assert b"\r\n\r\n" not in data  # the head never ends
    status, *lines, rest = data.split(b"\r\n")
    assert status == b"HTTP/1.1 200 OK" and rest == b""
    assert 3 <= len(lines) <= 6
    assert lines == [b"X-Drip-%d: 1" % n for n in range(len(lines))]
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.status == 200 and seen.ended_at is not None


def test_a_head_that_never_ends_lasts_a_minute_by_default(fault_gateway: FaultGateway) -> None:
    assert FaultGateway.scenarios()["header_drip"]
    with pytest.raises(ValueError, match="duration"):
        fault_gateway.base_url("early_hints_flood", duration=-1)
    with pytest.raises(ValueError, match="duration"):
        fault_gateway.base_url("ok", duration=1)  # only the endless heads take it


# -- broken streams ------------------------------------------------------------------------


def test_reset_mid_stream_sends_chunks_then_rst(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("reset_mid_stream", chunks=2), STREAM)
    raw.append(client)
    data, reset = client.read_until_reset()
    assert reset
    assert data.count(b"data: {") == 2


def test_reset_mid_stream_without_stream_cuts_the_body(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("reset_mid_stream"), CHAT) as response:
        assert response.status_code == 200
        with pytest.raises(requests.exceptions.RequestException):
            response.content  # noqa: B018 - the body read fails


def test_no_finish_reason_ends_cleanly_without_finish_or_done(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("no_finish_reason"), STREAM)
    raw.append(client)
    pieces, terminated = http_chunks(split_response(client.read_all())[2])
    assert terminated
    chunks = [json.loads(p[len(b"data: ") :]) for p in pieces]
    assert len(chunks) == 5
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert b"[DONE]" not in b"".join(pieces)


def test_no_finish_reason_without_stream_has_a_null_finish_reason(
    fault_gateway: FaultGateway,
) -> None:
    with post(fault_gateway.base_url("no_finish_reason"), CHAT) as response:
        assert response.json()["choices"][0]["finish_reason"] is None


def test_malformed_json_sends_a_data_line_that_is_not_json(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("malformed_json"), STREAM) as response:
        values = sse_data(response.raw.read())
    assert values[-1] == "[DONE]"
    bad = []
    for value in values[:-1]:
        try:
            json.loads(value)
        except ValueError:
            bad.append(value)
    assert len(bad) == 1
    json.loads(values[0])  # the chunk before it is fine


def test_malformed_json_without_stream_is_a_truncated_body(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("malformed_json"), CHAT) as response:
        assert int(response.headers["Content-Length"]) == len(response.content)
        with pytest.raises(ValueError):
            json.loads(response.content)


@pytest.mark.parametrize("body", [STREAM, CHAT])
def test_invalid_utf8_sends_bytes_that_do_not_decode(
    fault_gateway: FaultGateway, body: Dict[str, Any]
) -> None:
    with post(fault_gateway.base_url("invalid_utf8"), body) as response:
        content = response.raw.read()
    assert b"\xff\xfe" in content
    with pytest.raises(UnicodeDecodeError):
        content.decode("utf-8")


def test_error_mid_stream_sends_chunks_then_an_error_data_line(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("error_mid_stream", chunks=2), STREAM)
    raw.append(client)
    pieces, terminated = http_chunks(split_response(client.read_all())[2])
    assert terminated
    assert len(pieces) == 3
    error = json.loads(pieces[-1][len(b"data: ") :])["error"]
    assert error["type"] == "server_error" and error["message"]
    assert b"[DONE]" not in b"".join(pieces)
    with post(fault_gateway.base_url("error_mid_stream"), CHAT) as response:
        assert response.status_code == 529


def test_http529_is_overloaded_in_the_openai_shape(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("http529"), STREAM) as response:
        assert response.status_code == 529
        assert response.json()["error"]["type"] == "server_error"


# -- big events ----------------------------------------------------------------------------


def scan_lines(client: Raw, stop_after: Optional[int] = None) -> Tuple[int, int]:
    """Read to the end (or ``stop_after`` bytes) keeping nothing: (bytes read, longest line)."""
    total = longest = current = 0
    while stop_after is None or total < stop_after:
        piece = client.sock.recv(65536)
        if not piece:
            break
        total += len(piece)
        *_, tail = piece.split(b"\n")
        if b"\n" in piece:
            longest = max(longest, current + piece.index(b"\n"))
            current = len(tail)
        else:
            current += len(piece)
    return total, max(longest, current)


def test_huge_line_streams_64_mib_without_buffering_it(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("huge_line", framing="close"), STREAM)
    raw.append(client)
    tracemalloc.start()
    try:
        total, longest = scan_lines(client)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert longest >= 64 * 1024 * 1024
    assert total < 64 * 1024 * 1024 + 4096
    assert peak < 4 * 1024 * 1024, f"{peak} bytes allocated at once"


def test_huge_line_is_valid_json_once_read_whole(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("huge_line", size=100_000, piece=1000, chunks=0)
    with post(base, STREAM) as response:
        values = sse_data(response.raw.read())
    assert len(values[0]) == 100_000
    assert set(json.loads(values[0])["choices"][0]["delta"]["content"]) == {"x"}
    assert values[-1] == "[DONE]"


def test_huge_line_stops_when_the_client_leaves(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    base = fault_gateway.base_url("huge_line")
    client = Raw(base, STREAM)
    raw.append(client)
    assert scan_lines(client, stop_after=1024 * 1024)[0] >= 1024 * 1024
    client.close()
    record = last_record(fault_gateway, base)
    assert record.client_disconnected


def test_huge_line_without_stream_is_one_big_json_body(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("huge_line", size=50_000), CHAT) as response:
        assert len(response.content) == 50_000
        assert int(response.headers["Content-Length"]) == 50_000
        assert response.json()["object"] == "chat.completion"


def test_oversized_event_spreads_one_event_over_many_short_lines(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("oversized_event", size=200_000, piece=1000, chunks=0)
    with post(base, STREAM) as response:
        raw_body = response.raw.read()
    assert max(len(line) for line in raw_body.split(b"\n")) <= 1000 + len(b"data:")
    values = sse_data(raw_body)
    assert len(values[0]) >= 200_000
    assert json.loads(values[0])["object"] == "chat.completion.chunk"
    assert values[-1] == "[DONE]"


# -- the request phase ---------------------------------------------------------------------


def raw_exchange(gateway: FaultGateway, request: bytes, wait: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=wait) as sock:
        sock.sendall(request)
        data = bytearray()
        while True:
            piece = sock.recv(65536)
            if not piece:
                return bytes(data)
            data += piece


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NONSENSE\r\n\r\n", "400"),
        (b"POST / HTTP/1.1\r\nbroken header\r\n\r\n", "400"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "411"),
        (b"POST / HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", "413"),
        (b"POST / HTTP/1.1\r\nContent-Length: many\r\n\r\n", "400"),
        (b"POST / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", "431"),
    ],
)
def test_bad_requests_get_a_clear_status(
    fault_gateway: FaultGateway, request_bytes: bytes, status: str
) -> None:
    response = raw_exchange(fault_gateway, request_bytes)
    assert response.startswith(f"HTTP/1.1 {status} ".encode())
    assert b'"error"' in response


def test_a_slow_request_gets_408() -> None:
    with FaultGateway(request_timeout=0.2) as gateway:
        response = raw_exchange(gateway, b"POST /s/x/v1/chat/completions HTTP/1.1\r\n")
    assert response.startswith(b"HTTP/1.1 408 ")


def test_a_body_that_is_not_json_gets_400(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    response = requests.post(
        base + "/chat/completions", data=b"not json", headers={"Connection": "close"}, timeout=2
    )
    assert response.status_code == 400
    assert last_record(fault_gateway, base).body is None


def test_get_on_the_chat_route_gets_405(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    response = requests.get(base + "/chat/completions", headers={"Connection": "close"}, timeout=2)
    assert response.status_code == 405


def test_connections_over_the_limit_are_refused(raw: List[Raw]) -> None:
    with FaultGateway(max_connections=1) as gateway:
        held = Raw(gateway.base_url("no_headers"), STREAM)
        raw.append(held)
        wait_for(lambda: len(gateway.requests_seen()) == 1)
        extra = Raw(gateway.base_url("ok"), STREAM)
        raw.append(extra)
        try:
            data = extra.read_all()
        except ConnectionResetError:
            data = b""
        assert data == b"" or data.startswith(b"HTTP/1.1 503 ")
        assert len(gateway.requests_seen()) == 1


def test_constructor_rejects_bad_limits() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        FaultGateway(max_connections=0)
    with pytest.raises(ValueError, match="request_timeout"):
        FaultGateway(request_timeout=0)
    with pytest.raises(ValueError, match="keyfile needs certfile"):
        FaultGateway(keyfile="key.pem")


def test_a_gateway_starts_once() -> None:
    with FaultGateway() as gateway, pytest.raises(RuntimeError, match="already started"):
        gateway.start()


# -- TLS -----------------------------------------------------------------------------------


@pytest.fixture
def tls_files(tmp_path: Any) -> Tuple[str, str]:
    """A certificate for 127.0.0.1 (cert chain + key in one PEM) and its CA."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    pem, ca_pem = tmp_path / "server.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    return str(pem), str(ca_pem)


def test_tls_serves_https(tls_files: Tuple[str, str]) -> None:
    pem, ca_pem = tls_files
    with FaultGateway(certfile=pem) as gateway:
        base = gateway.base_url("ok")
        assert base.startswith("https://127.0.0.1:")
        response = requests.post(
            base + "/chat/completions",
            json=STREAM,
            verify=ca_pem,
            timeout=(2, 2),
            headers={"Connection": "close"},
        )
        assert sse_data(response.content)[-1] == "[DONE]"


def test_tls_silence_notices_the_client_leaving(tls_files: Tuple[str, str]) -> None:
    pem, ca_pem = tls_files
    with FaultGateway(certfile=pem) as gateway:
        base = gateway.base_url("silent_after_200")
        with requests.post(
            base + "/chat/completions",
            json=STREAM,
            verify=ca_pem,
            stream=True,
            timeout=(2, SILENCE),
            headers={"Connection": "close"},
        ) as response:
            assert response.status_code == 200
            assert_silent(response)
        assert last_record(gateway, base).client_disconnected


# -- the pytest plugin ---------------------------------------------------------------------


def test_the_fixture_comes_from_the_installed_pytest11_plugin(pytestconfig: Any) -> None:
    from watchdog_sync.testing import _plugin

    assert pytestconfig.pluginmanager.get_plugin("watchdog_sync") is _plugin


def test_the_fixture_yields_a_started_gateway(fault_gateway: FaultGateway) -> None:
    with post(fault_gateway.base_url("ok"), CHAT) as response:
        assert response.status_code == 200


def test_watchdog_sync_testing_imports_without_pytest() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None; sys.modules['_pytest'] = None\n"
        "from watchdog_sync.testing import FakeClock, FaultGateway, SeenRequest\n"
        "with FaultGateway() as gw: print(gw.base_url('ok'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("http://127.0.0.1:")


def test_keep_alive_false_closes_after_every_response(raw: List[Raw]) -> None:
    with FaultGateway(keep_alive=False) as gateway:
        client = Raw(gateway.base_url("ok"), STREAM, close=False)
        raw.append(client)
        _, headers, body = split_response(client.read_all())
    assert headers["connection"] == "close"
    assert http_chunks(body)[1]


def test_base_url_after_stop_is_an_error() -> None:
    gateway = FaultGateway().start()
    gateway.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        gateway.base_url("ok")


@pytest.mark.parametrize("depth", [700, 20000])
def test_a_request_body_nested_too_deep_is_answered_and_recorded_without_its_body(
    fault_gateway: FaultGateway, raw: List[Raw], depth: int
) -> None:
    """A JSON body nested deeper than json (20,000) or copy.deepcopy (700) can go crashes
    no connection thread: the request is answered and recorded with ``body`` None."""
    base = fault_gateway.base_url("ok")
    client = Raw(base, b"[" * depth + b"]" * depth)
    raw.append(client)
    status, _, _ = split_response(client.read_all())
    assert status.startswith("HTTP/1.1 ")
    assert last_record(fault_gateway, base).body is None
