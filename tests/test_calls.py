"""call_start / call_end: where each observed call begins and ends, with ids that nest."""

from __future__ import annotations

import gc
import logging
from typing import Iterator, List

import pytest

import watchdog_sync as ws
from watchdog_sync import Event, add_listener
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(30)

FAST = ws.RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=0.0)
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
def seen() -> Iterator[List[Event]]:
    events: List[Event] = []
    unregister = add_listener(events.append)
    try:
        yield events
    finally:
        unregister()


def test_nested_calls_name_their_parent_and_inner_events_carry_the_inner_id(
    seen: List[Event],
) -> None:
    def inner() -> str:
        return ws.retry_call(lambda: "ok", stage="inner", nested="independent")

    assert ws.retry_call(inner, stage="outer") == "ok"
    starts = {e.stage: e for e in seen if e.event == "call_start"}
    outer, nested = starts["outer"], starts["inner"]
    assert outer.parent_id is None and nested.parent_id == outer.call_id
    assert outer.operation == nested.operation == "retry"
    inner_attempts = [e for e in seen if e.event == "attempt_start" and e.stage == "inner"]
    assert [e.call_id for e in inner_attempts] == [nested.call_id]
    ends = [e for e in seen if e.event == "call_end"]
    assert [e.call_id for e in ends] == [nested.call_id, outer.call_id]  # inner ends first
    assert all(e.error_type is None and e.attempt == 1 for e in ends)


def test_nothing_is_emitted_and_no_id_taken_while_nobody_observes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="watchdog_sync")
    ws.retry_call(lambda: None, stage="quiet")
    assert [r for r in caplog.records if getattr(r, "event", None) == "call_start"] == []


def test_a_stream_makes_no_event_at_all_while_nobody_observes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Events cost their making: a stream nobody watches makes none (no ``first_byte``, no
    ``stream_end``, no call boundaries), and one somebody watches makes them all."""
    caplog.set_level(logging.INFO, logger="watchdog_sync")
    made: List[str] = []
    real_init = Event.__init__

    def counted(self: Event, event: str, **fields: object) -> None:
        made.append(event)
        real_init(self, event, **fields)  # type: ignore[arg-type]

    monkeypatch.setattr(Event, "__init__", counted)
    with FaultGateway() as gw:
        url = gw.base_url("ok") + "/chat/completions"
        with ws.deadline(10), ws.stream_sse(url, json={"stream": True}) as events:
            assert sum(1 for _ in events) >= 2
        assert made == []
        seen: List[Event] = []
        unregister = add_listener(seen.append)
        try:
            with ws.stream_sse(url, json={"stream": True}) as events:
                assert sum(1 for _ in events) >= 2
        finally:
            unregister()
    assert {"first_byte", "stream_end"} <= set(made)
    names = [e.event for e in seen]
    assert names[0] == "call_start" and names[-1] == "call_end"
    assert {"first_byte", "stream_end"} <= set(names)


def test_a_chat_streams_call_ends_once_with_its_outcome(seen: List[Event]) -> None:
    with FaultGateway() as gw, ws.ChatClient(gw.base_url("ok"), model="m", retry=FAST) as c:
        with c.stream(HELLO) as stream:
            chunks = sum(1 for _ in stream)
        stream.close()  # again: no second call_end
    [start] = [e for e in seen if e.event == "call_start" and e.operation == "chat_stream"]
    [end] = [e for e in seen if e.event == "call_end" and e.call_id == start.call_id]
    assert start.model == "m" and start.server_address == "127.0.0.1"
    assert start.server_port == gw.port and start.idle_timeout_ms == 120_000.0
    assert end.reason == "completed" and end.finish_reason == "stop"
    assert end.chunks_received == chunks and end.attempt == 1
    assert end.first_byte_ms is not None and end.last_chunk_ms is not None
    assert 0 < end.first_byte_ms <= end.last_chunk_ms <= (end.elapsed_ms or 0)
    reader = [e for e in seen if e.event == "first_byte"]
    assert reader and all(e.call_id is not None for e in reader)  # the reader thread's too


def test_a_chat_calls_own_retry_loop_is_part_of_its_call(seen: List[Event]) -> None:
    """No ``retry`` call inside a chat call: its attempts carry the chat call's id."""
    with FaultGateway() as gw:
        client = ws.ChatClient(
            gw.base_url("http429_then_ok", retry_after="0"), model="m", retry=FAST
        )
        with client:
            client.complete(HELLO)
    assert [e.operation for e in seen if e.event == "call_start"] == ["chat"]
    [start] = [e for e in seen if e.event == "call_start"]
    attempts = [e for e in seen if e.event == "attempt_start"]
    assert [e.attempt for e in attempts] == [1, 2]
    assert {e.call_id for e in attempts} == {start.call_id}
    [end] = [e for e in seen if e.event == "call_end"]
    assert end.call_id == start.call_id and end.error_type is None
    ws.retry_call(lambda: None, stage="alone")  # outside a chat call: a call of its own
    assert [e.operation for e in seen if e.event == "call_start"] == ["chat", "retry"]


def test_a_collected_stream_ends_its_call_as_abandoned(seen: List[Event]) -> None:
    with (
        FaultGateway() as gw,
        ws.ChatClient(gw.base_url("ok", chunks=50, interval=0.01), model="m", retry=FAST) as c,
    ):
        stream = c.stream(HELLO)
        next(stream)
        del stream
        gc.collect()
    [end] = [e for e in seen if e.event == "call_end" and e.operation == "chat_stream"]
    assert end.reason == "abandoned" and end.error_type is None


def test_an_outer_scopes_end_mid_stream_ends_the_call_with_its_reason(seen: List[Event]) -> None:
    with FaultGateway() as gw:
        client = ws.ChatClient(gw.base_url("slow_drip", interval=0.05), model="m", retry=FAST)
        with client, pytest.raises(ws.DeadlineExceeded), ws.deadline(0.4):
            for _ in client.stream(HELLO):
                pass
    [end] = [e for e in seen if e.event == "call_end" and e.operation == "chat_stream"]
    assert end.error_type == end.reason == "deadline_exceeded"
    assert (end.chunks_received or 0) > 0
