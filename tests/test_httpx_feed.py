"""HTTPXTransport's HTTP/1.1 event streams, read by their consumers: every byte arrives,
nothing waits on a thread of its own (reuse of a finished stream's connection:
test_httpx_pool.py)."""

from __future__ import annotations

import gc
import socket
import ssl
import threading
import time
from typing import Iterator, List

import httpx
import httpx2
import pytest
import trustme

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .httpxstream import numbers, sdk_stream, stream
from .internals import READER_THREAD_NAME, buffered_body_events
from .rawserver import (
    SSE_HEAD,
    RawServer,
    chunk,
    end_body,
    event,
    read_request_head,
    send_body_piece,
    send_sse_head,
    three_events_until_disconnect,
    wait_for_disconnect,
)
from .waiting import wait_for

pytestmark = pytest.mark.timeout(30)


def ours() -> List[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("watchdog_sync")]


def read_by_its_consumer() -> bool:
    """The open stream is read by its consumer, not by a reader thread of its own."""
    return wait_for(lambda: READER_THREAD_NAME not in ours(), 2)


@pytest.fixture
def client() -> Iterator[httpx2.Client]:
    with ws.httpx_client(idle_timeout=5) as made:
        yield made


def test_events_that_arrived_with_the_headers_are_taken_from_h11s_buffer(
    client: httpx2.Client,
) -> None:
    """Bytes httpcore read with the headers (in h11's buffer, not the socket) are delivered
    although the socket never becomes readable again."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(SSE_HEAD + b"".join(chunk(event(n)) for n in range(3)))  # one segment
        wait_for_disconnect(conn, stop)

    with RawServer(handler) as server, stream(client, server.url) as response:
        pieces = response.iter_bytes()
        got = [next(pieces) for _ in range(3)]
        assert read_by_its_consumer()
    assert numbers(b"".join(got)) == [0, 1, 2]


@pytest.mark.parametrize("size", [1, 2, 7])
def test_chunked_framing_split_anywhere_arrives_byte_for_byte(
    client: httpx2.Client, size: int
) -> None:
    """Chunk-size lines, data and CRLFs cut at every place: httpx gets the events unchanged."""
    events = b": hello\n\n" + b"".join(event(n) for n in range(4))
    body = chunk(events[:5]) + chunk(events[5:]) + b"0\r\n\r\n"

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(SSE_HEAD)
        for i in range(0, len(body), size):
            conn.sendall(body[i : i + size])
            stop.wait(0.0005)  # the scenario: each piece its own segment

    with RawServer(handler) as server, stream(client, server.url) as response:
        pieces = response.iter_bytes()
        got = [next(pieces)]
        assert read_by_its_consumer()
        got.extend(pieces)
    assert b"".join(got) == events


@pytest.mark.parametrize("framing", ["sized", "close-delimited"])
def test_sized_and_close_delimited_bodies_end_cleanly(client: httpx2.Client, framing: str) -> None:
    body = b"".join(event(n) for n in range(5))

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        length = f"Content-Length: {len(body)}\r\n" if framing == "sized" else ""
        conn.sendall(
            f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{length}"
            "Connection: close\r\n\r\n".encode()
        )
        for n in range(5):
            conn.sendall(event(n))
            stop.wait(0.01)

    with RawServer(handler) as server, stream(client, server.url) as response:
        pieces = response.iter_bytes()
        got = [next(pieces)]
        assert read_by_its_consumer()  # also with Connection: close (h11 says MUST_CLOSE)
        got.extend(pieces)
    assert b"".join(got) == body


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (chunk(event(1))[:-4], "message body"),  # cut inside a chunk
        (b"zz\r\n", "chunk"),  # a chunk-size line that is no number
    ],
)
def test_a_cut_or_malformed_chunked_body_is_httpxs_remote_protocol_error(
    client: httpx2.Client, tail: bytes, message: str
) -> None:
    """As httpcore says it: the SDKs classify httpx's own error types."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(SSE_HEAD + chunk(event(0)))
        stop.wait(0.05)
        conn.sendall(tail)  # then the server closes the connection

    got: List[bytes] = []
    server = RawServer(handler)
    with server, pytest.raises(httpx2.RemoteProtocolError) as info, stream(client, server.url) as r:
        got.extend(r.iter_bytes())
    assert numbers(b"".join(got)) == [0]
    assert message in str(info.value)


