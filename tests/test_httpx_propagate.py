"""HTTPXTransport(propagate=True) / httpx_client(propagate=True): the remaining time on every send.

The FaultGateway records each request's headers: every attempt of the openai
SDK carries a ``grpc-timeout`` within the budget; nothing is sent without
propagate or without a bounded budget, and a cross-origin redirect hop that
httpx follows (above the transport) gets none.
"""

from __future__ import annotations

import socket
import threading
from typing import Dict, Iterator, List, Optional

import httpx2
import openai
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .rawserver import RawServer, read_request_head

pytestmark = pytest.mark.timeout(30)

GRPC, ENVOY = "grpc-timeout", "x-envoy-upstream-rq-timeout-ms"
MESSAGES = [{"role": "user", "content": "hi"}]


def sent_seconds(headers: Dict[str, str]) -> Optional[float]:
    incoming = ws.budget_from_headers({GRPC: headers[GRPC]}) if GRPC in headers else None
    if incoming is None or incoming.deadline is None:
        return None
    return incoming.deadline - incoming.started


@pytest.fixture
def make_sdk() -> Iterator[object]:
    made: List[openai.OpenAI] = []

    def make(base: str, **options: object) -> openai.OpenAI:
        http = ws.httpx_client(idle_timeout=5, **options)  # type: ignore[arg-type]
        client = openai.OpenAI(base_url=base, api_key="sk-x", http_client=http, max_retries=2)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def _call(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]


def test_every_sdk_attempt_carries_the_remaining_time(
    fault_gateway: FaultGateway, make_sdk: object
) -> None:
    base = fault_gateway.base_url("http503")
    with ws.deadline(5.0):
        _call(make_sdk(base, propagate=True))  # type: ignore[operator]
    seen = [dict(r.headers) for r in fault_gateway.requests_seen(base)]
    values = [sent_seconds(h) for h in seen]
    assert len(values) == 3 and all(v is not None and 0 < v <= 5.0 for v in values), values
    assert all(ENVOY in h and 0 < int(h[ENVOY]) <= 5000 for h in seen)
    assert values == sorted(values, reverse=True)  # type: ignore[type-var]  # computed per send


@pytest.mark.parametrize("propagate, bounded", [(False, True), (True, False)])
def test_nothing_is_sent_without_propagate_or_a_bounded_budget(
    fault_gateway: FaultGateway, make_sdk: object, propagate: bool, bounded: bool
) -> None:
    base = fault_gateway.base_url("http503", message=f"{propagate}{bounded}")
    with ws.deadline(5.0 if bounded else None):
        _call(make_sdk(base, propagate=propagate))  # type: ignore[operator]
    seen = fault_gateway.requests_seen(base)
    assert len(seen) == 3
    for request in seen:
        names = {name.lower() for name in dict(request.headers)}
        assert GRPC not in names and ENVOY not in names


def test_propagate_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="propagate"):
        ws.HTTPXTransport(propagate="yes")  # type: ignore[arg-type]


class Heads:
    """A server that keeps each request head and answers with ``answer``."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.heads: List[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        with self._lock:
            self.heads.append(head.lower())
        conn.sendall(self.answer)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


def redirect(location: str) -> bytes:
    return (
        f"HTTP/1.1 307 Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n"
        "Connection: close\r\n\r\n"
    ).encode()


def test_a_cross_origin_redirect_hop_carries_no_deadline_headers() -> None:
    """httpx follows a 307 to another port: that hop has them stripped, the first had them."""
    target = Heads(OK)
    with RawServer(target) as other:
        first = Heads(redirect(f"http://127.0.0.1:{other.port}/next"))
        with (
            RawServer(first) as server,
            ws.httpx_client(propagate=True, follow_redirects=True) as client,
            ws.deadline(5.0),
        ):
            assert client.post(server.url + "/start", json={}).status_code == 200
    (start,) = first.heads
    (hop,) = target.heads
    assert GRPC.encode() in start and ENVOY.encode() in start
    assert GRPC.encode() not in hop and ENVOY.encode() not in hop


def test_a_same_origin_redirect_hop_carries_them() -> None:
    heads: List[bytes] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        heads.append(head.lower())
        conn.sendall(redirect("/next") if head.startswith(b"POST /start") else OK)

    transport = ws.HTTPXTransport(propagate=True)
    with (
        RawServer(handler) as server,
        httpx2.Client(transport=transport, follow_redirects=True) as client,
        ws.deadline(5.0),
    ):
        client.post(server.url + "/start", json={}).close()
    assert len(heads) == 2 and all(GRPC.encode() in head for head in heads)
