"""The connect and the response head on the httpx path, bounded by the budget like the body.

Every row for httpx2 and httpx 0.28 on httpx_client(), for the openai and anthropic SDKs on
it, and after instrument(): a flood of ``103 Early Hints``, a head dripped one header line
at a time, a name resolution that takes longer than the deadline, and a phase nothing can
interrupt that returns past the deadline (never a success).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator

import anthropic
import httpcore2
import httpx
import httpx2
import openai
import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .httpxstream import KEY, MESSAGES
from .internals import head_module, httpcore_shapes
from .waiting import wait_for

pytestmark = pytest.mark.timeout(30)

DEADLINE = 0.15
SLACK = 1.0  # generous for 2 noisy cores; the overshoot measured is a few ms
LATE = 0.25  # how long the phase that nothing interrupts takes
SLOW_NAME = "slow.invalid"
LIBRARIES = {"httpx2": httpx2, "httpx": httpx}
# Who sends: httpx_client() over httpx2 and httpx, the SDKs on httpx_client(), and after
# instrument(): the plain clients and the SDKs as they come.
KINDS = [
    "httpx2",
    "httpx",
    "openai",
    "anthropic",
    "instrumented-httpx2",
    "instrumented-httpx",
    "instrumented-openai",
    "instrumented-anthropic",
]


@pytest.fixture(scope="module")
def gateway() -> Iterator[FaultGateway]:
    with FaultGateway() as gw:
        yield gw


def api_of(kind: str) -> str:
    return "anthropic" if kind.endswith("anthropic") else "openai"


def http_client(kind: str, transport: Any = None) -> Any:
    """The httpx client ``kind`` sends through (``transport``: the one it wraps, if any)."""
    library = LIBRARIES[kind.rsplit("-", 1)[-1]] if "httpx" in kind else httpx2
    if kind.startswith("instrumented"):
        return library.Client(timeout=30)  # the library's own HTTPTransport, patched
    if transport is None and library is httpx:
        transport = httpx.HTTPTransport()
    return ws.httpx_client(**({} if transport is None else {"transport": transport}))


@contextlib.contextmanager
def sender(
    kind: str, base: str, *, stream: bool = True, transport: Any = None
) -> Iterator[Callable[[], None]]:
    """One chat call by ``kind`` to the gateway route ``base``, its clients made beforehand."""
    with http_client(kind, transport) as http:
        if kind.endswith("openai"):
            completions = openai.OpenAI(
                base_url=base, api_key=KEY, http_client=http
            ).chat.completions

            def call() -> None:
                answer = completions.create(model="m", messages=MESSAGES, stream=stream)
                if stream:
                    list(answer)

        elif kind.endswith("anthropic"):
            messages = anthropic.Anthropic(base_url=base, api_key=KEY, http_client=http).messages

            def call() -> None:
                answer = messages.create(model="m", max_tokens=16, messages=MESSAGES, stream=stream)
                if stream:
                    list(answer)

        else:
            body = {"model": "m", "messages": MESSAGES, "stream": stream}

            def call() -> None:
                http.post(base + "/chat/completions", json=body).read()

        yield call


@pytest.fixture
def instrumented(request: pytest.FixtureRequest) -> Iterator[None]:
    """instrument() for the test's ``kind`` when it asks for it."""
    kind = request.node.callspec.params.get("kind", "")
    undo = ws.instrument() if kind.startswith("instrumented") else (lambda: None)
    try:
        yield
    finally:
        undo()


def ends_by_the_deadline(call: Callable[[], None]) -> float:
    """Run ``call`` inside ``deadline(DEADLINE)``: DeadlineExceeded; the time it took."""
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded) as caught, ws.deadline(DEADLINE):
        call()
    elapsed = time.monotonic() - started
    assert caught.value.reason == "deadline_exceeded"
    return elapsed


def hung_up(gateway: FaultGateway, base: str) -> bool:
    """Every request the route saw ended: the client's socket was shut, not left open."""
    return all(r.ended_at is not None for r in gateway.requests_seen(base))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scenario", ["early_hints_flood", "header_drip"])
