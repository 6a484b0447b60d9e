"""BodyDecoder: a body's Content-Encoding undone piece by piece, never past its limit."""

from __future__ import annotations

import gzip
import os
import zlib
from typing import Callable, Dict, List, Tuple

import pytest
from urllib3.exceptions import DecodeError

from .internals import MAX_LAYERS, BodyDecoder, UnknownEncoding

pytestmark = pytest.mark.timeout(30)

STEP = 65536  # the most one piece may hold
# compressible and not: long runs (one input byte becomes much output) and random bytes
DATA = (b"a" * 100_000 + os.urandom(300)) * 4 + b"end"
BIG = 1 << 30


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


CODERS: Dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "identity": lambda data: data,
}


def decode(
    encoding: str, body: bytes, limit: int = BIG, size: int = STEP
) -> Tuple[BodyDecoder, bytes]:
    """Feed ``body`` in pieces of ``size`` bytes: the decoder and what it gave."""
    decoder = BodyDecoder(encoding, limit)
    out: List[bytes] = []
    for start in range(0, len(body), size):
        pieces = decoder.feed(body[start : start + size])
        assert all(len(piece) <= STEP for piece in pieces)
        out.extend(pieces)
    return decoder, b"".join(out)


@pytest.mark.parametrize("size", [1, 7, STEP])
@pytest.mark.parametrize("coding", sorted(CODERS))
def test_each_coding_decodes_whatever_the_pieces(coding: str, size: int) -> None:
    """gzip, x-gzip, deflate and identity give back the data, fed one byte at a time too."""
    decoder, out = decode(coding, CODERS[coding](DATA), size=size)
    decoder.finish()
    assert (out, decoder.over) == (DATA, False)


@pytest.mark.parametrize("size", [1, 1000])
def test_raw_deflate_is_decoded_too(size: int) -> None:
    """deflate without its zlib wrapper, as some servers send it, is recognised and decoded."""
    decoder, out = decode("deflate", raw_deflate(DATA), size=size)
    decoder.finish()
    assert out == DATA


@pytest.mark.parametrize("size", [1, 5, STEP])
def test_layers_are_undone_last_first(size: int) -> None:
    """'gzip, deflate, gzip' was gzipped, then deflated, then gzipped: it decodes back."""
    body = gzip.compress(zlib.compress(gzip.compress(DATA)))
    decoder, out = decode("gzip, deflate, gzip", body, size=size)
    decoder.finish()
    assert out == DATA


def test_identity_names_and_case_and_spaces_are_ignored() -> None:
    """'identity' layers are skipped; codings are case-insensitive and may carry spaces."""
    _, out = decode(" Identity ,GZIP,, identity", gzip.compress(DATA))
    assert out == DATA


def test_a_long_run_at_the_end_comes_out_whole_at_every_limit_near_it() -> None:
    """Data ending in a long run (little input, much output), fed one byte at a time, with
    limits just under and at its length: exactly the limit comes out, then over or whole."""
    data = os.urandom(300) + b"a" * 100_000  # the last input bytes decode to the most output
    for limit in range(len(data) - 300, len(data) + 1):
        decoder, out = decode("deflate", zlib.compress(data, 9), limit=limit, size=1)
        assert (out, decoder.over) == (data[:limit], limit < len(data))
        if limit == len(data):
            decoder.finish()


def test_gzip_members_follow_one_another() -> None:
    """Several gzip members in one body decode to their data joined."""
    body = gzip.compress(DATA[:1000]) + gzip.compress(b"") + gzip.compress(DATA[1000:])
    for size in (1, STEP):
        decoder, out = decode("gzip", body, size=size)
        decoder.finish()
        assert out == DATA


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("gzip", gzip.compress(DATA) + b"\x00\x00trailing garbage"),
        ("gzip", gzip.compress(DATA) + b"\x1f\x8b"),  # a member that never comes
        ("deflate", zlib.compress(DATA) + b"trailing garbage"),
    ],
    ids=["gzip_garbage", "gzip_half_header", "deflate_garbage"],
)
def test_trailing_garbage_after_a_complete_stream_is_ignored(coding: str, body: bytes) -> None:
    """What follows a complete stream is dropped without an error, as urllib3 and gzip do."""
    for size in (1, STEP):
        decoder, out = decode(coding, body, size=size)
        decoder.finish()
        assert out == DATA


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("gzip", gzip.compress(DATA)[:-4]),
        ("gzip", gzip.compress(DATA)[:5]),
        ("deflate", zlib.compress(DATA)[:-30]),
        ("deflate", b"x"),  # not even the two bytes that choose zlib or raw deflate
        ("gzip, gzip", gzip.compress(gzip.compress(DATA)[:-100])),  # the inner one is short
    ],
    ids=["gzip_trailer", "gzip_header", "deflate_end", "deflate_one_byte", "inner_layer"],
)
def test_a_truncated_stream_is_an_error_at_the_end(coding: str, body: bytes) -> None:
    """A body that ends inside its compressed stream: finish() raises DecodeError."""
    decoder, _ = decode(coding, body, size=3)
    with pytest.raises(DecodeError, match=r"ended inside its (gzip|deflate) stream"):
        decoder.finish()


