"""guard_stream: idle/first-item watchdog, budget boundary, hand-off, release of reader and source."""

from __future__ import annotations

import datetime
import errno
import gc
import logging
import random
import socket
import sys
import threading
import time
from typing import Any, Iterator, List, Optional, Set

import pytest

from watchdog_sync import (
    Budget,
    Cancelled,
    DeadlineExceeded,
    Event,
    GuardedStream,
    OperationCancelled,
    StreamIdleTimeout,
    StreamStats,
    add_listener,
    current_budget,
    deadline,
    guard_stream,
)
from watchdog_sync.testing import READER_THREAD_NAME, FakeClock

from .clocks import driving
from .internals import entry_scope

pytestmark = pytest.mark.timeout(20)


class SocketSource:
    """A source blocked in a real ``recv`` on a socketpair; ``unblock`` shuts it from outside."""

    def __init__(self, *, fail_on_eof: bool = False) -> None:
        self.sock, self.peer = socket.socketpair()
        self.fail_on_eof = fail_on_eof
        self.unblocked = 0
        self.closed = threading.Event()
        self.closed_in: Optional[str] = None

    def chunks(self) -> Iterator[bytes]:
        try:
            while True:
                data = self.sock.recv(1024)
                if not data:
                    if self.fail_on_eof:
                        raise ConnectionResetError(errno.ECONNRESET, "connection reset by peer")
                    return
                yield data
        finally:
            self.closed_in = threading.current_thread().name
            self.closed.set()

    def unblock(self) -> None:
        self.unblocked += 1
        self.sock.shutdown(socket.SHUT_RDWR)

    def send(self, data: bytes) -> None:
        self.peer.sendall(data)

    def close(self) -> None:
        self.sock.close()
        self.peer.close()


@pytest.fixture
def src() -> Iterator[SocketSource]:
    source = SocketSource()
    yield source
    source.close()


@pytest.fixture
def failing_src() -> Iterator[SocketSource]:
    source = SocketSource(fail_on_eof=True)
    yield source
    source.close()


def readers_alive() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READER_THREAD_NAME and t.is_alive()]


def wait_until_no_reader(limit: float = 1.5) -> bool:
    give_up = time.monotonic() + limit
    while readers_alive():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.005)
    return True


def counting(n: int) -> Iterator[int]:
    yield from range(n)


# -- the seven behaviours ------------------------------------------------------


def test_zero_item_stall_raises_etimedout_with_no_chunks_after_unblocking_the_source(
    src: SocketSource,
) -> None:
    clock = FakeClock()
    stream = guard_stream(src.chunks(), idle_timeout=0.1, on_timeout=src.unblock, clock=clock)
    with driving(clock, 0.0625, 0.0375), pytest.raises(StreamIdleTimeout) as info:
        next(stream)  # still waiting after the first step (else the second finds nobody)
    err = info.value
    assert clock() == 0.1 and err.stream_lifetime == 0.1
    assert err.errno == errno.ETIMEDOUT and err.code == "ETIMEDOUT"
    assert err.chunks_received == 0 and err.retryable is True
    assert err.idle_timeout == 0.1
    assert err.reason == "stream_idle_timeout"
    assert "idle_timeout=" in str(err) and "WATCHDOG_SYNC_IDLE_TIMEOUT" in str(err)
    assert src.unblocked == 1
    assert src.closed.wait(1.0)
    assert wait_until_no_reader()


def test_stall_after_items_delivers_the_items_then_raises(src: SocketSource) -> None:
    got: List[bytes] = []
    src.send(b"a")
    stream = guard_stream(src.chunks(), idle_timeout=0.15, on_timeout=src.unblock)
    with pytest.raises(StreamIdleTimeout) as info:
        for chunk in stream:
            got.append(chunk)
            if len(got) < 3:
                src.send(b"x")  # one chunk at a time: sent after the previous one arrived
    err = info.value
    assert got == [b"a", b"x", b"x"]
    assert err.chunks_received == 3
    assert err.retryable is False
    assert "after 3 chunks" in str(err)
    assert src.unblocked == 1


def test_a_source_active_every_0_8_idle_never_trips() -> None:
    idle = 120.0
    clock = FakeClock()

    def steady() -> Iterator[int]:
        for i in range(3):
            clock.sleep(idle * 0.8)  # the scenario: an item every 0.8 x idle
            yield i

    stream = guard_stream(steady(), idle_timeout=idle, clock=clock)
    assert list(stream) == [0, 1, 2]
    assert clock() == 3 * idle * 0.8 and stream.stats.lifetime == clock()


