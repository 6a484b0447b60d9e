"""complete() decodes the body itself, within its limit (issue 12, "never unbounded memory"):
a gzip bomb stops at the limit on urllib3 1.26 and 2.x alike, and every coding servers
really send still decodes. On real local sockets."""

from __future__ import annotations

import gzip
import threading
import tracemalloc
import zlib
from typing import Callable, Iterator

import pytest

import watchdog_sync as ws
from watchdog_sync import ChatClient

from .internals import MAX_RESPONSE_BYTES
from .rawserver import Answer, RawServer

pytestmark = pytest.mark.timeout(60)

MESSAGES = [{"role": "user", "content": "hi"}]
ONCE = ws.RetryPolicy(max_attempts=1)
COMPLETION = b'{"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}'
# 20 MB of zeros gzipped twice: 177 bytes on the wire, 20 MB once decoded
BOMB = gzip.compress(gzip.compress(b"\0" * 20_000_000, mtime=0), mtime=0)
MiB = 1024 * 1024
_TRACING = threading.Lock()  # one traced call at a time, should tests ever run in threads


def reply(status: bytes, encoding: bytes, body: bytes) -> Callable[[bytes], bytes]:
    """A reply with this status, Content-Encoding and body (as sent); a warm-up path gets
    a plain completion."""

    def answer(path: bytes) -> bytes:
        coded = (b"200 OK", b"identity", COMPLETION) if path.startswith(b"/warm") else None
        code, coding, data = coded or (status, encoding, body)
        return (
            b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Encoding: %s\r\n"
            b"Content-Length: %d\r\n\r\n" % (code, coding, len(data))
        ) + data

    return answer


@pytest.fixture
def traced() -> Iterator[Callable[[], int]]:
    """``peak()``: the most memory Python held (tracemalloc) since the last call, in bytes."""
    with _TRACING:
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()

        def peak() -> int:
            current, highest = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            return highest - current

        try:
            yield peak
        finally:
            if started:
                tracemalloc.stop()


BOMBS = {  # status -> (the error, its reason, the most memory the call may take)
    b"200 OK": (ws.StreamProtocolError, "response_too_large", MAX_RESPONSE_BYTES + 4 * MiB),
    b"400 Bad Request": (ws.HTTPStatusError, "invalid_request", 4 * MiB),
}


@pytest.mark.parametrize("status", sorted(BOMBS), ids=lambda s: s.split()[0].decode())
def test_a_gzip_bomb_stops_at_the_limit_with_memory_bounded(
    status: bytes, traced: Callable[[], int]
) -> None:
    """gzip inside gzip (177 bytes, 20 MB decoded): complete() refuses the completion (an
    error body is cut), and Python never holds much more than the limit (urllib3 1.26
    decoding it whole took 48 MiB here, 800 MiB with a bigger bomb)."""
    error, reason, bound = BOMBS[status]
    with RawServer(Answer(reply(status, b"gzip, gzip", BOMB))) as server:
        with ChatClient(server.url + "/warm/v1", "k", model="m", timeout=20, retry=ONCE) as warm:
            warm.complete(MESSAGES)  # imports and first-call caches are not the body's
        with ChatClient(server.url + "/v1", "k", model="m", timeout=20, retry=ONCE) as client:
            traced()
            with pytest.raises(error) as caught:
                client.complete(MESSAGES)
            grown = traced()
    assert caught.value.reason == reason
    assert grown < bound, f"the call held {grown / MiB:.1f} MiB at its peak"


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


CODINGS = {  # Content-Encoding -> the body as sent
    "gzip": (b"gzip", gzip.compress(COMPLETION)),
    "x-gzip": (b"x-gzip", gzip.compress(COMPLETION)),
    "two_gzip_members": (b"gzip", gzip.compress(COMPLETION[:20]) + gzip.compress(COMPLETION[20:])),
    "deflate": (b"deflate", zlib.compress(COMPLETION)),
    "raw_deflate": (b"deflate", _raw_deflate(COMPLETION)),
    "gzip_then_deflate": (b"gzip, deflate", zlib.compress(gzip.compress(COMPLETION))),
    "identity": (b"identity", COMPLETION),
    "upper_case_and_identity": (b"GZIP , identity", gzip.compress(COMPLETION)),
}


@pytest.mark.parametrize("coding", sorted(CODINGS))
def test_complete_decodes_every_coding_it_asks_for(coding: str) -> None:
    """gzip (several members too), deflate (zlib or raw), layers undone last first: the
    completion arrives; the request asks for exactly the codings that are decoded."""
    encoding, body = CODINGS[coding]
    answer = Answer(reply(b"200 OK", encoding, body))
    with (
        RawServer(answer) as server,
        ChatClient(server.url + "/v1", "k", model="m", timeout=10, retry=ONCE) as client,
    ):
        result = client.complete(MESSAGES)
    assert result["choices"][0]["message"]["content"] == "hi"
    assert b"\r\naccept-encoding: gzip, deflate\r\n" in answer.heads[0].lower()


def test_an_error_body_in_an_unknown_coding_is_shown_as_sent() -> None:
    """A 400 whose body is in a coding not asked for is still an HTTPStatusError with the
    status's reason, its body shown as sent."""
    with (
        RawServer(Answer(reply(b"400 Bad Request", b"br", b"bad model"))) as server,
        ChatClient(server.url + "/v1", "k", model="m", timeout=10, retry=ONCE) as client,
        pytest.raises(ws.HTTPStatusError) as caught,
    ):
        client.complete(MESSAGES)
    assert (caught.value.status, "bad model") == (400, caught.value.body)


def test_the_callers_accept_encoding_wins() -> None:
    """A caller's own Accept-Encoding header is sent instead of ours."""
    answer = Answer(reply(b"200 OK", b"identity", COMPLETION))
    headers = {"accept-encoding": "identity"}
    with (
        RawServer(answer) as server,
        ChatClient(server.url + "/v1", "k", model="m", retry=ONCE, headers=headers) as client,
    ):
        client.complete(MESSAGES)
    head = answer.heads[0].lower()
    assert (head.count(b"accept-encoding"), b"accept-encoding: identity\r\n" in head) == (1, True)
