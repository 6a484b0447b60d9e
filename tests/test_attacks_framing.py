"""Malformed chunked framing (issue 21), on real local sockets.

A chunk size of ``-5`` or ``zz`` (or ``+5``, ``0x5``: hex digits only), or no CRLF after a
chunk's data, with the headers or later in the stream (each decoded on the consumer's
thread): through ``stream_sse`` and ``ChatClient`` both it is one
documented error, ``StreamProtocolError('malformed_framing')``, not retryable, as
``classify()`` says, and nothing is logged at ERROR. It was a raw ``TypeError`` at the start
and a ``TransportError`` with an ERROR traceback later.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any, Callable, List

import pytest

import watchdog_sync as ws

from .rawserver import SSE_HEAD, RawServer, chunk, read_request_head, wait_for_disconnect

pytestmark = pytest.mark.timeout(30)

MESSAGES = [{"role": "user", "content": "hi"}]
GOOD = chunk(b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n')
MALFORMED = {
    "size -5": b"-5\r\nhello\r\n",
    "size zz": b"zz\r\n",
    "size +5": b"+5\r\nhello\r\n",
    "size 0x5": b"0x5\r\nhello\r\n",
    "no CRLF after the data": b"5\r\nhelloXX",
}


def _server(bad: bytes, later: bool, requests: List[int]) -> RawServer:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        requests.append(1)
        if later:  # a good event first, then the bad bytes in a later read
            conn.sendall(SSE_HEAD + GOOD)
            stop.wait(0.05)
            conn.sendall(bad)
        else:  # the bad bytes arrive with the headers
            conn.sendall(SSE_HEAD + bad)
        wait_for_disconnect(conn, stop, limit=5.0)

    return RawServer(handler)


def _through_stream_sse(url: str, got: List[Any]) -> None:
    for event in ws.stream_sse(url, json={}, idle_timeout=5):
        got.append(event.data)


def _through_chat_client(url: str, got: List[Any]) -> None:
    retry = ws.RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)
    with ws.ChatClient(url + "/v1", "test-key-0123456789", model="m", retry=retry) as client:
        for piece in client.stream(MESSAGES, timeout=10):
            got.append(piece)


@pytest.mark.parametrize("later", [False, True], ids=["with the headers", "later"])
@pytest.mark.parametrize("bad", list(MALFORMED.values()), ids=list(MALFORMED))
@pytest.mark.parametrize(
    "read", [_through_stream_sse, _through_chat_client], ids=["stream_sse", "ChatClient"]
)
def test_malformed_chunked_framing_is_a_stream_protocol_error_not_retried_not_logged(
    read: Callable[[str, List[Any]], None],
    bad: bytes,
    later: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    requests: List[int] = []
    got: List[Any] = []
    caplog.set_level(logging.WARNING, logger="watchdog_sync")
    server = _server(bad, later, requests)
    with server, pytest.raises(ws.StreamProtocolError) as caught:
        read(server.url, got)
    error = caught.value
    assert (error.reason, error.retryable) == ("malformed_framing", False)
    assert "chunked framing is malformed" in str(error)
    verdict = ws.classify(error)
    assert (verdict.kind, verdict.reason, verdict.retryable) == (
        "protocol",
        "malformed_framing",
        False,
    )
    assert len(got) == (1 if later else 0)  # the good event before it was delivered
    assert len(requests) == 1  # not sent again
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
