"""HTTPXTransport's event streams read by their consumers give a finished stream's connection back
to httpcore's pool (h11 parses the body, as in plain httpx), and never one that was stopped,
shut, cut or failed: the next call then opens a new connection and works."""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
from typing import Any, Callable, Iterator, List

import httpx
import httpx2
import openai
import pytest
import trustme

import watchdog_sync as ws
from watchdog_sync.testing import FakeClock, FaultGateway

from .httpxstream import numbers, sdk_stream, stream
from .internals import READER_THREAD_NAME, pooled_connections
from .rawserver import RawServer, chunk, read_request_head
from .sdkerrors import raises_from_body
from .waiting import wait_for

pytestmark = pytest.mark.timeout(30)

SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
CHUNKED = SSE + b"Transfer-Encoding: chunked\r\n\r\n"


def event(n: int) -> bytes:
    return b'data: {"n": %d}\n\n' % n


def chunked_body(count: int) -> bytes:
    return b"".join(chunk(event(n)) for n in range(count)) + b"0\r\n\r\n"


def sized(body: bytes, extra: bytes = b"") -> bytes:
    return SSE + b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body


def no_reader_thread_of_its_own() -> bool:
    """The stream is read by its consumer (or, all of it in h11's buffer, at once)."""
    return READER_THREAD_NAME not in [t.name for t in threading.enumerate()]


def serving(answers: Callable[[int], List[bytes]]) -> Callable[..., None]:
    """A handler that answers every request on its connection: the i-th request (counted
    over the whole server) gets ``answers(i)``'s pieces, each its own segment."""
    count = [0]
    lock = threading.Lock()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while not stop.is_set() and read_request_head(conn):
            with lock:
                index = count[0]
                count[0] += 1
            for piece in answers(index):
                conn.sendall(piece)
                stop.wait(0.005)

    return handler


@pytest.fixture(params=["httpx2", "httpx 0.28"])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """httpx_client() over httpx2/httpcore2, and httpx 0.28/httpcore 1.x wrapped by hand."""
    if request.param == "httpx2":
        made: Any = ws.httpx_client(idle_timeout=5)
    else:
        made = httpx.Client(transport=ws.HTTPXTransport(httpx.HTTPTransport(), idle_timeout=5))
    with made:
        yield made


@pytest.mark.parametrize(
    "answer",
    [
        lambda i: [CHUNKED, chunk(event(0)), chunk(event(1)), b"0\r\n\r\n"],
        lambda i: [sized(event(0) + event(1))],
        lambda i: [CHUNKED + chunked_body(2)],  # the whole body arrives with the headers
    ],
    ids=["chunked", "sized", "with-the-headers"],
)
def test_two_finished_streams_in_a_row_use_one_connection(
    client: Any, answer: Callable[[int], List[bytes]]
) -> None:
    """Read to its end by its consumer, the stream's connection goes back to the pool with
    its timeout given back (blocking again, no kernel receive timeout left from the
    consumer's reads), and the next stream reuses it."""
    socks = []
    with RawServer(serving(answer)) as server:
        for _ in range(2):
            with stream(client, server.url) as response:
                pieces = response.iter_bytes()
                got = [next(pieces)]
                assert no_reader_thread_of_its_own()
                got.extend(pieces)
            assert numbers(b"".join(got)) == [0, 1]
            assert len(pooled_connections(client)) == 1
            socks.append(response.extensions["network_stream"].get_extra_info("socket"))
        assert server.accepted == 1
    assert socks[0] is socks[1] and socks[0].fileno() >= 0 and socks[0].getblocking()
    assert socks[0].getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16) == bytes(16)


def test_two_finished_streams_over_tls_use_one_connection() -> None:
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    handler = serving(lambda i: [CHUNKED, chunk(event(i)), b"0\r\n\r\n"])
    tls = ws.httpx_client(idle_timeout=5, verify=client_context)
    with RawServer(handler, tls=server_context) as server, tls:
        for n in range(2):
            with stream(tls, server.url) as response:
                assert numbers(b"".join(response.iter_bytes())) == [n]
        assert server.accepted == 1