def test_a_head_that_never_ends_ends_at_the_deadline(
    gateway: FaultGateway, instrumented: None, scenario: str, kind: str
) -> None:
    """103s every 0.03 s, or a header line every 0.03 s: each read restarted a read
    timeout, and nothing shut the socket before the response existed."""
    base = gateway.base_url(scenario, api=api_of(kind), interval=0.03, duration=3)
    with sender(kind, base) as call:
        elapsed = ends_by_the_deadline(call)
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + SLACK
    # No retry loop swallowed it (on a loaded machine the gateway may not have read the
    # request before the deadline shut the socket: then it saw none).
    assert len(gateway.requests_seen(base)) <= 1
    assert wait_for(lambda: hung_up(gateway, base))


@pytest.fixture
def slow_resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Dict[str, int]]:
    """``socket.getaddrinfo`` answers ``slow.invalid`` (as 127.0.0.1) only when the test
    ends, or after 5 s; other names as usual. Counts the slow look-ups."""
    real = socket.getaddrinfo
    release = threading.Event()
    asked = {"slow": 0}

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != SLOW_NAME:
            return real(host, port, *args, **kwargs)
        asked["slow"] += 1
        release.wait(5)
        return real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    try:
        yield asked
    finally:
        release.set()  # the helper thread left waiting on the resolver ends now


@pytest.mark.parametrize("kind", KINDS)
def test_a_slow_name_resolution_ends_at_the_deadline(
    gateway: FaultGateway, instrumented: None, slow_resolver: Dict[str, int], kind: str
) -> None:
    """getaddrinfo has no timeout: it runs in a helper thread the call waits on for the
    time left (the call used to succeed once the resolver answered, past the deadline)."""
    base = gateway.base_url("ok", api=api_of(kind)).replace("127.0.0.1", SLOW_NAME)
    with sender(kind, base) as call:
        elapsed = ends_by_the_deadline(call)
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + SLACK
    assert slow_resolver["slow"] == 1
    assert gateway.requests_seen(base) == []


class LateTransport:
    """A transport of its own below HTTPXTransport: it answers, then works on for ``LATE``
    seconds, which nothing outside it can interrupt."""

    def __init__(self, library: Any) -> None:
        self._inner = library.HTTPTransport()

    def handle_request(self, request: Any) -> Any:
        response = self._inner.handle_request(request)
        threading.Event().wait(LATE)  # its own work, deaf to our budget
        return response

    def close(self) -> None:
        self._inner.close()


def late_transport(library: Any) -> Any:
    cls = type("LateTransport", (LateTransport, library.BaseTransport), {})
    return cls(library)


@pytest.mark.parametrize("kind", ["httpx2", "httpx", "openai", "anthropic"])
def test_a_phase_that_returns_past_the_deadline_is_never_a_success(
    gateway: FaultGateway, kind: str
) -> None:
    """A whole answer that comes back from a custom transport after the deadline raises
    DeadlineExceeded when it returns (it used to be returned as a success)."""
    base = gateway.base_url("ok", api=api_of(kind))
    transport = late_transport(httpx if kind == "httpx" else httpx2)
    with sender(kind, base, stream=False, transport=transport) as call:
        elapsed = ends_by_the_deadline(call)
    assert LATE - 0.05 <= elapsed < LATE + SLACK  # checked when the phase returned
    assert len(gateway.requests_seen(base)) == 1


@pytest.mark.parametrize("kind", ["instrumented-httpx2", "instrumented-httpx"])
def test_after_instrument_a_phase_that_returns_past_the_deadline_is_never_a_success(
    gateway: FaultGateway, instrumented: None, kind: str
) -> None:
    """httpcore's ``trace`` hook (the caller's code, inside httpcore) blocks past the
    deadline once the headers are in: the call raises when httpcore returns."""

    def trace(name: str, info: Any) -> None:
        if name.endswith("receive_response_headers.complete"):
            threading.Event().wait(LATE)

    base = gateway.base_url("ok")
    body = {"model": "m", "messages": MESSAGES}

    def call() -> None:
        with http_client(kind) as http:
            http.post(base + "/chat/completions", json=body, extensions={"trace": trace}).read()

    elapsed = ends_by_the_deadline(call)
    assert LATE - 0.05 <= elapsed < LATE + SLACK


