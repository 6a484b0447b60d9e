"""Session(propagate=True) and ChatClient(propagate=True) send the remaining time on every attempt.

The FaultGateway records each request's headers: every attempt carries a
``grpc-timeout`` computed when it was sent (so later attempts say less), never
more than the budget; nothing is sent when propagation is off or no budget is
bounded, and nothing follows a redirect to another origin.
"""

from __future__ import annotations

import socket
import threading
from typing import Dict, List, Optional

import pytest
import requests

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .rawserver import RawServer, read_request_head

pytestmark = pytest.mark.timeout(30)

GRPC, ENVOY = "grpc-timeout", "x-envoy-upstream-rq-timeout-ms"
FAST = ws.RetryPolicy(max_attempts=3, initial_backoff=0.1, jitter=0.0)
MESSAGES = [{"role": "user", "content": "hi"}]
BODY = {"model": "m", "messages": MESSAGES}


def sent_seconds(headers: Dict[str, str]) -> Optional[float]:
    incoming = ws.budget_from_headers({GRPC: headers[GRPC]}) if GRPC in headers else None
    if incoming is None or incoming.deadline is None:
        return None
    return incoming.deadline - incoming.started


def deadlines_seen(gateway: FaultGateway, base: str) -> List[Optional[float]]:
    return [sent_seconds(dict(seen.headers)) for seen in gateway.requests_seen(base)]


def assert_each_attempt_said_less(seen: List[Optional[float]], limit: float, count: int) -> None:
    assert len(seen) == count
    values = [value for value in seen if value is not None]
    assert len(values) == count, seen  # every attempt carried it
    assert all(0 < value <= limit for value in values)
    assert values == sorted(values, reverse=True) and values[0] - values[-1] >= 0.1  # recomputed


