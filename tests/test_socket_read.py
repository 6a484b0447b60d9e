"""A consumer's read of its own socket (SocketRead): one blocking recv() under the kernel's
receive timeout where it can, a poll() for the rest, on real loopback sockets."""

from __future__ import annotations

import socket
import sys
import threading
import time
from typing import Iterator, Tuple

import pytest

from .internals import KERNEL_MARGIN, SocketRead

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


def kernel_timeout(sock: socket.socket) -> bytes:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)


@pytest.mark.parametrize(("limit", "times"), [(0.01, 3), (0.3, 3), (2.5, 1)])
def test_nothing_within_the_limit_returns_none_at_the_limit_not_a_step_past(
    pair: Tuple[socket.socket, socket.socket], limit: float, times: int
) -> None:
    """The kernel's timeout runs out early (its timer wheel's steps grow with the distance:
    256 ms at 2.5 s on a kernel of 250 ticks a second), and the poll() after it ends the
    wait at the limit, within a few milliseconds. 0.01 s: below the margin, poll() alone."""
    ours, _ = pair
    reads = SocketRead(ours)
    reads.own()
    for _ in range(times):
        started = time.monotonic()
        assert reads.read(limit) is None
        waited = time.monotonic() - started
        assert limit <= waited < limit + 0.05, waited


def test_bytes_that_come_within_the_limit_are_returned_as_they_come(
    pair: Tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    reads = SocketRead(ours)
    reads.own()
    timer = threading.Timer(0.05, theirs.sendall, args=(b"data: 1\n\n",))
    started = time.monotonic()
    timer.start()
    try:
        assert reads.read(5.0) == b"data: 1\n\n"
    finally:
        timer.join()
    assert time.monotonic() - started < 2.0  # the read ends with the bytes, not the limit
    theirs.sendall(b"data: 2\n\n")
    assert reads.read(None) == b"data: 2\n\n"  # no limit


def test_a_shutdown_from_outside_ends_a_read_in_progress(
    pair: Tuple[socket.socket, socket.socket],
) -> None:
    """What on_timeout does at a stop or the budget's end: the blocked recv() returns b""."""
    ours, _ = pair
    reads = SocketRead(ours)
    reads.own()
    timer = threading.Timer(0.05, ours.shutdown, args=(socket.SHUT_RDWR,))
    started = time.monotonic()
    timer.start()
    try:
        assert reads.read(10.0) == b""
    finally:
        timer.join()
    assert time.monotonic() - started < 2.0


def test_the_kernel_timeout_is_set_only_while_the_consumer_reads_and_forgotten_after(
    pair: Tuple[socket.socket, socket.socket],
) -> None:
    """Blocking with a kernel timeout while its consumer reads; non-blocking for the shared
    reader; no kernel timeout left for the pool (a blocking read of a pooled socket would
    otherwise fail with EAGAIN). Elsewhere than on Linux, poll() alone: no kernel timeout."""
    ours, _ = pair
    reads = SocketRead(ours)
    reads.own()
    assert ours.getblocking()
    assert reads.read(KERNEL_MARGIN + 0.05) is None
    assert (kernel_timeout(ours) != NO_KERNEL_TIMEOUT) is LINUX
    reads.let_go()
    assert not ours.getblocking()
    reads.forget()
    assert kernel_timeout(ours) == NO_KERNEL_TIMEOUT
