"""The result pipe of process isolation: frames the child writes, read by the caller in time.

A frame is a 9-byte header (kind, payload length) and the payload. The
child writes one :data:`RESULT` frame (``fn``'s outcome), then one
:data:`REPORT` frame (how many processes ``fn`` left running).

The caller never blocks on the pipe: :class:`FrameReader` reads a
non-blocking descriptor as bytes arrive, so its wait stays bounded by the
deadline whoever else holds the pipe's write end (a grandchild that
inherited it, a child stopped or killed mid-send). A large payload is read
into an anonymous memory map of the announced size, whose pages the kernel
provides only as bytes arrive: memory grows with what actually arrives, not
with what a header claims, and nothing is copied or zero-filled up front.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from typing import List, Optional, Tuple, Union

__all__ = [
    "REPORT",
    "RESULT",
    "FrameReader",
    "Payload",
    "pack_report",
    "unpack_report",
    "write_frame",
]

RESULT = b"R"
REPORT = b"T"

_HEADER = struct.Struct("!cQ")
_REPORT = struct.Struct("!I")  # how many processes fn left running
_SMALL = 1 << 16  # payloads up to this size are read into a bytearray
_CHUNK = 1 << 20

Payload = Union[bytearray, mmap.mmap]


def write_frame(fd: int, kind: bytes, *parts: bytes) -> None:
    """Write one frame to the blocking descriptor ``fd`` (the parts are its payload)."""
    _write_all(fd, _HEADER.pack(kind, sum(len(part) for part in parts)))
    for part in parts:
        _write_all(fd, part)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def pack_report(left_running: int) -> bytes:
    """The payload of a :data:`REPORT` frame."""
    return _REPORT.pack(left_running)


def unpack_report(payload: bytes) -> int:
    """How many processes ``fn`` left running, from a :data:`REPORT` payload."""
    (left,) = _REPORT.unpack(payload)
    return int(left)


class FrameReader:
    """Frames read from a pipe descriptor without ever blocking on it.

    ``frames`` holds the complete frames in order; ``closed`` is set at end of
    file and ``broken`` when the bytes are not frames (an unknown kind).
    """

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._header = b""
        self._kind = b""
        self._length = 0
        self._payload: Payload = bytearray()
        self._filled = 0
        self.frames: List[Tuple[bytes, Payload]] = []
        self.closed = False
        self.broken = False

    def fileno(self) -> int:
        """The descriptor read (so the reader can be waited on)."""
        return self._fd

    def first(self, kind: bytes) -> Optional[Payload]:
        """The payload of the first complete frame of ``kind``, if one has arrived."""
        for got, payload in self.frames:
            if got == kind:
                return payload
        return None

    def pump(self, until: float) -> None:
        """Read what the pipe holds now (stopping at ``until``, a ``time.monotonic`` time)."""
        while not (self.closed or self.broken):
            try:
                if not self._read_once():
                    self.closed = True
            except BlockingIOError:
                return
            if time.monotonic() >= until:
                return

    def _read_once(self) -> bool:
        """One read; False at end of file."""
        if len(self._header) < _HEADER.size:
            data = os.read(self._fd, _HEADER.size - len(self._header))
            if not data:
                return False
            self._header += data
            if len(self._header) == _HEADER.size:
                self._start_payload()
            return True
        want = min(self._length - self._filled, _CHUNK)
        got = os.readv(self._fd, [memoryview(self._payload)[self._filled : self._filled + want]])
        if not got:
            return False
        self._filled += got
        if self._filled == self._length:
            self._finish_payload()
        return True

    def _start_payload(self) -> None:
        kind, length = _HEADER.unpack(self._header)
        if kind not in (RESULT, REPORT):
            self.broken = True
            return
        self._kind, self._length = kind, length
        try:
            self._payload = bytearray(length) if length <= _SMALL else mmap.mmap(-1, length)
        except (OSError, OverflowError, MemoryError):  # a size no sender of ours announces
            self.broken = True
            return
        self._filled = 0
        if length == 0:
            self._finish_payload()

    def _finish_payload(self) -> None:
        self.frames.append((self._kind, self._payload))
        self._header, self._payload, self._filled = b"", bytearray(), 0
