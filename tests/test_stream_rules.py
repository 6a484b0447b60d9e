"""One set of stream rules on every path: a stream that only pings ends at its idle limit
through stream_sse, ChatClient and httpx_client() alike (pings are not activity)."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
import zlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import anthropic
import httpx2
import openai
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .internals import Activity, EventWatch, is_activity
from .rawserver import RawServer, chunk, read_request_head

pytestmark = pytest.mark.timeout(30)

IDLE = 0.5
BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _through_stream_sse(base: str) -> None:
    for _ in ws.stream_sse(base + "/chat/completions", json=BODY, idle_timeout=IDLE):
        pass


def _through_chat_client(base: str) -> None:
    client = ws.ChatClient(base, "sk-test", idle_timeout=IDLE, retry=ws.RetryPolicy(max_attempts=1))
    for _ in client.stream([{"role": "user", "content": "hi"}], model="m"):
        pass


def _through_httpx_client(base: str) -> None:
    client = ws.httpx_client(idle_timeout=IDLE)
    try:
        with client.stream("POST", base + "/chat/completions", json=BODY) as response:
            for _ in response.iter_bytes():
                pass
    finally:
        client.close()


PATHS: Dict[str, Callable[[str], None]] = {
    "stream_sse": _through_stream_sse,
    "ChatClient": _through_chat_client,
    "httpx_client": _through_httpx_client,
}
# Outside a retry owner the transport sends a stream silent before its first event again,
# at most twice (documented): each send ends at the idle limit.
SENDS = {"stream_sse": 1, "ChatClient": 1, "httpx_client": 3}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_ping_only_stream_ends_at_the_idle_limit_on_every_path(
    fault_gateway: FaultGateway, path: str
) -> None:
    """Pings every 50 ms, never data: StreamIdleTimeout at the idle limit of each send, not at
    the deadline."""
    base = fault_gateway.base_url("pings_only", interval=0.05)
    started = time.monotonic()
    with pytest.raises(ws.WatchdogError) as info, ws.deadline(10):
        PATHS[path](base)
    elapsed = time.monotonic() - started
    error = info.value
    if isinstance(error, ws.RetryExhausted):
        error = error.last_error  # type: ignore[assignment]
    assert isinstance(error, ws.StreamIdleTimeout), repr(error)
    sends = SENDS[path]
    assert sends * IDLE * 0.8 <= elapsed < sends * IDLE + 2.0
    assert len(fault_gateway.requests_seen(base)) == sends


def test_stream_sse_hands_anthropics_keep_alive_on_in_order(
    fault_gateway: FaultGateway,
) -> None:
    """A keep-alive ping is no activity, and still delivered to a stream_sse consumer."""
    base = fault_gateway.base_url("ok", api="anthropic")
    body = {"model": "m", "stream": True, "max_tokens": 8, "messages": BODY["messages"]}
    names = [e.event for e in ws.stream_sse(base + "/v1/messages", json=body, idle_timeout=5)]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-1] == "message_stop"


def test_httpx2_is_the_library_under_test() -> None:
    """The httpx_client() path above runs on httpx2 (the SDKs' library)."""
    assert isinstance(ws.httpx_client(), httpx2.Client)


# -- the rows of issue 36's table: each failed on the code before it --------------------------

KEY = "sk-test-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "hi"}]
KEEPALIVE = b'event: ping\ndata: {"type": "ping"}\n\n'
MESSAGE_START = (
    b'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", '
    b'"type": "message", "role": "assistant", "content": [], "model": "m", '
    b'"stop_reason": null, "stop_sequence": null, '
    b'"usage": {"input_tokens": 1, "output_tokens": 0}}}\n\n'
)
DONE = b"data: [DONE]\n\n"


def _chunk(index: int, content: str, finish: Optional[str] = None) -> bytes:
    choice = {"index": index, "delta": {"content": content}, "finish_reason": finish}
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _serve(
    pieces: Iterable[bytes], *, gap: float = 0.0, hold: bool = False, gzipped: bool = False
) -> RawServer:
    """Each connection: an event stream's head, the pieces (``gap`` apart, each its own HTTP
    chunk; gzipped, each flushed so that it decodes at once), then its end, or held open."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        if gzipped:
            head += b"Content-Encoding: gzip\r\n"
        conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        for piece in pieces:
            if gzipped:
                piece = packer.compress(piece) + packer.flush(zlib.Z_SYNC_FLUSH)
            conn.sendall(chunk(piece))
            if gap and stop.wait(gap):
                return
        if hold:
            stop.wait(10)
            return
        if gzipped:
            conn.sendall(chunk(packer.flush()))
        conn.sendall(b"0\r\n\r\n")

    return RawServer(handler)


def _ours(error: BaseException) -> BaseException:
    """Our error inside an SDK's wrapper (anthropic >= 2.17 wraps it as its cause)."""
    seen: Optional[BaseException] = error
    while seen is not None:
        if isinstance(seen, ws.WatchdogError):
            if isinstance(seen, ws.RetryExhausted) and seen.last_error is not None:
                return seen.last_error
            return seen
        seen = seen.__cause__ or seen.__context__
    return error


def _sse_events(url: str, **options: Any) -> List[Tuple[str, str]]:
    with ws.stream_sse(url, json=BODY, **options) as stream:
        return [(event.event, event.data) for event in stream]


def _http(**options: Any) -> httpx2.Client:
    """httpx_client(); an httpx2.Client on HTTPXTransport where ``max_event_bytes`` is set
    (httpx_client() does not take it yet)."""
    if "max_event_bytes" in options:
        return httpx2.Client(transport=ws.HTTPXTransport(**options))
    return ws.httpx_client(**options)


def _httpx_body(url: str, **options: Any) -> bytes:
    with _http(**options) as client, client.stream("POST", url, json=BODY) as response:
        return b"".join(response.iter_bytes())


def _sdk(api: str, url: str, http: Any) -> Any:
    if api == "openai":
        openai_sdk: Any = openai.OpenAI(base_url=url, api_key=KEY, http_client=http, max_retries=0)
        return openai_sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    anthropic_sdk = anthropic.Anthropic(base_url=url, api_key=KEY, http_client=http, max_retries=0)
    return anthropic_sdk.messages.create(model="m", max_tokens=8, messages=MESSAGES, stream=True)


def _sdk_events(api: str, url: str, **options: Any) -> List[Any]:
    with _http(**options) as http:
        return list(_sdk(api, url, http))


def _chat_chunks(url: str, **options: Any) -> List[Dict[str, Any]]:
    client = ws.ChatClient(url, KEY, model="m", retry=ws.RetryPolicy(max_attempts=1), **options)
    with client.stream(MESSAGES) as stream:
        return list(stream)


@pytest.mark.parametrize(
    ("event", "data"),
    [
        # openai-python's own SSE decoder cases: several data lines, an escaped new line
        (b'event: ping\ndata: {\ndata: "foo":\ndata: true}\n\n', '{\n"foo":\ntrue}'),
        (b'event: ping\ndata: {"content": "a \\n b"}\n\n', '{"content": "a \\n b"}'),
        (KEEPALIVE, '{"type": "ping"}'),  # not activity, and still delivered
    ],
    ids=["data-lines", "escaped-new-line", "keep-alive"],
)
def test_a_trailing_ping_with_data_is_delivered_on_every_path(event: bytes, data: str) -> None:
    """stream_sse and httpx_client() hand on a ping at the stream's end (once: dropped)."""
    with _serve([event]) as server, ws.deadline(10):
        assert _sse_events(server.url, idle_timeout=5) == [("ping", data)]
        assert _httpx_body(server.url, idle_timeout=5) == event


@pytest.mark.parametrize(
    "ping", [b'event: ping\ndata: {"tick": %d}\n\n', b'event: ping\ndata: {"type": "ping"}\n\n']
)
def test_a_hundred_pings_before_a_data_event_are_all_delivered_in_order(ping: bytes) -> None:
    """Under a 1 KiB event cap, none held back and dropped (once: 30 of 100 came)."""
    pings = [ping % n if b"%d" in ping else ping for n in range(100)]
    last = b'data: {"n": 1}\n\n'
    with _serve([b"".join(pings), last]) as server, ws.deadline(10):
        got = _sse_events(server.url, idle_timeout=5, max_event_bytes=1024)
        assert len(got) == 101 and got[-1] == ("message", '{"n": 1}')
        assert [d for _, d in got[:-1]] == [
            p[len(b"event: ping\ndata: ") : -2].decode() for p in pings
        ]
        assert (
            _httpx_body(server.url, idle_timeout=5, max_event_bytes=1024) == b"".join(pings) + last
        )


def test_a_generic_servers_ping_events_with_data_are_activity_on_every_path() -> None:
    """Events named ping carrying {"tick": n} every 0.15 s keep a 0.6 s idle limit alive,
    and reach the caller (once: StreamIdleTimeout at 0.6 s, nothing delivered)."""
    ticks = [b'event: ping\ndata: {"tick": %d}\n\n' % n for n in range(8)]
    pieces = [*ticks, _chunk(0, "hi", "stop"), DONE]
    with _serve(pieces, gap=0.15) as server, ws.deadline(20):
        got = _sse_events(server.url, idle_timeout=0.6)
        assert [data for _, data in got[:8]] == [f'{{"tick": {n}}}' for n in range(8)]
        assert _httpx_body(server.url, idle_timeout=0.6) == b"".join(pieces)
        chunks = _chat_chunks(server.url, idle_timeout=0.6)
        assert [c.get("tick") for c in chunks[:8]] == list(range(8)) and len(chunks) == 9


DISGUISED = b'event: content_block_delta\nevent: ping\ndata: {"type": "ping"}\n\n'


@pytest.mark.parametrize("path", ["stream_sse", "anthropic"])
def test_an_events_name_is_its_last_event_line(path: str) -> None:
    """A keep-alive whose first event: line says content_block_delta is a ping, as the SSE
    spec and the anthropic SDK read it: the stream ends at its idle limit (once: alive to
    the deadline)."""
    pieces = itertools.chain([MESSAGE_START], itertools.repeat(DISGUISED, 200))
    with _serve(pieces, gap=0.05, hold=True) as server:
        started = time.monotonic()
        with pytest.raises(Exception) as info, ws.deadline(10):
            if path == "stream_sse":
                _sse_events(server.url + "/v1/messages", idle_timeout=IDLE)
            else:
                _sdk_events("anthropic", server.url, idle_timeout=IDLE)
        elapsed = time.monotonic() - started
    assert isinstance(_ours(info.value), ws.StreamIdleTimeout), repr(info.value)
    assert IDLE * 0.8 <= elapsed < IDLE + 2.0


@pytest.mark.parametrize("path", ["ChatClient", "openai"])
@pytest.mark.parametrize(
    "pieces",
    [
        [DONE],  # [DONE] with no chunk at all
        [_chunk(0, "a"), _chunk(1, "b"), _chunk(0, "", "stop"), DONE],  # n=2, choice 1 unfinished
    ],
    ids=["done-first", "one-of-two-choices-finished"],
)
def test_done_before_every_choice_finished_is_no_finish_reason_on_both_paths(
    path: str, pieces: List[bytes]
) -> None:
    """ChatClient and the openai SDK on httpx_client() read the same verdict (once: the SDK
    saw a clean end of both streams, ChatClient of the second)."""
    with _serve(pieces) as server, pytest.raises(Exception) as info, ws.deadline(10):
        if path == "ChatClient":
            _chat_chunks(server.url, idle_timeout=5)
        else:
            _sdk_events("openai", server.url, idle_timeout=5)
    error = _ours(info.value)
    assert isinstance(error, ws.StreamProtocolError), repr(info.value)
    assert error.reason == "no_finish_reason"
    assert ws.classify(error).retryable is (pieces == [DONE])


def test_a_gemini_stream_cut_after_a_finish_reason_key_in_function_arguments_is_cut() -> None:
    """A functionCall argument named finishReason is no terminal event (once: a clean end,
    found by searching the bytes)."""
    call = {"functionCall": {"name": "f", "args": {"finishReason": "STOP"}}}
    response = {"candidates": [{"content": {"parts": [call], "role": "model"}, "index": 0}]}
    event = b"data: " + json.dumps(response).encode() + b"\n\n"
    with _serve([event]) as server, pytest.raises(ws.StreamProtocolError) as info:
        _httpx_body(server.url, idle_timeout=5)
    assert info.value.reason == "no_finish_reason"


SDKS = ["openai", "anthropic"]
CAP = 64 * 1024


@pytest.mark.parametrize("path", ["stream_sse", "ChatClient", *SDKS])
def test_a_gzipped_stream_of_keep_alive_comments_ends_at_the_idle_limit(path: str) -> None:
    """Decoded on httpx_client() (the SDKs ask for gzip): comments are no activity, so the
    idle limit ends it (once: alive to the deadline); stream_sse and ChatClient, which ask
    for identity, refuse it at once."""
    pieces = itertools.chain(
        [_chunk(0, "hi") if path == "openai" else MESSAGE_START],
        itertools.repeat(b": keep-alive\n\n", 400),
    )
    with _serve(pieces, gap=0.02, hold=True, gzipped=True) as server:
        started = time.monotonic()
        with pytest.raises(Exception) as info, ws.deadline(10):
            _read_any(path, server.url, idle_timeout=IDLE)
        elapsed = time.monotonic() - started
    _check_compressed(path, info.value, ws.StreamIdleTimeout)
    assert elapsed < IDLE + 2.0


@pytest.mark.parametrize("path", ["stream_sse", "ChatClient", *SDKS])
def test_a_gzipped_event_past_the_cap_is_event_too_large(path: str) -> None:
    """1 MiB of data in one event, a few KiB of gzip, under a 64 KiB cap: event_too_large
    (once: delivered) on httpx_client(); refused on stream_sse and ChatClient."""
    huge = b"data: " + b"x" * (1 << 20) + b"\n\n"
    server = _serve([huge], hold=True, gzipped=True)
    with server, pytest.raises(Exception) as info, ws.deadline(10):
        _read_any(path, server.url, idle_timeout=5, max_event_bytes=CAP)
    _check_compressed(path, info.value, ws.StreamProtocolError, "event_too_large")


def test_a_gzipped_openai_stream_reads_as_the_plain_one_through_the_sdk() -> None:
    """Decoded by the transport, framed, and parsed by the SDK: the same chunks and a clean end."""
    pieces = [_chunk(0, "Hel"), _chunk(0, "lo"), _chunk(0, "", "stop"), DONE]
    with _serve(pieces, gzipped=True) as server, ws.deadline(10):
        chunks = _sdk_events("openai", server.url, idle_timeout=5)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello"
    assert chunks[-1].choices[0].finish_reason == "stop"


def _read_any(path: str, url: str, **options: Any) -> None:
    if path == "stream_sse":
        _sse_events(url, **options)
    elif path == "ChatClient":
        _chat_chunks(url, **{k: v for k, v in options.items() if k == "idle_timeout"})
    else:
        _sdk_events(path, url, **options)


def _check_compressed(
    path: str, raised: BaseException, kind: type, reason: Optional[str] = None
) -> None:
    error = _ours(raised)
    if path in ("stream_sse", "ChatClient"):
        assert isinstance(error, ws.StreamProtocolError), repr(raised)
        assert error.reason == "unexpected_content_encoding"
        return
    assert isinstance(error, kind), repr(raised)
    if reason is not None:
        assert getattr(error, "reason", None) == reason


# -- the rules alone ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "activity"),
    [
        (b'event: ping\ndata: {"type": "ping"}\n\n', False),  # Anthropic's keep-alive
        (b'event: ping\ndata: {"type":"ping"}\n\n', False),  # however the JSON is spaced
        (b'event: ping\ndata: {"tick": 1}\n\n', True),  # a generic server's: the caller's data
        (b'event: ping\ndata: {"type": "ping", "n": 1}\n\n', True),
        (DISGUISED, False),  # the last event: line names it
        (b'event: ping\nevent: message\ndata: {"type": "ping"}\n\n', True),
        (b": keep-alive\n\n", False),
        (b"event: ping\n\n", False),
        (b"id: 3\nretry: 10\n\n", False),
        (b"data\n\n", True),  # a data field with an empty value
    ],
)
def test_activity_is_data_other_than_anthropics_keep_alive(event: bytes, activity: bool) -> None:
    assert is_activity(event) is activity
    assert EventWatch().note(event) is activity


