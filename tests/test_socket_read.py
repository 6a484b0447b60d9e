"""A consumer's read of its own socket (SocketRead): one blocking recv() under the kernel's
receive timeout where it can, a poll() for the rest, on real loopback sockets."""

from __future__ import annotations

import socket
import struct
import sys
import time
from typing import Callable, Iterator, Optional, Tuple

import pytest

from .internals import KERNEL_MARGIN, MONOTONIC, SocketRead

pytestmark = pytest.mark.timeout(30)

LINUX = sys.platform.startswith("linux")
NO_KERNEL_TIMEOUT = bytes(16)  # struct timeval {0, 0}


@pytest.fixture
def pair() -> Iterator[Tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on 127.0.0.1: (the one read, its peer)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    with ours, theirs:
        ours.settimeout(0)  # as the stacks hand a stream's socket over: non-blocking
        yield ours, theirs


@pytest.fixture
def owned(pair: Tuple[socket.socket, socket.socket]) -> SocketRead:
    """The reads of the pair's first socket, as its consumer makes them (blocking)."""
    reads = SocketRead(pair[0])
    reads.own()
    return reads


def kernel_timeout(sock: socket.socket) -> bytes:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)


@pytest.mark.parametrize(("limit", "times"), [(0.01, 3), (0.3, 3), (2.5, 1)])
def test_nothing_within_the_limit_returns_none_at_the_limit_not_a_step_past(
    owned: SocketRead, limit: float, times: int
) -> None:
    """The kernel's timeout runs out early (its timer wheel's steps grow with the distance:
    256 ms at 2.5 s on a kernel of 250 ticks a second), and the poll() after it ends the
    wait at the limit, within a few milliseconds. 0.01 s: below the margin, poll() alone."""
    for _ in range(times):
        started = time.monotonic()
        assert owned.read(limit) is None
        waited = time.monotonic() - started
        assert limit <= waited < limit + 0.05, waited


def read_meanwhile(
    reads: SocketRead, limit: Optional[float], action: Callable[[], None]
) -> Tuple[Optional[bytes], float]:
    """``reads.read(limit)`` with ``action`` run 0.05 s in, on the shared watchdog thread:
    what the read returned, and how long it took."""
    started = time.monotonic()
    timer = MONOTONIC.call_at(started + 0.05, action)
    try:
        return reads.read(limit), time.monotonic() - started
    finally:
        timer.cancel()  # ran already, unless the read failed first


def test_bytes_that_come_within_the_limit_are_returned_as_they_come(
    pair: Tuple[socket.socket, socket.socket], owned: SocketRead
) -> None:
    theirs = pair[1]
    got, took = read_meanwhile(owned, 5.0, lambda: theirs.sendall(b"data: 1\n\n"))
    assert got == b"data: 1\n\n" and took < 2.0  # with the bytes, not at the limit
    got, took = read_meanwhile(owned, None, lambda: theirs.sendall(b"data: 2\n\n"))
    assert got == b"data: 2\n\n" and took < 2.0  # no limit


def test_reads_whose_wait_shrinks_with_the_budget_keep_one_kernel_timeout(
    pair: Tuple[socket.socket, socket.socket], owned: SocketRead
) -> None:
    """A budget's time left shrinks read by read: the kernel timeout set at the first read
    serves the next ones while it is within their wait, and is set anew, shorter, once a
    wait falls below it. It never outlasts a read's wait."""
    ours, theirs = pair
    seen = []
    for left in (30.0, 29.0, 25.0, 23.0, 10.0):
        theirs.sendall(b"data: 1\n\n")
        assert owned.read(left) == b"data: 1\n\n"
        whole, micro = struct.unpack("ll", kernel_timeout(ours))
        assert whole + micro / 1e6 <= left
        seen.append((whole, micro))
    if LINUX:
        assert len(set(seen[:4])) == 1 and seen[4] != seen[0], seen
    else:
        assert set(seen) == {(0, 0)}  # poll() alone


def test_a_shutdown_from_outside_ends_a_read_in_progress(
    pair: Tuple[socket.socket, socket.socket], owned: SocketRead
) -> None:
    """What on_timeout does at a stop or the budget's end: the blocked recv() returns b""."""
    got, took = read_meanwhile(owned, 10.0, lambda: pair[0].shutdown(socket.SHUT_RDWR))
    assert got == b"" and took < 2.0


def test_the_kernel_timeout_is_set_only_while_the_consumer_reads_and_forgotten_after(
    pair: Tuple[socket.socket, socket.socket], owned: SocketRead
) -> None:
    """Blocking with a kernel timeout while its consumer reads; no kernel timeout left for the
    pool (a blocking read of a pooled socket would otherwise fail with EAGAIN). Elsewhere than
    on Linux, poll() alone: no kernel timeout."""
    ours = pair[0]
    assert ours.getblocking()
    assert owned.read(KERNEL_MARGIN * 2 + 0.05) is None
    assert (kernel_timeout(ours) != NO_KERNEL_TIMEOUT) is LINUX
    owned.forget()
    assert kernel_timeout(ours) == NO_KERNEL_TIMEOUT
