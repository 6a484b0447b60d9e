"""Fuzzing the SSE path: framer + sseclient-py against a reference parse of the WHATWG spec.

Random streams split at random byte boundaries must give exactly the events a
reference parser (written here from the spec) finds in the whole body; garbage,
invalid UTF-8, NUL bytes, giant lines and truncated streams must end in events
or a documented ``WatchdogError``, with bounded time and memory.

The reference follows the spec's "interpreting an event stream" section, aligned
with what docs/streaming.md documents where sseclient-py differs on purpose:
``id`` and ``retry`` belong to the event that carries them (the spec keeps the
last event ID across events, ignores an ``id`` containing NUL and keeps
``retry`` as a stream setting, digits only).
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
import tracemalloc
import types
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
import sseclient
from hypothesis import event, given, settings
from hypothesis import strategies as st

import watchdog_sync as ws
from watchdog_sync import SSEStream, stream_sse

from .internals import EventFramer, _chunks, parse_events
from .rawserver import RawServer, read_request_head, send_sse_head, wait_for_disconnect

pytestmark = pytest.mark.timeout(60)

Parsed = Tuple[Optional[str], str, str, Optional[str]]  # id, event, data, retry

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile("\r\n|\r|\n")

# -- the reference parser -------------------------------------------------------


def reference_parse(body: bytes) -> Tuple[List[Parsed], bool]:
    """The events of a whole, valid UTF-8 body, and whether a half event was left at EOF."""
    text = body.decode("utf-8")
    if text.startswith("\ufeff"):
        text = text[1:]  # one leading BOM only
    lines = _LINE_END.split(text)
    unterminated = lines.pop()  # a line without its end is never processed
    events: List[Parsed] = []
    data, event_type = "", ""
    event_id: Optional[str] = None
    retry: Optional[str] = None
    pending = False
    for line in lines:
        if line == "":  # a blank line dispatches
            if data:  # an event with an empty data buffer is not dispatched
                events.append((event_id, event_type or "message", data[:-1], retry))
            data, event_type, event_id, retry = "", "", None, None
            pending = False
            continue
        pending = True
        if line.startswith(":"):
            continue  # a comment
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data += value + "\n"
        elif field == "event":
            event_type = value
        elif field == "id":
            event_id = value  # spec: ignored if it contains NUL; kept across events
        elif field == "retry":
            retry = value  # spec: digits only, a stream setting rather than an event's
        # any other field is ignored
    return events, pending or unterminated != ""


# -- the pipeline under test, without sockets -------------------------------------


class _Reads:
    """Stands in for the http.client response under urllib3: each read1 returns one piece."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self._pieces = iter([p for p in pieces if p])  # an empty read means EOF

    def read1(self, size: int) -> bytes:
        piece = next(self._pieces, b"")
        assert len(piece) <= size
        return piece


def framed_parse(
    pieces: Sequence[bytes], max_event_bytes: int = 1 << 20, into: Optional[List[Parsed]] = None
) -> Tuple[List[Parsed], bool]:
    """What stream_sse's body reader does with these reads: framer, then the parse of
    each event (sseclient-py's, or the same made directly for a one-line ``data:`` event).

    Events go to ``into`` as they are parsed, so a caller still has them after an error.
    """
    raw = http.client.HTTPResponse.__new__(http.client.HTTPResponse)
    raw.fp = _Reads(pieces)  # type: ignore[assignment]
    raw.chunked, raw.length = False, None  # close-delimited: the body is every read until EOF
    response: Any = types.SimpleNamespace(raw=types.SimpleNamespace(_fp=raw))
    stream = SSEStream()
    chunks = _chunks(response, EventFramer(max_event_bytes), lambda: stream, ws.Budget())
    parsed = [] if into is None else into
    for chunk in chunks:
        for e in parse_events([chunk]):
            parsed.append((e.id, e.event, e.data, e.retry))
    return parsed, stream.truncated


def split_at(body: bytes, cuts: Sequence[int]) -> List[bytes]:
    bounds = [0, *sorted(cuts), len(body)]
    return [body[a:b] for a, b in zip(bounds, bounds[1:])]


# -- random streams -----------------------------------------------------------------

