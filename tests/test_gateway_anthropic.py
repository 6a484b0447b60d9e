"""FaultGateway in the Anthropic Messages API: the real anthropic SDK, and the bytes of every scenario."""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import anthropic
import httpx2
import pytest

from watchdog_sync import Budget
from watchdog_sync.testing import FaultGateway

from . import rawclient
from .rawclient import http_chunks, split_response
from .sdkerrors import raises_from_body

pytestmark = pytest.mark.timeout(30)

MESSAGES = {
    "model": "claude-test",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "say hello"}],
}
STREAM = {**MESSAGES, "stream": True}
TEXT = "Hello from the watchdog_sync fault gateway."
SILENCE = 0.3  # how long a test listens to a silent connection
PING = b'event: ping\ndata: {"type": "ping"}\n\n'
OPENING = ["message_start", "content_block_start", "ping"]
CLOSING = ["content_block_stop", "message_delta", "message_stop"]


# -- helpers -------------------------------------------------------------------------------


def sdk(gw: FaultGateway, scenario: str, **options: Any) -> anthropic.Anthropic:
    """An anthropic client on a fresh Anthropic route: no retries, short timeouts."""
    return anthropic.Anthropic(
        base_url=gw.base_url(scenario, api="anthropic", **options),
        api_key="sk-ant-test-secret",
        max_retries=0,
        timeout=httpx2.Timeout(2.0),
    )


def ask(client: anthropic.Anthropic, **params: Any) -> Any:
    return client.messages.create(
        model="claude-test",
        max_tokens=64,
        messages=[{"role": "user", "content": "say hello"}],
        **params,
    )


class Raw(rawclient.Raw):
    """A raw socket client whose POST goes to ``{base}/v1/messages`` unless told otherwise."""

    def __init__(self, base: str, body: Any, *, headers: str = "", path: str = "/v1/messages"):
        super().__init__(base, body, path=path, headers=headers)


def sse_events(pieces: Iterable[bytes]) -> List[Tuple[Optional[str], bytes]]:
    """(event name, data) of each complete SSE event, fed piece by piece; comments dropped."""
    events: List[Tuple[Optional[str], bytes]] = []
    buffer = b""
    name: Optional[str] = None
    data: List[bytes] = []
    for piece in pieces:
        buffer += piece
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if not line:
                if data:
                    events.append((name, b"\n".join(data)))
                name, data = None, []
            elif line.startswith(b"event: "):
                name = line[len(b"event: ") :].decode("ascii")
            elif line.startswith(b"data:"):
                data.append(line[len(b"data:") :].removeprefix(b" "))
    return events


def one_byte_at_a_time(body: bytes) -> Iterator[bytes]:
    return (body[i : i + 1] for i in range(len(body)))


def stream_of(gw: FaultGateway, scenario: str, **options: Any) -> Tuple[List[bytes], bool]:
    """The HTTP chunks of a finite streaming answer, and whether the body ended cleanly."""
    client = Raw(gw.base_url(scenario, api="anthropic", **options), STREAM)
    try:
        status, headers, body = split_response(client.read_all())
    finally:
        client.close()
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"].startswith("text/event-stream")
    return http_chunks(body)


def names(events: List[Tuple[Optional[str], bytes]]) -> List[Optional[str]]:
    return [name for name, _ in events]


def post(
    gw: FaultGateway, base: str, body: Any, headers: str = ""
) -> Tuple[int, Dict[str, str], bytes]:
    client = Raw(base, body, headers=headers)
    try:
        status, head, payload = split_response(client.read_all())
    finally:
        client.close()
    return int(status.split()[1]), head, payload


# -- the anthropic SDK ---------------------------------------------------------------------


def test_sdk_takes_the_anthropic_base_url_as_is(fault_gateway: FaultGateway) -> None:
    """The URL has no /v1: the SDK appends /v1/messages itself."""
    base = fault_gateway.base_url("ok", api="anthropic")
    assert base.startswith(f"{fault_gateway.url}/s/ok-") and not base.endswith("/v1")
    with sdk(fault_gateway, "ok") as client:
        assert ask(client).content[0].text == TEXT
    (seen,) = [r for r in fault_gateway.requests_seen() if r.scenario == "ok"]
    assert seen.path.endswith("/v1/messages")
    assert seen.api == "anthropic"


