"""The shared stream reader: one thread waits on every socket-backed stream's socket.

Each stream's socket is registered with one ``selectors`` selector. When it is
readable, the reader takes what has arrived without blocking, decodes the body
framing, frames and parses the events and offers them to the stream's channel.

Isolation: a stream gets at most :data:`TURN_BYTES` per turn (its parse is
linear in the bytes), then the others are served before it is read again, so a
flooding stream costs its neighbours one bounded slice per turn; what a flood
of comments or pings costs is charged to its own stream's idle limits (they are
no activity). A full channel pauses its socket (it is unregistered until the
consumer takes a batch).

Supervision: if the reader ends for any reason but running out of streams (a
``BaseException`` from an event listener on its thread, say), every stream it
held ends at once with ``WatchdogError(reason='stream_reader_failed')``, the
cause is logged once, and the next stream starts a fresh reader. The thread
also exits once no stream is left (a new one starts on demand), and a child
after ``os.fork()`` starts its own. At interpreter exit, when no thread can start
(:mod:`.._core.threads`), a stream finalized then ends its connection in the
finalizing thread instead.

TLS: a non-blocking ``SSLSocket`` raises ``SSLWantReadError`` when a record is
incomplete, and may hold decrypted bytes (``pending()``) that ``select`` does
not see: a stream whose read budget ran out with bytes pending stays on the
ready list and is served again without waiting.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import selectors
import socket
import ssl
import threading
import time
from typing import Any, Callable, Deque, List, Optional, Set, Tuple

from .._core.errors import Cancelled, WatchdogError
from .._core.threads import threads_can_start
from .socket_read import READ_SIZE, WOULD_BLOCK

_log = logging.getLogger("watchdog_sync")

__all__ = ["SHARED_READER_THREAD_NAME", "TURN_BYTES", "Feed", "add", "call_soon", "kick"]

SHARED_READER_THREAD_NAME = "watchdog_sync-shared-reader"

TURN_BYTES = 65536  # the most one stream is given per turn before the others are served
GIVE_BACK_EVERY = 0.05  # how often the reader asks its streams whether to hand them back
_LINGER = 0.05  # an idle reader waits this long for a new stream before it exits


class Feed:
    """One stream's socket, its decoder (``take``) and how it ends (``end``).

    ``take(data)`` handles one read's bytes and returns False when the stream's
    buffer is full or the body ended (``self.finished``); ``end(error)`` is
    called once, on the reader thread, when the socket is done. ``give_back()``,
    asked every :data:`GIVE_BACK_EVERY` seconds, returns True when the stream's
    consumer reads the socket from then on: the reader lets it go (by default it
    never does).
    """

    __slots__ = (
        "end",
        "finished",
        "flush",
        "give_back",
        "paused",
        "sock",
        "take",
        "tls",
        "watched",
    )

    def __init__(
        self,
        sock: Any,
        take: Callable[[bytes], bool],
        end: Callable[[Optional[BaseException], bool], None],
        flush: Callable[[], None],
        give_back: Callable[[], bool] = lambda: False,
    ) -> None:
        self.give_back = give_back
        self.sock = sock
        self.take = take
        self.end = end
        self.flush = flush
        self.finished = False
        self.paused = False
        self.watched = False
        self.tls = isinstance(sock, ssl.SSLSocket)


class _Reader:
    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._ops: Deque[Tuple[str, Feed]] = collections.deque()  # appended anywhere, popped here
        self._calls: Deque[Callable[[], None]] = collections.deque()  # the same, run here
        self._feeds: Set[Feed] = set()
        self._ready: Set[Feed] = set()
        self._give_back_at = 0.0
        self._thread = threading.Thread(
            target=self._run, name=SHARED_READER_THREAD_NAME, daemon=True
        )

    def start(self) -> None:
        """Start the thread; if it cannot start, what was queued for it ends at once, as when
        a reader fails, and the next stream makes a fresh one."""
        try:
            self._thread.start()
        except BaseException as exc:
            self._failed(exc)
            self._close()
            raise

    def post(self, op: str, feed: Feed) -> None:
        """From any thread (``deque.append`` needs no lock): queue ``op`` and wake the reader."""
        self._ops.append((op, feed))
        self.wake()

    def wake(self) -> None:
        """From any thread: end the reader's wait (a ``send``, which lets the GIL go: never
        while holding ``_lock``, or threads stopping streams together queue on it)."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _run_calls(self) -> None:
        while self._calls:  # only this thread pops
            _run_call(self._calls.popleft())

    def _run(self) -> None:
        try:
            while self._turn():
                pass
        except BaseException as exc:  # supervised: its streams end now, the next gets a new reader
            self._failed(exc)
        finally:
            self._close()

    def _close(self) -> None:
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _failed(self, cause: BaseException) -> None:
        global _reader
        with _lock:  # after this, add() starts a fresh reader: no op reaches this one
            if _reader is self:
                _reader = None
        held = set(self._feeds) | self._ready
        while self._ops:
            op, feed = self._ops.popleft()
            if op == "add":
                held.add(feed)
        _log.error(
            "watchdog_sync: the shared stream reader stopped (%s); the %d streams it held "
            "end now and the next stream starts a fresh reader",
            type(cause).__name__,
            len(held),
            exc_info=(type(cause), cause, cause.__traceback__),
        )
        for feed in held:
            error = WatchdogError(
                f"the shared stream reader stopped ({type(cause).__name__}) while it read "
                "this stream; the stream was ended (a new stream gets a fresh reader)",
                reason="stream_reader_failed",
                retryable=False,
            )
            error.__cause__ = cause
            self._unwatch(feed)
            try:
                feed.end(error, False)
            except BaseException:  # one stream's end must not keep the others from theirs
                _log.debug("watchdog_sync: ending a stream after the reader stopped raised")
        self._run_calls()  # the ends it was given, here: nobody else will run them

    def _turn(self) -> bool:
        global _reader
        if not self._feeds and not self._ready:
            self._selector.select(_LINGER)  # a new stream's wake-up ends this early
            with _lock:
                if not self._ops and not self._calls:
                    if _reader is self:
                        _reader = None
                    return False
        # Woken at least every GIVE_BACK_EVERY while it holds streams: to ask them.
        timeout = 0.0 if self._ready else GIVE_BACK_EVERY
        for key, _ in self._selector.select(timeout):
            if key.data is None:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            else:
                self._ready.add(key.data)
        ops: List[Tuple[str, Feed]] = []
        while self._ops:  # only this thread pops; an op appended meanwhile also sent a wake-up
            ops.append(self._ops.popleft())
        for op, feed in ops:
            if op == "add":
                self._feeds.add(feed)
                self._ready.add(feed)  # bytes may have arrived before it was watched
            elif feed in self._feeds and feed.paused:
                feed.paused = False
                self._ready.add(feed)
        self._run_calls()
        ready, self._ready = self._ready, set()
        for feed in ready:
            if feed in self._feeds:
                self._serve(feed)
        for feed in ready:  # wake the consumers only now: see FedChannel.flush
            feed.flush()
        now = time.monotonic()
        if now >= self._give_back_at:
            self._give_back_at = now + GIVE_BACK_EVERY
            self._give_back()
        return True

    def _give_back(self) -> None:
        """Let go of the streams whose consumers read their sockets again (not one paused
        for a full buffer: its consumer has events to take first)."""
        for feed in list(self._feeds):
            if not feed.paused and feed.give_back():
                self._unwatch(feed)
                self._feeds.discard(feed)
                self._ready.discard(feed)

    def _serve(self, feed: Feed) -> None:
        sock = feed.sock
        given = 0
        while given < TURN_BYTES:
            try:
                data = sock.recv(READ_SIZE)
            except WOULD_BLOCK:
                self._watch(feed)
                return
            except OSError as exc:
                self._finish(feed, exc)
                return
            if not data:
                self._finish(feed, None, eof=True)
                return
            given += len(data)
            try:
                more = feed.take(data)
            except (Exception, Cancelled) as exc:  # decoding, framing, or stopped: its error
                self._finish(feed, exc)
                return
            if feed.finished:
                self._finish(feed, None)
                return
            if not more:
                feed.paused = True
                self._unwatch(feed)
                return
            # A short read took what the kernel had; TLS may still hold decrypted bytes
            # that select() cannot see.
            if len(data) < READ_SIZE and not (feed.tls and sock.pending()):
                self._watch(feed)
                return
        self._ready.add(feed)  # its slice of this turn is used up: more may be there

    def _watch(self, feed: Feed) -> None:
        if feed.watched:
            return
        try:
            try:
                self._selector.register(feed.sock, selectors.EVENT_READ, feed)
            except KeyError:  # its number is still another's, whose socket was closed
                self._drop_stale(feed.sock.fileno())
                self._selector.register(feed.sock, selectors.EVENT_READ, feed)
        except (OSError, ValueError, KeyError) as exc:  # closed from outside
            self._finish(feed, exc)
            return
        feed.watched = True

    def _drop_stale(self, fd: int) -> None:
        """End the stream still registered under ``fd``: its socket was closed from outside
        (the kernel forgot it, the selector did not), and the number now belongs to another."""
        key = self._selector.get_map().get(fd)
        if key is None or key.data is None:  # None: the reader's own wake-up socket
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(fd)
        stale: Feed = key.data
        stale.watched = False
        self._finish(stale, OSError(errno.EBADF, "the stream's socket was closed from outside"))

    def _unwatch(self, feed: Feed) -> None:
        if feed.watched:
            feed.watched = False
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(feed.sock)

    def _finish(self, feed: Feed, error: Optional[BaseException], eof: bool = False) -> None:
        self._unwatch(feed)
        self._feeds.discard(feed)
        try:
            feed.end(error, eof)
        except Exception:
            _log.exception("watchdog_sync: ending a stream on the shared reader raised; ignored")


