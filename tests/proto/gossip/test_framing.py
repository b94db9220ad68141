"""Messages on a TCP stream survive coalesced and split reads (Chatter's did not, §3/§7)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.proto.gossip.framing import (
    ChatterStreamDecoder,
    frame_message,
    stream_decoder,
)
from gossamer.wire.chatter import BroadcastID, Gossip, NetID, derive_key, encode_message, type_tag

KEY = derive_key("a test key")


def chatter_message(i: int, size: int) -> bytes:
    g = Gossip(
        current=BroadcastID(NetID("10.0.0.1", 29999), i + 1),
        type_tag=type_tag("hello"),
        content=bytes([i % 256]) * size,
    )
    return encode_message(g, KEY)


def cut(stream: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(stream), *(p % (len(stream) + 1) for p in points)})
    return [stream[a:b] for a, b in itertools.pairwise(edges)]


@pytest.mark.parametrize("chatter", [True, False])
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=8),
    points=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_messages_come_out_whole_whatever_the_reads(
    chatter: bool, sizes: list[int], points: list[int]
) -> None:
    messages = [
        chatter_message(i, size) if chatter else bytes([i]) * (size + 1)
        for i, size in enumerate(sizes)
    ]
    stream = b"".join(frame_message(m, chatter=chatter, max_size=1 << 20) for m in messages)
    decoder = stream_decoder(chatter=chatter, max_size=1 << 20)
    out: list[bytes] = []
    for chunk in cut(stream, points):
        out += decoder.feed(chunk)
    decoder.close()
    assert out == messages
    assert decoder.buffered == 0


def test_chatter_framing_adds_nothing_to_chatter_bytes() -> None:
    message = chatter_message(1, 10)
    assert frame_message(message, chatter=True, max_size=1 << 20) == message


def test_two_coalesced_chatter_messages_in_one_read() -> None:
    a, b = chatter_message(1, 5), chatter_message(2, 200)
    decoder = ChatterStreamDecoder(max_size=1 << 20)
    assert decoder.feed(a + b) == [a, b]
    assert decoder.feed(b[:1]) == []
    assert decoder.feed(b[1:3]) == []  # header split inside the length VarInt
    assert decoder.feed(b[3:]) == [b]


def test_a_bad_start_byte_loses_the_framing_for_good() -> None:
    decoder = ChatterStreamDecoder(max_size=1 << 20)
    with pytest.raises(DecodeError, match="0xff"):
        decoder.feed(b"\x00\x01\x02")
    assert decoder.failed is not None
    with pytest.raises(DecodeError, match="lost its framing"):
        decoder.feed(chatter_message(1, 1))


def test_oversized_and_unterminated_messages_are_refused_early() -> None:
    decoder = ChatterStreamDecoder(max_size=100)
    with pytest.raises(DecodeError, match="exceeds"):
        decoder.feed(b"\xff\xc8\x01")  # declares 200 bytes: refused before any body
    decoder = ChatterStreamDecoder(max_size=1 << 30)
    with pytest.raises(DecodeError, match="too long"):
        decoder.feed(b"\xff" + b"\x80" * 6)
    decoder = ChatterStreamDecoder(max_size=1 << 20)
    decoder.feed(chatter_message(1, 50)[:20])
    with pytest.raises(DecodeError, match="inside a frame"):
        decoder.close()


@given(st.binary(max_size=300))
def test_random_streams_raise_only_decode_error(data: bytes) -> None:
    decoder = ChatterStreamDecoder(max_size=4096)
    rng = random.Random(len(data))
    try:
        for chunk in cut(data, [rng.randrange(301) for _ in range(4)]):
            decoder.feed(chunk)
        decoder.close()
    except DecodeError:
        pass
