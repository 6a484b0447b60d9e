"""Each thread's private Session, for the streams sent without a session of their own.

Instead of a :class:`Session` made and closed at each open (as ``requests.post`` does),
each thread keeps one, held by one open stream at a time: a stream sent while another open
stream of the same thread holds it makes a new one and closes it once its head is in, so a
thread that interleaves many streams never fills a pool past its size.

Nothing of one call reaches the next: the cookies are cleared before each request, and a
stream's connection is closed at its end, so the pool keeps only closed connections. After
a redirect (whose connection may go back to the pool open) or a failed request the session
is closed at the stream's end and the next stream makes a new one. A child after ``fork()``
makes its own.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Optional, Tuple

from .._http.http import Session

__all__ = ["private_session"]


class _Slot:
    """A thread's private session, and whether an open stream holds it."""

    __slots__ = ("_held", "_lock", "_session", "pid")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()  # the holder may let go from another thread
        self._session: Optional[Session] = None
        self._held = False

    def take(self) -> Optional[Session]:
        """The session, cookies cleared, now held; ``None`` while another stream holds it."""
        with self._lock:
            if self._held:
                return None
            self._held = True
            session = self._session
        if session is None:
            session = self._session = Session()  # only its holder reaches it
        else:
            session.cookies.clear()
        return session

    def let_go(self, reusable: bool) -> None:
        """At the stream's end, from whichever thread ends it. Not ``reusable`` (a redirect
        may have left an open connection in its pool, or the request failed): closed, and
        the next stream makes a new one."""
        with self._lock:
            session = None if reusable else self._session
            if session is not None:
                self._session = None
            self._held = False
        if session is not None:
            session.close()


_local = threading.local()


def private_session() -> Tuple[Session, Optional[Callable[[bool], None]]]:
    """A session for one stream's request, and what lets it go at the stream's end (call it
    once, from any thread, with whether the session may serve the next stream): the
    calling thread's own, cookies cleared. While an open stream of the thread holds that
    one, a new session and ``None``: close it once the response's head is in, as
    ``requests.post`` closes its own (the response keeps its connection)."""
    slot = getattr(_local, "slot", None)
    if slot is None or slot.pid != os.getpid():  # none yet, or the parent's (after fork())
        slot = _local.slot = _Slot()
    session = slot.take()
    if session is None:
        return Session(), None
    return session, slot.let_go