def test_time_the_consumer_spends_on_its_own_work_is_not_idle_time() -> None:
    def quick() -> Iterator[int]:
        yield from range(3)

    clock = FakeClock()
    got = []
    for item in guard_stream(quick(), idle_timeout=120, clock=clock):
        clock.advance(200)  # the scenario: a consumer slower than the idle limit
        got.append(item)
    assert got == [0, 1, 2]


def test_cancel_wins_over_an_idle_timeout_due_at_the_same_moment(src: SocketSource) -> None:
    clock = FakeClock()
    budget = Budget(10, clock=clock)
    stream = guard_stream(
        src.chunks(), idle_timeout=0.05, budget=budget, on_timeout=src.unblock, clock=clock
    )
    clock.advance(0.1)  # the scenario: the first-item limit passes while nobody is waiting ...
    budget.cancel("user pressed stop")  # ... and the user cancels before the consumer looks
    with pytest.raises(OperationCancelled, match="user pressed stop"):
        next(stream)
    assert stream.stats.ended_by == "cancelled"
    assert src.unblocked == 1


@pytest.mark.parametrize("idle", [None, 0, 0.0, -1, datetime.timedelta(0)])
def test_idle_watchdog_disabled_but_the_deadline_still_ends_the_stream(
    src: SocketSource, idle: Any
) -> None:
    seen: List[BaseException] = []
    clock = FakeClock()
    with (
        entry_scope(Budget(clock=clock)),  # the scope below runs on the fake clock
        driving(clock, 0.125, 0.075),
        pytest.raises(DeadlineExceeded),
        deadline(0.2),
    ):
        stream = guard_stream(src.chunks(), idle_timeout=idle, on_timeout=src.unblock, clock=clock)
        try:
            list(stream)
        except BaseException as exc:  # observe what leaves the stream, then let it go on
            seen.append(exc)
            raise
    assert isinstance(seen[0], Cancelled)
    assert clock() == 0.2 and stream.stats.lifetime == 0.2
    assert stream.stats.ended_by == "deadline"
    assert src.unblocked == 1


def test_custom_idle_timeout_is_honoured(src: SocketSource) -> None:
    src.send(b"first")
    clock = FakeClock()
    stream = guard_stream(src.chunks(), idle_timeout=0.3, on_timeout=src.unblock, clock=clock)
    assert next(stream) == b"first"
    clock.advance(5)  # the consumer's own work: not idle time
    with driving(clock, 0.25, 0.05), pytest.raises(StreamIdleTimeout) as info:
        next(stream)
    assert clock() == 5.3
    assert info.value.idle_timeout == 0.3
    assert info.value.chunks_received == 1


def test_first_item_timeout_applies_before_the_first_item_then_idle_applies() -> None:
    clock = FakeClock()
    stall = threading.Event()

    def slow_start() -> Iterator[str]:
        clock.sleep(0.25)  # the scenario: slower than idle, faster than first_item_timeout
        yield "first"
        stall.wait(5)  # then a stall longer than idle (the driver moves the clock)
        yield "never"

    stream = guard_stream(slow_start(), idle_timeout=0.1, first_item_timeout=0.5, clock=clock)
    assert next(stream) == "first"
    with driving(clock, 0.1), pytest.raises(StreamIdleTimeout) as info:
        next(stream)
    assert info.value.idle_timeout == 0.1 and info.value.chunks_received == 1
    assert clock() == 0.35
    stall.set()
    stream.close()


def test_first_item_timeout_is_measured_from_creation_and_named_in_the_error(
    src: SocketSource,
) -> None:
    clock = FakeClock()
    stream = guard_stream(
        src.chunks(), idle_timeout=5, first_item_timeout=0.1, on_timeout=src.unblock, clock=clock
    )
    clock.advance(0.0625)  # the scenario: the caller sets up while the request is in flight
    with driving(clock, 0.0375), pytest.raises(StreamIdleTimeout) as info:
        next(stream)
    assert clock() == 0.1
    assert info.value.idle_timeout == 0.1
    assert "first_item_timeout=" in str(info.value)
    assert "no first item" in str(info.value)


