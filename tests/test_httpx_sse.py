"""Event streams through HTTPXTransport: only data events are activity, the first-event and
idle limits are separate, the terminal event is required, error events are classified."""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from typing import Iterator, List

import httpx
import httpx2
import pytest

import watchdog_sync as ws

from .httpxstream import sdk_stream
from .internals import EventWatch, error_event, json_object
from .rawserver import RawServer, end_body, read_request_head, send_body_piece, send_sse_head
from .sdkerrors import raises_from_body

pytestmark = pytest.mark.timeout(30)

SLACK = 0.3
PING = b'event: ping\ndata: {"type": "ping"}\n\n'
STOP = b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
DELTA = (
    b"event: content_block_delta\n"
    b'data: {"type": "content_block_delta", "index": 0, "delta": {"text": "hi"}}\n\n'
)
CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": null}]}\n\n'
FINISH = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
OVERLOADED = (
    b"event: error\n"
    b'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
)
GEMINI = b'data: {"candidates": [{"content": {"parts": [{"text": "hi"}], "role": "model"}}]}\n\n'
GEMINI_STOP = b'data: {"candidates": [{"content": {"parts": []}, "finishReason": "STOP"}]}\n\n'
GEMINI_BLOCKED = b'data: {"promptFeedback": {"blockReason": "SAFETY"}}\n\n'
GEMINI_UNAVAILABLE = (
    b'data: {"error": {"code": 503, "message": "The model is overloaded.", '
    b'"status": "UNAVAILABLE"}}\n\n'
)


@pytest.mark.parametrize(
    ("event", "activity"),
    [
        (CHUNK, True),
        (DELTA, True),
        (PING, False),
        (b": keep-alive\n\n", False),
        (b"event: foo\n\n", False),
        (b"id: 3\ndata: x\n\n", True),
    ],
)
def test_only_data_events_other_than_pings_are_activity(event: bytes, activity: bool) -> None:
    assert EventWatch().note(event) is activity


@pytest.mark.parametrize(
    "events",
    [
        [CHUNK, FINISH],
        [CHUNK, FINISH, b"data: [DONE]\n\n"],
        [DELTA, STOP],
        [b"event: response.created\ndata: {}\n\n", b"event: response.completed\ndata: {}\n\n"],
        [GEMINI, GEMINI_STOP],
        [GEMINI_BLOCKED],
        [b"data: something else\n\n"],  # a format we do not know: it ends as the server ended it
    ],
)
def test_a_stream_with_its_terminal_event_ends_cleanly(events: List[bytes]) -> None:
    watch = EventWatch()
    for event in events:
        watch.note(event)
    watch.end()


@pytest.mark.parametrize(
    "events",
    [[CHUNK, CHUNK], [DELTA], [b"event: response.created\ndata: {}\n\n"], [GEMINI, GEMINI]],
)
def test_a_known_stream_cut_before_its_terminal_event_is_no_finish_reason(
    events: List[bytes],
) -> None:
    watch = EventWatch()
    for event in events:
        watch.note(event)
    with pytest.raises(ws.StreamProtocolError) as info:
        watch.end()
    assert info.value.reason == "no_finish_reason"
    assert info.value.chunks_received == len(events)


def test_an_overloaded_error_event_is_a_classified_529() -> None:
    """Before any event: retryable 529 'overloaded'; after one, not retryable (no replay)."""
    with pytest.raises(ws.HTTPStatusError) as info:
        EventWatch().note(OVERLOADED)
    verdict = ws.classify(info.value)
    assert (info.value.status, verdict.reason, verdict.retryable) == (529, "overloaded", True)
    late = error_event(json_object(b'{"type": "error", "error": {"type": "overloaded_error"}}'), 3)
    assert isinstance(late, ws.HTTPStatusError) and not ws.classify(late).retryable
    odd = error_event(json_object(b"not json"), 0)
    assert isinstance(odd, ws.StreamProtocolError) and odd.reason == "stream_error"