def test_a_batch_without_activity_leaves_the_idle_clock_where_it_was() -> None:
    """Only activity restarts it and counts as a chunk; the first wait's start is kept."""
    activity = Activity(is_activity)
    activity.took([KEEPALIVE], 1.0, 2.0)
    assert (activity.chunks, activity.quiet_since) == (0, 1.0)
    activity.took([KEEPALIVE, b": c\n\n"], 1.0, 3.0)
    assert (activity.chunks, activity.quiet_since) == (0, 1.0)
    activity.took([KEEPALIVE, b"data: x\n\n"], 1.0, 4.0)
    assert (activity.chunks, activity.quiet_since) == (1, None)
    activity.took([KEEPALIVE], None, 5.0)  # found buffered: the quiet starts now
    assert (activity.chunks, activity.quiet_since) == (1, 5.0)
    every = Activity()  # guard_stream over any iterator: every item is activity
    every.took([None, None], 1.0, 2.0)
    assert (every.chunks, every.quiet_since) == (2, None)


def _verdict(*events: bytes) -> Optional[str]:
    """None when the events end cleanly, else the error's reason (raised by note or end)."""
    watch = EventWatch()
    try:
        for event in events:
            watch.note(event)
        watch.end()
    except ws.StreamProtocolError as exc:
        return exc.reason
    return None


