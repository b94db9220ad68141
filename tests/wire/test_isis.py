"""The ISIS / Chandy–Lamport message codec: big-endian uint32 structs, and bytes payloads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.wire import isis
from gossamer.wire.buffer import Buffer

u32 = st.integers(min_value=0, max_value=2**32 - 1)
payloads = st.binary(max_size=isis.MAX_DATA_SIZE)
messages = st.one_of(
    st.builds(isis.DataMessage, sender=u32, msg_id=u32, data=payloads),
    st.builds(isis.AckMessage, sender=u32, msg_id=u32, proposed_seq=u32, proposer=u32),
    st.builds(isis.SeqMessage, sender=u32, msg_id=u32, final_seq=u32, final_seq_proposer=u32),
    st.builds(isis.SeqAckMessage, sender=u32, msg_id=u32, ack_sender=u32),
    st.builds(isis.MarkerMessage, sender=u32),
    st.builds(isis.SnapshotMarker, sender=u32, snapshot_id=u32),
)


def words(*values: int) -> bytes:
    return b"".join(value.to_bytes(4, "big") for value in values)


# Reference (a) "Wire formats": type first, all fields uint32 big-endian, fixed sizes.
# The DataMessage values are those of the spec's delivery log line ("How a message is
# delivered?": type: 1, sender: 2, msg_id: 4, data: 14).
@pytest.mark.parametrize(
    ("msg", "wire"),
    [
        (isis.DataMessage(sender=2, msg_id=4, data=words(14)), words(1, 2, 4, 14)),
        (isis.DataMessage(sender=2, msg_id=4, data=b"job-1"), words(7, 2, 4, 5) + b"job-1"),
        (isis.DataMessage(sender=2, msg_id=4, data=b""), words(7, 2, 4, 0)),
        (isis.AckMessage(sender=2, msg_id=4, proposed_seq=9, proposer=1), words(2, 2, 4, 9, 1)),
        (
            isis.SeqMessage(sender=2, msg_id=4, final_seq=9, final_seq_proposer=1),
            words(3, 2, 4, 9, 1),
        ),
        (isis.SeqAckMessage(sender=2, msg_id=4, ack_sender=3), words(4, 2, 4, 3)),
        (isis.MarkerMessage(sender=1), words(5, 1)),
        (isis.SnapshotMarker(sender=1, snapshot_id=7), words(6, 1, 7)),
    ],
)
def test_exact_bytes(msg: isis.IsisMessage, wire: bytes) -> None:
    assert isis.encode(msg) == wire
    assert isis.decode(wire) == msg
    assert isis.message_size(wire[:16]) == len(wire)


def test_sizes_of_the_original() -> None:
    # 16, 20, 20, 16 bytes for the four multicast messages, 8 for the marker.
    original = [kind for kind in isis.IsisType if kind is not isis.IsisType.DATA_BYTES]
    sizes = {kind: isis.message_size(words(kind)) for kind in original}
    assert sizes == {1: 16, 2: 20, 3: 20, 4: 16, 5: 8, 6: 12}


def test_bytes_payloads_up_to_the_maximum() -> None:
    assert isis.MAX_DATA_SIZE == 512 and isis.MAX_SIZE == 16 + 512
    largest = isis.DataMessage(sender=1, msg_id=1, data=b"x" * isis.MAX_DATA_SIZE)
    assert len(isis.encode(largest)) == isis.MAX_SIZE
    assert isis.decode(isis.encode(largest)) == largest
    with pytest.raises(ValueError, match="over 512"):
        isis.encode(isis.DataMessage(sender=1, msg_id=1, data=b"x" * 513))
    # A length field over the limit is refused before anything is read or allocated.
    with pytest.raises(DecodeError, match="513 bytes"):
        isis.decode(words(7, 1, 1, 513) + b"x" * 513)
    with pytest.raises(DecodeError, match="513 bytes"):
        isis.message_size(words(7, 1, 1, 513))
    assert isis.message_size(words(7, 1, 1)) is None  # the length is not known yet


def test_a_four_byte_payload_is_always_the_originals_type_1() -> None:
    # Canonical: the original's 16-byte message, never type 7 with length 4.
    assert isis.encode(isis.DataMessage(sender=1, msg_id=2, data=b"abcd"))[:4] == words(1)
    with pytest.raises(DecodeError, match="never 4"):
        isis.decode(words(7, 1, 2, 4) + b"abcd")


def test_big_endian_field_order() -> None:
    wire = isis.encode(isis.AckMessage(sender=1, msg_id=0x01020304, proposed_seq=5, proposer=6))
    assert wire[8:12] == b"\x01\x02\x03\x04"


@given(messages)
def test_round_trip(msg: isis.IsisMessage) -> None:
    assert isis.decode(isis.encode(msg)) == msg


@given(st.binary(max_size=60))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    try:
        msg = isis.decode(data)
    except DecodeError:
        return
    assert isis.encode(msg) == data


@given(messages)
def test_every_truncation_and_trailing_garbage_is_rejected(msg: isis.IsisMessage) -> None:
    data = isis.encode(msg)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            isis.decode(data[:cut])
    with pytest.raises(DecodeError, match="trailing"):
        isis.decode(data + b"\x00")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (words(0, 1, 1, 1), "unknown message type 0"),
        (words(8, 1, 1), "unknown message type 8"),
        (words(7, 1, 1, 3) + b"ab", "truncated"),
        (words(1, 2, 4, 14, 0), "trailing"),  # a Data datagram of Ack size
        (words(2, 2, 4, 9), "truncated"),  # an Ack datagram of Data size
        (words(5, 1, 0), "trailing"),
        (words(1, 2, 4, 14) + b"\x00" * 1000, "1000 trailing bytes"),
    ],
)
def test_wrong_type_or_size_is_rejected(data: bytes, reason: str) -> None:
    # The original CHECK-aborts the process here (reference (a), bug 7).
    with pytest.raises(DecodeError, match=reason):
        isis.decode(data)


def test_stream_of_messages_frames_itself() -> None:
    msgs: list[isis.IsisMessage] = [
        isis.MarkerMessage(sender=3),
        isis.DataMessage(sender=1, msg_id=1, data=words(11)),
        isis.DataMessage(sender=1, msg_id=2, data=b"bytes"),
        isis.SeqMessage(sender=1, msg_id=1, final_seq=2, final_seq_proposer=3),
    ]
    stream = b"".join(isis.encode(msg) for msg in msgs)
    buf = Buffer(stream)
    assert [isis.pull_isis(buf) for _ in msgs] == msgs
    assert buf.eof()
    assert isis.message_size(stream[:3]) is None
    assert isis.message_size(stream[8 + 16 :]) == 16 + 5
    with pytest.raises(DecodeError, match="unknown message type 9"):
        isis.message_size(words(9))


@pytest.mark.parametrize("value", [-1, 2**32])
def test_encoder_refuses_values_outside_uint32(value: int) -> None:
    with pytest.raises(ValueError, match="msg_id"):
        isis.encode(isis.DataMessage(sender=1, msg_id=value, data=b""))
    with pytest.raises(ValueError, match="msg_id"):
        isis.encode(isis.DataMessage(sender=1, msg_id=value, data=bytes(4)))
    for msg in (
        isis.AckMessage(sender=1, msg_id=value, proposed_seq=1, proposer=1),
        isis.SeqMessage(sender=1, msg_id=value, final_seq=1, final_seq_proposer=1),
        isis.SeqAckMessage(sender=1, msg_id=value, ack_sender=1),
    ):
        with pytest.raises(ValueError, match="msg_id"):
            isis.encode(msg)


def _general_batch(data: bytes) -> list[isis.IsisMessage]:
    """A batch read one message at a time with the general decoder."""
    buf = Buffer(data)
    out = [isis.pull_isis(buf)]
    while not buf.eof():
        out.append(isis.pull_isis(buf))
    return out


@given(st.lists(messages, min_size=1, max_size=12))
def test_a_batch_decodes_to_its_messages_and_encode_matches_push(
    batch: list[isis.IsisMessage],
) -> None:
    data = b""
    for msg in batch:
        pushed = bytearray()
        isis.push_isis(pushed, msg)
        assert isis.encode(msg) == bytes(pushed)  # the fast encoder: the same bytes
        data += bytes(pushed)
    assert isis.decode_batch(data) == batch


@given(st.lists(messages, min_size=1, max_size=6), st.binary(max_size=24), st.integers(0, 200))
def test_a_damaged_batch_fails_as_the_general_decoder_does(
    batch: list[isis.IsisMessage], garbage: bytes, cut: int
) -> None:
    data = b"".join(isis.encode(msg) for msg in batch)
    for damaged in (data[: cut % (len(data) + 1)], data + garbage, garbage + data, b""):
        try:
            expected: object = _general_batch(damaged)
        except DecodeError as exc:
            expected = exc.reason
        try:
            got: object = isis.decode_batch(damaged)
        except DecodeError as exc:
            got = exc.reason
        assert got == expected
