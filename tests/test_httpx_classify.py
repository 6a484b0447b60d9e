"""classify() knows the errors of httpx2, httpx, openai and anthropic (without importing them)."""

from __future__ import annotations

from typing import Any, Dict, Optional

import anthropic
import httpx
import httpx2
import openai
import pytest

import watchdog_sync as ws

pytestmark = pytest.mark.timeout(10)

REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


class GatewayReadTimeout(httpx2.ReadTimeout):
    """A library's own subclass: recognised along the MRO."""


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (httpx2.ReadTimeout("read timed out"), "ETIMEDOUT"),
        (httpx2.ConnectTimeout("connect timed out"), "ETIMEDOUT"),
        (httpx2.PoolTimeout("pool"), "ETIMEDOUT"),
        (httpx2.ConnectError("refused"), "ECONNERROR"),
        (httpx2.ReadError("reset"), "ECONNERROR"),
        (httpx2.RemoteProtocolError("Server disconnected without sending a response."), "EPROTO"),
        (httpx.ReadTimeout("read timed out"), "ETIMEDOUT"),
        (httpx.RemoteProtocolError("peer closed connection"), "EPROTO"),
        (GatewayReadTimeout("slow"), "ETIMEDOUT"),
        (openai.APITimeoutError(request=REQUEST), "ETIMEDOUT"),
        (openai.APIConnectionError(request=REQUEST), "ECONNERROR"),
        (anthropic.APIConnectionError(request=REQUEST), "ECONNERROR"),
    ],
)
def test_transport_errors_of_httpx_and_the_sdks_are_retryable(
    error: BaseException, code: str
) -> None:
    verdict = ws.classify(error)
    assert (verdict.kind, verdict.transport_code, verdict.retryable) == ("transport", code, True)


def test_an_errno_in_the_cause_chain_wins_over_the_name() -> None:
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as exc:
            raise httpx2.ConnectError(str(exc)) from exc
    except httpx2.ConnectError as wrapped:
        assert ws.classify(wrapped).transport_code == "ECONNREFUSED"


def test_a_local_protocol_error_is_not_a_transport_failure() -> None:
    """Our side broke HTTP (a bad header, say): retrying cannot help."""
    assert not ws.classify(httpx2.LocalProtocolError("bad header")).retryable


def _status(
    cls: Any, status: int, body: Any, headers: Optional[Dict[str, str]] = None
) -> BaseException:
    response = httpx2.Response(status, headers=headers, json=body, request=REQUEST)
    error: BaseException = cls("error", response=response, body=body)
    return error


@pytest.mark.parametrize(
    ("error", "reason", "retryable", "retry_after"),
    [
        (
            _status(openai.RateLimitError, 429, {"error": {"code": "rate_limit_exceeded"}},
                    {"Retry-After": "3"}),
            "rate_limited", True, 3.0,
        ),
        (
            _status(openai.RateLimitError, 429, {"error": {"code": "insufficient_quota"}}),
            "quota_exceeded", False, None,
        ),
        (
            _status(openai.BadRequestError, 400, {"error": {"code": "context_length_exceeded"}}),
            "context_length", False, None,
        ),
        (_status(openai.InternalServerError, 500, {"error": {}}, {"retry-after-ms": "250"}),
         "server_error", True, 0.25),
        (_status(openai.AuthenticationError, 401, {"error": {}}), "auth", False, None),
        (
            _status(anthropic.APIStatusError, 529,
                    {"type": "error", "error": {"type": "overloaded_error"}}),
            "overloaded", True, None,
        ),
        (
            # the anthropic SDK raises a mid-stream error event on the stream's 200 response
            _status(anthropic.APIStatusError, 200,
                    {"type": "error", "error": {"type": "overloaded_error"}}),
            "overloaded", True, None,
        ),
        (
            _status(anthropic.BadRequestError, 400,
                    {"type": "error", "error": {"type": "invalid_request_error",
                                                "message": "prompt is too long"}}),
            "context_length", False, None,
        ),
    ],
)  # fmt: skip
def test_sdk_status_errors_follow_the_status_table(
    error: BaseException, reason: str, retryable: bool, retry_after: Optional[float]
) -> None:
    verdict = ws.classify(error)
    assert (verdict.kind, verdict.reason, verdict.retryable) == ("http", reason, retryable)
    assert verdict.retry_after == retry_after


def test_an_sdk_wrapper_of_our_error_is_classified_as_ours() -> None:
    """anthropic wraps what the transport raises in APIConnectionError(...) from ours."""
    deadline = ws.DeadlineExceeded("deadline of 1.00s exceeded")
    try:
        raise anthropic.APIConnectionError(request=REQUEST) from deadline
    except anthropic.APIConnectionError as wrapped:
        verdict = ws.classify(wrapped)
    assert (verdict.kind, verdict.retryable) == ("deadline", False)
    late = ws.StreamIdleTimeout("idle", idle_timeout=1, chunks_received=3, stream_lifetime=2)
    try:
        raise openai.APIConnectionError(request=REQUEST) from late
    except openai.APIConnectionError as wrapped:
        assert not ws.classify(wrapped).retryable


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (httpx2.TooManyRedirects("Exceeded maximum allowed redirects."), "too_many_redirects"),
        (httpx2.DecodingError("Error -3 while decompressing data"), "content_decoding"),
        (httpx.DecodingError("Error -3 while decompressing data"), "content_decoding"),
    ],
)
def test_permanent_httpx_failures_are_not_retried(error: BaseException, reason: str) -> None:
    """A redirect loop or an undecodable body is the same next time, as with requests."""
    verdict = ws.classify(error)
    assert (verdict.kind, verdict.reason, verdict.retryable) == ("transport", reason, False)
