"""A stream's end is never held up by the lock that starts and stops the shared reader.

When N idle limits fall due together (a provider that stalls every stream at once), each
consumer's ``on_timeout`` kicks its feed; a kick that took that lock queued the N consumers
behind one another, each hand-off waiting for the GIL (benchmarks/idle_scale.py: 40-100 ms
at N = 300).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import List

import pytest

import watchdog_sync as ws
from watchdog_sync import stream_sse

from .internals import shared_reader_lock
from .rawserver import SSE_HEAD, RawServer, chunk, read_request_head, wait_for_disconnect

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("shared_reader")]

_EVENT = b'data: {"n": 0}\n\n'
_IDLE = 0.3


def test_an_idle_timeout_reaches_its_caller_while_the_shared_readers_lock_is_held() -> None:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(SSE_HEAD + chunk(_EVENT))  # one event, then silence
        wait_for_disconnect(conn, stop)

    outcome: List[object] = []
    first = threading.Event()

    def consume(url: str) -> None:
        with stream_sse(url, idle_timeout=_IDLE) as stream:
            events = iter(stream)
            next(events)
            first.set()
            started = time.monotonic()
            try:
                next(events)
            except ws.StreamIdleTimeout as exc:
                outcome.append((exc, time.monotonic() - started))

    with RawServer(handler) as server:
        consumer = threading.Thread(target=consume, args=(server.url,))
        consumer.start()
        assert first.wait(5)
        with shared_reader_lock():  # as other consumers' kicks would hold it, one after another
            consumer.join(_IDLE + 2.0)
            on_time = not consumer.is_alive()
        consumer.join(5)
    assert on_time, "the idle timeout waited for the shared reader's lock"
    assert len(outcome) == 1
    assert _IDLE <= outcome[0][1] < _IDLE + 1.0  # type: ignore[index]
