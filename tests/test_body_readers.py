"""Who reads a socket-backed stream's body: its consumer's thread, for the body's whole life,
however many streams are open, however fast they were opened and however far behind a
consumer falls (stream_sse here; httpx_client()'s HTTP/1.1 streams use the same BodyFeed)."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any, Dict, Iterator, List, Optional

import pytest

from watchdog_sync import stream_sse
from watchdog_sync.testing import WATCHDOG_THREAD_NAME

from .internals import pipeline_module
from .rawserver import RawServer, end_body, event, read_request_head, send_body_piece, send_sse_head

pytestmark = pytest.mark.timeout(30)


def numbers(events: Iterator[object]) -> List[int]:
    return [json.loads(e.data)["n"] for e in events]  # type: ignore[attr-defined]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Dict[int, List[str]]:
    """Per body, the threads its reads were made on."""
    record: Dict[int, List[str]] = {}
    pull = pipeline_module.BodyFeed.pull

    def recorded_pull(body: Any, timeout: Optional[float]) -> List[Any]:
        record.setdefault(id(body), []).append(threading.current_thread().name)
        return pull(body, timeout)

    monkeypatch.setattr(pipeline_module.BodyFeed, "pull", recorded_pull)
    return record


def ours() -> List[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("watchdog_sync")]


def test_a_burst_of_opens_leaves_every_body_with_its_consumer(
    reads: Dict[int, List[str]],
) -> None:
    """Forty streams opened at once by forty consumer threads: every read of a body is made
    on the thread that consumes it, no reader thread is started, every event arrives once,
    in order."""
    count, streams = 20, 40
    go = threading.Event()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        go.wait(10)
        for n in range(1, count):
            send_body_piece(conn, event(n))
            stop.wait(0.005)
        end_body(conn)

    got: Dict[str, List[int]] = {}
    threads_seen: List[List[str]] = []

    def consume(name: str, url: str, opened: threading.Barrier) -> None:
        stream = stream_sse(url, idle_timeout=10)
        first = numbers([next(stream)])
        opened.wait(10)
        got[name] = first + numbers(stream)

    with RawServer(handler, max_connections=streams) as server:
        opened = threading.Barrier(streams + 1)
        consumers = [
            threading.Thread(
                target=consume, args=(f"consumer-{k}", server.url, opened), name=f"consumer-{k}"
            )
            for k in range(streams)
        ]
        for c in consumers:
            c.start()
        opened.wait(10)
        threads_seen.append(ours())
        go.set()
        for c in consumers:
            c.join(20)
    assert got == {f"consumer-{k}": list(range(count)) for k in range(streams)}
    assert set(threads_seen[0]) <= {WATCHDOG_THREAD_NAME}
    assert len(reads) == streams
    assert all(
        len(set(names)) == 1 and names[0].startswith("consumer-") for names in reads.values()
    )


def test_a_consumer_falling_behind_keeps_reading_its_own_body(
    reads: Dict[int, List[str]],
) -> None:
    """Two consumers whose every read finds three events waiting read their own bodies to the
    end: nothing moves a body to another thread."""
    rounds, per_piece = 8, 3
    released = [threading.Event() for _ in range(rounds)]
    released[0].set()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        for k, step in enumerate(released):
            if not step.wait(5):
                return
            first = k * per_piece
            send_body_piece(conn, b"".join(event(n) for n in range(first, first + per_piece)))
        end_body(conn)

    with RawServer(handler, max_connections=2) as server:
        streams = [stream_sse(server.url, idle_timeout=5) for _ in range(2)]
        got: List[List[int]] = [[] for _ in streams]
        for k in range(rounds):
            for taken, stream in zip(got, streams):
                taken += numbers([next(stream) for _ in range(per_piece)])
            if k + 1 < rounds:
                released[k + 1].set()
        for taken, stream in zip(got, streams):
            taken += numbers(stream)
    assert got == [list(range(rounds * per_piece))] * 2
    assert len(reads) == 2
    assert all(set(names) == {"MainThread"} for names in reads.values())