@pytest.mark.parametrize("kind", ["httpx2", "httpx", "instrumented-httpx2"])
def test_healthy_calls_on_the_hooked_connections_still_succeed(
    gateway: FaultGateway, instrumented: None, kind: str
) -> None:
    """In a scope, a kept-alive connection serves two calls; a name resolves as it should."""
    base = gateway.base_url("ok").replace("127.0.0.1", "localhost")
    body = {"model": "m", "messages": MESSAGES}
    with http_client(kind) as http, ws.deadline(5):
        for _ in range(2):
            answer = http.post(base + "/chat/completions", json=body)
            assert answer.json()["choices"][0]["finish_reason"] == "stop"
    assert [r.attempt for r in gateway.requests_seen(base)] == [1, 2]


def test_httpcore_is_where_the_hooks_reach() -> None:
    """The private names of httpcore2 and httpcore 1.x that the hooks use are there."""
    assert httpcore_shapes() == {"httpx2": True, "httpx": True}


@pytest.mark.parametrize("kind", ["httpx2", "instrumented-httpx2"])
def test_cancel_while_waiting_for_the_headers_shuts_the_socket_at_once(
    gateway: FaultGateway, instrumented: None, kind: str
) -> None:
    """budget.cancel() from another thread, before any response exists: the request ends
    at once (it used to wait for the read timeout clipped at the start, here 10 s)."""
    base = gateway.base_url("no_headers")
    with sender(kind, base) as call:
        started = time.monotonic()
        with pytest.raises(ws.OperationCancelled), ws.deadline(10) as budget:
            ws.Budget(DEADLINE).on_done(lambda _: budget.cancel())  # on the watchdog thread
            call()
        elapsed = time.monotonic() - started
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + SLACK
    assert wait_for(lambda: hung_up(gateway, base))


def test_a_dripping_head_counts_against_the_first_event_limit(gateway: FaultGateway) -> None:
    """A streaming request's first-event limit covers its whole head, not each read: a head
    dripping a line every 0.03 s is sent again after 0.15 s, twice, then StreamIdleTimeout."""
    base = gateway.base_url("header_drip", interval=0.03, duration=3)
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    with ws.httpx_client(idle_timeout=0.15) as http:
        started = time.monotonic()
        with pytest.raises(ws.StreamIdleTimeout, match="sent 3 times"):
            http.post(base + "/chat/completions", json=body)
        elapsed = time.monotonic() - started
    assert 0.4 <= elapsed < 0.45 + SLACK
    assert wait_for(lambda: len(gateway.requests_seen(base)) == 3 and hung_up(gateway, base))


class FakeStream:
    """A network stream over one end of a socket pair (what the head hooks look at)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None

    def write(self, buffer: bytes, timeout: Any = None) -> None:
        self.sock.sendall(buffer)


@pytest.mark.parametrize(
    ("first_bytes", "shut"),
    [(b"GET / HTTP/1.1\r\n\r\n", True), (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", False)],
    ids=["http/1.1", "h2c"],
)
def test_the_budget_end_shuts_an_http1_socket_never_an_http2_one(
    first_bytes: bytes, shut: bool
) -> None:
    """One HTTP/2 socket carries many streams: the head guard never registers it."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        stream = FakeStream(ours)
        with ws.deadline(10) as budget, head_module.head_phase(budget):
            head_module.write(httpcore2, FakeStream.write, stream, first_bytes, None)
            budget.cancel()
            ran = threading.Event()
            budget.on_done(lambda _: ran.set())  # after the guard's own callback
            assert ran.wait(2)
        assert theirs.recv(64) == first_bytes
        ours.setblocking(False)
        if shut:
            with pytest.raises(OSError):
                ours.send(b"x")
        else:
            assert ours.send(b"x") == 1
