"""instrument() and httpx2/httpx: the openai SDK with its defaults ends at the deadline, on real sockets."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Iterator

import anthropic
import httpcore2
import httpx
import httpx2
import openai
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import READER_THREAD_NAME, FaultGateway

from .internals import httpx_patches
from .rawserver import RawServer, read_request_head, silent

pytestmark = pytest.mark.timeout(60)

MESSAGES = [{"role": "user", "content": "hi"}]
KEY = "sk-test-0123456789abcdef"
DEADLINE = 1.5
SLACK = 0.4  # the deadline holds to +0.1 s; 2 noisy shared cores get more room
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


@pytest.fixture
def instrumented() -> Iterator[None]:
    undo = ws.instrument()
    try:
        yield
    finally:
        undo()


@pytest.fixture(scope="module")
def gateway() -> Iterator[FaultGateway]:
    with FaultGateway() as gw:
        yield gw


def answer_after_a_while(conn: socket.socket, stop: threading.Event) -> None:
    read_request_head(conn)
    if not stop.wait(0.8):
        conn.sendall(OK)


def _stream_all(client: openai.OpenAI) -> int:
    chunks = 0
    for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        chunks += 1
    return chunks


def _read_messages(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model="m", max_tokens=8, messages=MESSAGES) as stream:
        for _ in stream:
            pass


def _ended(gateway: FaultGateway, base: str, limit: float = 2.0) -> bool:
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        seen = gateway.requests_seen(base)
        if seen and all(r.ended_at is not None for r in seen):
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize(
    "scenario", ["silent_after_200", "stall_after_chunks", "slow_drip", "no_headers"]
)
def test_the_openai_sdk_with_defaults_ends_at_the_deadline(
    instrumented: None, gateway: FaultGateway, scenario: str
) -> None:
    """openai.OpenAI() as is (600 s timeout, 2 retries): DeadlineExceeded on time, one request."""
    base = gateway.base_url(scenario)
    with openai.OpenAI(base_url=base, api_key=KEY) as client:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
            _stream_all(client)
        elapsed = time.monotonic() - started
    assert DEADLINE - 0.1 <= elapsed < DEADLINE + SLACK
    assert len(gateway.requests_seen(base)) == 1  # the SDK's retry loop did not swallow it
    assert _ended(gateway, base)


def test_the_anthropic_sdk_with_defaults_ends_at_the_deadline(
    instrumented: None, gateway: FaultGateway
) -> None:
    """anthropic.Anthropic() as is, on a stream of pings only: DeadlineExceeded on time."""
    base = gateway.base_url("pings_only", api="anthropic")
    with anthropic.Anthropic(base_url=base, api_key=KEY) as client:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(DEADLINE):
            _read_messages(client)
        elapsed = time.monotonic() - started
    assert DEADLINE - 0.1 <= elapsed < DEADLINE + SLACK
    assert len(gateway.requests_seen(base)) == 1


def test_a_healthy_sdk_stream_in_a_scope_arrives_whole(
    instrumented: None, gateway: FaultGateway
) -> None:
    with openai.OpenAI(base_url=gateway.base_url("ok"), api_key=KEY) as client, ws.deadline(10):
        assert _stream_all(client) > 0


@pytest.mark.parametrize("library", [httpx2, httpx], ids=["httpx2", "httpx"])
def test_a_bare_httpx_call_ends_at_the_deadline(instrumented: None, library: Any) -> None:
    with RawServer(silent) as server, library.Client(timeout=30) as client:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(1.0):
            client.get(server.url)
        elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 1.0 + SLACK


def answer_ok_keepalive(conn: socket.socket, stop: threading.Event) -> None:
    while not stop.is_set():
        if not read_request_head(conn):
            return
        conn.sendall(OK)


def test_a_pooled_httpx2_connection_is_not_shut_after_the_scope_ended(instrumented: None) -> None:
    """The response was read and closed: the budget's end leaves its connection in the pool."""
    ended = threading.Event()
    with RawServer(answer_ok_keepalive) as server, httpx2.Client(timeout=5) as client:
        with ws.deadline(0.3) as budget:
            assert client.get(server.url).text == "ok"
            budget.on_done(lambda _: ended.set())
        assert ended.wait(5)
        assert client.get(server.url).text == "ok"
        assert server.accepted == 1


def test_outside_a_scope_a_slow_httpx2_call_still_completes(instrumented: None) -> None:
    with RawServer(answer_after_a_while) as server, httpx2.Client(timeout=5) as client:
        assert client.get(server.url).text == "ok"


@pytest.mark.parametrize("in_scope", [False, True])
def test_guard_stream_over_an_sdk_stream_shuts_its_socket_on_idle(
    instrumented: None, gateway: FaultGateway, in_scope: bool
) -> None:
    """No on_timeout: the idle timeout wakes the reader blocked in the SDK's recv."""
    base = gateway.base_url("stall_after_chunks")
    with openai.OpenAI(base_url=base, api_key=KEY) as client, ws.deadline(20 if in_scope else None):
        sdk_stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        with (
            pytest.raises(ws.StreamIdleTimeout),
            ws.guard_stream(sdk_stream, idle_timeout=0.5) as g,
        ):
            for _ in g:
                pass
        assert _ended(gateway, base, 1.0)
        give_up = time.monotonic() + 1.0
        while time.monotonic() < give_up and any(
            t.name == READER_THREAD_NAME for t in threading.enumerate()
        ):
            time.sleep(0.01)
        assert not any(t.name == READER_THREAD_NAME for t in threading.enumerate())


def test_httpx_client_and_instrument_together_bind_once(
    instrumented: None, gateway: FaultGateway
) -> None:
    base = gateway.base_url("silent_after_200")
    http = ws.httpx_client(idle_timeout=0)
    with openai.OpenAI(base_url=base, api_key=KEY, http_client=http, max_retries=0) as client:
        started = time.monotonic()
        with pytest.raises(ws.DeadlineExceeded), ws.deadline(1.0):
            _stream_all(client)
        assert time.monotonic() - started < 1.0 + SLACK


def test_undo_restores_the_httpx_transports_exactly() -> None:
    """httpx's transports and httpcore's network classes (backend and stream) alike."""
    patched = httpx_patches()
    assert patched is not None
    classes = list(dict.fromkeys(owner for owner, _ in patched.targets()))
    assert {httpx2.HTTPTransport, httpx.HTTPTransport, httpcore2.SyncBackend} <= set(classes)
    before = [dict(vars(cls)) for cls in classes]
    ws.instrument()()
    assert [dict(vars(cls)) for cls in classes] == before


def test_httpx_false_leaves_httpx_alone() -> None:
    original = httpx2.HTTPTransport.handle_request
    undo = ws.instrument(httpx=False)
    try:
        assert httpx2.HTTPTransport.handle_request is original
    finally:
        undo()
