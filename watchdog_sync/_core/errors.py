"""One exception hierarchy with structured fields.

::

    BaseException
     └── Cancelled                      the stop signal inside a scope (not an Exception)
    Exception
     └── WatchdogError                  .reason .stage .attempt .elapsed .remaining .retryable .request_id
          ├── DeadlineExceeded          (also TimeoutError) the shared deadline ran out; .phase
          ├── OperationTimeout          (also TimeoutError) a stage's own cap ran out; .phase
          │    └── StreamIdleTimeout    no stream activity for idle_timeout; errno ETIMEDOUT
          ├── OperationCancelled        somebody called Budget.cancel()
          ├── RetryExhausted            every attempt failed; .attempts .last_error
          ├── TransportError            (also ConnectionError) reset, refused, ...; .transport_code
          ├── HTTPStatusError           a non-2xx answer; .status .retry_after .body
          └── StreamProtocolError       the stream broke the protocol (no finish_reason, ...)

Every error pickles with its fields, so it can cross a process boundary. Errors are
immutable once raised: a layer that knows more (the call's request id, ...) raises a
copy made by :func:`with_fields`, never a changed original.
"""

from __future__ import annotations

import errno as _errno
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Type, TypeVar

from .redact import safe_text
from .status import status_verdict

if TYPE_CHECKING:
    from .budget import Budget

__all__ = [
    "PHASES",
    "Cancelled",
    "DeadlineExceeded",
    "HTTPStatusError",
    "OperationCancelled",
    "OperationTimeout",
    "RetryExhausted",
    "StreamIdleTimeout",
    "StreamProtocolError",
    "TransportError",
    "WatchdogError",
    "with_fields",
    "checked_phase",
]

E = TypeVar("E", bound="WatchdogError")

PHASES = ("resolve", "connect", "tls", "send", "head", "body", "backoff", "wait")
"""Where work can be when its time runs out (``.phase``); ``None``: nowhere known, or
nothing inside was interrupted."""


def checked_phase(phase: Optional[str]) -> Optional[str]:
    """``phase`` when it is None or one of :data:`PHASES`; else ``ValueError``."""
    if phase is not None and phase not in PHASES:
        raise ValueError(f"phase must be None or one of {', '.join(PHASES)}; got {phase!r}")
    return phase


class Cancelled(BaseException):
    """The budget of an enclosing scope has ended; unwind to that scope.

    A ``BaseException``, so ``except Exception`` in legacy code cannot swallow
    it. The ``deadline()`` scope (or public entry point) that owns ``budget``
    turns it into :class:`DeadlineExceeded` or :class:`OperationCancelled`;
    scopes of inner budgets let it pass untouched. Never catch it yourself.

    ``phase`` (one of :data:`PHASES`) and ``progress`` (how far the work got, in
    words) are set by the part that was interrupted, when it knows; the scope
    that converts the signal puts them into its error.
    """

    def __init__(
        self,
        budget: Budget,
        reason: str,
        *,
        phase: Optional[str] = None,
        progress: Optional[str] = None,
    ) -> None:
        super().__init__(budget, reason)
        self.budget = budget
        self.reason = reason
        self.phase = checked_phase(phase)
        self.progress = progress

    def __str__(self) -> str:
        stage = f" (stage {self.budget.stage!r})" if self.budget.stage else ""
        return f"budget ended{stage}: {self.reason}"


# OSError keeps these in slots of its own, not in the instance ``__dict__``: a copy (pickle,
# ``with_fields``) carries them beside it, or ``StreamIdleTimeout.errno`` came back ``None``.
_OS_FIELDS = ("errno", "strerror", "filename", "filename2")


def _state(error: WatchdogError) -> Dict[str, Any]:
    """Every field of ``error``: its ``__dict__``, and the OSError slots that are set."""
    state = dict(error.__dict__)
    if isinstance(error, OSError):
        for name in _OS_FIELDS:
            value = getattr(error, name)
            if value is not None:
                state[name] = value
    return state