_ODD_CHARS = [":", " ", "\t", "\x00", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\ufeff", "é", "😀"]
_value = st.one_of(
    st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12),
    st.lists(st.sampled_from(_ODD_CHARS), max_size=4).map("".join),
    st.integers(0, 150).map(lambda n: "v" * n),  # long lines, for the size limit
)
_field_name = st.sampled_from(
    ["data", "data", "data", "id", "event", "retry", "foo", "Data", " data", "data "]
)
_separator = st.sampled_from([":", ": ", ":  ", ""])  # "" is a field without a colon


@st.composite
def _line(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["field", "field", "field", "comment", "whitespace"]))
    if kind == "comment":
        return ":" + draw(_value)
    if kind == "whitespace":
        return draw(st.sampled_from([" ", "\t", "  \t", "\ufeff"]))
    name, sep = draw(_field_name), draw(_separator)
    return name + sep + draw(_value) if sep else name


_line_end = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def sse_bodies(draw: st.DrawFn) -> bytes:
    """A stream: optional BOM, blocks of lines each ended by a blank line, maybe a half event."""
    parts: List[str] = []
    for _ in range(draw(st.integers(0, 6))):
        for _ in range(draw(st.integers(0, 4))):
            parts.append(draw(_line()) + draw(_line_end))
        parts.append(draw(_line_end))  # the blank line (a lone LF after a CR merges into a CRLF)
    tail = draw(st.sampled_from(["none", "none", "half_event", "half_line"]))
    if tail == "half_event":
        parts.append(draw(_line()) + draw(_line_end))
    elif tail == "half_line":
        parts.append(draw(_line()))
    body = "".join(parts).encode("utf-8")
    return _BOM + body if draw(st.booleans()) else body


@st.composite
def split_bodies(draw: st.DrawFn) -> Tuple[bytes, List[bytes]]:
    body = draw(sse_bodies())
    cuts = draw(st.lists(st.integers(0, len(body)), max_size=12))
    return body, split_at(body, cuts)


@st.composite
def one_byte_or_random_split(draw: st.DrawFn) -> Tuple[bytes, List[bytes]]:
    body, pieces = draw(split_bodies())
    if draw(st.integers(0, 4)) == 0:
        pieces = [body[i : i + 1] for i in range(len(body))]
    return body, pieces


# -- 1. framer + sseclient-py == the reference ----------------------------------------


@settings(max_examples=600, deadline=None)
@given(one_byte_or_random_split())
def test_any_split_of_a_random_stream_gives_the_reference_events(
    case: Tuple[bytes, List[bytes]],
) -> None:
    body, pieces = case
    assert framed_parse(pieces) == reference_parse(body)


@settings(max_examples=200, deadline=None)
@given(sse_bodies())
def test_the_whole_body_in_one_read_gives_the_reference_events(body: bytes) -> None:
    assert framed_parse([body]) == reference_parse(body)


def _sseclient_or_error(raw: bytes) -> object:
    try:
        return [(e.id, e.event, e.data, e.retry) for e in _SSEClientOver(iter([raw])).events()]
    except UnicodeDecodeError as exc:
        return ("UnicodeDecodeError", str(exc))


def _parsed_or_error(raw: bytes) -> object:
    try:
        return [(e.id, e.event, e.data, e.retry) for e in parse_events([raw])]
    except UnicodeDecodeError as exc:
        return ("UnicodeDecodeError", str(exc))


class _SSEClientOver(sseclient.SSEClient):
    """sseclient-py's own field parser over framed events: the reference ours must match."""

    _event_source: Iterator[bytes]

    def _read(self) -> Iterator[bytes]:
        return self._event_source


_framed_events = st.one_of(
    st.binary(max_size=40).map(lambda b: b"data:" + b.replace(b"\n", b"").replace(b"\r", b"")),
    st.binary(max_size=40).map(lambda b: b"data: " + b.replace(b"\r", b"")),
    st.sampled_from([b"data", b"data:", b"data: ", b"data:  x", b":data: x", b"event: x\ndata: y"]),
    st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"")),
).map(lambda body: body.rstrip(b"\n") + b"\n\n")  # as the framer hands them on


