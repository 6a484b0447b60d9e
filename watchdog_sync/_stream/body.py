"""Raw body reads for event streams: the HTTP/1.1 framing, decoded by us.

http.client's ``read1`` returns at most one HTTP chunk per call. A :class:`FramingDecoder`
decodes the framing (chunked, sized or close-delimited) of whatever bytes one read took,
so that read yields every event that has arrived and never waits for more: the body
reader feeds it its consumer's reads, :func:`body_pieces` a response's buffered reader.
"""

from __future__ import annotations

import http.client
from typing import Any, Iterator, List, Optional

from .._http.translate import MalformedFraming
from .socket_read import READ_SIZE

__all__ = ["FramingDecoder", "body_pieces"]

_MAX_SIZE_LINE = 1024
_HEX = b"0123456789abcdefABCDEF"


class FramingDecoder:
    """Incremental decoder of one body's framing: ``feed`` raw bytes, get payload bytes.

    ``done`` turns true at the body's end (the last chunk, or ``length`` bytes);
    bytes fed after it are ignored. :meth:`eof` says whether the connection may
    end here.
    """

    __slots__ = ("_buffer", "_chunk_left", "_chunked", "_left", "_need_crlf", "done")

    def __init__(self, *, chunked: bool, length: Optional[int]) -> None:
        self._chunked = chunked
        self._left = None if chunked else length  # sized: bytes still to come
        self._buffer = b""
        self._chunk_left = 0  # chunked: bytes of chunk data still to come
        self._need_crlf = False  # chunked: the CRLF after a chunk's data
        self.done = self._left == 0

    def wanted(self) -> int:
        """How many bytes to read next without reading past a sized body."""
        return READ_SIZE if self._left is None else min(self._left, READ_SIZE)

    def feed(self, data: bytes) -> bytes:
        """The payload that ``data`` completes (possibly ``b""``).

        Raises:
            MalformedFraming: the chunked framing is malformed (an ``HTTPException``).
        """
        if self.done:
            return b""
        if not self._chunked:
            if self._left is None:
                return data
            data = data[: self._left]
            self._left -= len(data)
            self.done = self._left == 0
            return data
        if not (self._buffer or self._chunk_left or self._need_crlf):
            whole = _whole_chunk(data)
            if whole is not None:
                return whole
        buf = self._buffer + data if self._buffer else data
        pos, end_of = 0, len(buf)
        chunk_left, need_crlf = self._chunk_left, self._need_crlf
        out: List[bytes] = []
        while True:
            if chunk_left:
                take = min(chunk_left, end_of - pos)
                if not take:
                    break
                out.append(buf[pos : pos + take])
                pos += take
                chunk_left -= take
                need_crlf = not chunk_left
            elif need_crlf:
                if end_of - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise MalformedFraming("chunked body: missing CRLF after a chunk")
                pos += 2
                need_crlf = False
            else:
                end = buf.find(b"\n", pos)
                if end < 0:
                    if end_of - pos > _MAX_SIZE_LINE:
                        raise MalformedFraming("chunked body: chunk-size line too long")
                    break
                line = buf[pos:end].split(b";", 1)[0].strip()
                pos = end + 1
                size = _chunk_size(line)
                if size is None:  # int() alone takes "-5", "+5", "0x5", "5_0"
                    raise MalformedFraming(f"chunked body: bad chunk size {line[:20]!r}")
                if size == 0:  # last chunk; trailers are not needed for events
                    self.done = True
                    pos = end_of
                    break
                chunk_left = size
        self._buffer = buf[pos:]  # at most a chunk-size line or a CRLF
        self._chunk_left, self._need_crlf = chunk_left, need_crlf
        return b"".join(out)

    def eof(self) -> None:
        """The connection ended: fine for a close-delimited or finished body.

        Raises:
            http.client.IncompleteRead: the body was cut short.
        """
        if self.done or (not self._chunked and self._left is None):
            return
        left = self._chunk_left if self._chunked else self._left
        raise http.client.IncompleteRead(b"", left)


def _whole_chunk(data: bytes) -> Optional[bytes]:
    """The data of ``data`` if it is exactly one whole, non-empty chunk (size line, data,
    CRLF), the common read of an event stream; else ``None`` (the general loop decides,
    and raises what is malformed). The same result and state as the loop's."""
    end = data.find(b"\n")
    if end < 0:
        return None
    size = _chunk_size(data[:end].split(b";", 1)[0].strip())
    start = end + 1
    if size is None or size == 0 or len(data) != start + size + 2 or not data.endswith(b"\r\n"):
        return None
    return data[start : start + size]


def _chunk_size(line: bytes) -> Optional[int]:
    """A chunk-size line's value (hex digits only, as HTTP/1.1 has it), else ``None``."""
    if not line or line.strip(_HEX):
        return None
    return int(line, 16)


def body_pieces(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The decoded body of ``response`` (headers already read), piece by piece.

    Raises:
        http.client.IncompleteRead: the connection ended before the body did.
        MalformedFraming: the chunked framing is malformed (an ``HTTPException``).
    """
    fp: Optional[Any] = response.fp
    if fp is None:
        return
    decoder = FramingDecoder(chunked=bool(response.chunked), length=response.length)
    while not decoder.done:
        data = fp.read1(decoder.wanted())
        if not data:
            decoder.eof()
            return
        piece = decoder.feed(data)
        if piece:
            yield piece
