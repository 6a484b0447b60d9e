"""JSON nested deeper than the interpreter can decode is a StreamProtocolError, never a raw
RecursionError, and a stream that receives it is closed at once (reader gone, socket shut).

``json`` raises ``RecursionError`` (not ``ValueError``) for such a document; 100,000 ``[``
is a 100 kB body, well inside every size cap.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Callable, List

import pytest

import watchdog_sync as ws
from watchdog_sync import ChatClient
from watchdog_sync.cli import main
from watchdog_sync.testing import READER_THREAD_NAME

from .rawserver import RawServer, send_body_piece, send_sse_head, wait_for_disconnect
from .test_chat import DONE, HELLO, MESSAGES, read_request, wait_for

pytestmark = pytest.mark.timeout(30)

DEEP = b"[" * 100_000
DEEP_EVENT = b"data: " + DEEP + b"\n\n"
TIMEOUT = 20.0  # far beyond what any bound below allows: reaching it is the bug
Handler = Callable[[socket.socket, threading.Event], None]


def client(url: str) -> ChatClient:
    policy = ws.RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=0.0)
    return ChatClient(
        url, "key-0123456789", model="m", timeout=TIMEOUT, idle_timeout=TIMEOUT, retry=policy
    )


def event_stream(*pieces: bytes, closed_at: List[float]) -> Handler:
    """Send ``pieces`` as events, then hold the stream open until the client hangs up."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        send_sse_head(conn)
        for piece in pieces:
            send_body_piece(conn, piece)
        if wait_for_disconnect(conn, stop, limit=TIMEOUT):
            closed_at.append(time.monotonic())

    return handler


def answer(status: str, body: bytes) -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        conn.sendall(head.encode() + body)

    return handler


def readers() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READER_THREAD_NAME and t.is_alive()]


def test_a_deeply_nested_event_mid_stream_is_malformed_and_closes_the_stream_at_once() -> None:
    """After a good chunk, a 100,000-deep event: StreamProtocolError, socket shut in < 2 s."""
    closed_at: List[float] = []
    server = RawServer(event_stream(HELLO, DEEP_EVENT, closed_at=closed_at))
    with server, client(server.url) as chat:
        stream = chat.stream(MESSAGES)
        assert next(stream)["choices"][0]["delta"]["content"] == "Hel"
        with pytest.raises(ws.StreamProtocolError) as caught:
            next(stream)
        failed_at = time.monotonic()
        assert wait_for(lambda: bool(closed_at) and not readers(), limit=2.0)
        assert closed_at[0] - failed_at < 2.0, "the server still holds the stream"
        assert list(stream) == []  # ended: nothing more comes
    error = caught.value
    assert (error.reason, error.retryable, error.chunks_received) == ("malformed_event", False, 1)
    assert error.request_id == stream.request_id and error.attempt == 1
    assert "100000 characters" in str(error)


def test_a_deeply_nested_first_event_fails_the_stream_once_without_retry() -> None:
    """The first event 100,000 deep: stream() raises StreamProtocolError after one attempt."""
    closed_at: List[float] = []
    with RawServer(event_stream(DEEP_EVENT, closed_at=closed_at)) as server:
        with client(server.url) as chat, pytest.raises(ws.StreamProtocolError) as caught:
            chat.stream(MESSAGES)
        accepted = server.accepted
    assert (caught.value.reason, caught.value.retryable) == ("malformed_event", False)
    assert accepted == 1


def test_complete_with_a_deeply_nested_body_is_a_malformed_response_not_retried() -> None:
    """A 200 whose body is 100,000 ``[``: StreamProtocolError('malformed_response')."""
    with RawServer(answer("200 OK", DEEP)) as server:
        with client(server.url) as chat, pytest.raises(ws.StreamProtocolError) as caught:
            chat.complete(MESSAGES)
        accepted = server.accepted
    assert (caught.value.reason, caught.value.retryable) == ("malformed_response", False)
    assert accepted == 1


@pytest.mark.parametrize("call", ["complete", "stream"])
def test_an_error_status_with_a_deeply_nested_body_is_an_http_status_error(call: str) -> None:
    """A 400 whose body is 100,000 ``[``: the status error, its body shown as text."""
    server = RawServer(answer("400 Bad Request", DEEP))
    with server, client(server.url) as chat, pytest.raises(ws.HTTPStatusError) as caught:
        getattr(chat, call)(MESSAGES)
    error = caught.value
    assert (error.status, error.reason, error.retryable) == (400, "invalid_request", False)
    assert "HTTP 400: [[[" in str(error)


def test_the_probe_reports_a_stream_with_a_deeply_nested_event(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """watchdog-sync probe counts the event it cannot decode instead of crashing on it."""
    server = RawServer(event_stream(HELLO, DEEP_EVENT, DONE, closed_at=[]))
    with server:
        code = main(["probe", "--base-url", server.url, "--model", "m", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["ok"], report["events"]) == (0, True, 2)