@pytest.mark.parametrize("coding", ["gzip", "deflate", "gzip, gzip"])
def test_an_empty_body_decodes_to_nothing(coding: str) -> None:
    """No body at all, whatever the coding says, is an empty body, not an error."""
    decoder = BodyDecoder(coding, BIG)
    assert decoder.feed(b"") == []
    decoder.finish()


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("gzip", b"\x1f\x8b\x08 not really gzip"),
        ("gzip", b"plain text"),
        ("deflate", b"\x78\x9c" + b"\xff" * 10),  # a zlib header, then no valid block
        ("gzip, gzip", gzip.compress(b"not gzip inside")),
    ],
    ids=["gzip_body", "not_gzip", "deflate_body", "inner_layer"],
)
def test_a_corrupt_stream_is_a_decode_error(coding: str, body: bytes) -> None:
    """Bytes that are not what the coding says raise DecodeError naming the coding."""
    decoder = BodyDecoder(coding, BIG)
    with pytest.raises(DecodeError, match=r"not valid (gzip|deflate)"):
        decoder.feed(body)
        decoder.finish()


@pytest.mark.parametrize("coding", sorted(CODERS))
def test_the_limit_exactly_hit_is_not_over(coding: str) -> None:
    """A body of exactly ``limit`` decoded bytes is whole; one byte less and it is over,
    cut at the limit, and later pieces give nothing."""
    body = CODERS[coding](DATA)
    whole, whole_out = decode(coding, body, limit=len(DATA), size=1000)
    whole.finish()
    assert (whole_out, whole.over) == (DATA, False)
    cut, cut_out = decode(coding, body, limit=len(DATA) - 1, size=1000)
    assert (cut_out, cut.over) == (DATA[:-1], True)
    assert cut.feed(body) == []
    cut.finish()  # over: what was not read is not checked


def test_a_limit_of_zero_takes_nothing() -> None:
    """limit=0: an empty body is whole, one decoded byte is over."""
    empty = BodyDecoder("gzip", 0)
    assert empty.feed(gzip.compress(b"")) == []
    assert empty.over is False
    one = BodyDecoder("gzip", 0)
    assert (one.feed(gzip.compress(b"x")), one.over) == ([], True)


@pytest.mark.parametrize("size", [1, STEP])
def test_a_gzip_bomb_stops_at_the_limit_in_small_pieces(size: int) -> None:
    """gzip in gzip of 50 MB of zeros, limit 1 MiB: exactly the limit comes out, in pieces
    of at most 64 KiB, and the decoder says over."""
    bomb = gzip.compress(gzip.compress(b"\0" * 50_000_000))
    decoder, out = decode("gzip, gzip", bomb, limit=1 << 20, size=size)
    assert (len(out), decoder.over) == (1 << 20, True)


@pytest.mark.parametrize(
    ("header", "coding"),
    [("br", "br"), ("zstd", "zstd"), ("gzip, compress", "compress"), ("GZIP, Br", "br")],
)
def test_an_unknown_coding_is_refused_by_name(header: str, coding: str) -> None:
    """A coding other than gzip, deflate or identity raises UnknownEncoding naming it."""
    with pytest.raises(UnknownEncoding) as caught:
        BodyDecoder(header, BIG)
    assert caught.value.coding == coding
    assert repr(coding) in str(caught.value)


def test_more_codings_than_the_cap_are_refused() -> None:
    """MAX_LAYERS codings decode; one more raises DecodeError before any byte is read."""
    body = DATA
    for _ in range(MAX_LAYERS):
        body = gzip.compress(body)
    _, out = decode(", ".join(["gzip"] * MAX_LAYERS), body)
    assert out == DATA
    with pytest.raises(DecodeError, match=f"at most {MAX_LAYERS}"):
        BodyDecoder(", ".join(["gzip"] * (MAX_LAYERS + 1)), BIG)