def _rebuild(cls: Type[WatchdogError], message: str, state: Dict[str, Any]) -> WatchdogError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    fields = dict(state)
    slots = {}
    if issubclass(cls, OSError):
        slots = {name: fields.pop(name) for name in _OS_FIELDS if name in fields}
    err.__dict__.update(fields)
    for name, value in slots.items():
        setattr(err, name, value)
    return err


class WatchdogError(Exception):
    """Root of every error watchdog_sync raises.

    The message is redacted on construction (credential-shaped text and URL
    userinfo masked, control characters escaped: ``_core/redact.py``).

    Attributes:
        reason: a stable reason code (``'deadline_exceeded'``, ``'transport'``, ...).
        stage: the stage that was running (``Budget.stage`` or a call's ``stage=``).
        attempt: the attempt number (1-based) when a retry loop was running, else ``None``.
        elapsed: seconds since the budget started, when known.
        remaining: seconds the budget had left, when known.
        retryable: whether another attempt could help (an inner decision outer layers keep).
        request_id: the ``X-Request-ID`` of the request, when there was one.
    """

    default_reason = "error"
    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        reason: Optional[str] = None,
        stage: Optional[str] = None,
        attempt: Optional[int] = None,
        elapsed: Optional[float] = None,
        remaining: Optional[float] = None,
        retryable: Optional[bool] = None,
        request_id: Optional[str] = None,
    ) -> None:
        # Every message passes the redaction policy: no credential, no control character.
        Exception.__init__(self, safe_text(message) if isinstance(message, str) else message)
        self.reason = reason or self.default_reason
        self.stage = stage
        self.attempt = attempt
        self.elapsed = elapsed
        self.remaining = remaining
        self.retryable = self.default_retryable if retryable is None else retryable
        self.request_id = request_id

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r})"

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, _state(self)))


class DeadlineExceeded(WatchdogError, TimeoutError):
    """The one shared deadline ran out. Not retryable: only a new budget helps.

    ``attempts`` and ``last_error`` say how far a retry loop got (0 / ``None``
    when none was running). ``phase`` says where the work was when the budget
    ended: ``'resolve'``, ``'connect'``, ``'tls'``, ``'send'``, ``'head'``,
    ``'body'`` (a request), ``'backoff'`` (a retry's wait), ``'wait'`` (waiting
    for another task or worker), or ``None`` when nothing inside was
    interrupted (or the part that was does not say).
    """

    default_reason = "deadline_exceeded"
    phase: Optional[str] = None  # class default: errors pickled before the field existed

    def __init__(
        self,
        message: str,
        *,
        attempts: int = 0,
        last_error: Optional[BaseException] = None,
        phase: Optional[str] = None,
        **fields: Any,
    ) -> None:
        super().__init__(message, **fields)
        self.attempts = attempts
        self.last_error = last_error
        self.phase = checked_phase(phase)