def test_first_item_timeout_alone_works_with_idle_disabled(src: SocketSource) -> None:
    stream = guard_stream(
        src.chunks(), idle_timeout=None, first_item_timeout=0.1, on_timeout=src.unblock
    )
    with pytest.raises(StreamIdleTimeout):
        next(stream)


def test_an_error_the_reader_gets_after_the_consumer_gave_up_is_swallowed(
    failing_src: SocketSource,
) -> None:
    stream = guard_stream(failing_src.chunks(), idle_timeout=0.05, on_timeout=failing_src.unblock)
    with pytest.raises(StreamIdleTimeout):
        next(stream)
    # on_timeout shut the socket: the reader now raises ConnectionResetError, which nobody sees
    assert failing_src.closed.wait(1.0)
    assert wait_until_no_reader()
    stream.close()
    assert stream.stats.ended_by == "idle_timeout"
    # the conftest fixture fails the test if threading.excepthook fired


# -- errors, release, memory -----------------------------------------------------


def test_source_errors_reach_the_consumer_unchanged_after_the_preceding_items() -> None:
    boom = ConnectionResetError(errno.ECONNRESET, "reset by peer")

    def breaks() -> Iterator[int]:
        yield 1
        yield 2
        raise boom

    got: List[int] = []
    with pytest.raises(ConnectionResetError) as info:
        for item in guard_stream(breaks(), idle_timeout=1):
            got.append(item)
    assert info.value is boom
    assert got == [1, 2]


def test_a_reset_is_not_relabelled_as_a_timeout(failing_src: SocketSource) -> None:
    failing_src.send(b"x")
    stream = guard_stream(failing_src.chunks(), idle_timeout=1)
    assert next(stream) == b"x"
    failing_src.peer.shutdown(socket.SHUT_WR)
    with pytest.raises(ConnectionResetError):
        next(stream)
    assert stream.stats.ended_by == "error"


def test_break_inside_with_closes_the_source_in_the_reader_thread_and_joins_it() -> None:
    closed_in: List[str] = []

    def endless() -> Iterator[int]:
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed_in.append(threading.current_thread().name)

    with guard_stream(endless(), idle_timeout=1) as stream:
        for item in stream:
            if item == 10:
                break
    assert closed_in == [READER_THREAD_NAME]
    assert not readers_alive()
    assert stream.stats.ended_by == "closed"
    assert stream.stats.items == 11


def test_close_unblocks_a_reader_blocked_in_recv(src: SocketSource) -> None:
    stream = guard_stream(src.chunks(), idle_timeout=10, on_timeout=src.unblock)
    time.sleep(0.05)  # the scenario: the reader is blocked in recv
    started = time.monotonic()
    stream.close()
    assert time.monotonic() - started < 0.5
    assert src.unblocked == 1
    assert src.closed.is_set() and src.closed_in == READER_THREAD_NAME
    assert not readers_alive()
    stream.close()  # idempotent
    assert src.unblocked == 1
    assert stream.stats.ended_by == "closed"


def test_break_and_garbage_collection_release_the_reader_and_the_source(
    src: SocketSource,
) -> None:
    src.send(b"hello")
    for _ in guard_stream(src.chunks(), idle_timeout=10, on_timeout=src.unblock):
        break
    gc.collect()
    assert src.closed.wait(1.0)
    assert wait_until_no_reader()
    assert src.unblocked == 1


def test_an_abandoned_stream_never_iterated_releases_the_reader(src: SocketSource) -> None:
    guard_stream(src.chunks(), idle_timeout=10, on_timeout=src.unblock)
    gc.collect()
    assert src.closed.wait(1.0)
    assert wait_until_no_reader()


def test_close_from_another_thread_ends_a_waiting_consumers_loop(src: SocketSource) -> None:
    clock = FakeClock()
    stream = guard_stream(src.chunks(), idle_timeout=10, on_timeout=src.unblock, clock=clock)
    outcome: List[object] = []

    def consume() -> None:
        outcome.append(list(stream))

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert clock.wait_for_waiters()  # the scenario: the consumer is waiting for the first item
    stream.close()
    consumer.join(1.0)
    assert outcome == [[]]
    assert stream.stats.ended_by == "closed"


class ClosableSource:
    """An iterable (not an iterator) with its own close(), like a streamed HTTP response."""

    def __init__(self) -> None:
        self.closed = False

    def __iter__(self) -> Iterator[int]:
        return iter([1, 2, 3])

    def close(self) -> None:
        self.closed = True


