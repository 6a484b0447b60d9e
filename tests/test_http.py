"""Session: every phase of a request is bounded by the budget, against real local sockets."""

from __future__ import annotations

import inspect
import socket
import ssl
import struct
import threading
import time
from typing import Iterator

import pytest
import requests
import trustme
from urllib3 import connection as urllib3_connection
from urllib3 import connectionpool
from urllib3.util import Timeout

import watchdog_sync as ws
from watchdog_sync import Session
from watchdog_sync.testing import FaultGateway

from .internals import clip_timeout
from .rawserver import RawServer, read_request_head, silent

pytestmark = pytest.mark.timeout(30)

OK_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def slow_drip(conn: socket.socket, stop: threading.Event) -> None:
    """Headers at once, then a 1000-byte body one byte every 0.2 s."""
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        conn.sendall(b"x")
        if stop.wait(0.2):
            return


def answer_ok_keepalive(conn: socket.socket, stop: threading.Event) -> None:
    """Answer every request on the connection with 200 ok."""
    while not stop.is_set():
        if not read_request_head(conn):
            return
        conn.sendall(OK_RESPONSE)


def reset(conn: socket.socket, stop: threading.Event) -> None:
    read_request_head(conn)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.fixture
def session() -> Iterator[Session]:
    with Session() as s:
        yield s


def test_slow_drip_body_ends_at_the_deadline_not_when_the_body_ends(session: Session) -> None:
    """Read timeouts count bytes, not progress: only the deadline stops a drip."""
    with RawServer(slow_drip) as server:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(1.0):
            session.get(server.url, timeout=5)
        elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 1.5


def test_explicit_budget_without_a_scope_raises_deadline_exceeded() -> None:
    with RawServer(silent) as server, Session(budget=ws.Budget(0.4)) as s:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded):
            s.get(server.url)
        assert time.monotonic() - started < 1.0


def test_inside_a_scope_the_request_raises_cancelled_for_the_scope(session: Session) -> None:
    """The request raises Cancelled for the scope; swallowed, the scope's late exit still fails."""
    late = pytest.raises(ws.DeadlineExceeded, match="swallowed")
    with RawServer(silent) as server, late, ws.deadline(0.3) as budget:
        with pytest.raises(ws.Cancelled) as info:
            session.get(server.url)
        assert info.value.budget is budget


def test_cancel_from_another_thread_stops_a_blocked_request(session: Session) -> None:
    budget = ws.Budget(30)
    with RawServer(silent) as server:
        threading.Thread(target=lambda: (time.sleep(0.2), budget.cancel())).start()
        started = time.monotonic()
        with pytest.raises(ws.OperationCancelled), Session(budget=budget) as s:
            s.get(server.url)
        assert time.monotonic() - started < 1.0


def test_transport_failures_keep_requests_own_types(session: Session) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(requests.ConnectionError), ws.deadline(5):
        session.get(f"http://127.0.0.1:{port}/")


def test_urllib3_retries_are_off_one_reset_means_one_connection(session: Session) -> None:
    with RawServer(reset) as server:
        with pytest.raises(requests.ConnectionError):
            session.get(server.url, timeout=2)
        assert server.accepted == 1


def test_a_connection_shut_at_the_deadline_is_never_reused(session: Session) -> None:
    state = {"calls": 0}

    def first_silent_then_ok(conn: socket.socket, stop: threading.Event) -> None:
        state["calls"] += 1
        if state["calls"] == 1:
            answer_once_then_silent(conn, stop)
        else:
            answer_ok_keepalive(conn, stop)

    def answer_once_then_silent(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        conn.sendall(OK_RESPONSE)
        read_request_head(conn)
        stop.wait(10)

    with RawServer(first_silent_then_ok) as server:
        assert session.get(server.url).text == "ok"  # pooled, kept alive
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.3):
            session.get(server.url)  # reuses the pooled connection; the server goes silent
        assert session.get(server.url, timeout=2).text == "ok"
        assert server.accepted == 2  # the shut connection was dropped, a new one opened


