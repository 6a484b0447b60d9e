"""Socket-backed streams (``stream_sse``), read by their consumers: every socket, nothing
lost or stuck, no thread each."""

from __future__ import annotations

import gc
import json
import os
import socket
import ssl
import threading
import time
from typing import Iterator, List

import pytest
import trustme

import watchdog_sync as ws
import watchdog_sync.testing
from watchdog_sync import stream_sse

from .internals import FramingDecoder, buffered_events
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


def numbers(events: Iterator[object]) -> List[int]:
    return [json.loads(e.data)["n"] for e in events]  # type: ignore[attr-defined]


def test_events_that_arrived_with_the_headers_are_delivered_at_once() -> None:
    """Bytes http.client buffered with the headers never wait for the socket to be readable."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(SSE_HEAD + b"".join(chunk(event(n)) for n in range(3)))  # one segment
        wait_for_disconnect(conn, stop)

    with RawServer(handler) as server:
        stream = stream_sse(server.url, idle_timeout=0.5)
        with stream:
            got = numbers(next(stream) for _ in range(3))
    assert got == [0, 1, 2]


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_chunked_framing_split_anywhere_is_decoded(size: int) -> None:
    """Chunk-size lines, data and CRLFs cut at every place, on the wire and in the decoder."""
    body = b"".join(chunk(event(n)) for n in range(4)) + b"0\r\n\r\n"
    decoder = FramingDecoder(chunked=True, length=None)
    decoded = b"".join(decoder.feed(body[i : i + size]) for i in range(0, len(body), size))
    assert decoded == b"".join(event(n) for n in range(4)) and decoder.done

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(SSE_HEAD)
        for i in range(0, len(body), size):
            conn.sendall(body[i : i + size])
            stop.wait(0.0005)  # the scenario: each piece its own segment

    with RawServer(handler) as server:
        assert numbers(stream_sse(server.url, idle_timeout=5)) == [0, 1, 2, 3]


def test_tls_bursts_larger_than_one_read_are_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over TLS, a burst larger than one read (decrypted bytes left pending in the SSL object,
    invisible to poll) is still delivered whole and in order."""
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    count = 400  # about 1 KiB each: more than one read takes

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(SSE_HEAD + b"".join(chunk(event(n, 1000)) for n in range(count)))
        end_body(conn)

    with authority.cert_pem.tempfile() as ca_path, RawServer(handler, tls=context) as server:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", ca_path)
        assert numbers(stream_sse(server.url, idle_timeout=5)) == list(range(count))


def test_a_consumer_that_stops_reading_leaves_its_socket_unread_and_memory_bounded() -> None:
    """A fast server and a consumer that stops: nothing is read while it is away (at most one
    read's events wait); then everything arrives once it drains."""
    count = 20000
    small = event(0)

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        conn.settimeout(10)
        for n in range(count):
            send_body_piece(conn, event(n))
        end_body(conn)

    one_read = 65536 // len(small) + 1
    with RawServer(handler) as server:
        stream = stream_sse(server.url, idle_timeout=10)
        assert numbers([next(stream)]) == [0]
        time.sleep(0.2)  # the scenario: the consumer stays away while the server could send
        assert buffered_events(stream) <= one_read
        assert numbers(stream) == list(range(1, count))


def test_a_consumer_that_breaks_releases_the_connection() -> None:
    """``break`` and drop the stream: the connection is shut and let go."""
    gone: List[bool] = []

    with RawServer(three_events_until_disconnect(gone)) as server:
        for _ in stream_sse(server.url, idle_timeout=5):
            break
        gc.collect()
        assert wait_for(lambda: bool(gone), 3) and gone == [True]


def test_twenty_concurrent_streams_add_no_thread_each() -> None:
    """Socket-backed streams add no thread each: each is read by its consumer."""
    release = threading.Event()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        release.wait(5)
        send_body_piece(conn, event(1))
        end_body(conn)

    with RawServer(handler, max_connections=20) as server:
        streams = [stream_sse(server.url, idle_timeout=5) for _ in range(20)]
        assert [numbers([next(s)]) for s in streams] == [[0]] * 20  # all twenty are open
        ours = [t.name for t in threading.enumerate() if t.name.startswith("watchdog_sync")]
        release.set()
        assert [numbers(s) for s in streams] == [[1]] * 20
    assert set(ours) <= {ws.testing.WATCHDOG_THREAD_NAME}


