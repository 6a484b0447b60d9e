"""The error hierarchy: builtin bases, fields, messages, pickling."""

from __future__ import annotations

import errno
import pickle

import pytest

import watchdog_sync as ws

pytestmark = pytest.mark.timeout(10)

EXAMPLES = [
    ws.DeadlineExceeded("deadline", stage="s", attempts=3, last_error=ValueError("x")),
    ws.OperationTimeout("cap", stage="connect", elapsed=1.0, remaining=2.0),
    ws.StreamIdleTimeout("idle", idle_timeout=1.0, chunks_received=0, stream_lifetime=1.2),
    ws.OperationCancelled("stop"),
    ws.RetryExhausted("gave up", attempts=6, last_error=ConnectionResetError(104, "reset")),
    ws.TransportError("reset", transport_code="ECONNRESET", request_id="req-1"),
    ws.HTTPStatusError("429", status=429, retry_after=2.0, body="slow down"),
    ws.StreamProtocolError("no finish", reason="no_finish_reason", chunks_received=2),
]


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_error_survives_pickle_with_its_fields(error: ws.WatchdogError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    for name, value in vars(error).items():
        if isinstance(value, BaseException):
            assert repr(getattr(copy, name)) == repr(value)
        else:
            assert getattr(copy, name) == value


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_error_is_a_watchdog_error_and_an_exception(error: ws.WatchdogError) -> None:
    assert isinstance(error, ws.WatchdogError)
    assert isinstance(error, Exception)


def test_timeouts_are_builtin_timeout_errors() -> None:
    for cls in (ws.DeadlineExceeded, ws.OperationTimeout, ws.StreamIdleTimeout):
        assert issubclass(cls, TimeoutError)
    assert issubclass(ws.TransportError, ConnectionError)


def test_stream_idle_timeout_looks_like_a_transport_read_timeout() -> None:
    err = ws.StreamIdleTimeout("idle", idle_timeout=2.0, chunks_received=3, stream_lifetime=5.0)
    assert err.errno == errno.ETIMEDOUT
    assert err.code == "ETIMEDOUT"
    assert err.reason == "stream_idle_timeout"
    assert err.retryable is False  # chunks were delivered
    fresh = ws.StreamIdleTimeout("idle", idle_timeout=2.0, chunks_received=0, stream_lifetime=2.0)
    assert fresh.retryable is True


def test_reason_and_retryable_defaults() -> None:
    assert ws.DeadlineExceeded("x").reason == "deadline_exceeded"
    assert ws.DeadlineExceeded("x").retryable is False
    assert ws.DeadlineExceeded("x").attempts == 0
    assert ws.DeadlineExceeded("x").last_error is None
    assert ws.OperationCancelled("x").reason == "cancelled"
    assert ws.RetryExhausted("x", attempts=1, last_error=OSError()).reason == "retry_exhausted"
    assert ws.TransportError("x").reason == "transport"


def test_cancelled_is_not_an_exception() -> None:
    assert not issubclass(ws.Cancelled, Exception)
    assert issubclass(ws.Cancelled, BaseException)


def test_repr_names_the_class_and_reason() -> None:
    assert repr(ws.OperationCancelled("stop")) == "OperationCancelled('stop', reason='cancelled')"
