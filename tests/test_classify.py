"""classify(): the design's order, tested against real exceptions where they can be made."""

from __future__ import annotations

import email.utils
import socket
import struct
import threading
import time
from typing import Iterator, Tuple

import pytest
import requests
import responses

import watchdog_sync as ws

from .internals import parse_retry_after

pytestmark = pytest.mark.timeout(20)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def listener() -> Iterator[Tuple[socket.socket, int]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    try:
        yield server, server.getsockname()[1]
    finally:
        server.close()


def _serve_once(server: socket.socket, action: str) -> threading.Thread:
    def run() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            if action == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif action == "silent":
                conn.recv(1)  # hold the connection until the client gives up

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_connection_refused_on_a_closed_local_port_is_retryable_econnrefused() -> None:
    with pytest.raises(requests.ConnectionError) as info:
        requests.get(f"http://127.0.0.1:{_closed_port()}/", timeout=2)
    result = ws.classify(info.value)
    assert (result.kind, result.retryable, result.transport_code) == (
        "transport",
        True,
        "ECONNREFUSED",
    )


def test_a_server_that_resets_gives_a_retryable_reset(listener: Tuple[socket.socket, int]) -> None:
    server, port = listener
    thread = _serve_once(server, "reset")
    with pytest.raises(requests.ConnectionError) as info:
        requests.get(f"http://127.0.0.1:{port}/", timeout=2)
    thread.join(5)
    result = ws.classify(info.value)
    assert result.retryable is True
    assert result.transport_code in {"ECONNRESET", "EREMOTECLOSED"}


def test_a_read_timeout_against_a_silent_socket_is_etimedout(
    listener: Tuple[socket.socket, int],
) -> None:
    server, port = listener
    thread = _serve_once(server, "silent")
    with pytest.raises(requests.ReadTimeout) as info:
        requests.get(f"http://127.0.0.1:{port}/", timeout=(2, 0.2))
    thread.join(5)
    result = ws.classify(info.value)
    assert (result.retryable, result.transport_code) == (True, "ETIMEDOUT")


@pytest.mark.parametrize(
    ("status", "retryable", "reason"),
    [
        (408, True, "request_timeout"),
        (409, True, "conflict"),
        (425, True, "too_early"),
        (429, True, "rate_limited"),
        (500, True, "server_error"),
        (502, True, "bad_gateway"),
        (503, True, "unavailable"),
        (504, True, "gateway_timeout"),
        (529, True, "overloaded"),
        (400, False, "invalid_request"),
        (401, False, "auth"),
        (403, False, "forbidden"),
        (404, False, "not_found"),
        (413, False, "payload_too_large"),
        (422, False, "invalid_request"),
    ],
)
@responses.activate
def test_http_statuses_follow_the_table(status: int, retryable: bool, reason: str) -> None:
    responses.get("http://127.0.0.1/x", status=status, json={"error": {"message": "m"}})
    response = requests.get("http://127.0.0.1/x")
    with pytest.raises(requests.HTTPError) as info:
        response.raise_for_status()
    result = ws.classify(info.value)
    assert (result.kind, result.status, result.retryable, result.reason) == (
        "http",
        status,
        retryable,
        reason,
    )


@responses.activate
def test_retry_after_header_is_read_from_a_429() -> None:
    responses.get("http://127.0.0.1/x", status=429, headers={"Retry-After": "7"})
    with pytest.raises(requests.HTTPError) as info:
        requests.get("http://127.0.0.1/x").raise_for_status()
    assert ws.classify(info.value).retry_after == 7.0


@pytest.mark.parametrize(
    "body",
    [
        '{"error": {"code": "insufficient_quota"}}',
        '{"error": {"code": "billing_hard_limit_reached"}}',
        "You exceeded your current quota, please check your plan and billing details.",
    ],
)
def test_a_429_whose_body_says_the_quota_is_spent_is_not_retryable(body: str) -> None:
    err = ws.HTTPStatusError("429", status=429, body=body)
    result = ws.classify(err)
    assert (result.reason, result.retryable) == ("quota_exceeded", False)


def test_a_400_about_context_length_has_its_own_reason() -> None:
    err = ws.HTTPStatusError(
        "400", status=400, body="This model's maximum context length is 8192 tokens"
    )
    assert ws.classify(err).reason == "context_length"
    assert ws.classify(err).retryable is False


def test_a_definitive_4xx_beats_a_nested_transport_code() -> None:
    try:
        try:
            raise ConnectionResetError(104, "reset")
        except ConnectionResetError as inner:
            raise ws.HTTPStatusError("401", status=401) from inner
    except ws.HTTPStatusError as outer:
        result = ws.classify(outer)
    assert (result.status, result.retryable) == (401, False)


def test_errno_is_found_through_cause_and_context_chains() -> None:
    class AppError(Exception):
        pass

    try:
        try:
            raise OSError(32, "Broken pipe")
        except OSError:
            raise AppError("wrapped") from None
    except AppError as err:
        assert ws.classify(err).transport_code is None  # from None hides the context
    try:
        try:
            raise BrokenPipeError(32, "Broken pipe")
        except OSError as exc:
            raise AppError("wrapped") from exc
    except AppError as err:
        result = ws.classify(err)
    assert (result.transport_code, result.retryable) == ("EPIPE", True)


def test_order_cancelled_then_deadline_then_idle_timeout() -> None:
    assert ws.classify(ws.Cancelled(ws.Budget(), "cancelled")).kind == "cancelled"
    assert ws.classify(ws.OperationCancelled("x")).retryable is False
    assert ws.classify(KeyboardInterrupt()).kind == "cancelled"
    deadline = ws.classify(ws.DeadlineExceeded("x"))
    assert (deadline.kind, deadline.retryable) == ("deadline", False)
    fresh = ws.StreamIdleTimeout("i", idle_timeout=1, chunks_received=0, stream_lifetime=1)
    late = ws.StreamIdleTimeout("i", idle_timeout=1, chunks_received=4, stream_lifetime=9)
    assert (ws.classify(fresh).retryable, ws.classify(fresh).transport_code) == (True, "ETIMEDOUT")
    assert ws.classify(late).retryable is False


def test_stream_protocol_errors_keep_their_own_retry_decision() -> None:
    early = ws.StreamProtocolError("x", reason="no_finish_reason", retryable=True)
    malformed = ws.StreamProtocolError("x", reason="malformed_event")
    assert (ws.classify(early).kind, ws.classify(early).retryable) == ("protocol", True)
    assert ws.classify(malformed).retryable is False


def test_an_inner_not_retryable_decision_is_permanent() -> None:
    err = ws.RetryExhausted("x", attempts=3, last_error=OSError(), retryable=False)
    assert ws.classify(err).retryable is False


@pytest.mark.parametrize("exc", [TypeError(), NotImplementedError(), AttributeError()])
def test_programming_errors_are_never_retried(exc: Exception) -> None:
    assert ws.classify(exc) == ws.Classification("programming", "programming_error", False)


def test_anything_else_is_not_retryable() -> None:
    assert ws.classify(RuntimeError("?")).retryable is False


def test_retry_after_forms() -> None:
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    assert 25 < (parse_retry_after({"Retry-After": future}) or 0) <= 30
    assert parse_retry_after({"Retry-After": past}) is None
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-5"}) is None
    assert parse_retry_after({}) is None


def test_a_transport_error_an_inner_layer_marked_permanent_stays_permanent() -> None:
    err = ws.TransportError("reset", transport_code="ECONNRESET", retryable=False)
    result = ws.classify(err)
    assert (result.transport_code, result.retryable) == ("ECONNRESET", False)
    assert ws.classify(ws.TransportError("reset", transport_code="ECONNRESET")).retryable is True


def test_an_sdk_error_raised_while_handling_ours_is_classified_as_ours() -> None:
    """LiteLLM re-raises the openai SDK's error without ``from`` (ours is its __context__), and
    keeps it as ``original_exception``: the verdict is our error's, not a generic 500's."""
    import httpx2
    import openai

    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")

    class Wrapper(openai.APIConnectionError):  # the shape of litellm's wrappers
        def __init__(self, original: BaseException, delivered: bool) -> None:
            super().__init__(message="wrapped", request=request)
            self.original_exception = original
            self.is_pre_first_chunk = not delivered

    cut = ws.StreamProtocolError("cut", reason="no_finish_reason", chunks_received=5)
    try:
        try:
            raise cut
        except ws.StreamProtocolError:
            raise openai.APIConnectionError(message="inner", request=request)  # noqa: B904
    except openai.APIConnectionError as inner:
        by_context = inner
    assert ws.classify(by_context).reason == "no_finish_reason"
    assert ws.classify(Wrapper(by_context, delivered=True)).reason == "no_finish_reason"
    reset = openai.APIConnectionError(message="reset", request=request)
    assert ws.classify(Wrapper(reset, delivered=False)).retryable
    assert not ws.classify(Wrapper(reset, delivered=True)).retryable  # chunks came: no replay