@pytest.mark.parametrize(
    "head",
    [
        SSE + b"Connection: close\r\n\r\n",  # close-delimited
        SSE + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(event(0)),
    ],
    ids=["close-delimited", "sized-connection-close"],
)
def test_a_stream_the_server_ends_with_the_connection_is_not_reused(
    client: Any, head: bytes
) -> None:
    """As in plain httpx: a body delimited by the close, or sent with Connection: close,
    leaves h11 MUST_CLOSE; each call gets a connection of its own and works."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(head + event(0))  # then the server closes

    with RawServer(handler) as server:
        for _ in range(2):
            with stream(client, server.url) as response:
                assert numbers(b"".join(response.iter_bytes())) == [0]
        assert server.accepted == 2


def after_one_event(i: int) -> List[bytes]:
    """The first request: one event, then the body stays open; later ones: a whole body."""
    return [CHUNKED, chunk(event(0))] if i == 0 else [CHUNKED + chunked_body(1)]


def second_call_works(client: Any, server: RawServer) -> None:
    assert pooled_connections(client) == []  # the first connection was closed, not pooled
    with stream(client, server.url) as response:
        assert numbers(b"".join(response.iter_bytes())) == [0]
    assert server.accepted == 2


def test_a_stream_closed_early_is_never_pooled(client: Any) -> None:
    with RawServer(serving(after_one_event)) as server:
        with stream(client, server.url) as response:
            assert numbers(next(response.iter_bytes())) == [0]
        sock = response.extensions["network_stream"].get_extra_info("socket")
        assert wait_for(lambda: sock.fileno() == -1)  # closed, not in the pool
        second_call_works(client, server)


def test_closes_racing_the_readers_parse_never_pool_and_never_break_the_reader(
    client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """30 streams closed after 1-5 events while the server sends as fast as it can (the
    consumer's close meets its own last parse): none is pooled, nothing raised on
    the way, and a whole stream afterwards is read and pooled."""
    count = [0]

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        count[0] += 1
        if count[0] > 30:
            conn.sendall(CHUNKED + chunked_body(1))
            read_request_head(conn)  # until the client closes the pooled connection
            return
        conn.sendall(CHUNKED)
        for n in range(3000):
            if stop.is_set():
                return
            conn.sendall(chunk(event(n)))

    with RawServer(handler, max_connections=40) as server:
        for i in range(30):
            with stream(client, server.url) as response:
                pieces = response.iter_bytes()
                got = b""
                while len(numbers(got)) <= i % 5:
                    got += next(pieces)
            assert pooled_connections(client) == []
        with stream(client, server.url) as response:
            assert numbers(b"".join(response.iter_bytes())) == [0]
        assert len(pooled_connections(client)) == 1 and server.accepted == 31
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_a_stream_stopped_at_the_idle_limit_is_never_pooled() -> None:
    with RawServer(serving(after_one_event)) as server, ws.httpx_client(idle_timeout=0.3) as c:
        with pytest.raises(ws.StreamIdleTimeout), stream(c, server.url) as response:
            list(response.iter_bytes())
        second_call_works(c, server)


def test_a_stream_stopped_by_the_deadline_is_never_pooled(client: Any) -> None:
    with RawServer(serving(after_one_event)) as server:
        deadline = ws.deadline(0.4)
        with pytest.raises(ws.DeadlineExceeded), deadline, stream(client, server.url) as response:
            list(response.iter_bytes())
        second_call_works(client, server)


def test_a_malformed_body_on_a_kept_connection_is_never_pooled(client: Any) -> None:
    """h11 rejects a bad chunk-size line (httpx's RemoteProtocolError) while the server
    keeps the connection: it is closed, and the next call opens a new one."""
    lib = httpx2 if isinstance(client, httpx2.Client) else httpx

    def answer(i: int) -> List[bytes]:
        return [CHUNKED, chunk(event(0)), b"zz\r\n"] if i == 0 else [CHUNKED + chunked_body(1)]

    with RawServer(serving(answer)) as server:
        with pytest.raises(lib.RemoteProtocolError), stream(client, server.url) as response:
            list(response.iter_bytes())
        second_call_works(client, server)


def test_a_socket_shut_by_the_budget_after_the_body_ended_is_never_pooled() -> None:
    """h11 has parsed the whole body (one segment with the headers) when the budget is
    cancelled (from the first-event hook; a test clock runs the Shutter inside cancel()):
    the socket is shut, the call reports the cancel, and the connection is closed, not
    pooled (httpcore would drop a shut socket too: it is readable when it comes back)."""
    budget = ws.Budget(20, clock=FakeClock())

    def cancel_at_the_first_event(happened: Any) -> None:
        if happened.event == "first_byte":
            budget.cancel()

    gone: List[bool] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(CHUNKED + chunked_body(1))
        gone.append(not read_request_head(conn))  # the client closed instead of asking again

    client = ws.httpx_client(idle_timeout=5, budget=budget)
    with RawServer(handler) as server, client:
        remove = ws.add_listener(cancel_at_the_first_event)
        try:
            with pytest.raises(ws.OperationCancelled), stream(client, server.url) as response:
                list(response.iter_bytes())
        finally:
            remove()
        assert pooled_connections(client) == []  # closed, not pooled
        assert wait_for(lambda: gone == [True])


def test_a_pooled_socket_shut_later_is_discarded_and_the_next_call_works(client: Any) -> None:
    """What httpcore does with a pooled socket that was shut (what a late shutdown would
    do): it is readable (EOF), so the pool discards it and the next call opens a new one."""
    with RawServer(serving(lambda i: [CHUNKED + chunked_body(1)])) as server:
        with stream(client, server.url) as response:
            assert numbers(b"".join(response.iter_bytes())) == [0]
        sock = response.extensions["network_stream"].get_extra_info("socket")
        assert len(pooled_connections(client)) == 1  # pooled
        sock.shutdown(socket.SHUT_RDWR)
        with stream(client, server.url) as response:
            assert numbers(b"".join(response.iter_bytes())) == [0]
        assert server.accepted == 2


def forward_to(port: int) -> Callable[[socket.socket, threading.Event], None]:
    """A RawServer handler that relays one connection to 127.0.0.1:``port`` (so that the
    RawServer counts the client's connections in front of a FaultGateway)."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as upstream:
            other = {conn: upstream, upstream: conn}
            while not stop.is_set():
                for side in select.select(list(other), [], [], 0.05)[0]:
                    data = side.recv(65536)
                    if not data:
                        return
                    other[side].sendall(data)

    return handler


def openai_chunk(content: str, finish: Any = None) -> bytes:
    delta = {"content": content} if finish is None else {}
    body = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return chunk(b"data: " + json.dumps(body).encode() + b"\n\n")


def test_two_openai_sdk_streams_in_a_row_use_one_server_connection() -> None:
    """The openai SDK closes the response at ``data: [DONE]``: the connection is pooled when
    the body's last chunk came with it (here in one segment), which the consumer's read has
    parsed before the SDK sees [DONE]. (Plain httpx2 closes it: h11 has not read that far.)"""
    body = [CHUNKED, openai_chunk("a"), openai_chunk("b")]
    body.append(openai_chunk("", "stop") + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    with RawServer(serving(lambda i: body)) as server, ws.httpx_client() as http:
        runs = [list(sdk_stream("openai", server.url + "/v1", http)) for _ in range(2)]
        assert server.accepted == 1 and len(pooled_connections(http)) == 1
    assert [len(run) for run in runs] == [3, 3]


def test_two_anthropic_sdk_streams_in_a_row_use_one_server_connection(
    fault_gateway: FaultGateway,
) -> None:
    """The anthropic SDK reads the body to its end: the connection is pooled and reused."""
    with RawServer(forward_to(fault_gateway.port)) as relay, ws.httpx_client() as http:
        base = fault_gateway.base_url("ok", api="anthropic", chunks=3)
        base = base.replace(fault_gateway.url, relay.url)
        runs = [list(sdk_stream("anthropic", base, http)) for _ in range(2)]
        assert relay.accepted == 1 and len(pooled_connections(http)) == 1
    assert runs[0] and len(runs[0]) == len(runs[1])


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("ending", ["closed early", "idle limit", "error event"])
def test_an_sdk_stream_that_did_not_finish_leaves_no_connection_to_reuse(
    fault_gateway: FaultGateway, api: str, ending: str
) -> None:
    """Closed after its first event, stopped at the idle limit, or ended by an error event:
    the next SDK call works, on a new connection."""
    scenario = {"closed early": "ok", "idle limit": "stall_after_chunks"}.get(
        ending, "error_mid_stream"
    )
    errors: Any = ws.StreamIdleTimeout
    if ending == "error event":  # openai's is a data event its SDK raises; anthropic's ours
        errors = openai.APIError if api == "openai" else ws.HTTPStatusError
    with RawServer(forward_to(fault_gateway.port)) as relay, ws.httpx_client(idle_timeout=0.3) as h:
        first = fault_gateway.base_url(scenario, api=api, chunks=3, interval=0.01)
        sdk = sdk_stream(api, first.replace(fault_gateway.url, relay.url), h)
        if ending == "closed early":
            next(iter(sdk))
            sdk.close()
        else:
            with raises_from_body(errors, sdk=api):
                list(sdk)
        assert pooled_connections(h) == []
        base = fault_gateway.base_url("ok", api=api, chunks=3)
        assert list(sdk_stream(api, base.replace(fault_gateway.url, relay.url), h))
        assert relay.accepted == 2
