"""A proxy that drip-feeds its reply to CONNECT (issue 12): every phase of a request through
HTTPS_PROXY, the tunnel included, ends at the budget and is shut from outside."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Iterator, List

import pytest
import requests
import trustme

import watchdog_sync as ws
from watchdog_sync import ChatClient, Session

from .rawserver import RawServer, read_request_head

pytestmark = pytest.mark.timeout(30)

MESSAGES = [{"role": "user", "content": "hi"}]
KEY = "test-key-0123456789"
FAST = ws.RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)
DRIP_EVERY = 0.5


class DripProxy:
    """A proxy that answers CONNECT with one header line every 0.5 s and never finishes.

    Between lines it watches the connection, so ``left_at`` records within about 50 ms when
    each client shut or closed its side (bounded: 60 lines, 30 s at most).
    """

    def __init__(self) -> None:
        self.connects: List[bytes] = []
        self.left_at: List[float] = []
        self._lock = threading.Lock()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        with self._lock:
            self.connects.append(head.split(b"\r\n", 1)[0])
        try:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n")
            for line in range(60):
                if self._client_left(conn, stop):
                    break
                conn.sendall(b"X-Drip-%d: still here\r\n" % line)
            else:
                return
        except OSError:
            pass  # a reset: the client left
        if not stop.is_set():
            with self._lock:
                self.left_at.append(time.monotonic())

    @staticmethod
    def _client_left(conn: socket.socket, stop: threading.Event) -> bool:
        """Wait one drip interval; True as soon as the client shuts its side (EOF)."""
        conn.settimeout(0.05)
        give_up = time.monotonic() + DRIP_EVERY
        while time.monotonic() < give_up:
            if stop.is_set():
                return True  # the server is stopping: nothing more to drip
            try:
                if conn.recv(4096) == b"":
                    return True
            except socket.timeout:
                continue
        return False

    def wait_until_left(self, count: int, limit: float = 3.0) -> bool:
        give_up = time.monotonic() + limit
        while time.monotonic() < give_up:
            with self._lock:
                if len(self.left_at) >= count:
                    return True
            time.sleep(0.01)
        return False


@pytest.fixture
def drip_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[DripProxy]:
    """A dripping proxy on 127.0.0.1, set as HTTPS_PROXY (and nothing bypasses it)."""
    proxy = DripProxy()
    with RawServer(proxy) as server:
        for name in ("NO_PROXY", "no_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTPS_PROXY", server.url)
        yield proxy


# The drip happens before TLS, so nothing needs to listen on the target port.
TARGET = "https://127.0.0.1:9/v1"


def test_session_through_a_dripping_proxy_stops_at_the_deadline(drip_proxy: DripProxy) -> None:
    """`with deadline(2): Session().get(...)` ends at the deadline and the proxy sees us leave."""
    started = time.monotonic()
    with Session() as session, pytest.raises(ws.DeadlineExceeded), ws.deadline(2):
        session.get(TARGET + "/models")
    elapsed = time.monotonic() - started
    assert 1.9 < elapsed < 3.0
    assert drip_proxy.connects == [b"CONNECT 127.0.0.1:9 HTTP/1.0"]
    assert drip_proxy.wait_until_left(1)
    assert drip_proxy.left_at[0] - started < 2.5  # shut from outside at the deadline


def test_connect_timeout_bounds_the_whole_proxy_reply(drip_proxy: DripProxy) -> None:
    """The CONNECT reply as a whole gets the connect timeout: each drip no longer resets it."""
    started = time.monotonic()
    with Session() as session, pytest.raises(requests.ConnectTimeout) as caught:
        session.get(TARGET + "/models", timeout=(1.0, 5.0))
    assert time.monotonic() - started < 1.8
    verdict = ws.classify(caught.value)
    assert (verdict.transport_code, verdict.retryable) == ("ETIMEDOUT", True)


def test_chat_complete_through_a_dripping_proxy_ends_at_its_timeout(
    drip_proxy: DripProxy,
) -> None:
    """`ChatClient(timeout=2).complete()` through the dripping proxy ends on time."""
    started = time.monotonic()
    with (
        ChatClient(TARGET, KEY, model="m", timeout=2, retry=FAST) as client,
        pytest.raises(ws.DeadlineExceeded),
    ):
        client.complete(MESSAGES)
    assert time.monotonic() - started < 3.0
    assert drip_proxy.wait_until_left(len(drip_proxy.connects))


def test_chat_stream_through_a_dripping_proxy_leaves_no_reader_or_socket(
    drip_proxy: DripProxy,
) -> None:
    """`stream()` ends on time and its reader thread and socket are gone right after."""
    started = time.monotonic()
    with (
        ChatClient(TARGET, KEY, model="m", timeout=2, retry=FAST) as client,
        pytest.raises(ws.DeadlineExceeded),
    ):
        client.stream(MESSAGES)
    ended = time.monotonic()
    assert ended - started < 3.0
    assert drip_proxy.wait_until_left(len(drip_proxy.connects))
    assert max(drip_proxy.left_at) - ended < 0.5  # shut from outside, not left to linger
    # the leak fixture checks that no reader thread and no descriptor is left


class RelayProxy:
    """A well-behaved tunnelling proxy: CONNECT, 200, then bytes both ways (5 s at most)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        with socket.create_connection(("127.0.0.1", self.target_port), timeout=2) as upstream:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\nX-Proxy: relay\r\n\r\n")
            give_up = time.monotonic() + 5.0
            for sock in (conn, upstream):
                sock.settimeout(0.05)
            while not stop.is_set() and time.monotonic() < give_up:
                for source, sink in ((conn, upstream), (upstream, conn)):
                    try:
                        data = source.recv(65536)
                    except socket.timeout:
                        continue
                    if not data:
                        return
                    sink.sendall(data)


def test_a_well_behaved_proxy_still_tunnels_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded tunnel reply does not disturb a normal CONNECT + TLS exchange."""
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    with (
        authority.cert_pem.tempfile() as ca_path,
        RawServer(answer_once, tls=context) as target,
        RawServer(RelayProxy(target.port)) as proxy,
    ):
        for name in ("NO_PROXY", "no_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        with Session() as session, ws.deadline(5):
            response = session.get(target.url + "/", verify=ca_path, timeout=(2, 2))
        assert response.text == "ok"
        assert (proxy.accepted, target.accepted) == (1, 1)


def answer_once(conn: socket.socket, stop: threading.Event) -> None:
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


def slow_tunnel_then_dripping_handshake(conn: socket.socket, stop: threading.Event) -> None:
    """CONNECT answered after 1 s; then, as the "server", a TLS record that never completes."""
    read_request_head(conn)
    if stop.wait(1.0):
        return
    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    conn.recv(65536)  # the client hello
    conn.sendall(b"\x16\x03\x03\x40\x00")  # a 16 KiB handshake record ...
    for _ in range(100):  # ... sent one byte every 0.1 s (10 s at most)
        if stop.wait(0.1):
            return
        conn.sendall(b"\x02")


def test_a_tls_handshake_after_a_slow_tunnel_still_ends_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handshake, too, ends with the budget (it cannot be shut from outside)."""
    with RawServer(slow_tunnel_then_dripping_handshake) as proxy:
        for name in ("NO_PROXY", "no_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        started = time.monotonic()
        with Session() as session, pytest.raises(ws.DeadlineExceeded), ws.deadline(1.6):
            session.get(TARGET + "/models", timeout=(5, 5))
        assert time.monotonic() - started < 2.2
