"""Undo a body's Content-Encoding within a limit, so a decompression bomb stops there.

urllib3 decodes inside its reads, and urllib3 1.26 decodes a whole read at once:
822 bytes of gzip inside gzip became 800 MiB before anyone could count them.
:class:`BodyDecoder` takes the body as sent (``streamed.raw_content``) and undoes
its codings one layer at a time with :func:`zlib.decompressobj`. Every step asks
zlib for a bounded output (``max_length``: what the limit has left, and at most
64 KiB) and keeps the input it did not use (``unconsumed_tail``) for the next
step, so no step produces more than the limit allows, whatever the ratio and
however many layers.

Codings: ``gzip`` (or ``x-gzip``; several members; garbage after a complete
member is ignored, as urllib3 and gzip clients do), ``deflate`` (the zlib format,
or raw deflate as some servers send it, urllib3's fallback) and ``identity``.
Several listed are undone last first. Any other coding (``br``, ``zstd``,
``compress``) raises :class:`UnknownEncoding`. A body that is not what its coding
says (corrupt, or ended inside its compressed stream) and more than
:data:`MAX_LAYERS` codings (urllib3's own cap) raise urllib3's ``DecodeError``,
as urllib3's decoders do, so ``classify()`` reads it the same way.
"""

from __future__ import annotations

import zlib
from typing import Iterator, List, Optional, Protocol

from urllib3.exceptions import DecodeError

__all__ = ["MAX_LAYERS", "BodyDecoder", "UnknownEncoding"]

#: The most codings one body may list (identity aside); urllib3 2.x refuses more, too.
MAX_LAYERS = 5
_STEP = 65536  # the most one step hands to the next layer, or to the caller
_GZIP = 16 + zlib.MAX_WBITS
_ZLIB = zlib.MAX_WBITS
_RAW_DEFLATE = -zlib.MAX_WBITS


class UnknownEncoding(LookupError):
    """The Content-Encoding lists a coding that :class:`BodyDecoder` cannot undo."""

    def __init__(self, coding: str, header: str) -> None:
        super().__init__(coding, header)
        self.coding = coding
        self.header = header

    def __str__(self) -> str:
        return (
            f"unknown content coding {self.coding[:40]!r} in Content-Encoding {self.header[:100]!r}"
        )


class _Coding(Protocol):
    """One layer: input given in pieces, output taken in pieces of at most ``cap`` bytes."""

    def give(self, data: bytes) -> None: ...

    def take(self, cap: int) -> bytes: ...

    def finish(self) -> None: ...


class BodyDecoder:
    """The decoded body of one response, piece by piece, at most ``limit`` bytes of it.

    :meth:`feed` returns what a piece of the body as sent decodes to, cut where the
    limit is reached; then :attr:`over` is True (there was more) and later pieces
    are dropped. :meth:`finish` checks that the body ended where its coding did.

    Raises:
        UnknownEncoding: (when built) a coding other than gzip, deflate, identity.
        urllib3.exceptions.DecodeError: more than :data:`MAX_LAYERS` codings (when
            built), a corrupt body (:meth:`feed`), one that ended early (:meth:`finish`).
    """

    def __init__(self, content_encoding: str, limit: int) -> None:
        self._layers = _layers(content_encoding)  # in the order they are undone
        self._left = limit
        self.over = False

    def feed(self, data: bytes) -> List[bytes]:
        """What ``data`` decodes to, in pieces of at most 64 KiB, within the limit."""
        return list(self.pieces(data))

    def pieces(self, data: bytes) -> Iterator[bytes]:
        """:meth:`feed`'s pieces, each decoded only when the one before was taken: a reader
        that stops early (an event stream past its event cap) decodes no further."""
        if self.over or not data:
            return
        if not self._layers:
            kept = self._keep(data)
            if kept:
                yield kept
            return
        self._layers[0].give(data)
        last = len(self._layers) - 1
        while not self.over:
            piece = self._pull(last, min(_STEP, self._left + 1))  # one byte more tells "over"
            if not piece:
                break
            kept = self._keep(piece)
            if kept:
                yield kept

    def finish(self) -> None:
        """Raise ``DecodeError`` if the body ended inside a compressed stream."""
        if not self.over:
            for layer in self._layers:
                layer.finish()

    def _keep(self, piece: bytes) -> bytes:
        if len(piece) > self._left:
            self.over = True
            piece = piece[: self._left]
        self._left -= len(piece)
        return piece

    def _pull(self, index: int, cap: int) -> bytes:
        """At most ``cap`` bytes out of layer ``index``, pulling its input from the one before."""
        layer = self._layers[index]
        while True:
            piece = layer.take(cap)
            if piece or index == 0:
                return piece
            upstream = self._pull(index - 1, _STEP)
            if not upstream:
                return b""
            layer.give(upstream)


