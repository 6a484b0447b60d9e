"""A stream's end is never held up by the lock that starts and stops the shared reader, nor
a stream's move to the shared reader by a new reader's start; a reader that cannot start
ends what was queued for it, and the next stream makes a fresh one.

When N idle limits fall due together (a provider that stalls every stream at once), each
consumer's ``on_timeout`` kicks its feed; a kick that took that lock queued the N consumers
behind one another, each hand-off waiting for the GIL (benchmarks/idle_scale.py: 40-100 ms
at N = 300).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable, List, Optional

import pytest

import watchdog_sync as ws
from watchdog_sync import stream_sse

from .internals import SHARED_READER_THREAD_NAME, Feed, add_feed, shared_reader_lock
from .rawserver import SSE_HEAD, RawServer, chunk, read_request_head, wait_for_disconnect
from .waiting import wait_for

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


class _SocketFeeds:
    """Two feeds over socket pairs, not yet added: what each took, how each ended; on exit
    the peers close, both feeds must have ended, and our sides close (also when not)."""

    def __init__(self) -> None:
        self.pairs = [socket.socketpair() for _ in range(2)]
        self.taken: List[bytes] = []
        self.ended: List[Optional[BaseException]] = []
        self.feeds = [self._feed(ours) for ours, _ in self.pairs]

    def _feed(self, sock: socket.socket) -> Feed:
        sock.setblocking(False)
        return Feed(
            sock,
            self._take,
            lambda error, eof: self.ended.append(error),
            lambda: None,
        )

    def _take(self, data: bytes) -> bool:
        self.taken.append(data)
        return True

    def send(self, which: int) -> None:
        self.pairs[which][1].sendall(b"x")

    def __enter__(self) -> _SocketFeeds:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        for _, theirs in self.pairs:
            theirs.close()
        both_ended = wait_for(lambda: len(self.ended) == 2, 5)
        for ours, _ in self.pairs:
            ours.close()
        if exc_type is None:  # else the test's own failure is the one to see
            assert both_ended


def _patch_the_readers_start(monkeypatch: pytest.MonkeyPatch, before: Callable[[], None]) -> None:
    """``before()`` runs as a new shared reader's thread is started, once no reader runs."""
    assert wait_for(
        lambda: not any(t.name == SHARED_READER_THREAD_NAME for t in threading.enumerate()), 5
    )  # the next feed makes a fresh reader
    original_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == SHARED_READER_THREAD_NAME:
            before()
        original_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)


def test_a_stream_moved_to_a_starting_reader_does_not_wait_for_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In a burst of opens the first body to move started the reader under the lock; the
    # start waits for the new thread to run (for the GIL, among 300 threads), and every other
    # body queued on the lock meanwhile (scale.py N = 300: 69 ms an add, 177 ms at most).
    starting, released = threading.Event(), threading.Event()

    def held_back() -> None:
        starting.set()
        released.wait(10)  # as a start waiting for the GIL

    _patch_the_readers_start(monkeypatch, held_back)
    with _SocketFeeds() as socket_feeds:
        try:
            first = threading.Thread(target=add_feed, args=(socket_feeds.feeds[0],))
            first.start()
            assert starting.wait(5)
            second = threading.Thread(target=add_feed, args=(socket_feeds.feeds[1],))
            second.start()
            second.join(2)
            added_while_starting = not second.is_alive()
        finally:
            released.set()
        first.join(5)
        second.join(5)
        assert added_while_starting, "the add waited for the new reader's start"
        socket_feeds.send(0)
        socket_feeds.send(1)
        assert wait_for(lambda: len(socket_feeds.taken) == 2, 5)  # served once it runs


def test_a_reader_that_cannot_start_ends_its_streams_and_the_next_gets_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    refused: List[bool] = []

    def refuse_once() -> None:
        if not refused:
            refused.append(True)
            raise RuntimeError("can't start new thread")

    _patch_the_readers_start(monkeypatch, refuse_once)
    with _SocketFeeds() as socket_feeds:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            add_feed(socket_feeds.feeds[0])
        ended = socket_feeds.ended
        assert len(ended) == 1 and isinstance(ended[0], ws.WatchdogError)
        assert ended[0].reason == "stream_reader_failed"
        assert any("shared stream reader stopped" in r.getMessage() for r in caplog.records)
        add_feed(socket_feeds.feeds[1])  # a fresh reader
        socket_feeds.send(1)
        assert wait_for(lambda: socket_feeds.taken == [b"x"], 5)