def test_a_stalled_socket_never_holds_up_the_others() -> None:
    """One stream stalls in the middle of a chunk; another keeps its 20 ms pace."""

    def stalled(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(SSE_HEAD + b"40\r\ndata: half an ev")  # a chunk that never completes
        wait_for_disconnect(conn, stop)

    def paced(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        for n in range(10):
            send_body_piece(conn, event(n))
            if stop.wait(0.02):
                return
        end_body(conn)

    with RawServer(stalled) as slow, RawServer(paced) as fast:
        stuck = stream_sse(slow.url, idle_timeout=5)
        waiting = threading.Thread(target=lambda: list(stuck), daemon=True)
        with stuck:
            waiting.start()
            arrivals: List[float] = []
            for _ in stream_sse(fast.url, idle_timeout=5):
                arrivals.append(time.monotonic())
            assert len(arrivals) == 10
            gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
            assert max(gaps) < 0.5  # generous: two noisy cores
        waiting.join(5)


def test_the_deadline_ends_a_paused_stream_and_shuts_its_socket() -> None:
    """The consumer stopped reading when the budget ends: the socket is shut and the body
    ended from the watchdog thread, so the connection ends at the deadline, not when the
    consumer comes back."""
    disconnected: List[float] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        conn.settimeout(0.2)
        piece = b"".join(chunk(event(n)) for n in range(100))
        view = memoryview(piece)
        while not stop.is_set():
            try:
                view = view[conn.send(view) :] or memoryview(piece)
            except socket.timeout:
                continue  # the client's window is full: it does not read
            except OSError:
                disconnected.append(time.monotonic())
                return

    with RawServer(handler) as server:
        budget = ws.Budget(0.5)
        stream = stream_sse(server.url, idle_timeout=10, budget=budget)
        next(stream)
        started = time.monotonic()
        assert wait_for(lambda: bool(disconnected), 5)
        assert disconnected[0] - started < 2.0
        with pytest.raises(ws.DeadlineExceeded):
            list(stream)


def test_a_child_after_fork_reads_its_own_streams_while_the_parents_go_on() -> None:
    """A fork while a parent's stream is open: the child's stream is read whole, and the
    parent's goes on."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        for n in range(3):
            send_body_piece(conn, event(n))
            if stop.wait(0.01):
                return
        end_body(conn)

    with RawServer(handler) as server:
        parent = stream_sse(server.url, idle_timeout=5)
        with parent:
            assert numbers([next(parent)]) == [0]  # the parent's stream is open
            pid = os.fork()
            if pid == 0:  # the child: exits by itself, whatever happens
                code = 1
                try:
                    code = 0 if numbers(stream_sse(server.url, idle_timeout=5)) == [0, 1, 2] else 2
                finally:
                    os._exit(code)
            give_up = time.monotonic() + 20
            status = 0
            while time.monotonic() < give_up:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.02)
            else:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise AssertionError("the child's stream hung")
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            assert numbers(parent) == [1, 2]


def test_the_first_event_limit_counts_from_the_first_next_when_the_request_goes_out() -> None:
    """The request is sent at the first ``next()``: time the caller spends between
    ``stream_sse()`` and iterating is not counted against ``first_event_timeout``."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, event(0))
        end_body(conn)

    with RawServer(handler) as server:
        stream = stream_sse(server.url, idle_timeout=5, first_event_timeout=0.2)
        time.sleep(0.3)  # the scenario: the caller sets up for longer than the limit
        assert numbers(stream) == [0]


def test_a_kept_alive_connection_is_closed_and_the_next_stream_opens_its_own() -> None:
    """A stream read to its end over a keep-alive connection closes it (requests and
    urllib3 saw none of the body, so none of it can be left for the next request): the
    session's next stream opens a new connection, and works."""
    served: List[int] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        for n in range(2):  # two requests on this connection, if the client reuses it
            if not read_request_head(conn):
                return
            conn.sendall(SSE_HEAD + chunk(event(n)) + b"0\r\n\r\n")
            served.append(n)

    with RawServer(handler) as server, ws.Session() as session:
        first = numbers(stream_sse(server.url, method="GET", idle_timeout=5, session=session))
        second = numbers(stream_sse(server.url, method="GET", idle_timeout=5, session=session))
    assert (first, second, server.accepted) == ([0], [0], 2)
