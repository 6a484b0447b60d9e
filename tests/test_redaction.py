"""Secrets against a hostile server and careless input: redirects, cut excerpts, raw causes,
URLs, reason phrases, control bytes, and the one redaction policy (issues 12 and 13)."""

from __future__ import annotations

import base64
import socket
import threading
import traceback
from typing import Callable, Iterator, List, Tuple

import pytest
import requests

import watchdog_sync as ws
from tests.internals import excerpt, redact_module
from tests.rawserver import RawServer, read_request_head
from watchdog_sync.cli import main
from watchdog_sync.testing import FakeClock

pytestmark = pytest.mark.timeout(60)

KEY = "wsfake-R8t2Lq9Zx4Vb7Nm1Kc6Jd3Hs5Gf0Pw8Ye2Ua4Io7T"  # 48 characters, no "sk-" shape
assert len(KEY) == 48
MESSAGES = [{"role": "user", "content": "the secret prompt"}]
ONE = ws.RetryPolicy(max_attempts=1)
THREE = ws.RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=0.0)
COMPLETION = (
    b'{"id":"c","object":"chat.completion","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"from elsewhere"},"finish_reason":"stop"}]}'
)
SSE_OK = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def fragments(text: str, key: str = KEY, size: int = 8) -> List[str]:
    """The pieces of ``key`` of ``size`` characters that appear in ``text``."""
    return [key[i : i + size] for i in range(len(key) - size + 1) if key[i : i + size] in text]


def chain_text(error: BaseException) -> str:
    """The traceback of ``error`` with its causes, and the reprs along the chain."""
    texts = ["".join(traceback.format_exception(type(error), error, error.__traceback__))]
    node: object = error
    for _ in range(8):
        if not isinstance(node, BaseException):
            break
        texts += [repr(node), repr(node.args), repr(vars(node))]
        request = getattr(node, "request", None)
        if request is not None:
            texts += [repr(dict(request.headers)), str(request.url)]
        node = node.__cause__ or getattr(node, "last_error", None)
    return "\n".join(texts)


