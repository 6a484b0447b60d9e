"""DeadlineMiddleware: each WSGI request runs inside a deadline its caller's headers set."""

from __future__ import annotations

import contextvars
from typing import Any, Callable, Dict, Iterable, Optional

from .._core.budget import Budget
from .._core.durations import Duration, validate_duration
from .._core.errors import Cancelled, DeadlineExceeded
from .._core.scope import current_child, set_current
from .body import Reply, ScopedBody, StartResponse, converted, timeout_reply
from .headers import incoming_timeout

__all__ = ["DeadlineMiddleware"]

WSGIApp = Callable[[Dict[str, Any], StartResponse], Iterable[bytes]]
STAGE = "request"


class DeadlineMiddleware:
    """Run every request of a WSGI app inside ``deadline(...)`` from its caller's headers.

    The request's time is the caller's remaining time (``grpc-timeout`` or
    ``x-envoy-expected-rq-timeout-ms``, see :func:`budget_from_headers`),
    else ``default_timeout``; either is clipped by ``max_timeout``. Inside,
    every library wait of the app (``Session``, ``ChatClient``, ...) is bounded
    by it, and ``Session(propagate=True)`` passes what is left on to the next
    hop. The time counts from when the server hands the request to the app.

    The scope lasts until the server closes the response body (PEP 3333's
    ``close()``), not only while the app is called: the body is iterated in
    the request's context, so a streamed response is bounded too, and it is
    checked before each chunk, so a body still going at the deadline stops.
    (The body is wrapped, so a server's ``wsgi.file_wrapper`` fast path,
    ``sendfile``, is not taken for it.)

    On timeout: a :class:`DeadlineExceeded` (or the request's own
    ``Cancelled``) that escapes the app becomes ``504 Gateway Timeout`` with a
    short JSON body, ``{"reason": "deadline_exceeded", "stage": "chat"}``, if
    the response headers have not gone out yet. Once they have, the stream is
    cut: ``DeadlineExceeded`` is raised to the server, which logs it and closes
    the connection (so a client reading a ``Content-Length`` or chunked body
    sees it cut, not complete). On cancel (the request's budget cancelled):
    the same, with reason ``cancelled``. Other errors pass through untouched.

    Args:
        app: the WSGI application.
        max_timeout: the longest any request may run (seconds): a caller's
            header asking for more, and ``default_timeout``, are clipped to
            it. ``None``: no cap (callers are trusted; set one in production).
        default_timeout: the time of a request that carries no valid
            deadline header. ``None``: no limit of its own (``max_timeout``
            still applies).

    Raises:
        TypeError, ValueError: a bad argument (``0`` or less, NaN, not a number).

    Example (gunicorn sync workers: end before the worker ``timeout`` kills it)::

        application = DeadlineMiddleware(app, max_timeout=25, default_timeout=10)
        # gunicorn --worker-class sync --timeout 30 module:application
    """

    def __init__(
        self,
        app: WSGIApp,
        *,
        max_timeout: Optional[Duration] = None,
        default_timeout: Optional[Duration] = None,
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be a WSGI application (callable), not {type(app).__name__}")
        self.app = app
        self.max_timeout = validate_duration(max_timeout, "max_timeout", allow_zero=False)
        self.default_timeout = validate_duration(
            default_timeout, "default_timeout", allow_zero=False
        )

    def __repr__(self) -> str:
        return (
            f"DeadlineMiddleware({self.app!r}, max_timeout={self.max_timeout!r}, "
            f"default_timeout={self.default_timeout!r})"
        )

    def timeout_for(self, environ: Dict[str, Any]) -> Optional[float]:
        """The seconds a request with this environ gets (``None``: no limit of its own)."""
        incoming = incoming_timeout(environ)
        chosen = incoming if incoming is not None else self.default_timeout
        if self.max_timeout is None:
            return chosen
        return self.max_timeout if chosen is None else min(chosen, self.max_timeout)

    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        timeout = self.timeout_for(environ)
        context = contextvars.copy_context()
        budget: Budget = context.run(_enter, timeout)
        reply = Reply(start_response)
        try:
            result = context.run(self.app, environ, reply.start_response)
        except (Cancelled, DeadlineExceeded) as exc:
            error = converted(exc, budget)
            if error is None:
                raise
            return timeout_reply(reply, error, budget)
        return ScopedBody(result, context, budget, reply)


def _enter(timeout: Optional[float]) -> Budget:
    """In the request's private context: its budget, made current for the whole request."""
    budget = current_child(timeout, stage=STAGE)
    set_current(budget)
    return budget
