"""The response body of a request under a deadline: iterated inside its scope, ended by close().

A WSGI server calls ``next()`` on the body from its own frames, outside the
application's call, so the request's ``contextvars`` are gone by then. Every
``next()`` and the ``close()`` here run in the request's private context, so
library waits inside a streaming generator are bounded by the request's
budget, and a scope the generator opened stays open across its ``yield``\\ s.
"""

from __future__ import annotations

import contextvars
import json
import sys
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple

from .._core.budget import Budget
from .._core.errors import Cancelled, DeadlineExceeded, WatchdogError
from .._core.scope import error_for, owns

__all__ = ["Reply", "ScopedBody", "converted", "timeout_reply"]

StartResponse = Callable[..., Callable[[bytes], Any]]
_STATUS = "504 Gateway Timeout"


class Reply:
    """The request's ``start_response``, and whether its headers may have gone out yet."""

    def __init__(self, start_response: StartResponse) -> None:
        self._start_response = start_response
        self.headers_sent = False

    def start_response(self, status: str, headers: List[Tuple[str, str]], *exc_info: Any) -> Any:
        write = self._start_response(status, headers, *exc_info)

        def write_through(data: bytes) -> Any:
            self.headers_sent = True  # write() sends the headers at once
            return write(data)

        return write_through


def timeout_reply(reply: Reply, error: WatchdogError, budget: Budget) -> List[bytes]:
    """Answer ``504`` with a short JSON body naming the stage and reason.

    Must be called while the exception being answered is handled: it is passed
    as ``exc_info`` (so a ``start_response`` already called is replaced, as
    PEP 3333 allows). Re-raises it if the headers went out already.
    """
    if reply.headers_sent:
        raise error
    body = json.dumps(
        {"reason": error.reason, "stage": error.stage or budget.stage}, separators=(",", ":")
    ).encode()
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
    ]
    reply.start_response(_STATUS, headers, sys.exc_info())
    return [body]


def converted(exc: BaseException, budget: Budget) -> Optional[WatchdogError]:
    """The public error for ``exc`` if it is ours to answer with 504, else ``None``."""
    if isinstance(exc, Cancelled):
        if not owns(budget, exc):
            return None
        error = error_for(exc)
        error.__suppress_context__ = True  # the stop signal is not the story
        return error
    return exc if isinstance(exc, DeadlineExceeded) else None


class ScopedBody:
    """The app's response iterable, run in the request's context and bounded by its budget.

    Before each chunk the budget is checked: a body still going at the deadline
    ends there, even if it never waits on the library. If the deadline ends it
    before any chunk went out, the answer becomes the 504; afterwards the
    stream is cut (``DeadlineExceeded`` is raised to the server, which closes
    the connection). ``close()`` closes the app's iterable and ends the scope.
    """

    def __init__(
        self, result: Iterable[bytes], context: contextvars.Context, budget: Budget, reply: Reply
    ) -> None:
        self._result = result
        self._context = context
        self._budget = budget
        self._reply = reply
        self._iterator: Optional[Iterator[bytes]] = None
        self._done = False
        self._closed = False

    def __iter__(self) -> ScopedBody:
        return self

    def __next__(self) -> bytes:
        if self._done:
            raise StopIteration
        try:
            self._budget.check()
            if self._iterator is None:
                self._iterator = self._context.run(iter, self._result)
            chunk = self._context.run(next, self._iterator)
        except StopIteration:
            self._done = True
            raise
        except (Cancelled, DeadlineExceeded) as exc:
            error = converted(exc, self._budget)
            if error is None:
                raise
            self._done = True
            self._close_result()
            (answer,) = timeout_reply(self._reply, error, self._budget)
            return answer
        self._reply.headers_sent = True  # the server sends the headers with the first chunk
        return chunk

    def close(self) -> None:
        """Close the app's iterable (in the request's context); the scope ends here."""
        if self._closed:
            return
        self._done = True
        self._close_result()

    def _close_result(self) -> None:
        if self._closed:
            return
        self._closed = True
        close = getattr(self._result, "close", None)
        if close is None:
            return
        try:
            self._context.run(close)
        except Cancelled as exc:
            if not owns(self._budget, exc):
                raise
            raise error_for(exc) from None
