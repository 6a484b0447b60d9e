"""Transport attacks from issue 12 that must be classified right, each on real local sockets:
certificate failures, redirect loops, nested gzip, header floods and over-long header lines,
and exceptions that break when inspected. The proxy attack is in test_attacks_proxy.py."""

from __future__ import annotations

import datetime
import gzip
import socket
import ssl
import struct
import threading
from typing import Any, Callable, Iterator, List, Tuple

import pytest
import requests
import trustme

import watchdog_sync as ws
from watchdog_sync import ChatClient, Session

from .rawserver import Answer, RawServer, read_request_head

pytestmark = pytest.mark.timeout(30)

MESSAGES = [{"role": "user", "content": "hi"}]
KEY = "test-key-0123456789"
FAST = ws.RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)


def answer_ok(conn: socket.socket, stop: threading.Event) -> None:
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


# -- certificate failures ------------------------------------------------------------------


def _tls_server(kind: str, authority: trustme.CA) -> ssl.SSLContext:
    """A server context whose certificate fails verification in the way ``kind`` names."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if kind == "self_signed":  # the CA's own certificate: self-signed, and unknown to us
        with authority.cert_pem.tempfile() as cert, authority.private_key_pem.tempfile() as key:
            context.load_cert_chain(cert, key)
    elif kind == "wrong_host":
        authority.issue_cert("other.example").configure_cert(context)
    else:
        expired = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
        authority.issue_cert("127.0.0.1", not_after=expired).configure_cert(context)
    return context


CERT_PROBLEMS = {  # what the message says (OpenSSL's words; urllib3 1.26 checks host names)
    "self_signed": ("self-signed certificate",),
    "wrong_host": ("address mismatch", "doesn't match"),
    "expired": ("certificate has expired",),
}


@pytest.fixture(params=sorted(CERT_PROBLEMS))
def bad_tls(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Tuple[str, RawServer]]:
    """An HTTPS server on 127.0.0.1 whose certificate our trust store (its CA) refuses."""
    authority = trustme.CA()
    kind = str(request.param)
    # a self-signed certificate is one nobody vouches for: trust another CA then
    trusted = trustme.CA() if kind == "self_signed" else authority
    with (
        trusted.cert_pem.tempfile() as ca_path,
        RawServer(answer_ok, tls=_tls_server(kind, authority)) as server,
    ):
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", ca_path)
        yield kind, server


def assert_agrees(error: ws.WatchdogError, reason: str) -> None:
    """The raised error and classify() say the same, and nothing promises a retry."""
    verdict = ws.classify(error)
    assert (error.reason, error.retryable) == (reason, False)
    assert (verdict.reason, verdict.retryable) == (reason, False)
    assert verdict.transport_code == getattr(error, "transport_code", None)
    assert ws.classify(error.__cause__) == verdict  # type: ignore[arg-type]
    assert "transient" not in str(error)


@pytest.mark.parametrize("call", ["complete", "stream"])
def test_a_certificate_failure_is_tls_and_tried_once(
    bad_tls: Tuple[str, RawServer], call: str
) -> None:
    """Self-signed, wrong host, expired: reason `tls`, one attempt, says what was wrong."""
    kind, server = bad_tls
    with (
        ChatClient(server.url + "/v1", KEY, model="m", timeout=5, retry=FAST) as client,
        pytest.raises(ws.TransportError) as caught,
    ):
        getattr(client, call)(MESSAGES)
    assert_agrees(caught.value, "tls")
    assert caught.value.transport_code == "ETLS"
    assert any(problem in str(caught.value) for problem in CERT_PROBLEMS[kind])
    assert "not retried" in str(caught.value)
    assert server.accepted == 1


def test_session_certificate_failure_classifies_as_tls(bad_tls: Tuple[str, RawServer]) -> None:
    """Session keeps requests' SSLError; classify() calls it `tls`, not retryable."""
    _, server = bad_tls
    with Session() as session, pytest.raises(requests.exceptions.SSLError) as caught:
        session.get(server.url + "/")
    verdict = ws.classify(caught.value)
    assert (verdict.kind, verdict.reason, verdict.retryable) == ("transport", "tls", False)
    assert verdict.transport_code == "ETLS"