def _layers(header: str) -> List[_Coding]:
    codings = [coding.strip().lower() for coding in header.split(",")]
    codings = [coding for coding in codings if coding not in ("", "identity")]
    unknown = [coding for coding in codings if coding not in ("gzip", "x-gzip", "deflate")]
    if unknown:
        raise UnknownEncoding(unknown[0], header)
    if len(codings) > MAX_LAYERS:
        raise DecodeError(
            f"the Content-Encoding lists {len(codings)} codings; at most {MAX_LAYERS} are undone"
        )
    return [_Deflate() if coding == "deflate" else _Gzip() for coding in reversed(codings)]


def _corrupt(coding: str, exc: zlib.error) -> DecodeError:
    return DecodeError(f"the body is not valid {coding} ({exc})")


def _truncated(coding: str) -> DecodeError:
    return DecodeError(f"the body ended inside its {coding} stream")


class _Gzip:
    """gzip members, one after another; garbage after a complete member is ignored."""

    def __init__(self) -> None:
        self._obj = zlib.decompressobj(_GZIP)
        self._pending = b""  # input not decoded yet
        self._more = False  # the last step filled its cap: zlib may hold more output
        self._started = False  # the current member has had input
        self._members = 0  # complete members
        self._ignoring = False

    def give(self, data: bytes) -> None:
        if not self._ignoring:
            self._pending += data

    def take(self, cap: int) -> bytes:
        while (self._pending or self._more) and not self._ignoring:
            data, self._pending = self._pending, b""
            self._started = self._started or bool(data)
            try:
                out = self._obj.decompress(data, cap)
            except zlib.error as exc:
                if not self._members:
                    raise _corrupt("gzip", exc) from exc
                self._ignoring = True  # trailing garbage, as gzip clients allow
                return b""
            if self._obj.eof:  # all of the member's output is out: start the next one
                self._pending = self._obj.unused_data
                self._obj = zlib.decompressobj(_GZIP)
                self._members += 1
                self._started = self._more = False
            else:
                self._pending = self._obj.unconsumed_tail
                self._more = len(out) == cap
            if out:
                return out
        return b""

    def finish(self) -> None:
        if self._started and not self._members:
            raise _truncated("gzip")


class _Deflate:
    """One zlib stream, or a raw deflate one; what follows its end is ignored."""

    def __init__(self) -> None:
        self._obj: Optional[zlib._Decompress] = None  # chosen by the first two bytes
        self._pending = b""
        self._more = False

    def give(self, data: bytes) -> None:
        if self._obj is None or not self._obj.eof:
            self._pending += data

    def take(self, cap: int) -> bytes:
        if self._obj is None:
            if len(self._pending) < 2:
                return b""
            self._obj = zlib.decompressobj(_ZLIB if _zlib_header(self._pending) else _RAW_DEFLATE)
        if self._obj.eof or not (self._pending or self._more):
            return b""
        data, self._pending = self._pending, b""
        try:
            out = self._obj.decompress(data, cap)
        except zlib.error as exc:
            raise _corrupt("deflate", exc) from exc
        self._pending = b"" if self._obj.eof else self._obj.unconsumed_tail
        self._more = len(out) == cap and not self._obj.eof
        return out

    def finish(self) -> None:
        if (self._obj is None and self._pending) or (self._obj is not None and not self._obj.eof):
            raise _truncated("deflate")


def _zlib_header(head: bytes) -> bool:
    """Whether ``head`` starts a zlib stream (RFC 1950): deflate, a window zlib accepts,
    and the header check; otherwise the body is taken to be raw deflate."""
    cmf, flg = head[0], head[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and ((cmf << 8) | flg) % 31 == 0