def test_a_streamed_body_read_after_the_request_is_still_bounded() -> None:
    with RawServer(slow_drip) as server, Session(budget=ws.Budget(0.6)) as s:
        response = s.get(server.url, stream=True)
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded):
            for _ in response.iter_content(1):
                pass
        assert time.monotonic() - started < 1.0
        response.close()


def test_a_server_blocked_writing_learns_at_once_that_the_client_left(
    fault_gateway: FaultGateway,
) -> None:
    """A connection shut at the deadline is reset on close: a server stuck on a full window
    is told at once, instead of probing an orphaned socket until the kernel drops it (60 s)."""
    base = fault_gateway.base_url("huge_line", size=256 * 1024 * 1024, piece=1024 * 1024)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    budget = ws.Budget(0.3)
    with Session(budget=budget) as s:
        response = s.post(base + "/chat/completions", json=body, stream=True, timeout=(2, 2))
        # Not reading lets the server fill both socket buffers; then the budget ends.
        while not budget.ended:
            time.sleep(0.01)
        with pytest.raises(ws.DeadlineExceeded):
            for _ in response.iter_content(1024 * 1024):
                pass  # what was queued before the shutdown, then the end: the socket is drained
        response.close()
    closed_at = time.monotonic()
    while time.monotonic() - closed_at < 2.0:
        (seen,) = fault_gateway.requests_seen(base)
        if seen.ended_at is not None:
            break
        time.sleep(0.01)
    assert seen.client_disconnected
    assert seen.ended_at is not None and seen.ended_at - closed_at < 0.5


def test_tls_slow_drip_is_shut_at_the_deadline() -> None:
    authority = trustme.CA()
    cert = authority.issue_cert("127.0.0.1")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_context)
    with (
        authority.cert_pem.tempfile() as ca_path,
        RawServer(slow_drip, tls=server_context) as server,
        Session() as s,
    ):
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(1.0):
            s.get(server.url, verify=ca_path, timeout=5)
        assert time.monotonic() - started < 1.6


def test_host_names_resolve_within_the_connect_timeout(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_getaddrinfo = socket.getaddrinfo

    def slow_dns(*args: object, **kwargs: object) -> object:
        time.sleep(0.6)  # a resolver that hangs longer than the connect timeout
        return real_getaddrinfo(*args, **kwargs)  # type: ignore[arg-type]

    with RawServer(answer_ok_keepalive) as server:
        url = f"http://localhost:{server.port}/"
        assert session.get(url, timeout=2).text == "ok"
        monkeypatch.setattr(socket, "getaddrinfo", slow_dns)
        started = time.monotonic()
        with pytest.raises(requests.ConnectTimeout):
            Session().get(f"http://example.invalid:{server.port}/", timeout=(0.2, 1))
        assert time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    ("timeout", "remaining", "expected"),
    [
        (None, float("inf"), None),
        (None, 2.0, (2.0, 2.0)),
        (10, 2.0, (2.0, 2.0)),
        (1, 2.0, (1.0, 1.0)),
        ((0.5, 30), 2.0, (0.5, 2.0)),
        ((None, 1), 3.0, (3.0, 1.0)),
        (Timeout(connect=1, read=9), 4.0, (1.0, 4.0)),
    ],
)
def test_timeouts_are_clipped_to_the_remaining_budget(
    timeout: object, remaining: float, expected: object
) -> None:
    assert clip_timeout(timeout, remaining) == expected


def test_repr_shows_no_headers_or_credentials() -> None:
    s = Session()
    s.headers["Authorization"] = "Bearer sk-secret-value"
    assert "sk-secret" not in repr(s)
    s.close()


def test_urllib3_internals_we_rely_on_are_still_there() -> None:
    """Fails loudly if urllib3 changes what Session's bounds are built on."""
    assert "_dns_host" in inspect.getsource(urllib3_connection.HTTPConnection._new_conn)
    for name in ("_get_conn", "_put_conn", "ConnectionCls"):
        assert hasattr(connectionpool.HTTPConnectionPool, name)
    manager = requests.adapters.HTTPAdapter().poolmanager
    assert "http" in manager.pool_classes_by_scheme