def test_tls_bursts_larger_than_one_read_arrive_whole_and_in_order() -> None:
    """Over TLS (an ssl.SSLSocket under httpcore), a burst larger than one read (decrypted
    bytes pending in the SSL object, invisible to poll) arrives whole."""
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    count = 400  # about 1 KiB each: more than one read takes

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(SSE_HEAD + b"".join(chunk(event(n, 1000)) for n in range(count)))
        end_body(conn)

    tls = ws.httpx_client(idle_timeout=5, verify=client_context)
    with RawServer(handler, tls=server_context) as server, tls, stream(tls, server.url) as r:
        pieces = r.iter_bytes()
        got = [next(pieces)]
        assert read_by_its_consumer()
        got.extend(pieces)
    assert numbers(b"".join(got)) == list(range(count))


def test_a_consumer_that_stops_reading_pauses_its_socket_and_memory_stays_bounded(
    client: httpx2.Client,
) -> None:
    """A fast server and a consumer that stops: nothing is read while it is away (one read's
    events at most wait); then everything arrives once the consumer drains."""
    count = 20000

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        conn.settimeout(10)
        for n in range(count):
            send_body_piece(conn, event(n))
        end_body(conn)

    one_read = 65536 // len(event(0)) + 1
    with RawServer(handler) as server, stream(client, server.url) as response:
        pieces = response.iter_bytes()
        got = [next(pieces)]
        time.sleep(0.2)  # the scenario: the consumer stays away while the server could send
        assert buffered_body_events(response) <= one_read
        got.extend(pieces)
    assert numbers(b"".join(got)) == list(range(count))


def test_a_consumer_that_closes_early_closes_the_connection_at_once(
    client: httpx2.Client,
) -> None:
    """Closing the response after one event: the server sees the connection go, and the
    socket is let go (the leak check: no descriptor left)."""
    gone: List[bool] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        gone.append(wait_for_disconnect(conn, stop))

    with RawServer(handler) as server:
        with stream(client, server.url) as response:
            assert numbers(next(response.iter_bytes())) == [0]
        assert wait_for(lambda: bool(gone), 2) and gone == [True]


def test_a_response_dropped_without_close_releases_its_connection(
    client: httpx2.Client,
) -> None:
    """``break`` and drop the response: collected, its stream stops, the connection closes."""
    gone: List[bool] = []

    with RawServer(three_events_until_disconnect(gone)) as server:
        response = client.send(client.build_request("GET", server.url), stream=True)
        for _ in response.iter_bytes():
            break
        del response
        gc.collect()
        assert wait_for(lambda: bool(gone), 3) and gone == [True]


def test_the_deadline_shuts_a_paused_stream_from_outside(client: httpx2.Client) -> None:
    """The consumer stopped reading when the budget ends: the socket is shut from outside and
    the connection ends at the deadline; the caller gets DeadlineExceeded."""
    gone: List[float] = []
    flood = b"".join(chunk(event(n)) for n in range(100))

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        conn.settimeout(0.05)
        view = memoryview(flood)
        while not stop.is_set():
            try:
                view = view[conn.send(view) :] or memoryview(flood)
            except socket.timeout:
                continue  # the client's window is full: it paused
            except OSError:
                gone.append(time.monotonic())
                return

    with RawServer(handler) as server:
        started = time.monotonic()
        deadline = ws.deadline(0.6)
        with pytest.raises(ws.DeadlineExceeded), deadline, stream(client, server.url) as response:
            pieces = response.iter_bytes()
            next(pieces)
            assert wait_for(lambda: bool(gone), 5)  # the consumer does not come back before
            list(pieces)
        assert 0.5 <= gone[0] - started < 2.0