def test_a_tls_reset_during_the_handshake_stays_retryable() -> None:
    """Only certificate failures are permanent: a handshake cut by the server is retried."""

    def reset_in_handshake(conn: socket.socket, stop: threading.Event) -> None:
        conn.recv(1)  # the client hello has started: cut it with a reset
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    with RawServer(reset_in_handshake) as server:
        https = f"https://127.0.0.1:{server.port}"
        with (
            ChatClient(https + "/v1", KEY, model="m", timeout=5, retry=FAST) as client,
            pytest.raises(ws.RetryExhausted) as caught,
        ):
            client.complete(MESSAGES)
        assert server.accepted == FAST.max_attempts
    verdict = ws.classify(caught.value.last_error)
    assert (verdict.reason, verdict.retryable) == ("transport", True)


# -- hostile answers: redirect loops, nested gzip, header floods, over-long lines -----------


def _redirect_loop(path: bytes) -> bytes:
    return b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n"


def _gzip_reply(encoding: bytes, body: bytes) -> Callable[[bytes], bytes]:
    def reply(path: bytes) -> bytes:
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: %s\r\n"
            b"Content-Length: %d\r\n\r\n" % (encoding, len(body))
        ) + body

    return reply


def _head_reply(extra: bytes) -> Callable[[bytes], bytes]:
    def reply(path: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\n" + extra + b"Content-Length: 2\r\n\r\n{}"

    return reply


COMPLETION = b'{"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}'
HOSTILE = {
    "redirect_loop": (_redirect_loop, "too_many_redirects"),
    # the header says two layers, the body has one whose inside is not gzip
    "gzip_in_gzip_header": (
        _gzip_reply(b"gzip, gzip", gzip.compress(b"not gzip")),
        "content_decoding",
    ),
    "broken_gzip": (_gzip_reply(b"gzip", b"\x1f\x8b\x08 not really gzip"), "content_decoding"),
    # a gzip stream cut short, inside a body whose length is right
    "truncated_gzip": (_gzip_reply(b"gzip", gzip.compress(COMPLETION)[:-9]), "content_decoding"),
    "six_codings": (_gzip_reply(b"gzip, " * 5 + b"gzip", b"{}"), "content_decoding"),
    "unasked_brotli": (_gzip_reply(b"br", b"\x0b\x02\x80{}\x03"), "unexpected_content_encoding"),
    # one layer announced, two sent: what is left after decoding is not JSON
    "gzip_in_gzip_body": (
        _gzip_reply(b"gzip", gzip.compress(gzip.compress(COMPLETION))),
        "malformed_response",
    ),
    "header_flood": (
        _head_reply(b"".join(b"X-Flood-%d: x\r\n" % i for i in range(1000))),
        "too_many_headers",
    ),
    "long_header_line": (_head_reply(b"X-Long: " + b"a" * 70_000 + b"\r\n"), "line_too_long"),
}
ENDPOINT = b"/v1/chat/completions"
# ChatClient does not follow a POST's redirect at all: the first 3xx is its answer
CHAT_REASON = {"redirect_loop": "redirect"}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_answer_to_complete_is_classified_once_and_not_retried(attack: str) -> None:
    """complete(): the error and classify() agree, and retrying is not tried."""
    reply, reason = HOSTILE[attack]
    answer = Answer(reply)
    with RawServer(answer) as server:
        with (
            ChatClient(server.url + "/v1", KEY, model="m", timeout=5, retry=FAST) as client,
            pytest.raises(ws.WatchdogError) as caught,
        ):
            client.complete(MESSAGES)
        assert answer.first_attempts(ENDPOINT) == 1
    error = caught.value
    verdict = ws.classify(error)
    expected = (CHAT_REASON.get(attack, reason), False)
    assert (verdict.reason, verdict.retryable) == (error.reason, error.retryable) == expected
    assert "transient" not in str(error)


@pytest.mark.parametrize("attack", ["redirect_loop", "header_flood", "long_header_line"])
def test_a_hostile_answer_to_stream_is_classified_once_and_not_retried(attack: str) -> None:
    """stream(): the same agreement and a single attempt."""
    reply, _ = HOSTILE[attack]
    answer = Answer(reply)
    with RawServer(answer) as server:
        with (
            ChatClient(server.url + "/v1", KEY, model="m", timeout=5, retry=FAST) as client,
            pytest.raises(ws.WatchdogError) as caught,
        ):
            client.stream(MESSAGES)
        assert answer.first_attempts(ENDPOINT) == 1
    error = caught.value
    verdict = ws.classify(error)
    assert (verdict.reason, verdict.retryable) == (error.reason, error.retryable)
    assert verdict.retryable is False
    assert "transient" not in str(error)


@pytest.mark.parametrize(
    "attack", ["redirect_loop", "gzip_in_gzip_header", "header_flood", "long_header_line"]
)
def test_session_errors_for_hostile_answers_classify_as_not_retryable(attack: str) -> None:
    """Session raises requests' own error; classify() names it and says no retry."""
    reply, reason = HOSTILE[attack]
    with (
        RawServer(Answer(reply)) as server,
        Session() as session,
        pytest.raises(requests.RequestException) as caught,
    ):
        session.get(server.url + "/v1/models").close()
    verdict = ws.classify(caught.value)
    assert (verdict.kind, verdict.reason, verdict.retryable) == ("transport", reason, False)


def test_stream_sse_errors_agree_with_classify_for_a_redirect_loop() -> None:
    """stream_sse (GET) through a redirect loop: one TransportError that classify() repeats."""
    with (
        RawServer(Answer(_redirect_loop)) as server,
        pytest.raises(ws.TransportError) as caught,
        ws.stream_sse(server.url + "/events", method="GET", budget=ws.Budget(5)) as events,
    ):
        list(events)
    assert_agrees(caught.value, "too_many_redirects")


# -- exceptions that break when looked at ---------------------------------------------------


class _Boom(Exception):
    pass


class BrokenResponse(Exception):
    """An exception whose `.response` property raises."""

    @property
    def response(self) -> Any:
        raise _Boom("no response for you")


class BrokenStr(Exception):
    """An exception whose `__str__` raises."""

    def __str__(self) -> str:
        raise _Boom("no text for you")


class BrokenEverything(OSError):
    """`.response`, `.reason`, `.errno` and `__str__` all raise."""

    @property  # type: ignore[override]
    def errno(self) -> Any:
        raise _Boom("errno")

    @property
    def reason(self) -> Any:
        raise _Boom("reason")

    @property
    def response(self) -> Any:
        raise _Boom("response")

    def __str__(self) -> str:
        raise _Boom("str")


class BrokenStatusText(Exception):
    """A 4xx response whose `.text` and `.headers` raise."""

    class _Response:
        status_code = 404

        @property
        def text(self) -> str:
            raise _Boom("text")

        @property
        def headers(self) -> Any:
            raise _Boom("headers")

    response = _Response()


@pytest.mark.parametrize(
    "exc", [BrokenResponse(), BrokenStr(), BrokenEverything()], ids=lambda e: type(e).__name__
)
def test_classify_survives_exceptions_that_raise_when_inspected(exc: Exception) -> None:
    """A raising `.response`, `__str__`, `.reason` or `.errno` still gets a Classification,
    alone and as the cause of a TransportError."""
    wrapped = ws.TransportError("wrapper")
    wrapped.__cause__ = exc
    assert ws.classify(exc) == ws.Classification("unknown", "unknown", False)
    assert ws.classify(wrapped).kind == "transport"


def test_classify_reads_the_status_of_a_response_whose_body_and_headers_raise() -> None:
    """A 4xx response whose `.text` and `.headers` raise is still classified by its status."""
    verdict = ws.classify(BrokenStatusText())
    assert (verdict.kind, verdict.reason, verdict.status, verdict.retryable) == (
        "http",
        "not_found",
        404,
        False,
    )


class BrokenStrReset(ConnectionResetError):
    """A retryable reset whose `__str__` raises."""

    def __str__(self) -> str:
        raise _Boom("no text for you")


def test_retry_call_gives_up_cleanly_on_an_error_whose_str_raises() -> None:
    """The retry loop's give-up message survives an error it cannot print."""
    calls: List[int] = []

    def always_reset() -> None:
        calls.append(1)
        raise BrokenStrReset()

    policy = ws.RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=0.0)
    with pytest.raises(ws.RetryExhausted) as caught:
        ws.retry_call(always_reset, policy=policy, budget=ws.Budget(5))
    assert len(calls) == 2
    assert isinstance(caught.value.last_error, BrokenStrReset)
    assert "BrokenStrReset" in str(caught.value)
