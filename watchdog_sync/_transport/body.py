"""Raw body reads for event streams: whatever bytes have arrived, as soon as they arrive.

http.client's ``read1`` returns at most one HTTP chunk per call, so a burst
of small chunked events costs a read (and a hand-off between threads) per
event. :func:`body_pieces` reads the socket's buffered reader directly and
decodes the framing itself: one read returns every event that has arrived,
chunked, sized or close-delimited alike, and never waits for more than is
there.
"""

from __future__ import annotations

import http.client
from typing import Any, Iterator, Optional

__all__ = ["body_pieces"]

_READ_SIZE = 65536
_MAX_SIZE_LINE = 1024


def body_pieces(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The decoded body of ``response`` (headers already read), piece by piece.

    Raises:
        http.client.IncompleteRead: the connection ended before the body did.
        http.client.HTTPException: the chunked framing is malformed.
    """
    fp: Optional[Any] = response.fp
    if fp is None:
        return iter(())
    if response.chunked:
        return _chunked(fp)
    if response.length is not None:
        return _sized(fp, response.length)
    return _until_eof(fp)


def _until_eof(fp: Any) -> Iterator[bytes]:
    while True:
        data = fp.read1(_READ_SIZE)
        if not data:
            return
        yield data


def _sized(fp: Any, length: int) -> Iterator[bytes]:
    left = length
    while left > 0:
        data = fp.read1(min(left, _READ_SIZE))
        if not data:
            raise http.client.IncompleteRead(b"", left)
        left -= len(data)
        yield data


def _chunked(fp: Any) -> Iterator[bytes]:
    buffer = bytearray()
    chunk_left = 0  # bytes of chunk data still to come
    need_crlf = False  # the CRLF after a chunk's data
    while True:
        out = []
        while True:
            if chunk_left:
                if not buffer:
                    break
                take = min(chunk_left, len(buffer))
                out.append(bytes(buffer[:take]))
                del buffer[:take]
                chunk_left -= take
                need_crlf = chunk_left == 0
            elif need_crlf:
                if len(buffer) < 2:
                    break
                if buffer[:2] != b"\r\n":
                    raise http.client.HTTPException("chunked body: missing CRLF after a chunk")
                del buffer[:2]
                need_crlf = False
            else:
                end = buffer.find(b"\n")
                if end < 0:
                    if len(buffer) > _MAX_SIZE_LINE:
                        raise http.client.HTTPException("chunked body: chunk-size line too long")
                    break
                line = bytes(buffer[:end]).split(b";", 1)[0].strip()
                del buffer[: end + 1]
                try:
                    chunk_left = int(line, 16)
                except ValueError:
                    raise http.client.HTTPException(
                        f"chunked body: bad chunk size {line[:20]!r}"
                    ) from None
                if chunk_left < 0:
                    raise http.client.HTTPException("chunked body: negative chunk size")
                if chunk_left == 0:  # last chunk; trailers are not needed for events
                    if out:
                        yield b"".join(out)
                    return
        if out:
            yield b"".join(out)
        data = fp.read1(_READ_SIZE)
        if not data:
            raise http.client.IncompleteRead(b"", chunk_left)
        buffer += data
