"""Who reads a socket-backed stream's body: its consumer, until the process is busy (past
SHARED_FROM open bodies, or BUSY_FROM open with one consumer in BEHIND_SHARE falling
behind), then the shared reader (stream_sse here; httpx_client()'s streams use the same
BodyFeed)."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any, Dict, Iterator, List, Optional

import pytest

from watchdog_sync import stream_sse

from .internals import SHARED_READER_THREAD_NAME, endless_burst, pipeline_module
from .rawserver import RawServer, end_body, event, read_request_head, send_body_piece, send_sse_head
from .waiting import wait_for

pytestmark = pytest.mark.timeout(30)


def numbers(events: Iterator[object]) -> List[int]:
    return [json.loads(e.data)["n"] for e in events]  # type: ignore[attr-defined]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Dict[str, Dict[int, List[str]]]:
    """Per body, the threads its reads were made on: ``pulled`` by its consumer, ``taken`` by
    the shared reader (or, in the consumer's thread, with the headers)."""
    record: Dict[str, Dict[int, List[str]]] = {"pulled": {}, "taken": {}}
    take, pull = pipeline_module.BodyFeed.take, pipeline_module.BodyFeed.pull

    def recorded_take(body: Any, data: Optional[bytes]) -> bool:
        record["taken"].setdefault(id(body), []).append(threading.current_thread().name)
        return take(body, data)

    def recorded_pull(body: Any, timeout: Optional[float]) -> List[Any]:
        record["pulled"].setdefault(id(body), []).append(threading.current_thread().name)
        return pull(body, timeout)

    monkeypatch.setattr(pipeline_module.BodyFeed, "take", recorded_take)
    monkeypatch.setattr(pipeline_module.BodyFeed, "pull", recorded_pull)
    return record


def _shared_reader_running() -> bool:
    return any(t.name == SHARED_READER_THREAD_NAME for t in threading.enumerate())


@pytest.fixture(autouse=True)
def fresh_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The busy sign's window starts empty: an earlier test's reads are not this one's. And
    a burst of opens never ends, unless a test says when (``CALM``)."""
    for counter in ("_window_reads", "_window_readers", "_window_behind"):
        monkeypatch.setattr(pipeline_module, counter, 0)
    monkeypatch.setattr(pipeline_module, "_busy", False)
    endless_burst(monkeypatch)


@pytest.fixture
def busy_from_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two bodies open are enough for the busy sign, judged every four consumer reads."""
    monkeypatch.setattr(pipeline_module, "BUSY_FROM", 2)
    monkeypatch.setattr(pipeline_module, "BUSY_WINDOW", 4)


def test_past_shared_from_open_bodies_every_stream_moves_to_the_shared_reader(
    monkeypatch: pytest.MonkeyPatch, reads: Dict[str, Dict[int, List[str]]]
) -> None:
    """Up to SHARED_FROM open bodies their consumers read them (no thread at all); the next
    ones opened go to the shared reader, and those read by their consumers move there at
    their next read. Every event arrives once, in order."""
    monkeypatch.setattr(pipeline_module, "SHARED_FROM", 2)
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
    assert len(reads["taken"]) == 4 and len(reads["pulled"]) == 2  # two began in their consumers
    assert all(names[-1] == SHARED_READER_THREAD_NAME for names in reads["taken"].values())


class Lockstep:
    """A server handler sending ``rounds`` pieces of ``per_piece`` events each, piece k once
    the test released round k: every read a consumer makes finds a whole piece waiting."""

    def __init__(self, rounds: int, per_piece: int) -> None:
        self.per_piece = per_piece
        self.released = [threading.Event() for _ in range(rounds)]
        self.released[0].set()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        for k, released in enumerate(self.released):
            if not released.wait(5):
                return
            first = k * self.per_piece
            send_body_piece(conn, b"".join(event(n) for n in range(first, first + self.per_piece)))
        end_body(conn)

    def run(self, streams: List[Any]) -> List[List[int]]:
        """Take each round's events from every stream, then release the next round."""
        got: List[List[int]] = [[] for _ in streams]
        for k in range(len(self.released)):
            for taken, stream in zip(got, streams):
                taken += numbers([next(stream) for _ in range(self.per_piece)])
            if k + 1 < len(self.released):
                self.released[k + 1].set()
        for taken, stream in zip(got, streams):
            taken += numbers(stream)  # nothing more: the body's end
        return got


def test_consumers_falling_behind_hand_their_bodies_to_the_shared_reader(
    reads: Dict[str, Dict[int, List[str]]], busy_from_two: None
) -> None:
    """With BUSY_FROM bodies open, consumers whose reads keep finding more than one event
    waiting (the sign of a busy process) hand their bodies to the shared reader: after a
    window of such reads each moves at its next read, in order, nothing lost."""
    server_rounds = Lockstep(rounds=8, per_piece=3)
    with RawServer(server_rounds, max_connections=2) as server:
        streams = [stream_sse(server.url, idle_timeout=5) for _ in range(2)]
        got = server_rounds.run(streams)
    assert got == [list(range(24))] * 2
    assert len(reads["pulled"]) == 2  # both began in their consumers
    last_reads = [names[-1] for names in reads["taken"].values()]
    assert last_reads == [SHARED_READER_THREAD_NAME] * 2


def test_one_consumer_falling_behind_among_many_keeping_pace_moves_no_body(
    monkeypatch: pytest.MonkeyPatch, reads: Dict[str, Dict[int, List[str]]]
) -> None:
    """The busy sign counts consumers, not reads: one stream whose consumer's reads each find
    three events waiting, among eight whose reads find one, leaves every body with its
    consumer, although that one stream's reads alone are more than one in eight."""
    monkeypatch.setattr(pipeline_module, "BUSY_FROM", 2)
    monkeypatch.setattr(pipeline_module, "BUSY_WINDOW", 26)  # two rounds of reads, below
    behind, keeping_pace = Lockstep(rounds=40, per_piece=3), Lockstep(rounds=8, per_piece=1)
    with (
        RawServer(behind, max_connections=1) as one,
        RawServer(keeping_pace, max_connections=8) as eight,
    ):
        fast = stream_sse(one.url, idle_timeout=5)
        paced = [stream_sse(eight.url, idle_timeout=5) for _ in range(8)]
        got_fast: List[int] = []
        got_paced: List[List[int]] = [[] for _ in paced]
        for k in range(8):
            for piece in range(k * 5, k * 5 + 5):  # five reads of three events each
                got_fast += numbers([next(fast) for _ in range(3)])
                if piece + 1 < 40:
                    behind.released[piece + 1].set()
            for taken, stream in zip(got_paced, paced):  # one read of one event each
                taken += numbers([next(stream)])
            if k + 1 < 8:
                keeping_pace.released[k + 1].set()
        got_fast += numbers(fast)
        got_paced = [taken + numbers(stream) for taken, stream in zip(got_paced, paced)]
    assert got_fast == list(range(120)) and got_paced == [list(range(8))] * 8
    assert len(reads["pulled"]) == 9
    assert all(SHARED_READER_THREAD_NAME not in names for names in reads["taken"].values())


def test_a_body_alone_stays_with_its_consumer_however_far_behind_and_busy_ends_with_the_bodies(
    reads: Dict[str, Dict[int, List[str]]], busy_from_two: None
) -> None:
    """Fewer than BUSY_FROM bodies open: reads finding many events waiting move nothing. And
    once the bodies that made the process busy have ended, a new body is its consumer's."""
    busy = Lockstep(rounds=8, per_piece=3)
    with RawServer(busy, max_connections=2) as server:
        assert (
            busy.run([stream_sse(server.url, idle_timeout=5) for _ in range(2)])
            == [list(range(24))] * 2
        )
    assert any(SHARED_READER_THREAD_NAME in names for names in reads["taken"].values())
    reads["pulled"].clear()
    reads["taken"].clear()
    alone = Lockstep(rounds=8, per_piece=3)
    with RawServer(alone, max_connections=1) as server:
        assert alone.run([stream_sse(server.url, idle_timeout=5)]) == [list(range(24))]
    assert len(reads["pulled"]) == 1 and len(next(iter(reads["pulled"].values()))) >= 7
    assert all(SHARED_READER_THREAD_NAME not in names for names in reads["taken"].values())


def test_once_the_burst_of_opens_is_over_the_shared_reader_hands_each_body_back(
    monkeypatch: pytest.MonkeyPatch, reads: Dict[str, Dict[int, List[str]]]
) -> None:
    """Past SHARED_FROM open bodies, during a burst of opens, the shared reader reads them;
    once no body has started for CALM seconds it hands each back to its consumer, whose own
    reads take the rest (the shared reader's thread then ends: it has no stream left).
    Every event arrives once, in order."""
    monkeypatch.setattr(pipeline_module, "SHARED_FROM", 0)
    monkeypatch.setattr(pipeline_module, "CALM", 1.0)
    calm = threading.Event()
    count = 20

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        if not calm.wait(10):  # the rest once both bodies are their consumers' again
            return
        for n in range(1, count):
            send_body_piece(conn, event(n))
        end_body(conn)

    with RawServer(handler, max_connections=2) as server:
        streams = [stream_sse(server.url, idle_timeout=5) for _ in range(2)]
        firsts = [numbers([next(s)]) for s in streams]  # both on the shared reader
        on_reader = _shared_reader_running()
        assert wait_for(lambda: not _shared_reader_running(), limit=10)
        calm.set()
        rest = [numbers(s) for s in streams]
    assert on_reader and firsts == [[0]] * 2 and rest == [list(range(1, count))] * 2
    assert len(reads["pulled"]) == 2  # each body's consumer read it, once handed back
    assert all(set(names) == {"MainThread"} for names in reads["pulled"].values())


def test_a_body_handed_back_moves_to_the_shared_reader_again_at_the_next_burst(
    monkeypatch: pytest.MonkeyPatch, reads: Dict[str, Dict[int, List[str]]]
) -> None:
    """A body its consumer reads again goes back to the shared reader once another body
    starts (a new burst of opens), and comes back to its consumer once that burst is over:
    every event arrives once, in order."""
    monkeypatch.setattr(pipeline_module, "SHARED_FROM", 0)
    monkeypatch.setattr(pipeline_module, "CALM", 1.0)
    steps = [threading.Event() for _ in range(3)]
    accepted: List[int] = []
    accept_lock = threading.Lock()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        with accept_lock:
            first = not accepted
            accepted.append(1)
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        if first:  # the stream that moves: one event after each step
            for n, step in enumerate(steps, start=1):
                if not step.wait(10):
                    return
                send_body_piece(conn, event(n))
        end_body(conn)

    with RawServer(handler, max_connections=2) as server:
        moving = stream_sse(server.url, idle_timeout=5)
        got = numbers([next(moving)])  # on the shared reader: the first burst
        assert wait_for(lambda: not _shared_reader_running(), limit=10)  # handed back
        assert numbers(stream_sse(server.url, idle_timeout=5)) == [0]  # a second burst
        steps[0].set()
        got += numbers([next(moving)])  # its consumer's read, then the move
        assert _shared_reader_running()
        steps[1].set()
        got += numbers([next(moving)])
        body = next(iter(reads["taken"]))  # the moving stream's: it took bytes first
        moved_again = reads["taken"][body][-1]
        assert wait_for(lambda: not _shared_reader_running(), limit=10)  # handed back again
        steps[2].set()
        got += numbers(moving)
    assert got == [0, 1, 2, 3]
    assert moved_again == SHARED_READER_THREAD_NAME
    assert reads["pulled"][body][-1] == "MainThread"


def test_a_consumer_waiting_on_the_shared_reader_is_handed_its_body_and_reads_it(
    monkeypatch: pytest.MonkeyPatch, reads: Dict[str, Dict[int, List[str]]]
) -> None:
    """A consumer that waits for its next event while the shared reader hands its body back
    is woken and waits on its own socket: the event sent after the hand-back reaches it."""
    monkeypatch.setattr(pipeline_module, "SHARED_FROM", 0)
    monkeypatch.setattr(pipeline_module, "CALM", 0.5)

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        if not wait_for(_shared_reader_running, limit=10):  # the body moved to it
            return
        if not wait_for(lambda: not _shared_reader_running(), limit=10):  # handed back
            return
        send_body_piece(conn, event(1))
        end_body(conn)

    with RawServer(handler, max_connections=1) as server:
        stream = stream_sse(server.url, idle_timeout=5)
        first = numbers([next(stream)])
        on_reader = _shared_reader_running()
        rest = numbers(stream)  # waits on the shared reader, then on its own socket
    assert on_reader and first == [0] and rest == [1]
    (pulled,) = reads["pulled"].values()
    assert set(pulled) == {"MainThread"}


def test_opens_fewer_than_a_burst_leave_the_bodies_with_their_consumers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past SHARED_FROM open bodies, opens that are not a burst (fewer than BURST_OPENS
    within CALM seconds) leave each body with its consumer; the open that makes the burst
    moves the bodies to the shared reader."""
    monkeypatch.setattr(pipeline_module, "SHARED_FROM", 0)
    monkeypatch.setattr(pipeline_module, "BURST_OPENS", 3)
    monkeypatch.setattr(pipeline_module, "CALM", 30.0)
    done = threading.Event()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        if done.wait(10):
            end_body(conn)

    with RawServer(handler, max_connections=3) as server:
        streams = [stream_sse(server.url, idle_timeout=5) for _ in range(3)]
        firsts = [numbers([next(s)]) for s in streams[:2]]
        before_the_burst = _shared_reader_running()
        firsts.append(numbers([next(streams[2])]))  # the third open within CALM: a burst
        in_the_burst = _shared_reader_running()
        done.set()
        rest = [numbers(s) for s in streams]
    assert not before_the_burst and in_the_burst
    assert firsts == [[0]] * 3 and rest == [[]] * 3
