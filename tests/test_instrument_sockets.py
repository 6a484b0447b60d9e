"""instrument(sockets=True): any socket connected in a scope is bound by it, on real sockets."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.request
from typing import Any, Dict

import pytest
import requests
import trustme

import watchdog_sync as ws

from .rawserver import RawServer, mute, read_request_head, silent

pytestmark = pytest.mark.timeout(30)

SLACK = 0.8
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def answer_ok(conn: socket.socket, stop: threading.Event) -> None:
    while read_request_head(conn):
        conn.sendall(OK)


def _ends_by_deadline(call: Any, limit: float) -> float:
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(limit):
        call()
    return time.monotonic() - started


def test_a_blocked_recv_on_a_raw_socket_ends_at_the_deadline(bound_sockets: None) -> None:
    """recv() with no timeout of its own, inside deadline(1): DeadlineExceeded at ~1 s."""
    with RawServer(mute) as server:

        def read() -> None:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.settimeout(None)  # the program's own choice: wait for ever
                sock.recv(100)

        elapsed = _ends_by_deadline(read, 1.0)
    assert 0.9 <= elapsed < 1.0 + SLACK


def test_http_client_ends_at_the_deadline(bound_sockets: None) -> None:
    with RawServer(silent) as server:

        def ask() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            try:
                conn.request("GET", "/")
                conn.getresponse()
            finally:
                conn.close()

        elapsed = _ends_by_deadline(ask, 0.6)
    assert elapsed < 0.6 + SLACK


def test_urllib_request_ends_at_the_deadline(bound_sockets: None) -> None:
    with RawServer(silent) as server:
        elapsed = _ends_by_deadline(lambda: urllib.request.urlopen(server.url, timeout=30), 0.6)
    assert elapsed < 0.6 + SLACK


def test_a_tls_socket_is_shut_at_the_deadline(bound_sockets: None) -> None:
    """The registration moves to the TLS socket that wraps the connected one."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    with RawServer(silent, tls=server_context) as server:

        def ask() -> None:
            conn = http.client.HTTPSConnection(
                "127.0.0.1", server.port, timeout=30, context=client_context
            )
            try:
                conn.request("GET", "/")
                conn.getresponse()
            finally:
                conn.close()

        elapsed = _ends_by_deadline(ask, 0.8)
    assert elapsed < 0.8 + SLACK


def test_the_connect_timeout_is_clipped_to_the_time_left(bound_sockets: None) -> None:
    """A socket with no timeout connects with at most what the scope has left."""
    with RawServer(answer_ok) as server, ws.deadline(3):
        sock = socket.create_connection(("127.0.0.1", server.port))
        try:
            timeout = sock.gettimeout()
            assert timeout is not None and 2 < timeout <= 3
        finally:
            sock.close()


def test_outside_a_scope_a_socket_is_left_as_it_is(bound_sockets: None) -> None:
    with RawServer(answer_ok) as server:
        sock = socket.create_connection(("127.0.0.1", server.port))
        try:
            assert sock.gettimeout() is None
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
        finally:
            sock.close()


def test_a_socket_closed_in_time_is_not_touched_at_the_end(bound_sockets: None) -> None:
    """A finished exchange inside a short scope: the answer, and no error at its end."""
    ended = threading.Event()
    with RawServer(answer_ok) as server:
        with ws.deadline(0.3) as budget:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            conn.request("GET", "/")
            assert conn.getresponse().read() == b"ok"
            conn.close()
            budget.on_done(lambda _: ended.set())
        assert ended.wait(5)


def test_requests_sockets_are_left_to_the_urllib3_guard() -> None:
    """With urllib3 instrumented too, a pooled connection survives its scope's end."""
    undo = ws.instrument(sockets=True)
    ended = threading.Event()
    try:
        with RawServer(answer_ok) as server, requests.Session() as session:
            with ws.deadline(0.3) as budget:
                assert session.get(server.url, timeout=5).text == "ok"
                budget.on_done(lambda _: ended.set())
            assert ended.wait(5)
            assert session.get(server.url, timeout=5).text == "ok"
            assert server.accepted == 1
    finally:
        undo()


def test_undo_restores_the_socket_classes_exactly() -> None:
    def snapshot() -> Dict[str, Any]:
        return {
            "socket": dict(vars(socket.socket)),
            "ssl": dict(vars(ssl.SSLSocket)),
            "context": dict(vars(ssl.SSLContext)),
        }

    before = snapshot()
    ws.instrument(sockets=True)()
    assert snapshot() == before


def test_sockets_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="sockets"):
        ws.instrument(sockets="yes")  # type: ignore[arg-type]


def test_sockets_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_SYNC_INSTRUMENT_SOCKETS", "on")
    undo = ws.instrument(urllib3=False, httpx=False)
    try:
        with RawServer(mute) as server:

            def read() -> None:
                with socket.create_connection(("127.0.0.1", server.port)) as sock:
                    sock.recv(100)

            assert _ends_by_deadline(read, 0.5) < 0.5 + SLACK
    finally:
        undo()