def _run_call(fn: Callable[[], None]) -> None:
    try:
        fn()
    except OSError:  # closing a connection; anything else is a bug the reader's end reports
        _log.exception("watchdog_sync: ending a stream on the shared reader raised; ignored")


_lock = threading.Lock()
_reader: Optional[_Reader] = None


def add(feed: Feed) -> None:
    """Watch ``feed``'s socket (already non-blocking) on the shared reader."""
    _queue(("add", feed), None)


def call_soon(fn: Callable[[], None]) -> None:
    """Run ``fn`` on the shared reader's thread, soon: a stopped body's end (its connection
    let go) off the thread that stopped it, which raises at once. At interpreter exit, here
    and now (see the module's docstring)."""
    if not threads_can_start():
        _run_call(fn)
        return
    _queue(None, fn)


def _queue(op: Optional[Tuple[str, Feed]], fn: Optional[Callable[[], None]]) -> None:
    """Queue ``op`` or ``fn`` for the current reader (made and started if there is none), and
    wake it.

    Queued under ``_lock``, so that a reader on its way out sees it and stays. Nothing
    under the lock lets the GIL go (a new reader's socket pair is made before it, its
    thread started after it): in a burst of opens a thread waiting for the GIL while it
    holds the lock makes every other stream queue on the lock, each then waiting for the
    GIL again (69 ms an add at N = 300, 177 ms at most).
    """
    global _reader
    fresh = _Reader() if _reader is None else None
    made = False
    with _lock:
        reader = _reader
        if reader is None:  # none yet, or (rarely: then made here) the one we saw has left
            reader = _reader = fresh if fresh is not None else _Reader()
            made = True
        if op is not None:
            reader._ops.append(op)
        if fn is not None:
            reader._calls.append(fn)
    if fresh is not None and not made:
        fresh._close()
    if made:
        reader.start()
    reader.wake()


def kick(feed: Feed) -> None:
    """Serve ``feed`` again: it was paused (room again) or its socket was shut.

    Without ``_lock``: N consumers whose idle limits end together would queue on it, each
    handing it on only once it has the GIL back. A kick that reaches a reader on its way
    out is dropped, which is harmless: a reader exits only once it has no feed left.
    """
    reader = _reader
    if reader is not None:
        reader.post("resume", feed)


def _after_fork_in_child() -> None:
    global _lock, _reader
    _lock = threading.Lock()
    _reader = None  # the parent's thread does not exist here; its sockets are the parent's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