def test_sdk_stream_yields_the_text_and_the_stop_reason(fault_gateway: FaultGateway) -> None:
    with sdk(fault_gateway, "ok") as client, client.messages.stream(**MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == TEXT
    assert final.stop_reason == "end_turn"
    assert final.model == "claude-test"
    assert final.usage.input_tokens == 2 and final.usage.output_tokens == 6


def test_sdk_raw_stream_events_come_in_the_messages_api_order(
    fault_gateway: FaultGateway,
) -> None:
    """The SDK drops ping; every other event type arrives, message_stop last."""
    with sdk(fault_gateway, "ok", chunks=3) as client:
        kinds = [event.type for event in ask(client, stream=True)]
    deltas = ["content_block_delta"] * 3
    assert kinds == ["message_start", "content_block_start", *deltas, *CLOSING]


def test_sdk_create_without_stream_returns_a_message(fault_gateway: FaultGateway) -> None:
    with sdk(fault_gateway, "ok", text="fine") as client:
        message = ask(client)
    assert message.type == "message" and message.role == "assistant"
    assert [block.text for block in message.content] == ["fine"]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 1


@pytest.mark.parametrize("stream", [False, True])
def test_sdk_sees_a_529_as_its_overloaded_error(fault_gateway: FaultGateway, stream: bool) -> None:
    with sdk(fault_gateway, "http529") as client, pytest.raises(anthropic.OverloadedError) as info:
        ask(client, stream=stream)
    assert info.value.status_code == 529
    assert info.value.body["error"]["type"] == "overloaded_error"


def test_sdk_sees_a_429_as_rate_limit_with_retry_after(fault_gateway: FaultGateway) -> None:
    with sdk(fault_gateway, "http429") as client, pytest.raises(anthropic.RateLimitError) as info:
        ask(client)
    assert info.value.response.headers["retry-after"] == "1"
    assert info.value.body["error"]["type"] == "rate_limit_error"


def test_sdk_yields_nothing_from_a_ping_only_stream_and_its_timeout_never_fires(
    fault_gateway: FaultGateway,
) -> None:
    """Pings every 50 ms keep a 0.5 s read timeout alive; the SDK yields none of them.

    The test ends the stream itself by shutting the socket after 1.2 s.
    """
    client = anthropic.Anthropic(
        base_url=fault_gateway.base_url("pings_only", api="anthropic", interval=0.05),
        api_key="sk-ant-test-secret",
        max_retries=0,
        timeout=httpx2.Timeout(0.5),
    )
    with client:
        stream = ask(client, stream=True)
        sock = stream.response.extensions["network_stream"].get_extra_info("socket")
        stopper = Budget(1.2)
        unregister = stopper.on_done(lambda _: sock.shutdown(socket.SHUT_RDWR))
        started = time.monotonic()
        events = []
        try:
            with raises_from_body(httpx2.RemoteProtocolError):
                for event in stream:
                    events.append(event)
        finally:
            unregister()
            stream.close()
        elapsed = time.monotonic() - started
    assert events == []
    assert 1.1 < elapsed < 2.5  # ended by our shutdown, not by the 0.5 s read timeout


def test_sdk_raises_the_mid_stream_error_event_after_the_text(
    fault_gateway: FaultGateway,
) -> None:
    texts: List[str] = []
    client = sdk(fault_gateway, "error_mid_stream", chunks=2)
    manager = client.messages.stream(**MESSAGES)  # sends nothing before it is entered
    with client, pytest.raises(anthropic.APIStatusError) as info, manager as stream:
        texts.extend(stream.text_stream)
    assert "".join(texts) == TEXT  # both chunks arrived before the error
    assert info.value.body["error"]["type"] == "overloaded_error"


def test_sdk_meets_silent_then_ok_as_a_read_timeout_then_a_whole_stream(
    fault_gateway: FaultGateway,
) -> None:
    """The silence comes after the 200, so the SDK's own retry (before headers) never runs."""
    client = anthropic.Anthropic(
        base_url=fault_gateway.base_url("silent_then_ok", api="anthropic"),
        api_key="sk-ant-test-secret",
        max_retries=2,
        timeout=httpx2.Timeout(0.3),
    )
    with client:
        with raises_from_body(httpx2.ReadTimeout), client.messages.stream(**MESSAGES) as stream:
            list(stream.text_stream)
        with client.messages.stream(**MESSAGES) as stream:
            assert "".join(stream.text_stream) == TEXT
    assert [r.faulted for r in fault_gateway.requests_seen()] == [True, False]


def test_requests_seen_redacts_the_sdks_and_raw_api_key_headers(
    fault_gateway: FaultGateway,
) -> None:
    with sdk(fault_gateway, "ok") as client:
        ask(client)
    base = fault_gateway.base_url("ok", api="anthropic")
    status, _, _ = post(fault_gateway, base, MESSAGES, headers="x-api-key: sk-ant-raw-secret\r\n")
    assert status == 200
    seen = fault_gateway.requests_seen()
    assert len(seen) == 2 and all(r.api == "anthropic" for r in seen)
    assert seen[1].headers["x-api-key"] == "[REDACTED]"
    assert "secret" not in repr(seen)
    assert fault_gateway.requests_seen(base) == [seen[1]]


# -- routes --------------------------------------------------------------------------------


def test_unknown_api_lists_the_valid_ones(fault_gateway: FaultGateway) -> None:
    with pytest.raises(ValueError, match=r"unknown api 'vertex'.*'openai', 'anthropic', 'gemini'"):
        fault_gateway.base_url("ok", api="vertex")


def test_anthropic_errors_have_no_code_option(fault_gateway: FaultGateway) -> None:
    with pytest.raises(ValueError, match="unknown option 'code' for scenario 'http429'"):
        fault_gateway.base_url("http429", api="anthropic", code="x")


def test_each_route_answers_only_its_own_api_with_an_error_in_the_callers_shape(
    fault_gateway: FaultGateway,
) -> None:
    anthropic_base = fault_gateway.base_url("ok", api="anthropic")
    client = Raw(anthropic_base, MESSAGES, path="/v1/chat/completions")
    try:
        status_line, _, body = split_response(client.read_all())
    finally:
        client.close()
    assert status_line.startswith("HTTP/1.1 404 ")
    assert "api='anthropic'" in json.loads(body)["error"]["message"]  # in the caller's shape
    openai_base = fault_gateway.base_url("ok")
    status, _, body = post(fault_gateway, openai_base.removesuffix("/v1"), MESSAGES)
    assert status == 404
    error = json.loads(body)
    assert error["type"] == "error" and error["error"]["type"] == "not_found_error"
    assert "api='openai'" in error["error"]["message"]


# -- the bytes of every scenario -----------------------------------------------------------


def test_ok_stream_is_the_messages_api_event_sequence(fault_gateway: FaultGateway) -> None:
    """Each event its own HTTP chunk; read one byte at a time it parses the same."""
    pieces, terminated = stream_of(fault_gateway, "ok", chunks=3)
    assert terminated
    assert all(p.startswith(b"event: ") and p.endswith(b"\n\n") for p in pieces)
    events = sse_events(pieces)
    assert sse_events(one_byte_at_a_time(b"".join(pieces))) == events
    assert len(events) == len(pieces)
    assert names(events) == [*OPENING, *["content_block_delta"] * 3, *CLOSING]
    payloads = [json.loads(data) for _, data in events]
    assert [p["type"] for p in payloads] == names(events)
    start = payloads[0]["message"]
    assert start["model"] == "claude-test" and start["content"] == []
    assert "".join(p["delta"]["text"] for p in payloads[3:6]) == TEXT
    assert payloads[-2]["delta"]["stop_reason"] == "end_turn"
    assert payloads[-2]["usage"]["output_tokens"] == 6


def test_ok_without_stream_is_a_message_with_content_length(fault_gateway: FaultGateway) -> None:
    status, headers, body = post(
        fault_gateway, fault_gateway.base_url("ok", api="anthropic"), MESSAGES
    )
    assert status == 200
    assert int(headers["content-length"]) == len(body)
    message = json.loads(body)
    assert message["type"] == "message"
    assert message["content"] == [{"type": "text", "text": TEXT}]
    assert message["stop_reason"] == "end_turn"
    assert message["usage"] == {"input_tokens": 2, "output_tokens": 6}


@pytest.mark.parametrize(
    ("scenario", "options", "expected"),
    [
        ("silent_after_200", {}, []),
        ("no_headers", {}, None),
        (
            "stall_after_chunks",
            {"chunks": 2},
            [*OPENING, "content_block_delta", "content_block_delta"],
        ),
    ],
)
def test_held_scenarios_send_their_events_then_hold(
    fault_gateway: FaultGateway,
    raw: List[Raw],
    scenario: str,
    options: Dict[str, Any],
    expected: Optional[List[str]],
) -> None:
    client = Raw(fault_gateway.base_url(scenario, api="anthropic", **options), STREAM)
    raw.append(client)
    data, closed = client.read_for(SILENCE)
    assert not closed
    if expected is None:
        assert data == b""
        return
    pieces, terminated = http_chunks(split_response(data)[2])
    assert not terminated
    assert names(sse_events(pieces)) == expected
    assert names(sse_events(one_byte_at_a_time(b"".join(pieces)))) == expected


def test_slow_drip_sends_a_delta_every_interval_and_never_stops(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("slow_drip", api="anthropic", interval=0.1), STREAM)
    raw.append(client)
    data, closed = client.read_for(0.5)
    assert not closed
    events = names(sse_events(http_chunks(split_response(data)[2])[0]))
    assert events[:3] == OPENING
    assert 2 <= len(events[3:]) <= 7  # about one every 0.1 s (slack for a loaded machine)
    assert set(events[3:]) == {"content_block_delta"}


@pytest.mark.parametrize(
    ("scenario", "beat"), [("pings_only", PING), ("keepalive_only", b": keep-alive\n\n")]
)
def test_pings_only_and_keepalive_only_send_beats_and_never_data(
    fault_gateway: FaultGateway, raw: List[Raw], scenario: str, beat: bytes
) -> None:
    base = fault_gateway.base_url(scenario, api="anthropic", interval=0.1, framing="close")
    client = Raw(base, STREAM)
    raw.append(client)
    data, closed = client.read_for(0.35)
    body = split_response(data)[2]
    assert not closed
    assert body.count(beat) >= 2
    assert body.replace(beat, b"") == b""
    expected = [("ping", b'{"type": "ping"}')] if beat == PING else []
    assert set(sse_events(one_byte_at_a_time(body))) <= set(expected)


def test_reset_mid_stream_sends_deltas_then_rst(
    fault_gateway: FaultGateway, raw: List[Raw]
) -> None:
    client = Raw(fault_gateway.base_url("reset_mid_stream", api="anthropic", chunks=2), STREAM)
    raw.append(client)
    data, reset = client.read_until_reset()
    assert reset
    assert data.count(b"event: content_block_delta\n") == 2
    assert b"message_stop" not in data


def test_reset_before_headers_sends_nothing(fault_gateway: FaultGateway, raw: List[Raw]) -> None:
    client = Raw(fault_gateway.base_url("reset_before_headers", api="anthropic"), STREAM)
    raw.append(client)
    assert client.read_until_reset() == (b"", True)


@pytest.mark.parametrize(
    ("scenario", "status", "error_type"),
    [
        ("http400", 400, "invalid_request_error"),
        ("http401", 401, "authentication_error"),
        ("http429", 429, "rate_limit_error"),
        ("http500", 500, "api_error"),
        ("http503", 503, "api_error"),
        ("http529", 529, "overloaded_error"),
        ("http_error", 502, "api_error"),
    ],
)
def test_http_statuses_carry_anthropic_error_bodies(
    fault_gateway: FaultGateway, scenario: str, status: int, error_type: str
) -> None:
    for body in (STREAM, MESSAGES):
        got, headers, payload = post(
            fault_gateway, fault_gateway.base_url(scenario, api="anthropic"), body
        )
        assert got == status
        assert headers["content-type"] == "application/json"
        error = json.loads(payload)
        assert set(error) == {"type", "error"} and error["type"] == "error"
        assert error["error"]["type"] == error_type and error["error"]["message"]
        assert ("retry-after" in headers) == (status == 429)


def test_status_options_set_retry_after_and_the_error_fields(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url(
        "http529", api="anthropic", retry_after=2, retry_after_ms=1500, message="busy"
    )
    status, headers, payload = post(fault_gateway, base, STREAM)
    assert status == 529
    assert headers["retry-after"] == "2" and headers["retry-after-ms"] == "1500"
    assert json.loads(payload)["error"] == {"type": "overloaded_error", "message": "busy"}


def test_error_mid_stream_sends_deltas_then_an_error_event(fault_gateway: FaultGateway) -> None:
    pieces, terminated = stream_of(fault_gateway, "error_mid_stream", chunks=2)
    assert terminated  # the body ends cleanly, without message_stop
    events = sse_events(pieces)
    assert sse_events(one_byte_at_a_time(b"".join(pieces))) == events
    assert names(events) == [*OPENING, "content_block_delta", "content_block_delta", "error"]
    assert json.loads(events[-1][1]) == {
        "type": "error",
        "error": {
            "type": "overloaded_error",
            "message": "Overloaded (FaultGateway error_mid_stream).",
        },
    }


def test_error_mid_stream_without_stream_is_a_529(fault_gateway: FaultGateway) -> None:
    status, _, payload = post(
        fault_gateway, fault_gateway.base_url("error_mid_stream", api="anthropic"), MESSAGES
    )
    assert status == 529
    assert json.loads(payload)["error"]["type"] == "overloaded_error"


def test_no_finish_reason_cuts_the_stream_before_message_stop(fault_gateway: FaultGateway) -> None:
    pieces, terminated = stream_of(fault_gateway, "no_finish_reason")
    assert terminated  # a clean HTTP end: only the terminal events are missing
    events = names(sse_events(pieces))
    assert events == [*OPENING, *["content_block_delta"] * 5]
    status, _, payload = post(
        fault_gateway, fault_gateway.base_url("no_finish_reason", api="anthropic"), MESSAGES
    )
    assert status == 200 and json.loads(payload)["stop_reason"] is None


def test_malformed_json_sends_one_event_that_is_not_json(fault_gateway: FaultGateway) -> None:
    pieces, terminated = stream_of(fault_gateway, "malformed_json")
    assert terminated
    events = sse_events(pieces)
    assert names(events) == [*OPENING, "content_block_delta", "content_block_delta", *CLOSING]
    bad = []
    for _, data in events:
        try:
            json.loads(data)
        except ValueError:
            bad.append(data)
    assert bad == [events[4][1]]


def test_invalid_utf8_sends_a_delta_that_does_not_decode(fault_gateway: FaultGateway) -> None:
    pieces, terminated = stream_of(fault_gateway, "invalid_utf8")
    assert terminated
    events = sse_events(pieces)
    assert names(events)[-4:] == ["content_block_delta", *CLOSING]
    with pytest.raises(UnicodeDecodeError):
        events[-4][1].decode("utf-8")


def test_huge_line_is_one_delta_of_size_bytes(fault_gateway: FaultGateway) -> None:
    pieces, terminated = stream_of(fault_gateway, "huge_line", size=100_000, piece=1000, chunks=0)
    assert terminated
    events = sse_events(pieces)
    assert sse_events(one_byte_at_a_time(b"".join(pieces))) == events
    assert names(events) == [*OPENING, "content_block_delta", *CLOSING]
    data = events[3][1]
    assert len(data) == 100_000
    assert set(json.loads(data)["delta"]["text"]) == {"x"}


def test_huge_line_without_stream_is_one_big_message(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("huge_line", api="anthropic", size=50_000)
    status, headers, payload = post(fault_gateway, base, MESSAGES)
    assert status == 200 and len(payload) == int(headers["content-length"]) == 50_000
    assert json.loads(payload)["type"] == "message"


def test_oversized_event_is_one_delta_in_many_short_lines(fault_gateway: FaultGateway) -> None:
    pieces, terminated = stream_of(
        fault_gateway, "oversized_event", size=20_000, piece=100, chunks=0
    )
    assert terminated
    body = b"".join(pieces)
    delta = body.split(b"event: content_block_delta\n", 1)[1].split(b"\n\n", 1)[0]
    lines = delta.split(b"\n")
    assert len(lines) >= 200
    assert max(len(line) for line in lines[1:]) <= 100 + len(b"data:")
    events = sse_events(pieces)
    assert sse_events(one_byte_at_a_time(body)) == events
    assert names(events) == [*OPENING, "content_block_delta", *CLOSING]
    assert len(events[3][1]) >= 20_000
    assert json.loads(events[3][1])["type"] == "content_block_delta"


@pytest.mark.parametrize(
    ("scenario", "first"),
    [("http500_then_ok", "500"), ("http429_then_ok", "429"), ("reset_then_ok", "reset")],
)
def test_then_ok_shortcuts_fail_once_then_stream_the_messages_api(
    fault_gateway: FaultGateway, scenario: str, first: str
) -> None:
    base = fault_gateway.base_url(scenario, api="anthropic")
    client = Raw(base, STREAM)
    try:
        data, reset = client.read_until_reset()
    finally:
        client.close()
    assert ("reset" if reset else split_response(data)[0].split()[1]) == first
    status, _, body = post(fault_gateway, base, STREAM)
    assert status == 200
    assert names(sse_events(http_chunks(body)[0]))[-1] == "message_stop"
    assert [r.attempt for r in fault_gateway.requests_seen(base)] == [1, 2]


def test_every_scenario_has_an_anthropic_route(fault_gateway: FaultGateway) -> None:
    for scenario in FaultGateway.scenarios():
        assert "/s/" in fault_gateway.base_url(scenario, api="anthropic")