_event_line = st.one_of(
    st.sampled_from(
        [
            b"data",
            b"data:",
            b"data: ",
            b"data:x",
            b"data: x",
            b"data:  x",
            b": c",
            b":",
            b" ",
            b"event",
            b"event: e",
            b"event:f",
            b"id: 7",
            b"id",
            b"retry: 5",
            b"datax: y",
            b"data\t",
            b" data: x",
            b"\x0b",
            b"data: data: x",
            b"data:\xc3\xa9",
            b"data: \xff",
        ]
    ),
    st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")),
)
_multi_line_events = (
    st.lists(_event_line, min_size=1, max_size=12)
    .map(lambda lines: b"\n".join(lines).lstrip(b"\n") + b"\n\n")
    .filter(lambda raw: b"\n\n" not in raw[:-2])
)


@settings(max_examples=1000, deadline=None)
@given(_multi_line_events)
def test_an_event_of_many_lines_parses_as_sseclient_parses_it(raw: bytes) -> None:
    """Any mix of field, comment and odd lines: the fields (or the UnicodeDecodeError)
    sseclient-py makes of the event, from the linear parse."""
    assert _parsed_or_error(raw) == _sseclient_or_error(raw)


@settings(max_examples=200, deadline=None)
@given(st.lists(_multi_line_events, min_size=2, max_size=4))
def test_held_back_events_in_front_of_a_data_event_parse_one_by_one(
    raws: List[bytes],
) -> None:
    """Several whole events in one item (pings held in front of a data event): each is
    parsed as sseclient-py parses it alone."""
    joined = _parsed_or_error(b"".join(raws))
    alone = [_parsed_or_error(raw) for raw in raws]
    errors = [e for e in alone if isinstance(e, tuple)]
    if errors:
        assert joined == errors[0]
    else:
        assert joined == [event for events in alone for event in events]  # type: ignore[union-attr]


@settings(max_examples=500, deadline=None)
@given(_framed_events)
def test_the_direct_parse_of_a_data_line_is_sseclients_parse(raw: bytes) -> None:
    """A one-line ``data:`` event made without sseclient-py's generators is the event (or the
    UnicodeDecodeError) sseclient-py makes of it; any other event is sseclient-py's own."""
    assert _parsed_or_error(raw) == _sseclient_or_error(raw)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"data: a\r", ([], True)),  # a CR at EOF ends the line, but no blank line follows
        (b"data: a\r\r", ([(None, "message", "a", None)], False)),
        (b"data: a\r\n\r", ([(None, "message", "a", None)], False)),
        (b"data: a\n \n\n", ([(None, "message", "a", None)], False)),  # a space line is a field
        (b"id: 1\n\ndata: b\n\n", ([(None, "message", "b", None)], False)),  # id not kept
        (b"data\n\n", ([(None, "message", "", None)], False)),
        (b"event: x\n\n", ([], False)),
        (b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n", ([], False)),  # only one BOM is stripped
    ],
)
def test_reference_corner_cases(body: bytes, expected: Tuple[List[Parsed], bool]) -> None:
    """The reference parser itself, on cases whose answer the spec states outright."""
    assert reference_parse(body) == expected
    assert framed_parse([body[i : i + 1] for i in range(len(body))]) == expected


def _normalized(body: bytes) -> bytes:
    body = body[len(_BOM) :] if body.startswith(_BOM) else body
    return body.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


@settings(max_examples=300, deadline=None)
@given(one_byte_or_random_split(), st.integers(64, 200))
def test_a_small_limit_stops_the_stream_only_after_every_event_before_the_large_one(
    case: Tuple[bytes, List[bytes]], limit: int
) -> None:
    """Whatever the chunking: the events before the first too-large one, then event_too_large."""
    body, pieces = case
    blocks = _normalized(body).split(b"\n\n")  # how the framer cuts events (each + b"\n\n")
    sizes = [len(b) + 2 for b in blocks[:-1]] + [len(blocks[-1])]
    first_large = next((i for i, size in enumerate(sizes) if size > limit), None)
    got: List[Parsed] = []
    if first_large is None:
        assert framed_parse(pieces, limit)[0] == reference_parse(body)[0]
        return
    with pytest.raises(ws.StreamProtocolError) as info:
        framed_parse(pieces, limit, into=got)
    assert info.value.reason == "event_too_large"
    before = b"".join(b + b"\n\n" for b in blocks[:first_large])
    assert got == reference_parse(before)[0]


