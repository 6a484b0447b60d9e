"""Event streams over HTTP/2 through httpx_client(http2=True), against a real h2 server over
TLS (ALPN) on 127.0.0.1: guarded as over HTTP/1.1, and at an early end the h2 stream is
reset, its socket shut only when no other stream uses it, and no reader thread is left."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator, List, Optional

import httpx
import httpx2
import openai
import pytest

import watchdog_sync as ws

from .h2server import H2Server
from .internals import READER_THREAD_NAME, h2_shape_problems

pytestmark = pytest.mark.timeout(30)

SLACK = 0.3  # 2 noisy shared cores
IDLE = 0.2
CANCEL = 8  # the h2 error code of a stream given up on (RST_STREAM CANCEL)
LIBS = ["httpx2", "httpx"]  # httpx2 on httpcore2, httpx 0.28 on httpcore 1.x


@pytest.fixture
def server() -> Iterator[H2Server]:
    with H2Server() as made:
        yield made


def make_client(lib: str, server: H2Server, **options: Any) -> Any:
    """An h2 client of ``lib`` on HTTPXTransport, trusting the server's certificate."""
    options = {"idle_timeout": IDLE, **options}
    if lib == "httpx2" and "max_event_bytes" not in options:
        return ws.httpx_client(http2=True, verify=server.client_context(), **options)
    module: Any = httpx2 if lib == "httpx2" else httpx
    inner = module.HTTPTransport(http2=True, verify=server.client_context())
    return module.Client(transport=ws.HTTPXTransport(inner, **options))


@pytest.fixture(params=LIBS)
def client(request: pytest.FixtureRequest, server: H2Server) -> Iterator[Any]:
    with make_client(request.param, server) as made:
        yield made


def readers() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READER_THREAD_NAME and t.is_alive()]