def test_a_source_object_with_close_is_closed_too() -> None:
    source = ClosableSource()
    with guard_stream(source, idle_timeout=1) as stream:
        assert next(stream) == 1
    assert source.closed


def test_a_stream_kept_alive_by_the_for_loop_alone_keeps_running() -> None:
    got = [item for item in guard_stream(counting(5000), idle_timeout=1)]
    assert got == list(range(5000))


def test_a_slow_consumer_bounds_the_buffer_and_close_wakes_the_blocked_reader() -> None:
    produced = [0]
    closed = threading.Event()

    def firehose() -> Iterator[int]:
        try:
            while True:
                produced[0] += 1
                yield produced[0]
        finally:
            closed.set()

    stream = guard_stream(firehose(), idle_timeout=1, max_buffered=16)
    assert next(stream) == 1
    time.sleep(0.1)  # the scenario: the consumer is busy; the reader fills the buffer
    first_look = produced[0]
    time.sleep(0.1)
    assert produced[0] == first_look  # blocked on the full buffer, not growing
    assert first_look <= 16 * 2 + 1  # one batch in the consumer's hands + a full buffer
    stream.close()
    assert closed.is_set()
    assert not readers_alive()


def test_an_item_arriving_while_the_reader_is_mid_round_reaches_a_waiting_consumer_at_once(
    src: SocketSource,
) -> None:
    def burst_then_socket() -> Iterator[bytes]:
        yield from [b"burst"] * 50
        yield from src.chunks()

    sent_at: List[float] = []

    def send_late() -> None:
        time.sleep(0.2)  # the scenario: the consumer has drained the burst and waits
        sent_at.append(time.monotonic())
        src.send(b"late")

    stream = guard_stream(burst_then_socket(), idle_timeout=1.5, on_timeout=src.unblock)
    assert next(stream) == b"burst"
    time.sleep(0.05)  # the scenario: a busy consumer; the reader runs a bulk round into recv
    sender = threading.Thread(target=send_late)
    sender.start()
    try:
        assert [next(stream) for _ in range(49)] == [b"burst"] * 49
        assert next(stream) == b"late"
        latency = time.monotonic() - sent_at[0]
    finally:
        sender.join()
        stream.close()
    assert latency < 0.1


@pytest.mark.parametrize("max_buffered", [1, 2, 3, 5, 1024])
@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 6, 11, 3000])
def test_every_item_arrives_once_in_order_whatever_the_buffer_size(
    max_buffered: int, count: int
) -> None:
    stream = guard_stream(counting(count), idle_timeout=1, max_buffered=max_buffered)
    assert list(stream) == list(range(count))
    assert stream.stats.items == count and stream.stats.ended_by == "completed"


def test_random_interleavings_keep_order_and_lose_nothing() -> None:
    rng = random.Random(1234)
    for _ in range(30):
        count = rng.randrange(0, 400)
        pauses = {rng.randrange(0, 400) for _ in range(3)}

        def bursty(count: int = count, pauses: Set[int] = pauses) -> Iterator[int]:
            for i in range(count):
                if i in pauses:
                    time.sleep(0.002)  # the scenario: the source pauses mid-stream
                yield i

        got: List[int] = []
        for item in guard_stream(bursty(), idle_timeout=1, max_buffered=rng.choice([1, 2, 7, 64])):
            if item in pauses:
                time.sleep(0.002)  # the scenario: the consumer is busy now and then
            got.append(item)
        assert got == list(range(count))


def test_hand_off_loses_no_item_and_no_wake_up_when_threads_switch_at_every_step() -> None:
    """The reader's rounds and the consumer's waits interleave at the finest grain the
    interpreter allows (a 1 us switch interval): nothing is lost, nothing stalls until the
    idle limit (a lost wake-up would end a stream with StreamIdleTimeout)."""
    rng = random.Random(4321)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(40):
            count = rng.randrange(1, 300)
            ready = threading.Event()

            def trickle(count: int = count, ready: threading.Event = ready) -> Iterator[int]:
                for i in range(count):
                    if i % 37 == 5:
                        ready.wait(0.001)  # the scenario: a short block, the GIL released
                    yield i

            stream = guard_stream(trickle(), idle_timeout=5, max_buffered=rng.choice([1, 2, 3, 64]))
            assert list(stream) == list(range(count))
            assert stream.stats.ended_by == "completed" and stream.stats.lifetime < 5
    finally:
        sys.setswitchinterval(interval)


