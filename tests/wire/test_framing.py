"""gossamer.wire.framing: the length-prefixed frame codec for streams.

(Lives with the stream driver's tests; it mirrors src/gossamer/wire/framing.py.)
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer
from gossamer.wire.framing import (
    HEADER_SIZE,
    FrameDecoder,
    encode_frame,
    encode_frames,
    pull_frame,
    push_frame,
)

payloads = st.lists(st.binary(max_size=300), max_size=20)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(frames=payloads, cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_round_trip_through_arbitrary_chunking(frames: list[bytes], cuts: list[int]) -> None:
    stream = encode_frames(frames)
    decoder = FrameDecoder(max_size=300)
    out: list[bytes] = []
    for chunk in _split(stream, cuts):
        out += decoder.feed(chunk)
    assert out == frames
    assert decoder.buffered == 0
    assert decoder.consumed == len(stream)
    decoder.close()


@given(frames=payloads)
def test_round_trip_byte_by_byte_and_all_at_once(frames: list[bytes]) -> None:
    stream = encode_frames(frames)
    one_by_one = FrameDecoder(max_size=300)
    out = [f for i in range(len(stream)) for f in one_by_one.feed(stream[i : i + 1])]
    assert out == frames
    assert FrameDecoder(max_size=300).feed(stream) == frames


@given(frames=payloads)
def test_pull_frame_reads_what_push_frame_wrote(frames: list[bytes]) -> None:
    buf = bytearray()
    for frame in frames:
        push_frame(buf, frame, max_size=300)
    reader = Buffer(bytes(buf))
    assert [pull_frame(reader, max_size=300) for _ in frames] == frames
    assert reader.eof()


@given(data=st.binary(max_size=2000), cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_random_bytes_raise_only_decode_error(data: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder(max_size=64)
    total = 0
    try:
        for chunk in _split(data, cuts):
            for frame in decoder.feed(chunk):
                assert len(frame) <= 64
                total += HEADER_SIZE + len(frame)
        decoder.close()
    except DecodeError:
        pass
    assert total <= len(data)
    reader = Buffer(data)
    try:
        while not reader.eof():
            assert len(pull_frame(reader, max_size=64)) <= 64
    except DecodeError:
        pass


def test_oversized_frame_is_rejected_at_its_header_before_any_payload() -> None:
    decoder = FrameDecoder(max_size=10)
    assert decoder.feed(encode_frame(b"ok", max_size=10)) == [b"ok"]
    with pytest.raises(DecodeError) as info:
        decoder.feed((11).to_bytes(4, "big"))  # only the header of an 11-byte frame
    assert info.value.offset == 6
    assert info.value.fields["length"] == 11
    assert decoder.buffered == 0
    assert decoder.failed is info.value
    # The framing is lost for good: later chunks and the end of stream are errors too.
    with pytest.raises(DecodeError):
        decoder.feed(encode_frame(b"x"))
    with pytest.raises(DecodeError):
        decoder.close()


def test_frames_before_a_bad_header_in_the_same_chunk_are_returned_then_the_error() -> None:
    decoder = FrameDecoder(max_size=4)
    chunk = encode_frames([b"good", b"ok"], max_size=4) + (5).to_bytes(4, "big") + b"rest"
    assert decoder.feed(chunk) == [b"good", b"ok"]
    assert decoder.failed is not None
    assert decoder.failed.offset == 2 * HEADER_SIZE + 6
    with pytest.raises(DecodeError) as info:
        decoder.feed(b"")
    assert info.value.offset == decoder.failed.offset


def test_stream_ending_inside_a_frame_is_malformed() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(encode_frame(b"whole") + encode_frame(b"half")[:6]) == [b"whole"]
    assert decoder.buffered == 6
    with pytest.raises(DecodeError, match="inside a frame") as info:
        decoder.close()
    assert info.value.offset == HEADER_SIZE + 5


def test_pull_frame_truncated_and_oversized() -> None:
    with pytest.raises(DecodeError, match="truncated"):
        pull_frame(Buffer(encode_frame(b"abc")[:-1]))
    with pytest.raises(DecodeError, match="exceeds"):
        pull_frame(Buffer(encode_frame(b"abcd")), max_size=3)


def test_zero_bound_allows_only_empty_frames() -> None:
    decoder = FrameDecoder(max_size=0)
    assert decoder.feed(encode_frame(b"", max_size=0) * 3) == [b"", b"", b""]
    with pytest.raises(DecodeError):
        decoder.feed(encode_frame(b"x"))


def test_encoding_more_than_the_bound_is_a_local_error() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        encode_frame(b"12345", max_size=4)
    with pytest.raises(ValueError, match="max_size"):
        FrameDecoder(max_size=-1)
    with pytest.raises(ValueError, match="max_size"):
        FrameDecoder(max_size=1 << 32)
