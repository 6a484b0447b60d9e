"""The error hierarchy: builtin bases, fields, messages, pickling."""

from __future__ import annotations

import errno
import inspect
import pickle
from typing import Any

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .internals import with_fields

pytestmark = pytest.mark.timeout(10)

# Every field of the base class, set away from its default, on every example.
_BASE = dict(stage="s", attempt=2, elapsed=1.5, remaining=0.25, request_id="req-1")

EXAMPLES = [
    ws.WatchdogError("root", reason="custom", retryable=True, **_BASE),
    ws.DeadlineExceeded(
        "deadline",
        attempts=3,
        last_error=ValueError("x"),
        phase="body",
        reason="r",
        retryable=True,
        **_BASE,
    ),
    ws.OperationTimeout("cap", reason="connect_timeout", phase="connect", retryable=False, **_BASE),
    ws.StreamIdleTimeout(
        "idle",
        idle_timeout=1.0,
        chunks_received=0,
        stream_lifetime=1.2,
        phase="head",
        reason="r",
        retryable=False,  # overrides "retryable when no chunk came"
        **_BASE,
    ),
    ws.OperationCancelled("stop", reason="user_abort", retryable=True, **_BASE),
    ws.RetryExhausted(
        "gave up",
        attempts=6,
        last_error=ConnectionResetError(104, "reset"),
        reason="retry_budget_exhausted",
        retryable=True,
        **_BASE,
    ),
    ws.TransportError("reset", transport_code="ECONNRESET", reason="tls", retryable=False, **_BASE),
    ws.HTTPStatusError(
        "429", status=429, retry_after=2.0, body="slow down", reason="x", retryable=False, **_BASE
    ),
    ws.StreamProtocolError(
        "no finish", reason="no_finish_reason", chunks_received=2, retryable=True, **_BASE
    ),
]

_MISSING = object()


def _fields(error: BaseException) -> dict:
    """Every field a caller can read: the instance's own, its class's and the builtin's
    (``errno``, ``strerror``, ``code``, ``message``, ``args``), methods left out."""
    names = set(vars(error)) | {name for name in dir(error) if not name.startswith("_")}
    values = {name: getattr(error, name, _MISSING) for name in sorted(names)}
    return {name: value for name, value in values.items() if not callable(value)}