# -- the budget --------------------------------------------------------------------


def test_an_explicit_budget_ends_the_stream_with_deadline_exceeded(src: SocketSource) -> None:
    clock = FakeClock()
    budget = Budget(0.15, clock=clock)
    stream = guard_stream(
        src.chunks(), idle_timeout=None, budget=budget, on_timeout=src.unblock, clock=clock
    )
    with driving(clock, 0.125, 0.025), pytest.raises(DeadlineExceeded) as info:
        list(stream)
    assert clock() == 0.15 and info.value.elapsed == 0.15
    assert info.value.retryable is False
    assert stream.stats.ended_by == "deadline"
    assert src.unblocked == 1


def test_an_outer_scope_cancelled_passes_an_explicit_budget_untouched(src: SocketSource) -> None:
    seen: List[BaseException] = []
    with pytest.raises(DeadlineExceeded), deadline(0.1) as outer:
        stream = guard_stream(
            src.chunks(), idle_timeout=5, budget=Budget(10), on_timeout=src.unblock
        )
        try:
            list(stream)
        except BaseException as exc:  # observe what leaves the stream, then let it go on
            seen.append(exc)
            raise
    assert isinstance(seen[0], Cancelled) and seen[0].budget is outer


def test_cancel_from_another_thread_wakes_the_consumer_within_50_ms(src: SocketSource) -> None:
    budget = Budget(10)
    clock = FakeClock()  # the stream's idle limit, on which the consumer waits
    stream = guard_stream(
        src.chunks(), idle_timeout=5, budget=budget, on_timeout=src.unblock, clock=clock
    )
    cancelled_at: List[float] = []

    def cancel_soon() -> None:
        clock.wait_for_waiters(timeout=5)  # the scenario: the consumer waits when the cancel comes
        cancelled_at.append(time.monotonic())
        budget.cancel()

    canceller = threading.Thread(target=cancel_soon)
    canceller.start()
    try:
        with pytest.raises(OperationCancelled):
            next(stream)
        woke = time.monotonic() - cancelled_at[0]
    finally:
        canceller.join()
    assert woke < 0.05
    assert src.unblocked == 1


def test_the_budget_ends_a_stream_whose_consumer_never_waits() -> None:
    def endless() -> Iterator[int]:
        while True:
            yield 0

    with (
        pytest.raises(DeadlineExceeded),
        guard_stream(endless(), idle_timeout=1, budget=Budget(0.1)) as stream,
    ):
        for _ in stream:
            pass


def test_the_reader_runs_under_the_callers_scope() -> None:
    seen: List[Budget] = []

    def source() -> Iterator[int]:
        seen.append(current_budget())
        yield 1

    with deadline(5) as budget:
        assert list(guard_stream(source(), idle_timeout=1)) == [1]
    assert seen == [budget]


def test_a_cancelled_raised_by_a_library_wait_in_the_source_reaches_the_scope() -> None:
    def source() -> Iterator[int]:
        yield 1
        current_budget().sleep(5)
        yield 2

    got: List[int] = []
    with pytest.raises(DeadlineExceeded), deadline(0.1):
        for item in guard_stream(source(), idle_timeout=None):
            got.append(item)
    assert got == [1]


# -- hooks, stats, events, arguments -------------------------------------------------


def test_on_timeout_errors_are_logged_not_raised(
    src: SocketSource, caplog: pytest.LogCaptureFixture
) -> None:
    def bad_hook() -> None:
        src.unblock()
        raise RuntimeError("hook bug")

    stream = guard_stream(src.chunks(), idle_timeout=0.05, on_timeout=bad_hook)
    with pytest.raises(StreamIdleTimeout):
        next(stream)
    stream.close()
    assert src.unblocked == 1  # at most once, though close() came after the timeout
    assert "on_timeout hook raised" in caplog.text


def test_on_timeout_is_not_called_when_the_source_finished() -> None:
    calls: List[int] = []
    stream = guard_stream(counting(3), idle_timeout=1, on_timeout=lambda: calls.append(1))
    assert list(stream) == [0, 1, 2]
    stream.close()
    assert calls == []


