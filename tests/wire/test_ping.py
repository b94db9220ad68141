"""The demo ping codec and the bounded Buffer under it."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.wire import ping
from gossamer.wire.buffer import Buffer

messages = st.builds(
    ping.PingMessage,
    type=st.sampled_from(ping.PingType),
    seq=st.integers(min_value=0, max_value=2**32 - 1),
    sender=st.text(min_size=1, max_size=60).filter(lambda s: len(s.encode()) <= 255),
)


@given(messages)
def test_round_trip(msg: ping.PingMessage) -> None:
    assert ping.decode(ping.encode(msg)) == msg


@given(st.binary(max_size=300))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        ping.decode(data)


def test_exact_bytes() -> None:
    msg = ping.PingMessage(type=ping.PingType.PONG, seq=258, sender="n1")
    assert ping.encode(msg) == b"GP\x01\x02\x00\x00\x01\x02\x02n1"


@given(messages)
def test_every_truncation_and_trailing_garbage_is_rejected(msg: ping.PingMessage) -> None:
    data = ping.encode(msg)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            ping.decode(data[:cut])
    with pytest.raises(DecodeError, match="trailing"):
        ping.decode(data + b"\x00")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"XX\x01\x01\x00\x00\x00\x00\x01a", "bad magic"),
        (b"GP\x02\x01\x00\x00\x00\x00\x01a", "unsupported version"),
        (b"GP\x01\x09\x00\x00\x00\x00\x01a", "unknown message type"),
        (b"GP\x01\x01\x00\x00\x00\x00\x00", "empty sender"),
        (b"GP\x01\x01\x00\x00\x00\x00\x01\xff", "not UTF-8"),
        (b"GP" + b"\x00" * 400, "exceeds"),
    ],
)
def test_malformed_fields_say_why(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        ping.decode(data)


def test_encoder_refuses_unencodable_values() -> None:
    with pytest.raises(ValueError, match="sender"):
        ping.encode(ping.PingMessage(type=ping.PingType.PING, seq=0, sender=""))
    with pytest.raises(ValueError, match="32 bits"):
        ping.encode(ping.PingMessage(type=ping.PingType.PING, seq=2**32, sender="a"))


def test_buffer_reads_and_bounds() -> None:
    buf = Buffer(b"\x01\x00\x02\x00\x00\x00\x03" + b"\x00" * 7 + b"\x04tail")
    assert (buf.pull_uint8(), buf.pull_uint16(), buf.pull_uint32(), buf.pull_uint64()) == (
        1,
        2,
        3,
        4,
    )
    assert buf.remaining == 4 and not buf.eof()
    with pytest.raises(DecodeError, match="truncated: name needs 5 bytes, 4 left") as info:
        buf.pull_bytes(5, "name")
    assert info.value.offset == 15
    assert buf.pull_rest() == b"tail" and buf.eof()
    buf.expect_end()
    with pytest.raises(DecodeError):
        Buffer(b"ab", offset=3)
    with pytest.raises(DecodeError):
        Buffer(b"ab").pull_bytes(-1)