def test_a_data_event_that_is_not_utf8_is_a_malformed_event() -> None:
    """As stream_sse says of one: no SDK decodes it with replacement characters."""
    assert EventWatch().note('data: {"text": "h\u00e9"}\n\n'.encode())  # UTF-8 is fine
    with pytest.raises(ws.StreamProtocolError) as info:
        EventWatch().note(b'data: {"text": "bad \xff\xfe"}\n\n')
    assert info.value.reason == "malformed_event"
    assert not ws.classify(info.value).retryable


def test_a_gemini_error_payload_is_a_classified_http_status() -> None:
    """``{"error": {"code": 503, "status": "UNAVAILABLE"}}``: before any event a retryable 503;
    after one, not retryable. An OpenAI-style ``{"error": ...}`` is left to the SDK."""
    with pytest.raises(ws.HTTPStatusError) as info:
        EventWatch().note(GEMINI_UNAVAILABLE)
    verdict = ws.classify(info.value)
    assert (info.value.status, verdict.reason, verdict.retryable) == (503, "unavailable", True)
    watch = EventWatch()
    watch.note(GEMINI)
    with pytest.raises(ws.HTTPStatusError) as late:
        watch.note(GEMINI_UNAVAILABLE)
    assert not ws.classify(late.value).retryable
    assert EventWatch().note(b'data: {"error": {"message": "x", "type": "server_error"}}\n\n')


def sse_server(*pieces: bytes, gap: float = 0.0, then_wait: bool = False) -> RawServer:
    """Each connection: SSE headers, the pieces (``gap`` apart), then end or hold."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        for piece in pieces:
            send_body_piece(conn, piece)
            if gap and stop.wait(gap):
                return
        if then_wait:
            stop.wait(10)
        else:
            end_body(conn)

    return RawServer(handler)


@pytest.fixture
def client() -> Iterator[httpx2.Client]:
    with ws.httpx_client(idle_timeout=0.5) as made:
        yield made


def read_stream(client: httpx2.Client, url: str) -> bytes:
    with client.stream("POST", url, json={"stream": True}) as response:
        return b"".join(response.iter_bytes())


def test_one_byte_reads_arrive_as_whole_events_with_comments_kept(client: httpx2.Client) -> None:
    """Comments and pings reach the reader in front of the next data event, bytes unchanged."""
    body = b": hello\n\n" + CHUNK + PING + FINISH + b"data: [DONE]\n\n"
    with sse_server(*[body[i : i + 1] for i in range(len(body))]) as server, ws.deadline(10):
        assert read_stream(client, server.url) == body


def test_pings_do_not_keep_a_stream_alive(client: httpx2.Client) -> None:
    """A ping every 0.1 s, never data: StreamIdleTimeout after each send's 0.5 s, 3 sends."""
    with sse_server(*[PING] * 200, gap=0.1) as server:
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
            read_stream(client, server.url)
        assert time.monotonic() - started <= 3 * 0.5 + SLACK
        assert info.value.chunks_received == 0
        assert server.accepted == 3


def test_pings_after_data_do_not_keep_a_stream_alive(client: httpx2.Client) -> None:
    with sse_server(DELTA, *[PING] * 200, gap=0.1) as server:
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
            read_stream(client, server.url)
        assert time.monotonic() - started <= 0.5 + 0.1 + SLACK
        assert info.value.chunks_received == 1
        assert server.accepted == 1


def test_a_short_first_event_limit_does_not_cut_the_gaps_after_it() -> None:
    """first_event_timeout 0.3 s bounds headers and the first event only; gaps of 0.5 s pass."""
    server = sse_server(CHUNK, CHUNK, CHUNK, FINISH, gap=0.5)
    client = ws.httpx_client(idle_timeout=2, first_event_timeout=0.3)
    with server, client, ws.deadline(10):
        assert read_stream(client, server.url).count(b"data:") == 4
    assert server.accepted == 1


