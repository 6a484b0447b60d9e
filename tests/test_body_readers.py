"""Who reads a socket-backed stream's body: its consumer, up to SHARED_FROM open bodies, then
the shared reader (stream_sse here; httpx_client()'s streams use the same BodyFeed)."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any, Dict, Iterator, List, Optional, Set

import pytest

from watchdog_sync import stream_sse

from .internals import SHARED_READER_THREAD_NAME, pipeline_module
from .rawserver import RawServer, end_body, event, read_request_head, send_body_piece, send_sse_head

pytestmark = pytest.mark.timeout(30)


def numbers(events: Iterator[object]) -> List[int]:
    return [json.loads(e.data)["n"] for e in events]  # type: ignore[attr-defined]


def test_past_shared_from_open_bodies_every_stream_moves_to_the_shared_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Up to SHARED_FROM open bodies their consumers read them (no thread at all); the next
    ones opened go to the shared reader, and those read by their consumers move there at
    their next read. Every event arrives once, in order."""
    monkeypatch.setattr(pipeline_module, "SHARED_FROM", 2)
    readers: Dict[int, List[str]] = {}  # per body: the threads its reads were taken on
    pulled: Set[int] = set()  # the bodies their consumers read (pull)
    take, pull = pipeline_module.BodyFeed.take, pipeline_module.BodyFeed.pull

    def recorded_take(body: Any, data: Optional[bytes]) -> bool:
        readers.setdefault(id(body), []).append(threading.current_thread().name)
        return take(body, data)

    def recorded_pull(body: Any, timeout: Optional[float]) -> List[Any]:
        pulled.add(id(body))
        return pull(body, timeout)

    monkeypatch.setattr(pipeline_module.BodyFeed, "take", recorded_take)
    monkeypatch.setattr(pipeline_module.BodyFeed, "pull", recorded_pull)
    steps = [threading.Event(), threading.Event()]
    count = 30

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        steps[0].wait(5)  # event 1 once all four are open
        send_body_piece(conn, event(1))
        steps[1].wait(5)  # the rest once each stream took event 1
        for n in range(2, count):
            send_body_piece(conn, event(n))
        end_body(conn)

    def ours() -> List[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("watchdog_sync")]

    with RawServer(handler, max_connections=4) as server:
        streams = [stream_sse(server.url, idle_timeout=5) for _ in range(4)]
        firsts = [numbers([next(s)]) for s in streams[:2]]  # two open: read by their consumers
        alone = ours()
        firsts += [numbers([next(s)]) for s in streams[2:]]  # four open: past SHARED_FROM
        shared = ours()
        steps[0].set()
        seconds = [numbers([next(s)]) for s in streams]  # the first two move after this read
        steps[1].set()
        rest = [numbers(s) for s in streams]
    assert firsts == [[0]] * 4 and seconds == [[1]] * 4 and rest == [list(range(2, count))] * 4
    assert SHARED_READER_THREAD_NAME not in alone and shared.count(SHARED_READER_THREAD_NAME) == 1
    assert len(readers) == 4 and len(pulled) == 2  # the first two began in their consumers
    assert all(names[-1] == SHARED_READER_THREAD_NAME for names in readers.values())
