"""ChatStream: the chunks of one streaming chat completion, opened with retries.

Opening a stream means "send the request and obtain the first parsed chunk";
that, and only that, is retried (one ``retry_call``). Once the first chunk
is in hand it is delivered, and no later failure is retried: a replay would
duplicate output the caller has already seen, so errors raised while
iterating carry ``retryable=False`` and outer retry loops leave them alone.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

from .._core import scope as _scope
from .._core.budget import Budget
from .._core.calls import CallMark
from .._core.errors import Cancelled, StreamIdleTimeout, StreamProtocolError, WatchdogError
from .._core.events import Event, context_with_fields, emit, event_fields
from .._core.redact import excerpt
from .._http.json_object import json_object
from .._retry.loop import retry_call
from .._retry.policy import RetryPolicy
from .._stream.limits import StreamLimits
from .._stream.sse import SSEStream, open_sse
from .._stream.stream import StreamStats
from .._stream.wire import EventWatch, is_done, no_finish_reason
from .call import STAGE, ChatCall, run_in_call
from .errors import error_object, for_call

__all__ = ["ChatStream", "open_stream"]

_SERVER_ID_HEADERS = ("x-request-id", "openai-request-id", "request-id")


class ChatStream:
    """The chunks of a streaming chat completion. Made by :meth:`ChatClient.stream`.

    Iterate it for the parsed ``chat.completion.chunk`` dicts, as the server
    sent them. Use it as a context manager, or call :meth:`close`, to stop
    early: the connection is shut and let go at once.

    Afterwards (or at any point) read:

    Attributes:
        text: the ``choices[0].delta.content`` pieces so far, joined.
        finish_reason: ``choices[0].finish_reason`` once the server sent it.
        usage: the ``usage`` object, when the server sent one.
        stats: the last attempt's :class:`StreamStats`.
        request_id: the ``X-Request-ID`` sent with every attempt of this call.
        server_request_id: the server's own request id (``x-request-id``,
            ``openai-request-id`` or ``request-id`` response header), if any.
        attempts: how many attempts were made to open the stream.

    On timeout, while iterating: :class:`StreamIdleTimeout` when no chunk
    arrived for ``idle_timeout`` (once every choice had its ``finish_reason`` the
    answer is whole, and the silence just ends the stream);
    :class:`DeadlineExceeded` when the call's
    own ``timeout`` or ``budget=`` ran out; an enclosing ``deadline()``
    scope's end passes through to that scope. On cancel:
    :class:`OperationCancelled`. Every error raised while iterating has
    ``retryable=False`` (chunks were delivered; nothing is replayed) and
    carries ``request_id``; after any error the stream is closed (connection
    shut and let go).
    """

    def __init__(
        self, call: ChatCall, owner: Budget, release: Callable[[], None], mark: CallMark
    ) -> None:
        self.request_id = call.request_id
        self.server_request_id: Optional[str] = None
        self.attempts = 0
        self.finish_reason: Optional[str] = None
        self.usage: Optional[Dict[str, Any]] = None
        self._call = call
        self._owner = owner
        self._release = release
        self._mark = mark
        self._fields = {**call.fields(), **mark.fields()}
        self._context = context_with_fields(**self._fields)
        self._parts: List[str] = []
        self._pending: Optional[Dict[str, Any]] = None
        self._watch = EventWatch()  # the stream rules' verdict: has the answer ended?
        self._sse: Optional[SSEStream] = None
        self._events: Iterator[Any] = iter(())
        self._ended = False
        self._first_at: Optional[float] = None
        self._last_at: Optional[float] = None
        mark.end_when_collected(self)  # a stream dropped unclosed still ends its call

    # -- reading -------------------------------------------------------------

    @property
    def text(self) -> str:
        """The assistant text received so far (``choices[0].delta.content`` joined)."""
        return "".join(self._parts)

    @property
    def stats(self) -> StreamStats:
        """The last attempt's stream statistics (items, first item, lifetime, end)."""
        assert self._sse is not None
        return self._sse.stats

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> Dict[str, Any]:
        chunk = self._pending
        if chunk is not None:
            self._pending = None
            return chunk
        if self._ended:
            raise StopIteration
        run = self._context.run  # events inside carry request_id and model
        try:
            chunk = run(self._step)
        except Cancelled as exc:
            run(self._failed, exc.reason, exc)
            if not _scope.owns(self._owner, exc):
                raise  # an enclosing scope's end: that scope converts it
            raise _scope.error_for(
                exc, stage=STAGE, attempts=self.attempts, request_id=self.request_id
            ) from None
        except WatchdogError as exc:
            if not (isinstance(exc, StreamIdleTimeout) and self._watch.finished):
                raise self._failure(exc)  # noqa: B904  (a copy of exc, with its cause)
            chunk = None  # finished, but the server kept the stream open: the answer is whole
        except BaseException as exc:
            run(self._end, exc)  # whatever broke, nothing more comes: shut the connection now
            raise
        if chunk is None:
            run(self._end, None, "completed")
            raise StopIteration
        return chunk

    def _failure(self, exc: WatchdogError) -> WatchdogError:
        """What to raise for ``exc`` after chunks were delivered (the stream is ended).

        Not retryable (no replay, for any outer loop), with the call's fields. No
        frame that raises it names it, so its traceback makes no reference cycle.
        """
        more: Dict[str, Any] = {"retryable": False}
        if isinstance(exc, StreamProtocolError) and not exc.chunks_received:
            more["chunks_received"] = self._chunks
        final = for_call(exc, self.request_id, self.attempts, **more)
        self._context.run(self._failed, final.reason, final)
        return final

    def _step(self) -> Optional[Dict[str, Any]]:
        """The next chunk, ``None`` at a normal end; raises on every failure."""
        while True:
            try:
                event = next(self._events)
            except StopIteration:
                if self._watch.finished or self._ended:
                    return None  # every choice finished, then EOF without [DONE]; or close()
                truncated = self._sse is not None and self._sse.truncated
                how = "in the middle of an event" if truncated else "before every choice finished"
                raise no_finish_reason(self._chunks, how, **self._fields_of_errors()) from None
            name, data = event.event, event.data
            if is_done(data):
                self._watch.read(name, data)  # no_finish_reason before every choice finished
                return None
            chunk = json_object(data)
            if chunk is None:
                raise self._malformed(data)
            if chunk.get("error") is not None or name == "error":
                raise error_object(
                    chunk, data, self._chunks, self._call.secrets, **self._fields_of_errors()
                )
            if self._watch.read(name, data, chunk):  # False: Anthropic's keep-alive, no chunk
                break
        choices = chunk.get("choices")
        choice = choices[0] if choices and type(choices) is list else None
        if type(choice) is dict and choice.get("index", 0) == 0:
            delta = choice.get("delta")
            content = delta.get("content") if type(delta) is dict else None
            if content and type(content) is str:
                self._parts.append(content)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        self.usage = chunk.get("usage") or self.usage
        now, last = time.monotonic(), self._last_at
        sink = self._mark.on_chunk
        if last is not None and sink is not None:
            sink(now - last)  # the gap since this attempt's previous chunk, for an observer
        self._last_at = now
        return chunk

    @property
    def _chunks(self) -> int:
        return self._watch.delivered  # the chunks this attempt delivered

    def _malformed(self, data: str) -> StreamProtocolError:
        return StreamProtocolError(
            f"a stream event is not a JSON object (after {self._chunks} chunks; "
            f"{len(data)} characters, starting {excerpt(data, 60, self._call.secrets)!r}); "
            "the server is not speaking the OpenAI chunk format",
            reason="malformed_event",
            chunks_received=self._chunks,
            **self._fields_of_errors(),
        )

    def _fields_of_errors(self) -> Dict[str, Any]:
        return {"request_id": self.request_id, "attempt": self.attempts}

    # -- opening ---------------------------------------------------------------

    def _attempt(self) -> None:
        """One attempt: a new SSE stream and its first chunk; the stream is closed on failure."""
        self.attempts += 1
        self._parts = []
        self._last_at = None
        self.finish_reason = None
        self.usage = None
        self._watch = EventWatch(secrets=self._call.secrets, **self._fields_of_errors())
        call = self._call
        sse = open_sse(
            call.url,
            json=call.body,
            headers=call.headers,
            session=call.session,
            limits=StreamLimits(
                call.idle_timeout,
                call.first_event_timeout,
                # the same limit as idle: errors then name idle_timeout
                first_named=call.first_event_timeout != call.idle_timeout,
            ),
            connect=call.connect_timeout,
            translator=call.translator(self.attempts),
        )
        self._sse = sse
        self._events = iter(sse)
        try:
            chunk = self._step()
        except BaseException as exc:
            sse.close()
            if isinstance(exc, WatchdogError):  # the guard's and framer's lack the call's fields
                raise for_call(exc, self.request_id, self.attempts)  # noqa: B904  (keeps its cause)
            raise
        # None (a normal end) needs a chunk first: a finish_reason or [DONE] after chunks.
        assert chunk is not None
        headers = {k.lower(): v for k, v in sse.headers.items()}
        self.server_request_id = next(
            (headers[name] for name in _SERVER_ID_HEADERS if headers.get(name)), None
        )
        self._pending = chunk

    # -- ending ----------------------------------------------------------------

    def _failed(self, reason: str, error: BaseException) -> None:
        """A failure after the first chunk: one event, then release everything."""
        emit(
            Event(
                "attempt_failed",
                stage=STAGE,
                reason=reason,
                attempt=self.attempts,
                chunks_received=self._chunks,
                status=getattr(error, "status", None),
                transport_code=getattr(error, "transport_code", None),
            )
        )
        self._end(error)

    def _end(self, error: Optional[BaseException] = None, how: str = "closed") -> None:
        """Shut the connection, release the budget, end the call (once) with its outcome:
        chunks, finish reason, time to the first and last chunk, and ``how`` if no error."""
        if self._ended:
            return
        self._ended = True
        started = self._mark.started
        first, last = self._first_at, self._last_at
        outcome: Dict[str, Any] = {
            "attempt": self.attempts,
            "chunks_received": self._chunks,
            "finish_reason": self.finish_reason,
            "first_byte_ms": None if first is None else (first - started) * 1000.0,
            "last_chunk_ms": None if last is None or first is None else (last - started) * 1000.0,
        }
        if error is None:
            outcome["reason"] = how
        try:
            if self._sse is not None:
                self._sse.close()
        finally:
            try:
                self._release()
            finally:
                self._mark.end(error, **outcome)

    def close(self) -> None:
        """Stop the stream: shut the connection and let it go (idempotent).

        Iterating afterwards ends at once (``StopIteration``).
        """
        self._pending = None
        with event_fields(**self._fields):
            self._end()

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "ended" if self._ended else "open"
        return (
            f"<ChatStream {state} request_id={self.request_id!r} model={self._call.model!r} "
            f"chunks={self._chunks} finish_reason={self.finish_reason!r}>"
        )


def open_stream(
    call: ChatCall,
    policy: RetryPolicy,
    budget: Budget,
    owner: Budget,
    release: Callable[[], None],
    mark: CallMark,
) -> ChatStream:
    """Open a :class:`ChatStream` for ``call`` (retried): returns once its first chunk arrived.

    ``mark`` is the call's boundary for observers; it ends when the stream does.
    """
    stream = ChatStream(call, owner, release, mark)
    attempts = functools.partial(
        retry_call, stream._attempt, policy=policy, budget=budget, stage=STAGE
    )
    try:
        with event_fields(**mark.fields()):
            run_in_call(call, budget, owner, attempts)
    except BaseException as exc:
        stream._end(exc)
        raise
    stream._first_at = stream._last_at
    return stream
