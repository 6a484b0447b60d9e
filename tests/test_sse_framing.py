"""EventFramer: complete events whatever the chunking, bounded, BOM-stripped."""

from __future__ import annotations

from typing import List

import pytest
import sseclient

from watchdog_sync import StreamProtocolError

from .internals import EventFramer

pytestmark = pytest.mark.timeout(20)

BODY = (
    b": comment\n\n"
    b"id: 1\nevent: delta\ndata: one\n\n"
    b"data: two\r\ndata: lines\r\n\r\n"
    b"data: three\r\rdata: four\n\n"
)


def _frame(body: bytes, size: int, limit: int = 1 << 20) -> List[bytes]:
    framer = EventFramer(limit)
    events: List[bytes] = []
    for start in range(0, len(body), size):
        events.extend(framer.feed(body[start : start + size]))
    return events


def _parse(events: List[bytes]) -> List[tuple]:
    return [(e.id, e.event, e.data) for e in sseclient.SSEClient(iter(events)).events()]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 4096])
def test_any_chunking_gives_the_same_events(size: int) -> None:
    """One-byte chunks included: CRLF and CR line ends split anywhere."""
    assert _parse(_frame(BODY, size)) == [
        ("1", "delta", "one"),
        (None, "message", "two\nlines"),
        (None, "message", "three"),
        (None, "message", "four"),
    ]


def test_events_are_delivered_as_soon_as_they_end() -> None:
    framer = EventFramer(1024)
    assert framer.feed(b"data: a\n") == []
    assert framer.feed(b"\ndata: b") == [b"data: a\n\n"]


def test_a_leading_bom_is_stripped_even_when_split() -> None:
    framer = EventFramer(1024)
    events = framer.feed(b"\xef\xbb") + framer.feed(b"\xbfdata: first\n\n")
    assert _parse(events) == [(None, "message", "first")]


def test_an_unfinished_event_at_eof_is_reported_not_delivered() -> None:
    framer = EventFramer(1024)
    assert framer.feed(b"data: whole\n\ndata: half") == [b"data: whole\n\n"]
    assert framer.truncated()
    clean = EventFramer(1024)
    clean.feed(b"data: whole\n\n\n")
    assert not clean.truncated()


def test_a_line_longer_than_the_limit_fails_without_buffering_more() -> None:
    framer = EventFramer(1024)
    framer.feed(b"data: " + b"x" * 1000)
    with pytest.raises(StreamProtocolError) as info:
        framer.feed(b"x" * 100)
    assert info.value.reason == "event_too_large"
    assert "max_event_bytes=1024" in str(info.value)


def test_a_complete_event_larger_than_the_limit_in_one_chunk_fails() -> None:
    with pytest.raises(StreamProtocolError):
        EventFramer(100).feed(b"data: " + b"y" * 200 + b"\n\n")


def test_bad_limits_are_programmer_errors() -> None:
    with pytest.raises(TypeError):
        EventFramer(True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 64"):
        EventFramer(10)


def test_sseclient_still_reads_events_through_its_read_method() -> None:
    """Fails loudly if sseclient-py changes the hook stream_sse's parser relies on."""
    import inspect

    assert "self._read()" in inspect.getsource(sseclient.SSEClient.events)


def test_a_piece_without_a_blank_line_is_held_back_even_on_the_fast_path() -> None:
    """Regression: a one-byte read once passed as a whole event."""
    framer = EventFramer(1024)
    assert framer.feed(b"data: a\n\n") == [b"data: a\n\n"]
    assert framer.feed(b"d") == []
    assert framer.feed(b"ata: b\n\n") == [b"data: b\n\n"]


@pytest.mark.parametrize(
    "large",
    [b"data: " + b"x" * 100, b"data: " + b"x" * 100 + b"\n\n"],
    ids=["unfinished", "complete"],
)
def test_events_before_a_too_large_one_in_the_same_read_come_first(large: bytes) -> None:
    """Regression (found by fuzzing): they were lost when one read also held the large event."""
    framer = EventFramer(64)
    assert framer.feed(b"data: a\n\ndata: b\n\n" + large) == [b"data: a\n\n", b"data: b\n\n"]
    with pytest.raises(StreamProtocolError) as info:
        framer.check()
    assert info.value.reason == "event_too_large"
    with pytest.raises(StreamProtocolError):
        framer.feed(b"data: c\n\n")  # nothing more after the error


def test_check_is_silent_while_nothing_went_wrong() -> None:
    framer = EventFramer(64)
    framer.feed(b"data: a\n\n")
    framer.check()