def test_an_overloaded_error_event_reaches_the_reader_as_our_error(client: httpx2.Client) -> None:
    server = sse_server(DELTA, OVERLOADED)
    with server, pytest.raises(ws.HTTPStatusError) as info, ws.deadline(10):
        read_stream(client, server.url)
    assert info.value.status == 529 and not info.value.retryable


DEEP_ERROR = b"event: error\ndata: " + b"[" * 100_000 + b"\n\n"


def test_an_error_event_nested_too_deep_is_our_stream_error(client: httpx2.Client) -> None:
    """``event: error`` whose data is ``[`` x 100,000: ``StreamProtocolError('stream_error')``
    (json raises RecursionError there, which reached the caller raw)."""
    server = sse_server(DELTA, DEEP_ERROR)
    with server, pytest.raises(ws.StreamProtocolError) as info, ws.deadline(10):
        read_stream(client, server.url)
    assert info.value.reason == "stream_error" and not ws.classify(info.value).retryable


def test_an_error_event_nested_too_deep_reaches_the_anthropic_sdk_as_ours() -> None:
    """Through the anthropic SDK on httpx_client(): our error, not the SDK's RecursionError."""
    server = sse_server(DELTA, DEEP_ERROR)
    http = ws.httpx_client(idle_timeout=5)
    try:
        with server, raises_from_body(ws.StreamProtocolError) as info, ws.deadline(10):
            for _ in sdk_stream("anthropic", server.url, http):
                pass
    finally:
        http.close()
    assert info.value.reason == "stream_error"


def test_an_anthropic_stream_cut_before_message_stop_is_no_finish_reason(
    client: httpx2.Client,
) -> None:
    message_start = b'event: message_start\ndata: {"type": "message_start"}\n\n'
    server = sse_server(message_start, DELTA)
    with server, pytest.raises(ws.StreamProtocolError) as info, ws.deadline(10):
        read_stream(client, server.url)
    assert info.value.reason == "no_finish_reason"


def test_a_stream_closed_early_lets_the_reader_thread_go(client: httpx2.Client) -> None:
    """Leaving the stream after one event shuts it; the leak check sees no reader thread."""
    with sse_server(CHUNK, gap=0.0, then_wait=True) as server:
        stream = client.stream("POST", server.url, json={"stream": True})
        with ws.deadline(10), stream as response:
            first = next(response.iter_bytes())
        assert json.loads(first[len(b"data: ") :])["choices"][0]["delta"]["content"] == "hi"


def test_an_httpx_028_client_guards_event_streams_too() -> None:
    """Around an httpx (not httpx2) transport, pings keep nothing alive either."""
    transport = ws.HTTPXTransport(httpx.HTTPTransport(), idle_timeout=0.3)
    server = sse_server(CHUNK, *[PING] * 100, gap=0.1)
    legacy = httpx.Client(transport=transport)
    with server, legacy, pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
        stream = legacy.stream("POST", server.url, json={"stream": True})
        with stream as response:
            b"".join(response.iter_bytes())
    assert info.value.chunks_received == 1


def test_a_compressed_event_stream_arrives_whole_and_stays_bounded(
    client: httpx2.Client,
) -> None:
    """gzip cannot be framed before httpx decodes it: raw pieces are activity, idle still ends it."""
    body = CHUNK + FINISH
    packer = zlib.compressobj(wbits=31)  # gzip
    packed = packer.compress(body) + packer.flush(zlib.Z_SYNC_FLUSH)

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        send_body_piece(conn, packed)
        stop.wait(10)  # then silence, without ending the body

    got: List[bytes] = []
    server = RawServer(handler)
    stream = client.stream("POST", server.url, json={"stream": True})
    with server, pytest.raises(ws.StreamIdleTimeout), ws.deadline(10), stream as response:
        got.extend(response.iter_bytes())
    assert b"".join(got) == body