def gone_within(threads: List[threading.Thread], limit: float) -> bool:
    give_up = time.monotonic() + limit
    for thread in threads:
        thread.join(max(0.0, give_up - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def read_all(client: Any, url: str) -> bytes:
    with client.stream("POST", url, json={"stream": True}) as response:
        assert response.http_version == "HTTP/2"
        return b"".join(response.iter_bytes())


def open_stream(client: Any, url: str) -> Any:
    """A streaming response whose first event was read (the rest is up to the test)."""
    response = client.send(client.build_request("POST", url, json={"stream": True}), stream=True)
    assert response.http_version == "HTTP/2"
    response.pieces = response.iter_bytes()
    assert next(response.pieces).startswith(b"data: ")
    return response


def test_the_h2_stream_control_fits_every_httpcore_we_support() -> None:
    """httpcore2 and httpcore 1.x have every private piece the HTTP/2 stream control reads."""
    assert h2_shape_problems("httpcore2") == []
    assert h2_shape_problems("httpcore") == []


def test_a_whole_h2_stream_arrives_and_its_connection_is_reused(
    client: Any, server: H2Server
) -> None:
    """Read to its end, a stream is neither reset nor shut: the next one shares its socket."""
    with ws.deadline(10):
        first = read_all(client, server.url("whole/a"))
        second = read_all(client, server.url("whole/b"))
    assert first == second and first.endswith(b"data: [DONE]\n\n") and first.count(b"data:") == 4
    assert [c for c, _, _ in server.seen("request")] == [1, 1]
    assert server.seen("reset") == [] and server.seen("closed") == []


def test_a_silent_h2_stream_ends_at_its_idle_limit_reset_and_shut(
    client: Any, server: H2Server
) -> None:
    """The only stream on its connection: RST_STREAM, the socket shut, the reader gone in 1 s."""
    started = time.monotonic()
    with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
        read_all(client, server.url("stall"))
    took = time.monotonic() - started
    assert IDLE - 0.05 <= took < IDLE + SLACK
    assert info.value.chunks_received == 1
    assert gone_within(readers(), 1.0)
    assert server.wait_for("closed", timeout=1.0)
    assert server.seen("reset") == [(1, 1, CANCEL)]
    assert server.seen("closed") == [(1, 0, "eof")]


@pytest.mark.parametrize("lib", LIBS)
def test_a_silent_h2_stream_sharing_its_connection_ends_alone(lib: str, server: H2Server) -> None:
    """Two silent streams on one connection: one times out, its reader ends at once (a PING
    wakes the read), the other keeps the connection; closed early, it then shuts it."""
    with make_client(lib, server) as client, ws.deadline(10):
        kept = open_stream(client, server.url("stall/kept"))  # never read again until closed
        before = readers()
        dropped = open_stream(client, server.url("stall/dropped"))
        (its_reader,) = [t for t in readers() if t not in before]
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout):
            b"".join(dropped.pieces)
        assert time.monotonic() - started < IDLE + SLACK
        dropped.close()
        assert gone_within([its_reader], 1.0)
        assert server.wait_for("reset") and server.wait_for("ping")
        assert server.seen("reset") == [(1, 3, CANCEL)]
        assert server.seen("closed") == [] and len(readers()) == 1
        started = time.monotonic()
        kept.close()
        assert time.monotonic() - started < 0.5
        assert gone_within(readers(), 1.0)
    assert server.wait_for("closed", timeout=1.0)
    assert server.seen("reset") == [(1, 3, CANCEL), (1, 1, CANCEL)]
    assert [c for c, _, _ in server.seen("request")] == [1, 1]


def test_a_request_beside_a_quiet_h2_stream_is_answered_at_once(server: H2Server) -> None:
    """A guarded quiet stream's reader holds httpcore's read lock across its read; a second
    request on the connection still gets its turn (without one: the read timeout, 1 s)."""
    timeout = httpx2.Timeout(5, read=1)
    for _ in range(3):  # without the turn it waits 4 times in 5: 3 tries all but always see it
        with (
            make_client("httpx2", server, idle_timeout=10, timeout=timeout) as client,
            ws.deadline(10),
        ):
            quiet = open_stream(client, server.url("stall"))
            started = time.monotonic()
            assert read_all(client, server.url("whole")).endswith(b"data: [DONE]\n\n")
            assert time.monotonic() - started < 0.5
            quiet.close()
    assert {c for c, _, _ in server.seen("request")} == {1, 2, 3}


@pytest.mark.parametrize("lib", LIBS)
def test_a_stream_that_times_out_leaves_its_neighbour_whole(lib: str, server: H2Server) -> None:
    """One stream goes silent and times out while another on its connection completes."""
    got: List[bytes] = []
    failure: List[BaseException] = []
    with make_client(lib, server) as client:  # idle 0.2 s; the neighbour sends every 0.05 s
        slow = client.send(client.build_request("POST", server.url("slow")), stream=True)

        def read_slow() -> None:
            try:
                with ws.deadline(10):
                    got.extend(slow.iter_bytes())
            except BaseException as exc:  # the test looks at it below
                failure.append(exc)
            finally:
                slow.close()

        neighbour = threading.Thread(target=read_slow)
        neighbour.start()
        try:
            with pytest.raises(ws.StreamIdleTimeout), ws.deadline(10):
                read_all(client, server.url("stall"))
            assert server.seen("closed") == [] and neighbour.is_alive()
        finally:
            neighbour.join(5)
    assert failure == []
    body = b"".join(got)
    assert body.count(b"data:") == 12 and body.endswith(b"data: [DONE]\n\n")
    assert server.seen("reset") == [(1, 3, CANCEL)]
    assert [c for c, _, _ in server.seen("request")] == [1, 1]


@pytest.mark.parametrize(
    ("scenario", "options", "error", "reason"),
    [
        ("pings", {}, ws.StreamIdleTimeout, "stream_idle_timeout"),
        ("cut", {}, ws.StreamProtocolError, "no_finish_reason"),
        ("huge", {"max_event_bytes": 1024}, ws.StreamProtocolError, "event_too_large"),
    ],
)
def test_h2_streams_keep_the_stream_rules(
    server: H2Server, scenario: str, options: Any, error: type, reason: str
) -> None:
    """Pings are no activity, the terminal event is required, the event cap holds."""
    with make_client("httpx2", server, **options) as client:
        started = time.monotonic()
        with pytest.raises(error) as info, ws.deadline(10):
            read_all(client, server.url(scenario))
        assert time.monotonic() - started < IDLE + SLACK
        assert info.value.reason == reason
        assert gone_within(readers(), 1.0)
        if scenario != "cut":  # cut: the server ended the stream itself
            assert server.wait_for("reset", timeout=1.0)
            assert server.seen("reset") == [(1, 1, CANCEL)]


def test_an_h2_stream_silent_from_the_start_is_sent_again_then_fails(server: H2Server) -> None:
    """No first event: each silent send is reset and shut, three sends, then the error."""
    with make_client("httpx2", server, first_event_timeout=0.1) as client:
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout) as info, ws.deadline(10):
            read_all(client, server.url("silent"))
        assert time.monotonic() - started < 3 * 0.1 + SLACK + 0.2
        assert info.value.chunks_received == 0 and "sent 3 times" in str(info.value)
        assert gone_within(readers(), 1.0)
    assert server.wait_for("closed", count=3, timeout=1.0)
    assert [d for _, _, d in server.seen("reset")] == [CANCEL] * 3