USAGE = b'data: {"choices": [], "usage": {"total_tokens": 3}}\n\n'
GEMINI_FUNCTION = (
    b'data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", '
    b'"args": {"finishReason": "STOP"}}}]}}]}\n\n'
)


@pytest.mark.parametrize(
    ("events", "verdict"),
    [
        ((_chunk(0, "a"), _chunk(0, "", "stop")), None),
        ((_chunk(0, "a"), _chunk(0, "", "stop"), USAGE, DONE), None),  # usage-only: fine
        ((_chunk(0, "a"), _chunk(1, "b"), _chunk(1, "", "stop"), _chunk(0, "", "stop")), None),
        ((DONE,), "no_finish_reason"),
        ((_chunk(0, "a"), DONE), "no_finish_reason"),
        ((_chunk(0, "a"), _chunk(0, "", "stop"), _chunk(1, "b")), "no_finish_reason"),
        ((_chunk(0, "a"), _chunk(1, "b"), _chunk(0, "", "stop"), DONE), "no_finish_reason"),
        ((_chunk(0, "a"), USAGE), "no_finish_reason"),
        ((GEMINI_FUNCTION,), "no_finish_reason"),
        ((GEMINI_FUNCTION, b'data: {"candidates": [{"finishReason": "STOP"}]}\n\n'), None),
        ((b'data: {"promptFeedback": {"blockReason": "SAFETY"}}\n\n',), None),
        ((b'data: {"text": "finish_reason"}\n\n',), None),  # no known format: no verdict
    ],
)
def test_the_terminal_event_is_read_from_the_parsed_event(
    events: Tuple[bytes, ...], verdict: Optional[str]
) -> None:
    assert _verdict(*events) == verdict