def test_session_sends_the_remaining_time_on_every_attempt(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("http503")

    def attempt() -> None:
        session.post(base + "/chat/completions", json=BODY).raise_for_status()

    with (
        ws.Session(propagate=True) as session,
        pytest.raises(ws.RetryExhausted),
        ws.deadline(5.0),
    ):
        ws.retry_call(attempt, policy=FAST)
    assert_each_attempt_said_less(deadlines_seen(fault_gateway, base), 5.0, 3)
    (first, *_) = fault_gateway.requests_seen(base)
    assert int(first.headers[ENVOY]) <= 5000


def test_session_budget_alone_is_propagated(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    with ws.Session(ws.Budget(2.0), propagate=True) as session:
        session.post(base + "/chat/completions", json=BODY).close()
    (value,) = deadlines_seen(fault_gateway, base)
    assert value is not None and 1.5 < value <= 2.0


@pytest.mark.parametrize("propagate", [False, True])
def test_nothing_is_sent_when_off_or_unbounded(
    fault_gateway: FaultGateway, propagate: bool
) -> None:
    """Off (the default) inside a scope; on with no bounded budget: no deadline headers."""
    base = fault_gateway.base_url("ok")
    with ws.Session(propagate=propagate) as session:
        if propagate:
            session.post(base + "/chat/completions", json=BODY).close()
        else:
            with ws.deadline(5.0):
                session.post(base + "/chat/completions", json=BODY).close()
    (seen,) = fault_gateway.requests_seen(base)
    assert GRPC not in seen.headers and ENVOY not in seen.headers


@pytest.mark.parametrize("entry", ["complete", "stream"])
@pytest.mark.parametrize("own_session", [False, True])
def test_chat_client_sends_the_remaining_time_on_every_attempt(
    fault_gateway: FaultGateway, entry: str, own_session: bool
) -> None:
    """500 twice, then ok: three attempts, each with what the call had left then."""
    base = fault_gateway.base_url("http500", fail_first=2)
    session = ws.Session() if own_session else None  # a session's own setting is off
    with ws.ChatClient(
        base, "key", model="m", timeout=4.0, retry=FAST, session=session, propagate=True
    ) as client:
        if entry == "complete":
            client.complete(MESSAGES)
        else:
            with client.stream(MESSAGES) as stream:
                list(stream)
    if session is not None:
        session.close()
    assert_each_attempt_said_less(deadlines_seen(fault_gateway, base), 4.0, 3)


def test_chat_client_does_not_propagate_by_default(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    with ws.ChatClient(base, "key", model="m", timeout=4.0) as client:
        client.complete(MESSAGES)
    (seen,) = fault_gateway.requests_seen(base)
    assert GRPC not in seen.headers


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_propagate_must_be_a_bool(bad: object) -> None:
    with pytest.raises(TypeError, match="propagate"):
        ws.Session(propagate=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="propagate"):
        ws.ChatClient("http://127.0.0.1:9/v1", propagate=bad)  # type: ignore[arg-type]


# -- redirects ---------------------------------------------------------------------------------


class Heads:
    """A server that keeps each request head and answers with ``answer(head)``."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.heads: List[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        with self._lock:
            self.heads.append(head.lower())
        conn.sendall(self.answer)


def ok() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


def redirect(location: str) -> bytes:
    return (
        f"HTTP/1.1 307 Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n"
        "Connection: close\r\n\r\n"
    ).encode()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_cross_origin_redirect_carries_no_deadline_headers(host: str) -> None:
    """Another port or host name: the hop there gets neither header (like the credentials)."""
    target = Heads(ok())
    with RawServer(target) as other:
        first = Heads(redirect(f"http://{host}:{other.port}/next"))
        with RawServer(first) as server, ws.Session(propagate=True) as session, ws.deadline(5.0):
            session.post(server.url + "/start", json={}).close()
    (start,) = first.heads
    (hop,) = target.heads
    assert GRPC.encode() in start and ENVOY.encode() in start
    assert GRPC.encode() not in hop and ENVOY.encode() not in hop


def test_a_same_origin_redirect_carries_them_recomputed() -> None:
    """The same origin the caller asked for: the hop carries them, computed for that send."""
    heads: List[bytes] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        heads.append(head)
        conn.sendall(redirect("/next") if head.startswith(b"POST /start") else ok())

    with RawServer(handler) as server, ws.Session(propagate=True) as session, ws.deadline(5.0):
        session.post(server.url + "/start", json={}).close()
    values = [sent_seconds(_headers(head)) for head in heads]
    assert len(values) == 2 and all(v is not None and v <= 5.0 for v in values)
    assert values[1] <= values[0]  # type: ignore[operator]


def test_back_on_the_callers_origin_they_are_sent_again() -> None:
    """A -> B -> A: none at B, and A (the origin asked for) gets them again."""
    home_heads: List[bytes] = []
    elsewhere = Heads(b"")

    def home(conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        home_heads.append(head.lower())
        away = f"http://localhost:{other.port}/away"
        conn.sendall(redirect(away) if head.startswith(b"POST /start") else ok())

    with RawServer(elsewhere) as other, RawServer(home) as server:
        elsewhere.answer = redirect(f"{server.url}/home")
        with ws.Session(propagate=True) as session, ws.deadline(5.0):
            session.post(server.url + "/start", json={}).close()
    assert len(home_heads) == 2 and all(GRPC.encode() in head for head in home_heads)
    (away,) = elsewhere.heads
    assert GRPC.encode() not in away


def test_a_users_own_requests_client_can_send_them() -> None:
    """deadline_headers() for a plain requests call: the server sees what the scope had left."""
    target = Heads(ok())
    with RawServer(target) as server, ws.deadline(3.0):
        requests.get(server.url + "/", headers=ws.deadline_headers(), timeout=5).close()
    value = sent_seconds(_headers(target.heads[0]))
    assert value is not None and 2.5 < value <= 3.0


def _headers(head: bytes) -> Dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    pairs = (line.split(":", 1) for line in lines if ":" in line)
    return {name.strip().lower(): value.strip() for name, value in pairs}


def test_a_header_of_the_callers_own_is_replaced_when_bounded_kept_when_not() -> None:
    """propagate=True owns the deadline headers under a bounded budget; unbounded: yours go."""
    target = Heads(ok())
    with RawServer(target) as server, ws.Session(propagate=True) as session:
        session.get(server.url + "/", headers={"Grpc-Timeout": "1H"}).close()
        with ws.deadline(2.0):
            session.get(server.url + "/", headers={"Grpc-Timeout": "1H"}).close()
    unbounded, bounded = (_headers(head) for head in target.heads)
    assert unbounded["grpc-timeout"] == "1h"  # as given (Heads lower-cases what it keeps)
    value = sent_seconds({GRPC: bounded["grpc-timeout"]})  # 2 s: in microseconds, "...u"
    assert value is not None and value <= 2.0