# -- 2. end to end through stream_sse over real sockets ---------------------------------


class _Plans:
    """Bodies to serve, each under its own path; one RawServer serves all examples of a test."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: Dict[str, Tuple[List[bytes], str, str]] = {}
        self._count = 0

    def add(self, pieces: List[bytes], framing: str, ending: str) -> str:
        with self._lock:
            self._count += 1
            path = f"/case/{self._count}"
            self._plans[path] = (pieces, framing, ending)
        return path

    def handler(self, conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        path = head.split(b" ", 2)[1].decode() if head.count(b" ") >= 2 else ""
        with self._lock:
            pieces, framing, ending = self._plans.pop(path)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        send_sse_head(conn, framing)
        for piece in pieces:
            if stop.is_set():
                return
            _send_piece(conn, piece, framing)
        if ending == "clean" and framing == "chunked":
            conn.sendall(b"0\r\n\r\n")
        elif ending == "cut" and framing == "chunked":
            conn.sendall(b"5\r\nab")  # a chunk cut short, then the connection closes
        elif ending == "hold":
            wait_for_disconnect(conn, stop)


def _send_piece(conn: socket.socket, piece: bytes, framing: str) -> None:
    """One piece as its own HTTP chunk (empty pieces skipped) or raw bytes; no copy of it."""
    if not piece:
        return
    if framing == "chunked":
        conn.sendall(b"%x\r\n" % len(piece))
        conn.sendall(piece)
        conn.sendall(b"\r\n")
    else:
        conn.sendall(piece)


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_random_streams_end_to_end_give_the_reference_events(framing: str) -> None:
    plans = _Plans()
    with RawServer(plans.handler, max_connections=1000) as server:

        @settings(max_examples=40, deadline=None)
        @given(split_bodies())
        def check(case: Tuple[bytes, List[bytes]]) -> None:
            body, pieces = case
            expected, truncated = reference_parse(body)
            path = plans.add(pieces, framing, "clean")
            stream = stream_sse(server.url + path, idle_timeout=5)
            got = [(e.id, e.event, e.data, e.retry) for e in stream]
            assert got == expected
            assert stream.truncated is truncated
            assert stream.stats.ended_by == "completed"

        check()


def test_a_chunked_body_cut_short_gives_its_events_then_a_transport_error() -> None:
    plans = _Plans()
    with RawServer(plans.handler, max_connections=1000) as server:

        @settings(max_examples=25, deadline=None)
        @given(split_bodies())
        def check(case: Tuple[bytes, List[bytes]]) -> None:
            body, pieces = case
            path = plans.add(pieces, "chunked", "cut")
            got: List[Parsed] = []
            with pytest.raises(ws.TransportError):
                for e in stream_sse(server.url + path, idle_timeout=5):
                    got.append((e.id, e.event, e.data, e.retry))
            assert got == reference_parse(body)[0]

        check()


# -- 3. garbage: events or a documented error, bounded --------------------------------

_ALLOWED_REASONS = {"event_too_large", "malformed_event"}


def _garbage_piece() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=64),
        st.sampled_from(
            [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\x00\x00\n", b"\r", b"\n\n", b"\xef\xbb"]
        ),
        st.builds(lambda s: b"data: " + s + b"\n\n", st.binary(max_size=16)),
        st.builds(lambda n: b"x" * n, st.integers(0, 3000)),
        split_bodies().map(lambda case: case[0]),
    )


garbage_streams = st.lists(_garbage_piece(), max_size=10)


def _outcome(pieces: Sequence[bytes], max_event_bytes: int) -> str:
    try:
        framed_parse(pieces, max_event_bytes)
    except ws.StreamProtocolError as exc:
        assert exc.reason == "event_too_large"
        return exc.reason
    except UnicodeDecodeError:
        return "malformed_event"  # stream_sse turns this into StreamProtocolError (tested below)
    return "events"


@settings(max_examples=400, deadline=None)
@given(garbage_streams, st.sampled_from([64, 100, 1000, 1 << 20]))
def test_garbage_through_the_framer_gives_events_or_a_documented_error(
    pieces: List[bytes], max_event_bytes: int
) -> None:
    outcome = _outcome(pieces, max_event_bytes)
    event(outcome)
    assert outcome in {"events", *_ALLOWED_REASONS}


def test_garbage_end_to_end_gives_events_or_a_documented_watchdog_error() -> None:
    plans = _Plans()
    with RawServer(plans.handler, max_connections=1000) as server:

        @settings(max_examples=60, deadline=None)
        @given(
            garbage_streams,
            st.sampled_from(["chunked", "close"]),
            st.sampled_from(["clean", "cut"]),
            st.sampled_from([64, 4096, 1 << 20, 1 << 20]),
        )
        def check(pieces: List[bytes], framing: str, ending: str, limit: int) -> None:
            path = plans.add(pieces, framing, ending)
            started = time.monotonic()
            outcome = "events"
            try:
                for e in stream_sse(server.url + path, idle_timeout=5, max_event_bytes=limit):
                    assert isinstance(e.data, str)
            except ws.StreamProtocolError as exc:
                outcome = exc.reason
                assert exc.reason in _ALLOWED_REASONS
            except ws.TransportError:
                outcome = "transport"
                assert framing == "chunked" and ending == "cut"
            event(outcome)
            assert outcome != "events" or (framing, ending) != ("chunked", "cut")
            assert time.monotonic() - started < 5

        check()


def test_a_stream_that_stalls_after_garbage_ends_by_the_idle_timeout() -> None:
    plans = _Plans()
    with RawServer(plans.handler, max_connections=100) as server:

        @settings(max_examples=6, deadline=None)
        @given(garbage_streams, st.sampled_from(["chunked", "close"]))
        def check(pieces: List[bytes], framing: str) -> None:
            path = plans.add(pieces, framing, "hold")
            started = time.monotonic()
            try:
                for _ in stream_sse(server.url + path, idle_timeout=0.3, max_event_bytes=1000):
                    pass
            except ws.StreamProtocolError as exc:
                assert exc.reason in _ALLOWED_REASONS
            except ws.StreamIdleTimeout:
                pass
            else:
                pytest.fail("a held-open stream cannot complete")
            assert time.monotonic() - started < 3

        check()


@settings(max_examples=15, deadline=None)
@given(st.binary(min_size=1, max_size=200))
def test_garbage_instead_of_an_http_response_is_a_watchdog_error(garbage: bytes) -> None:
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(garbage)

    with RawServer(answer) as server, pytest.raises(ws.WatchdogError):
        list(stream_sse(server.url, idle_timeout=2))


# -- 4. giant lines: memory stays bounded ------------------------------------------

_MAX_EVENT = 64 * 1024
_GIANT = b"y" * (1 << 20)  # built before any tracing: the server sends views of it


def _giant_handler(conn: socket.socket, stop: threading.Event) -> None:
    head = read_request_head(conn)
    line = head.split(b"\r\n", 1)[0].split(b" ")[1]  # /<framing>/<prefix>/<bytes>/<piece>
    _, framing, prefix, size, piece = line.decode().split("/")
    send_sse_head(conn, framing)
    _send_piece(conn, {"data": b"data: ", "comment": b":", "field": b"x"}[prefix], framing)
    view = memoryview(_GIANT)[: int(size)]
    step = int(piece)
    for start in range(0, len(view), step):
        if stop.is_set():
            return
        _send_piece(conn, view[start : start + step], framing)  # type: ignore[arg-type]
    if framing == "chunked":
        conn.sendall(b"0\r\n\r\n")


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_giant_lines_fail_with_bounded_memory(framing: str) -> None:
    with RawServer(_giant_handler, max_connections=100) as server:

        @settings(max_examples=8, deadline=None)
        @given(
            st.sampled_from(["data", "comment", "field"]),
            st.integers(_MAX_EVENT + 1, len(_GIANT)),
            st.sampled_from([1000, 8192, 65536, 300_000]),
        )
        def check(prefix: str, size: int, piece: int) -> None:
            tracemalloc.start()
            try:
                with pytest.raises(ws.StreamProtocolError) as info:
                    url = f"{server.url}/{framing}/{prefix}/{size}/{piece}"
                    list(stream_sse(url, idle_timeout=5, max_event_bytes=_MAX_EVENT))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert info.value.reason == "event_too_large"
            event(f"peak under {-(-peak // 65536) * 64} KiB")
            assert peak < _MAX_EVENT * 3 + (1 << 20)

        check()