def reply(head: bytes, body: bytes = b"", content_type: str = "application/json") -> bytes:
    return (
        head
        + f"\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )


class Recorder:
    """A server that answers every request with ``answer`` and keeps each request's head."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.heads: List[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        with self._lock:
            self.heads.append(head)
        conn.sendall(self.answer)


@pytest.fixture
def target() -> Iterator[Tuple[RawServer, Recorder]]:
    """The place a redirect points to: it records what reached it."""
    recorder = Recorder(reply(b"HTTP/1.1 200 OK", COMPLETION))
    with RawServer(recorder) as server:
        yield server, recorder


def redirecting(status: int, location: str) -> Recorder:
    return Recorder(reply(f"HTTP/1.1 {status} Moved\r\nLocation: {location}".encode()))


def call(entry: str, base: str, headers: dict) -> None:
    if entry == "stream_sse":
        with ws.stream_sse(base + "/chat/completions", json={}, headers=headers) as events:
            list(events)
        return
    with ws.ChatClient(base, KEY, model="m", timeout=5, retry=THREE, headers=headers) as client:
        if entry == "stream":
            with client.stream(MESSAGES) as stream:
                list(stream)
        else:
            client.complete(MESSAGES)


# -- 1. redirects ---------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["complete", "stream", "stream_sse"])
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_of_the_chat_post_is_refused_naming_the_location(
    target: Tuple[RawServer, Recorder], status: int, entry: str
) -> None:
    """Not followed: nothing reaches the other host, one attempt, a clear error."""
    other, seen = target
    location = f"{other.url}/v1/chat/completions"
    first = redirecting(status, location)
    with RawServer(first) as server, pytest.raises(ws.HTTPStatusError) as caught:
        call(entry, server.url + "/v1", {"X-Api-Key": KEY, "api-key": KEY})
    error = caught.value
    assert (error.status, error.reason, error.retryable) == (status, "redirect", False)
    assert location in str(error) and "base_url" in str(error)
    assert (ws.classify(error).reason, ws.classify(error).retryable) == ("redirect", False)
    assert seen.heads == []  # neither the prompt nor a key went there
    assert len(first.heads) == 1  # not retried


def test_the_refused_location_is_shown_without_userinfo_or_key(
    target: Tuple[RawServer, Recorder],
) -> None:
    other, _ = target
    location = f"http://admin:{KEY}@127.0.0.1:{other.port}/v1?api_key={KEY}"
    with (
        RawServer(redirecting(307, location)) as server,
        pytest.raises(ws.HTTPStatusError) as caught,
    ):
        call("complete", server.url + "/v1", {})
    shown = chain_text(caught.value)
    assert not fragments(shown) and "admin" not in shown
    assert f"127.0.0.1:{other.port}/v1" in str(caught.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_session_strips_every_credential_header_on_a_cross_origin_redirect(
    target: Tuple[RawServer, Recorder], host: str
) -> None:
    """Another port (or host name): Authorization, Api-Key and X-Api-Key stay behind."""
    other, seen = target
    headers = {"Authorization": f"Bearer {KEY}", "api-key": KEY, "X-Api-Key": KEY}
    redirect = redirecting(307, f"http://{host}:{other.port}/next")
    with RawServer(redirect) as server, ws.Session() as session:
        response = session.post(server.url + "/start", json={"q": 1}, headers=headers)
        response.close()
    assert response.status_code == 200
    (head,) = seen.heads
    assert head.startswith(b"POST /next ")  # a drop-in: requests' own redirect rules
    assert KEY.encode() not in head
    assert b"authorization" not in head.lower() and b"api-key" not in head.lower()


def test_session_keeps_credentials_on_a_same_origin_redirect() -> None:
    """Same scheme, host and port: the credentials are still needed there."""
    calls: List[bytes] = []

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn)
        calls.append(head)
        if head.startswith(b"GET /start"):
            conn.sendall(reply(b"HTTP/1.1 302 Found\r\nLocation: /next"))
        else:
            conn.sendall(reply(b"HTTP/1.1 200 OK", b"{}"))

    with RawServer(handler) as server, ws.Session() as session:
        session.get(server.url + "/start", headers={"X-Api-Key": KEY}).close()
    assert len(calls) == 2 and f"X-Api-Key: {KEY}".encode() in calls[1]


def test_stream_sse_get_follows_a_cross_origin_redirect_without_the_key() -> None:
    """A GET is followed (nothing is replayed), and the key stays with the first origin."""
    stream = Recorder(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + SSE_OK
    )
    with RawServer(stream) as other, RawServer(redirecting(302, f"{other.url}/events")) as server:
        events = ws.stream_sse(
            server.url + "/events", method="GET", headers={"api-key": KEY}, idle_timeout=5
        )
        with events:
            assert [event.data for event in events][-1] == "[DONE]"
    (head,) = stream.heads
    assert KEY.encode() not in head


# -- 2. redact, then cut ----------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["complete", "stream"])
@pytest.mark.parametrize("offset", [0, 30])
def test_a_body_that_starts_with_the_key_is_not_cut_before_redaction(
    entry: str, offset: int
) -> None:
    """A malformed body or event carrying the key near its start shows none of it."""
    data = ("x" * offset + KEY + " and more text").encode()
    if entry == "stream":
        answer = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + b"data: "
            + data
            + b"\n\n"
        )
    else:
        answer = reply(b"HTTP/1.1 200 OK", data)
    with RawServer(Recorder(answer)) as server, pytest.raises(ws.StreamProtocolError) as caught:
        call(entry, server.url + "/v1", {})
    assert not fragments(chain_text(caught.value))


def test_a_key_cut_in_the_middle_is_still_masked() -> None:
    """Text that was itself cut short (a bounded read) ends in half a key: masked."""
    for shown in (
        excerpt("error: " + KEY[:30], 100, [KEY]),
        excerpt("error: " + KEY + " more", 20, [KEY]),
        excerpt("e" * 90 + KEY, 100, [KEY]),
    ):
        assert not fragments(shown, size=5), shown
        assert "[REDACTED]" in shown


# -- 3. the raw cause -------------------------------------------------------------------------


def refused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.mark.parametrize("method", ["complete", "stream"])
def test_the_cause_of_a_transport_error_carries_no_key(method: str) -> None:
    client = ws.ChatClient(refused_url(), KEY, model="m", timeout=5, retry=ONE)
    with client, pytest.raises(ws.WatchdogError) as caught:
        getattr(client, method)(MESSAGES)
    transport = caught.value.last_error if isinstance(caught.value, ws.RetryExhausted) else None
    assert isinstance(transport, ws.TransportError)
    cause = transport.__cause__
    assert isinstance(cause, requests.RequestException) and cause.request is not None
    assert cause.request.headers["Authorization"] == "[REDACTED]"
    assert not fragments(chain_text(caught.value))


@pytest.mark.parametrize(
    "given",
    [
        {"api_key": KEY + "\n"},
        {"api_key": "\ufeff" + KEY + "\u200b"},
        {"headers": {"X-Api-Key": KEY + "\r\n"}},
        {"headers": {"Authorization": f"Bearer {KEY}\n"}},
    ],
)
def test_a_key_with_surrounding_whitespace_is_sent_clean(given: dict) -> None:
    """A key read from a file (or pasted with a BOM) is stripped, sent, and never shown."""
    seen = Recorder(reply(b"HTTP/1.1 401 Unauthorized", f'{{"error": "bad key {KEY}"}}'.encode()))
    with RawServer(seen) as server, pytest.raises(ws.HTTPStatusError) as caught:
        client = ws.ChatClient(server.url + "/v1", model="m", retry=ONE, **given)
        with client:
            client.complete(MESSAGES)
    assert f"{KEY}\r\n".encode() in seen.heads[0]  # the clean key, ending the header line
    assert not fragments(chain_text(caught.value))


@pytest.mark.parametrize(
    "given",
    [
        {"api_key": KEY[:20] + "\u200b" + KEY[20:]},
        {"api_key": KEY[:20] + "\x00" + KEY[20:]},
        {"api_key": KEY[:20] + "\u00e9" + KEY[20:]},
        {"headers": {"api-key": KEY[:20] + "\ufeff" + KEY[20:]}},
        {"headers": {"X-Api-Key": KEY[:20] + "\n" + KEY[20:]}},
    ],
)
def test_a_key_with_an_invisible_character_inside_is_a_clear_value_error(given: dict) -> None:
    with pytest.raises(ValueError, match="position 20") as caught:
        ws.ChatClient("http://127.0.0.1:9/v1", model="m", **given)
    assert not isinstance(caught.value, UnicodeError)
    assert not fragments(chain_text(caught.value))


# -- 4. URLs, reason phrases ------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url",
    [f"ftp://user:{KEY}@host/v1", f"http://user:{KEY}@host:0/v1", f"http://{KEY}@/v1"],
)
def test_a_bad_base_url_with_userinfo_is_not_echoed(base_url: str) -> None:
    with pytest.raises(ValueError) as caught:
        ws.ChatClient(base_url, model="m")
    assert not fragments(str(caught.value)) and "user:" not in str(caught.value)


def test_the_probe_does_not_echo_a_base_url_with_userinfo(capsys: pytest.CaptureFixture) -> None:
    assert main(["probe", "--base-url", f"ftp://user:{KEY}@host/v1", "--model", "m"]) == 2
    err = capsys.readouterr().err
    assert "--base-url must start with" in err and not fragments(err) and "user:" not in err


@pytest.mark.parametrize("url", ["http://user:{key}@127.0.0.1:99999/x", "http://u:{key}@/x"])
def test_an_invalid_url_with_userinfo_is_not_shown_by_the_transport_error(url: str) -> None:
    with (
        pytest.raises(ws.TransportError) as caught,
        ws.stream_sse(url.format(key=KEY), json={}) as s,
    ):
        list(s)
    assert not fragments(chain_text(caught.value))


def test_stream_sse_redacts_the_reason_phrase() -> None:
    answer = reply(f"HTTP/1.1 500 key {KEY} rejected".encode(), b"{}")
    with RawServer(Recorder(answer)) as server, pytest.raises(ws.HTTPStatusError) as caught:
        call("stream_sse", server.url, {"Authorization": f"Bearer {KEY}"})
    assert "rejected" in str(caught.value)
    assert not fragments(chain_text(caught.value))


# -- 5. control bytes -------------------------------------------------------------------------

HOSTILE = "\x1b[2J\x1b]0;owned\x07\x00\x9b31m\u202eevil"


@pytest.mark.parametrize("where", ["body", "reason", "content_type", "event"])
def test_escape_and_nul_bytes_from_a_server_are_escaped_in_messages(where: str) -> None:
    raw = HOSTILE.encode("utf-8")
    latin = HOSTILE.replace("\u202e", "").encode("latin-1")
    entry = "stream_sse"
    if where == "body":
        answer = reply(b"HTTP/1.1 500 Oops", b'{"error": {"message": "' + raw + b'"}}')
        entry = "complete"
    elif where == "reason":
        answer = reply(b"HTTP/1.1 500 " + latin.replace(b"\x00", b""), b"{}")
    elif where == "content_type":
        answer = reply(b"HTTP/1.1 200 OK", b"data: x\n\n", content_type=latin.decode("latin-1"))
    else:
        answer = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            b"data: " + raw + b"\n\n"
        )
        entry = "stream"
    with RawServer(Recorder(answer)) as server, pytest.raises(ws.WatchdogError) as caught:
        call(entry, server.url + ("" if entry == "stream_sse" else "/v1"), {})
    texts = [str(caught.value), repr(caught.value), getattr(caught.value, "body", "")]
    for text in texts:
        assert not any(c in text for c in "\x1b\x00\x07\x9b\u202e"), text
    assert "\\x1b" in str(caught.value)


# -- 6. one policy, one mask ------------------------------------------------------------------

SHAPED = "Authorization: Bearer abc.def-123456 and api_key=wsfake-123456789"


def failing(times: int, then: Callable[[], None]) -> Callable[[], None]:
    state = {"calls": 0}

    def fn() -> None:
        state["calls"] += 1
        if state["calls"] <= times:
            raise ConnectionResetError(SHAPED)
        then()

    return fn


def test_the_retry_loop_uses_the_one_policy_and_mask() -> None:
    with pytest.raises(ws.RetryExhausted) as caught:
        ws.retry_call(failing(2, lambda: None), policy=ws.RetryPolicy(max_attempts=2, jitter=0.0))
    message = str(caught.value)
    assert "abc.def" not in message and "wsfake-123456789" not in message
    assert "Authorization: [REDACTED]" in message and "api_key=[REDACTED]" in message
    assert "[redacted]" not in message


def test_a_deadline_during_a_retry_redacts_the_last_error() -> None:
    """The scope's DeadlineExceeded quotes the last error through the same policy."""
    clock = FakeClock()
    budget = ws.Budget(10, clock=clock)
    policy = ws.RetryPolicy(max_attempts=5, initial_backoff=0.5, jitter=0.0)
    with pytest.raises(ws.DeadlineExceeded) as caught:
        ws.retry_call(failing(1, lambda: budget.sleep(60)), policy=policy, budget=budget)
    message = str(caught.value)
    assert "last error" in message and "[REDACTED]" in message
    assert "abc.def" not in message and "wsfake-123456789" not in message


def test_every_error_message_passes_the_policy() -> None:
    """Even an error built elsewhere: credentials masked, control characters escaped."""
    error = ws.TransportError(f"failed: {SHAPED} \x1b[31m http://u:pw@host/")
    assert str(error) == (
        "failed: Authorization: [REDACTED] and api_key=[REDACTED] \\x1b[31m http://[REDACTED]@host/"
    )


def test_a_google_api_key_and_its_header_are_masked() -> None:
    """Gemini's keys (``AIza...``) and google-genai's ``x-goog-api-key`` header, like ``sk-``."""
    key = "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"
    text = redact_module.redact(f"error: API key not valid: {key} (x-goog-api-key: {key})")
    assert key not in text and text.count(redact_module.MASK) == 2
    headers = redact_module.safe_headers({"X-Goog-Api-Key": key, "Accept": "*/*"})
    assert headers == {"X-Goog-Api-Key": redact_module.MASK, "Accept": "*/*"}


def test_the_secret_set_of_a_request_is_every_credential_it_carried() -> None:
    """Credential headers (bare tokens, a Basic value decoded), the URL's userinfo and
    ``key=`` value, and a proxy's password with the Proxy-Authorization token made of it."""
    basic = base64.b64encode(b"me:basic-pass-1").decode()
    proxy_token = base64.b64encode(b"pu:proxy pass/2").decode()
    found = redact_module.request_secrets(
        {
            "Authorization": f"Basic {basic}",
            "x-api-key": "xapi-1",
            "api-key": "azure-1",
            "X-Goog-Api-Key": "goog-1",
            "Accept": "text/event-stream",
        },
        "https://user:url-pass-1@example.invalid/v1beta/m?alt=sse&key=query%2F1",
        ["http://pu:proxy%20pass%2F2@proxy.invalid:3128"],
    )
    for secret in (
        basic, "me:basic-pass-1", "basic-pass-1", "xapi-1", "azure-1", "goog-1",
        "url-pass-1", "query%2F1", "query/1", "proxy%20pass%2F2", "proxy pass/2", proxy_token,
    ):  # fmt: skip
        assert secret in found, secret
    assert "text/event-stream" not in found
    assert redact_module.request_secrets({}, "https://example.invalid/v1?alt=sse") == []


def test_a_foreign_errors_own_request_masks_what_it_quotes() -> None:
    """retry_call words the last error of an SDK call: a key that the error's request
    carried (header or ``key=``) and that its message quotes is masked."""

    class Request:
        def __init__(self) -> None:
            self.headers = {"x-goog-api-key": "wsgoog-6Tz1Qa8Lk3"}
            self.url = "https://example.invalid/v1beta/m?key=wsquery-2Rb7Ye4Nc9"

    class SDKError(ConnectionResetError):
        request = Request()

    def call() -> None:
        raise SDKError("API key wsgoog-6Tz1Qa8Lk3 not valid (and wsquery-2Rb7Ye4Nc9)")

    with pytest.raises(ws.RetryExhausted) as caught:
        ws.retry_call(call, policy=THREE)
    assert "wsgoog-6Tz1Qa8Lk3" not in str(caught.value)
    assert "wsquery-2Rb7Ye4Nc9" not in str(caught.value)
    assert "API key [REDACTED] not valid" in str(caught.value)
