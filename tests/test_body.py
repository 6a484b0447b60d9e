"""body_pieces: raw body reads decode every framing and return what has arrived."""

from __future__ import annotations

import http.client
from typing import List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .internals import FramingDecoder, body_pieces

pytestmark = pytest.mark.timeout(10)


class Reads:
    """A buffered reader whose read1 returns the given pieces one by one."""

    def __init__(self, pieces: List[bytes]) -> None:
        self._pieces = list(pieces)

    def read1(self, size: int) -> bytes:
        if not self._pieces:
            return b""
        piece = self._pieces.pop(0)
        if len(piece) > size:
            self._pieces.insert(0, piece[size:])
            piece = piece[:size]
        return piece


def _response(
    pieces: List[bytes], *, chunked: bool, length: object = None
) -> http.client.HTTPResponse:
    response = http.client.HTTPResponse.__new__(http.client.HTTPResponse)
    response.fp = Reads(pieces)  # type: ignore[assignment]
    response.chunked = chunked
    response.length = length  # type: ignore[assignment]
    return response


ENCODED = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64])
def test_chunked_framing_is_decoded_whatever_the_read_sizes(size: int) -> None:
    pieces = [ENCODED[i : i + size] for i in range(0, len(ENCODED), size)]
    assert b"".join(body_pieces(_response(pieces, chunked=True))) == b"hello, world"


def test_one_read_returns_every_chunk_that_has_arrived() -> None:
    assert list(body_pieces(_response([ENCODED], chunked=True))) == [b"hello, world"]


@pytest.mark.parametrize(
    "encoded",
    [b"zz\r\nhello\r\n0\r\n\r\n", b"5\r\nhelloXX0\r\n\r\n", b"9" * 2000],
    ids=["bad-size", "missing-crlf", "endless-size-line"],
)
def test_malformed_chunked_framing_is_an_http_exception(encoded: bytes) -> None:
    with pytest.raises(http.client.HTTPException):
        list(body_pieces(_response([encoded], chunked=True)))


def test_a_chunked_body_cut_short_is_an_incomplete_read() -> None:
    with pytest.raises(http.client.IncompleteRead):
        list(body_pieces(_response([b"5\r\nhel"], chunked=True)))


def test_a_sized_body_stops_at_its_length_and_detects_truncation() -> None:
    assert (
        b"".join(body_pieces(_response([b"abc", b"defXYZ"], chunked=False, length=6))) == b"abcdef"
    )
    with pytest.raises(http.client.IncompleteRead):
        list(body_pieces(_response([b"abc"], chunked=False, length=6)))


def test_a_close_delimited_body_runs_to_eof() -> None:
    assert list(body_pieces(_response([b"a", b"b"], chunked=False))) == [b"a", b"b"]


def test_a_response_without_a_body_yields_nothing() -> None:
    response = _response([], chunked=False)
    response.fp = None  # type: ignore[assignment]
    assert list(body_pieces(response)) == []


def _decoded(reads: List[bytes]) -> object:
    """Each read's payload through one decoder, then whether it is done, or the error."""
    decoder = FramingDecoder(chunked=True, length=None)
    try:
        return [decoder.feed(read) for read in reads], decoder.done
    except http.client.HTTPException as exc:
        return type(exc).__name__, str(exc)


_size_lines = st.one_of(
    st.integers(0, 80).map(lambda n: b"%x" % n),
    st.sampled_from([b"5;ext=1", b" 5 ", b"5\r", b"-5", b"zz", b"0x5", b"5_0", b""]),
    st.binary(max_size=6).filter(lambda b: b"\n" not in b),
)


@settings(max_examples=400, deadline=None)
@given(_size_lines, st.binary(max_size=90), st.sampled_from([b"\r\n", b"\n", b"xx", b""]))
def test_a_read_of_one_whole_chunk_decodes_as_the_same_bytes_read_one_by_one(
    size_line: bytes, data: bytes, tail: bytes
) -> None:
    """The shortcut for a read that is exactly one chunk (an event stream's usual read) gives
    the payload, the state after it (the next chunk decodes alike) and the errors that the
    byte-at-a-time decoding gives."""
    read = size_line + b"\n" + data + tail
    following = b"3\r\nabc\r\n"
    whole = _decoded([read, following])
    one_by_one = _decoded([read[i : i + 1] for i in range(len(read))] + [following])
    if isinstance(whole, tuple) and isinstance(whole[0], list):
        assert isinstance(one_by_one, tuple) and isinstance(one_by_one[0], list)
        assert b"".join(whole[0]) == b"".join(one_by_one[0])
        assert whole[1] == one_by_one[1]
    else:
        assert whole == one_by_one