def _same(value: Any, other: Any) -> bool:
    if isinstance(value, BaseException):
        return type(other) is type(value) and repr(other) == repr(value)
    return bool(other == value)


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_error_survives_pickle_with_every_field(error: ws.WatchdogError) -> None:
    """Issue 21: a pickled StreamIdleTimeout came back with ``errno`` None."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    before, after = _fields(error), _fields(copy)
    assert sorted(after) == sorted(before)
    changed = [name for name, value in before.items() if not _same(value, after[name])]
    assert changed == [], {name: (before[name], after[name]) for name in changed}


def test_phase_defaults_to_none_and_rejects_an_unknown_place() -> None:
    assert ws.DeadlineExceeded("d").phase is None
    assert ws.OperationTimeout("t").phase is None
    with pytest.raises(ValueError, match="phase must be None or one of resolve, connect"):
        ws.DeadlineExceeded("d", phase="somewhere")


def test_an_error_pickled_without_a_phase_reads_none() -> None:
    """A copy from before the field existed (its state has no phase) still answers."""
    error = ws.DeadlineExceeded("d", phase="wait")
    del error.__dict__["phase"]
    copy = pickle.loads(pickle.dumps(error))
    assert copy.phase is None


def test_a_pickled_stream_idle_timeout_still_looks_like_a_read_timeout() -> None:
    error = ws.StreamIdleTimeout("idle", idle_timeout=1.0, chunks_received=0, stream_lifetime=1.0)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.errno, copy.code, copy.retryable) == (errno.ETIMEDOUT, "ETIMEDOUT", True)
    assert copy.strerror == error.strerror


def test_a_copy_with_new_fields_keeps_the_errno_of_a_stream_idle_timeout() -> None:
    error = ws.StreamIdleTimeout("idle", idle_timeout=1.0, chunks_received=0, stream_lifetime=1.0)
    copy = with_fields(error, request_id="req-2")
    assert (copy.request_id, copy.errno) == ("req-2", errno.ETIMEDOUT)


def test_the_examples_set_every_constructor_field_of_every_public_error_class() -> None:
    """So the pickling test above covers every field: each keyword away from its default."""
    classes = {
        value
        for value in vars(ws).values()
        if isinstance(value, type) and issubclass(value, ws.WatchdogError)
    }
    assert classes == {type(error) for error in EXAMPLES}
    for error in EXAMPLES:
        cls = type(error)
        params: dict = {}
        for klass in reversed(cls.__mro__):
            if "__init__" in vars(klass) and issubclass(klass, ws.WatchdogError):
                params.update(inspect.signature(klass.__init__).parameters)
        for name, param in params.items():
            if param.kind is not param.KEYWORD_ONLY:
                continue
            value = getattr(error, name)
            assert value is not None, (cls.__name__, name)
            if name != "retryable":  # a bool: either value is some class's default
                default = getattr(cls, f"default_{name}", param.default)
                assert value != default, (cls.__name__, name, value)


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


class _FailingSession(ws.Session):
    """A Session whose every request fails with one shared error, as a layer below may raise."""

    def __init__(self, error: ws.WatchdogError) -> None:
        super().__init__()
        self.error = error

    def request(self, *args: object, **kwargs: object) -> Any:
        raise self.error


def test_the_chat_layer_raises_a_copy_with_its_fields_and_leaves_the_raised_error_alone() -> None:
    """Errors are immutable once raised: the call's request_id goes into a copy, same cause."""
    cause = ConnectionResetError(errno.ECONNRESET, "reset")
    shared = ws.TransportError("reset", transport_code="ECONNRESET", retryable=False)
    shared.__cause__ = cause
    session = _FailingSession(shared)
    messages = [{"role": "user", "content": "hi"}]
    client = ws.ChatClient("http://127.0.0.1:9/v1", model="m", session=session)
    with session, client, pytest.raises(ws.TransportError) as caught:
        client.complete(messages)
    assert caught.value is not shared and caught.value.request_id is not None
    assert (shared.request_id, shared.attempt) == (None, None)
    assert caught.value.__cause__ is cause
    assert (str(caught.value), caught.value.transport_code) == ("reset", "ECONNRESET")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.request_id, copy.transport_code) == (caught.value.request_id, "ECONNRESET")


@pytest.mark.parametrize("method", ["complete", "stream"])
def test_a_status_error_is_built_once_at_the_boundary_with_the_calls_fields(
    fault_gateway: FaultGateway, method: str
) -> None:
    """No rebuilt error hides in its context; request_id and the chat wording are its own."""
    base = fault_gateway.base_url("http401")
    client = ws.ChatClient(base, "key-0123456789", model="m")
    with client, pytest.raises(ws.HTTPStatusError) as caught:
        getattr(client, method)([{"role": "user", "content": "hi"}])
    error = caught.value
    assert error.__context__ is None and error.__cause__ is None
    assert (error.reason, error.retryable, error.attempt) == (
        "auth",
        False,
        1 if method == "stream" else None,
    )
    (seen,) = fault_gateway.requests_seen(base)
    assert error.request_id == seen.request_id
    assert str(error).startswith("HTTP 401: Incorrect API key provided")


def test_with_fields_copies_only_on_a_change_and_refuses_unknown_fields() -> None:
    """The copy keeps message, cause and traceback; the same fields give the same error."""
    try:
        try:
            raise ConnectionResetError(errno.ECONNRESET, "reset")
        except ConnectionResetError as cause:
            raise ws.TransportError("reset", transport_code="ECONNRESET") from cause
    except ws.TransportError as raised:
        original = raised
    assert with_fields(original, transport_code="ECONNRESET") is original
    copy = with_fields(original, retryable=False, request_id="r1")
    assert (copy.retryable, copy.request_id, original.retryable, original.request_id) == (
        False,
        "r1",
        True,
        None,
    )
    assert copy.__cause__ is original.__cause__ and copy.__traceback__ is original.__traceback__
    with pytest.raises(TypeError, match="no field 'chunks_received'"):
        with_fields(original, chunks_received=1)
