"""A compressed event stream, decoded as it arrives, so the stream rules read its events.

A body sent with the codings :class:`~.._http.decode.BodyDecoder` undoes (``gzip``,
``x-gzip``, ``deflate``, or several) is decoded one piece at a time, each at most 64 KiB
and decoded only when the one before was framed: the framer's cap bounds memory whatever
the ratio, and compressed comments never restart the idle clock. Any other coding is
refused with ``StreamProtocolError('unexpected_content_encoding')``; a body that is not
what its coding says is ``StreamProtocolError('malformed_event')``.
"""

from __future__ import annotations

import sys
from typing import Iterator

from urllib3.exceptions import DecodeError

from .._core.errors import StreamProtocolError
from .._core.redact import excerpt
from .._http.decode import BodyDecoder, UnknownEncoding

__all__ = ["StreamDecoder", "is_identity"]


def is_identity(content_encoding: str) -> bool:
    """True when a ``Content-Encoding`` value says the body is not encoded."""
    return all(coding.strip().lower() in ("", "identity") for coding in content_encoding.split(","))


class StreamDecoder:
    """The decoded bytes of one compressed event stream, piece by piece.

    Raises (when built) ``StreamProtocolError('unexpected_content_encoding')`` for a
    coding it cannot undo.
    """

    __slots__ = ("_decoder", "_encoding")

    def __init__(self, content_encoding: str) -> None:
        self._encoding = excerpt(content_encoding, 100)
        try:
            self._decoder = BodyDecoder(content_encoding, sys.maxsize)
        except (UnknownEncoding, DecodeError) as exc:
            raise StreamProtocolError(
                f"the event stream is sent with Content-Encoding {self._encoding!r}, which is "
                f"not decoded here ({exc}); gzip and deflate are",
                reason="unexpected_content_encoding",
            ) from None

    def pieces(self, data: bytes) -> Iterator[bytes]:
        """What ``data`` decodes to, each piece decoded once the one before was taken."""
        try:
            yield from self._decoder.pieces(data)
        except DecodeError as exc:
            raise self._malformed(exc) from None

    def finish(self) -> None:
        """At the body's end: raise if it ended inside its compressed stream."""
        try:
            self._decoder.finish()
        except DecodeError as exc:
            raise self._malformed(exc) from None

    def _malformed(self, exc: DecodeError) -> StreamProtocolError:
        return StreamProtocolError(
            f"the event stream is not what its Content-Encoding {self._encoding!r} says ({exc})",
            reason="malformed_event",
        )
