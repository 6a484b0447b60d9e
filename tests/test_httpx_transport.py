"""HTTPXTransport with bare httpx2 (and httpx 0.28) calls against raw local servers: every
phase bounded by the budget, sockets shut from outside, never a socket back in the pool."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from typing import Any, Iterator, List

import httpx
import httpx2
import pytest

import watchdog_sync as ws

from .rawserver import RawServer, read_request_head, silent

pytestmark = pytest.mark.timeout(30)

DEADLINE = 1.0
SLACK = 0.3
OK_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def slow_drip(conn: socket.socket, stop: threading.Event) -> None:
    """Headers at once, then a 1000-byte body one byte every 0.1 s."""
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        conn.sendall(b"x")
        if stop.wait(0.1):
            return


def stall_in_body(conn: socket.socket, stop: threading.Event) -> None:
    """Headers and one byte of a 1000-byte body, then nothing."""
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nx")
    stop.wait(10)


def answer_ok_keepalive(conn: socket.socket, stop: threading.Event) -> None:
    """Answer every request on the connection with 200 ok."""
    while not stop.is_set():
        if not read_request_head(conn):
            return
        conn.sendall(OK_RESPONSE)


@pytest.fixture
def client() -> Iterator[httpx2.Client]:
    with ws.httpx_client(idle_timeout=30) as made:
        yield made


def test_import_watchdog_sync_imports_no_httpx() -> None:
    """httpx2, httpx and the SDKs (google-genai, litellm, langchain-openai too) stay unimported
    until HTTPXTransport is used."""
    code = (
        "import sys, watchdog_sync\n"
        "watchdog_sync.HTTPXTransport, watchdog_sync.httpx_client\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('httpx', 'httpx2', 'httpcore', 'httpcore2', 'openai', 'anthropic', 'google', "
        "'litellm', 'langchain_openai', 'langchain_core')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_transport_is_a_base_transport_of_the_wrapped_library() -> None:
    default = ws.HTTPXTransport()
    legacy = ws.HTTPXTransport(httpx.HTTPTransport())
    try:
        assert isinstance(default, httpx2.BaseTransport) and isinstance(default, ws.HTTPXTransport)
        assert isinstance(legacy, httpx.BaseTransport)
        assert not isinstance(legacy, httpx2.BaseTransport)
        assert "HTTPXTransport around" in repr(legacy)
    finally:
        default.close()
        legacy.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"transport": object()}, TypeError, "transport"),
        ({"budget": 5}, TypeError, "budget"),
        ({"idle_timeout": float("nan")}, ValueError, "idle_timeout"),
        ({"first_event_timeout": "1"}, TypeError, "first_event_timeout"),
        ({"max_event_bytes": 10}, ValueError, "max_event_bytes"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs: Any, error: type, names: str) -> None:
    with pytest.raises(error, match=names):
        ws.HTTPXTransport(**kwargs)


def test_the_deadline_holds_on_a_dripping_body(client: httpx2.Client) -> None:
    """A byte every 0.1 s never trips a read timeout; the socket is shut at the deadline."""
    with RawServer(slow_drip) as server:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
            client.get(server.url, timeout=30)
        assert time.monotonic() - started <= DEADLINE + SLACK


def test_the_deadline_holds_while_waiting_for_headers(client: httpx2.Client) -> None:
    with RawServer(silent) as server:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
            client.get(server.url, timeout=30)
        assert time.monotonic() - started <= DEADLINE + SLACK


def test_cancel_wakes_a_blocked_body_read(client: httpx2.Client) -> None:
    """budget.cancel() from another thread ends a read that no timeout would end."""
    with RawServer(stall_in_body) as server:
        started = time.monotonic()
        with pytest.raises(ws.OperationCancelled), ws.deadline(10) as budget:
            ws.Budget(0.3).on_done(lambda _: budget.cancel())  # on the watchdog thread
            client.get(server.url, timeout=30)
        assert time.monotonic() - started <= 0.3 + SLACK


def test_budget_argument_is_the_boundary() -> None:
    """Without a scope, the transport's own budget raises DeadlineExceeded itself."""
    plain = httpx2.Client(transport=ws.HTTPXTransport(budget=ws.Budget(DEADLINE)))
    with RawServer(slow_drip) as server, plain:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded):
            plain.get(server.url, timeout=30)
        assert time.monotonic() - started <= DEADLINE + SLACK


def _local_port(response: Any) -> int:
    return int(response.extensions["network_stream"].get_extra_info("client_addr")[1])


def test_a_socket_back_in_the_pool_is_never_shut(client: httpx2.Client) -> None:
    """The budget of a finished request ends: its pooled connection serves the next request."""
    with RawServer(answer_ok_keepalive) as server:
        with ws.deadline(10) as budget:
            first = client.get(server.url)
            assert first.text == "ok"
            budget.cancel()
            ran = threading.Event()
            budget.on_done(lambda _: ran.set())  # after every callback registered before it
            assert ran.wait(2)
        second = client.get(server.url)
        assert second.text == "ok"
        assert _local_port(second) == _local_port(first)
        assert server.accepted == 1


def test_an_httpx_028_transport_is_wrapped_and_bounded() -> None:
    """httpx (not httpx2): HTTPXTransport around its transport is an httpx.BaseTransport."""
    legacy = ws.httpx_client(transport=httpx.HTTPTransport())
    with RawServer(slow_drip) as server, legacy:
        assert isinstance(legacy, httpx.Client)
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
            legacy.get(server.url, timeout=30)
        assert time.monotonic() - started <= DEADLINE + SLACK


def test_proxies_from_the_environment_keep_working(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY routes through the proxy as with a default client, and stays bounded."""
    lines: List[bytes] = []

    def proxy(conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        lines.append(head.split(b"\r\n", 1)[0])
        if b"/drip" in head:
            slow_drip_after_head(conn, stop)
        else:  # one request per connection: the client must not reuse one this handler closes
            conn.sendall(OK_RESPONSE.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))

    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    with RawServer(proxy) as server:
        monkeypatch.setenv("HTTP_PROXY", server.url)
        with ws.httpx_client(idle_timeout=30) as proxied:
            assert proxied.get("http://upstream.invalid/ok").text == "ok"
            started = time.monotonic()
            with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
                proxied.get("http://upstream.invalid/drip", timeout=30)
            assert time.monotonic() - started <= DEADLINE + SLACK
    assert lines[0] == b"GET http://upstream.invalid/ok HTTP/1.1"


def slow_drip_after_head(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        conn.sendall(b"x")
        if stop.wait(0.1):
            return