def test_stats_while_running_and_after_completion() -> None:
    stream = guard_stream(counting(10), idle_timeout=1)
    assert next(stream) == 0
    running = stream.stats
    assert isinstance(running, StreamStats)
    assert running.ended_by is None and running.items == 1
    assert running.first_item_after is not None and running.first_item_after >= 0
    assert list(stream) == list(range(1, 10))
    done = stream.stats
    assert done.items == 10 and done.ended_by == "completed"
    assert done.lifetime >= done.first_item_after  # type: ignore[operator]
    with pytest.raises(dataclass_frozen_error()):
        done.items = 3  # type: ignore[misc]
    assert "completed" in repr(stream)


def dataclass_frozen_error() -> type:
    import dataclasses

    return dataclasses.FrozenInstanceError


def test_stats_of_a_fully_read_stream_closed_without_stopiteration_say_completed() -> None:
    with guard_stream(counting(2), idle_timeout=1) as stream:
        assert next(stream) == 0 and next(stream) == 1
        assert wait_until_no_reader()
    assert stream.stats.ended_by == "completed"


def test_stats_of_an_empty_source() -> None:
    stream = guard_stream(iter(()), idle_timeout=1)
    assert list(stream) == []
    assert stream.stats == StreamStats(0, None, stream.stats.lifetime, "completed")


def test_first_byte_and_stream_end_events_are_emitted() -> None:
    events: List[Event] = []
    unregister = add_listener(events.append)
    try:
        assert list(guard_stream(counting(3), idle_timeout=1)) == [0, 1, 2]
    finally:
        unregister()
    names = [e.event for e in events]
    assert names == ["first_byte", "stream_end"]
    assert events[0].first_byte_ms is not None and events[0].first_byte_ms >= 0
    assert events[1].reason == "completed" and events[1].chunks_received == 3


def test_next_and_for_share_one_position() -> None:
    stream = guard_stream(counting(5), idle_timeout=1)
    assert isinstance(stream, GuardedStream)
    assert next(stream) == 0
    assert list(stream) == [1, 2, 3, 4]
    with pytest.raises(StopIteration):
        next(stream)


def test_a_plain_iterable_source_works() -> None:
    assert list(guard_stream([1, 2, 3], idle_timeout=1)) == [1, 2, 3]


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"source": 5}, TypeError, "source"),
        ({"idle_timeout": "5"}, TypeError, "idle_timeout"),
        ({"idle_timeout": True}, TypeError, "idle_timeout"),
        ({"idle_timeout": float("nan")}, ValueError, "idle_timeout"),
        ({"first_item_timeout": "1"}, TypeError, "first_item_timeout"),
        ({"budget": 5}, TypeError, "budget"),
        ({"on_timeout": "close"}, TypeError, "on_timeout"),
        ({"max_buffered": 0}, ValueError, "max_buffered"),
        ({"max_buffered": 2.5}, TypeError, "max_buffered"),
        ({"max_buffered": True}, TypeError, "max_buffered"),
    ],
)
def test_bad_arguments_are_rejected_naming_the_parameter(
    kwargs: Any, error: type, name: str
) -> None:
    args: Any = {"source": [1], "idle_timeout": 1, **kwargs}
    with pytest.raises(error, match=name):
        guard_stream(args.pop("source"), **args)
    assert not readers_alive()


def test_a_reader_killed_by_a_base_exception_is_reported_not_hung(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: List[type] = []
    # The thread's own hook gets the SystemExit (it is not ours to catch); record it here.
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_type))

    def exits() -> Iterator[int]:
        yield 1
        raise SystemExit(3)

    stream = guard_stream(exits(), idle_timeout=5)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="reader thread ended without an outcome"):
        list(stream)
    assert time.monotonic() - started < 1.0
    assert stream.stats.ended_by == "error" and stream.stats.items == 1
    assert wait_until_no_reader()
    assert seen == [SystemExit]


def test_a_stuck_reader_is_left_behind_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()

    def stuck() -> Iterator[int]:
        release.wait(5)  # uninterruptible from outside: no on_timeout given
        yield 1

    caplog.set_level(logging.WARNING, logger="watchdog_sync")
    stream = guard_stream(stuck(), idle_timeout=10)
    started = time.monotonic()
    stream.close()
    assert 0.9 <= time.monotonic() - started < 1.6
    assert "still blocked" in caplog.text
    release.set()
    assert wait_until_no_reader()