def test_a_socket_shut_from_outside_while_the_reader_watches_it_ends_the_stream_at_once(
    client: httpx2.Client,
) -> None:
    """Someone else shuts the socket between two reads of its consumer: the next read sees
    the end now (not at the 5 s idle limit) and it is a cut body, httpx's RemoteProtocolError."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        wait_for_disconnect(conn, stop)

    with RawServer(handler) as server, stream(client, server.url) as response:
        pieces = response.iter_bytes()
        assert numbers(next(pieces)) == [0]
        sock = response.extensions["network_stream"].get_extra_info("socket")
        started = time.monotonic()
        sock.shutdown(socket.SHUT_RDWR)
        with pytest.raises(httpx2.RemoteProtocolError):
            list(pieces)
        assert time.monotonic() - started < 2.0


def test_a_client_closed_while_its_stream_is_read_raises_httpxs_read_error() -> None:
    """``client.close()`` closes the pool's connections, ours among them: the stream's next
    read raises httpx's ReadError (as without the transport) and no descriptor is left."""
    release = threading.Event()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        release.wait(5)
        send_body_piece(conn, event(1))
        wait_for_disconnect(conn, stop)

    client = ws.httpx_client(idle_timeout=5)
    with RawServer(handler) as server, stream(client, server.url) as response:
        pieces = response.iter_bytes()
        assert numbers(next(pieces)) == [0]
        client.close()
        release.set()
        with pytest.raises(httpx2.ReadError):
            list(pieces)


def test_an_httpx_028_client_reads_as_httpx2_does() -> None:
    """httpx over httpcore 1.x has the same shape as httpx2 over httpcore2."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        for n in range(3):
            send_body_piece(conn, event(n))
            stop.wait(0.01)
        end_body(conn)

    legacy = httpx.Client(transport=ws.HTTPXTransport(httpx.HTTPTransport(), idle_timeout=5))
    with RawServer(handler) as server, legacy, stream(legacy, server.url) as response:
        pieces = response.iter_bytes()
        got = [next(pieces)]
        assert read_by_its_consumer()
        got.extend(pieces)
    assert numbers(b"".join(got)) == [0, 1, 2]


def test_a_response_of_another_shape_keeps_a_reader_thread_of_its_own() -> None:
    """A transport that is not httpcore's (here httpx's MockTransport) has no socket to hand
    over: its event stream is read by a thread of its own, and still arrives whole."""
    seen: List[List[str]] = []

    def body() -> Iterator[bytes]:
        for n in range(3):
            seen.append(ours())
            yield event(n)

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    transport = ws.HTTPXTransport(httpx2.MockTransport(answer), idle_timeout=5)
    with httpx2.Client(transport=transport) as mock, stream(mock, "http://127.0.0.1/") as r:
        assert numbers(b"".join(r.iter_bytes())) == [0, 1, 2]
    assert all(READER_THREAD_NAME in names for names in seen)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_concurrent_sdk_streams_add_no_thread_each(fault_gateway: FaultGateway, api: str) -> None:
    """Twenty SDK streams open at once through httpx_client(): no reader thread per stream
    (read by their consumers), and every stream arrives whole."""
    count = 20
    base = fault_gateway.base_url("ok", api=api, chunks=30, interval=0.05)
    with ws.httpx_client(idle_timeout=5) as http, ws.deadline(20):
        streams = [iter(sdk_stream(api, base, http)) for _ in range(count)]
        firsts = [next(s) for s in streams]
        names = ours()
        rest = [list(s) for s in streams]
    assert READER_THREAD_NAME not in names
    assert len(firsts) == count and len({len(r) for r in rest}) == 1 and rest[0]