class OperationTimeout(WatchdogError, TimeoutError):
    """A stage's own time cap ran out before the shared deadline did.

    ``phase``: where the work was then, as for :class:`DeadlineExceeded`.
    """

    default_reason = "operation_timeout"
    default_retryable = True
    phase: Optional[str] = None  # class default: errors pickled before the field existed

    def __init__(self, message: str, *, phase: Optional[str] = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.phase = checked_phase(phase)


class StreamIdleTimeout(OperationTimeout):
    """A stream produced nothing for ``idle_timeout`` seconds.

    It looks like a transport read timeout (``errno == errno.ETIMEDOUT``,
    ``code == 'ETIMEDOUT'``) so ordinary retry paths recover it; retryable only
    when no chunk was delivered yet (``chunks_received == 0``).
    """

    default_reason = "stream_idle_timeout"
    code = "ETIMEDOUT"

    def __init__(
        self,
        message: str,
        *,
        idle_timeout: float,
        chunks_received: int,
        stream_lifetime: float,
        **fields: Any,
    ) -> None:
        fields.setdefault("retryable", chunks_received == 0)
        super().__init__(message, **fields)
        self.errno = _errno.ETIMEDOUT
        self.idle_timeout = idle_timeout
        self.chunks_received = chunks_received
        self.stream_lifetime = stream_lifetime


class OperationCancelled(WatchdogError):
    """``Budget.cancel()`` was called; the work stopped early. Not retryable."""

    default_reason = "cancelled"


class RetryExhausted(WatchdogError):
    """Every allowed attempt failed (or a RetryBudget refused the next one).

    ``last_error`` (also ``__cause__``) is the final failure; ``retryable`` is
    true when that failure was, meaning a later call with a new budget may work.
    """

    default_reason = "retry_exhausted"

    def __init__(self, message: str, *, attempts: int, last_error: BaseException, **fields: Any):
        super().__init__(message, **fields)
        self.attempts = attempts
        self.last_error = last_error


class TransportError(WatchdogError, ConnectionError):
    """The connection failed: reset, refused, broken pipe, truncated body.

    ``transport_code`` names it (``'ECONNRESET'``, ...); the requests/urllib3
    error is ``__cause__``. ``reason`` is ``'transport'`` (retryable), or for a failure
    another attempt cannot fix ``'tls'``, ``'too_many_redirects'``, ``'content_decoding'``,
    ``'too_many_headers'`` or ``'line_too_long'`` (not retryable).
    """

    default_reason = "transport"
    default_retryable = True

    def __init__(self, message: str, *, transport_code: Optional[str] = None, **fields: Any):
        super().__init__(message, **fields)
        self.transport_code = transport_code


class HTTPStatusError(WatchdogError):
    """The server answered with a non-2xx status.

    ``body`` is a short excerpt with secrets redacted; ``retry_after`` is the
    server's requested wait in seconds, when it sent one. The library passes
    ``reason`` and ``retryable`` from the status table (``_core/status.py``); an
    error built without them (by a caller's own code) reads them from that table.
    """

    default_reason = "http_status"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        retry_after: Optional[float] = None,
        body: str = "",
        **fields: Any,
    ) -> None:
        if fields.get("reason") is None or fields.get("retryable") is None:
            reason, retryable = status_verdict(status, body)
            fields["reason"] = fields.get("reason") or reason
            fields["retryable"] = (
                retryable if fields.get("retryable") is None else fields["retryable"]
            )
        super().__init__(message, **fields)
        self.status = status
        self.retry_after = retry_after
        self.body = body


class StreamProtocolError(WatchdogError):
    """The stream broke the protocol.

    Reasons: ``'no_finish_reason'`` (ended without finishing; retryable only
    before any chunk was delivered), ``'malformed_event'``, ``'event_too_large'``,
    ``'unexpected_content_type'``, ``'malformed_framing'`` (an event stream's chunked
    framing breaks HTTP/1.1; not retryable), ``'stream_error'`` (the server sent an error
    object).
    """

    default_reason = "malformed_event"

    def __init__(self, message: str, *, chunks_received: int = 0, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.chunks_received = chunks_received


def with_fields(error: E, **fields: Any) -> E:
    """A new error like ``error`` with ``fields`` changed; ``error`` itself stays as it was raised.

    The copy keeps the message, the cause, the traceback and how the context is shown,
    so ``raise with_fields(exc, request_id=...)`` in ``except ... as exc`` reads like
    re-raising ``exc`` with more context. Returns ``error`` itself when nothing changes.
    """
    unknown = sorted(name for name in fields if name not in vars(error))
    if unknown:
        raise TypeError(f"{type(error).__name__} has no field {unknown[0]!r}")
    if all(getattr(error, name) == value for name, value in fields.items()):
        return error
    copy = _rebuild(type(error), error.message, {**_state(error), **fields})
    copy.__cause__ = error.__cause__
    # Raised inside ``except``, the copy's context is the original: show what it showed.
    copy.__suppress_context__ = error.__suppress_context__ or error.__context__ is None
    copy.__traceback__ = error.__traceback__
    return copy  # type: ignore[return-value]  # _rebuild made an instance of type(error)