def test_the_budget_end_stops_an_h2_stream(server: H2Server) -> None:
    """deadline() ends a slow-dripping h2 stream on time: reset, shut, no reader left."""
    with make_client("httpx2", server, idle_timeout=5) as client:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.3):
            read_all(client, server.url("stall"))
        assert 0.25 <= time.monotonic() - started < 0.3 + SLACK
        assert gone_within(readers(), 1.0)
    assert server.wait_for("closed", timeout=1.0)
    assert server.seen("reset") == [(1, 1, CANCEL)]


def test_an_h2_stream_closed_early_is_reset_at_once(server: H2Server) -> None:
    """close() after the first event: RST_STREAM, socket shut, reader gone; close is quick."""
    with make_client("httpx2", server, idle_timeout=5) as client, ws.deadline(10):
        response = open_stream(client, server.url("stall"))
        started = time.monotonic()
        response.close()
        assert time.monotonic() - started < 0.5
        assert gone_within(readers(), 1.0)
        assert server.wait_for("closed", timeout=1.0)
        assert server.seen("reset") == [(1, 1, CANCEL)]
        assert read_all(client, server.url("whole")).endswith(b"data: [DONE]\n\n")
    assert [c for c, _, _ in server.seen("request")] == [1, 2]  # a new connection


def sdk_text(sdk: openai.OpenAI) -> str:
    stream = sdk.chat.completions.create(model="m", messages=[], stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


@pytest.mark.parametrize(("scenario", "expect"), [("whole", "12"), ("stall", ws.StreamIdleTimeout)])
def test_the_openai_sdk_on_an_h2_httpx_client(
    server: H2Server, scenario: str, expect: Optional[Any]
) -> None:
    """The openai SDK streams whole over h2, and a silent h2 stream raises our idle error."""
    http: httpx2.Client = make_client("httpx2", server)
    sdk = openai.OpenAI(base_url=server.url(f"{scenario}/v1"), api_key="k", http_client=http)
    run: Callable[[], str] = lambda: sdk_text(sdk.with_options(max_retries=0))  # noqa: E731
    with sdk, ws.deadline(10):
        if isinstance(expect, str):
            assert run() == expect
        else:
            with pytest.raises(expect):
                run()
    assert gone_within(readers(), 1.0)
    if scenario == "stall":
        assert server.wait_for("closed", timeout=1.0)
        assert server.seen("reset") == [(1, 1, CANCEL)]
