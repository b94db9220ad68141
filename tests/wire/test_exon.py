"""The Exon/A3M socket middleware codec: fixed header, socket header, every body."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.wire import exon
from gossamer.wire.buffer import Buffer
from gossamer.wire.exon import (
    ControlBody,
    DataBody,
    ErrorBody,
    ErrorCode,
    ExonLimits,
    FlowBody,
    LinkAckBody,
    LinkBody,
    LinkDecision,
    LinkMetadata,
    SocketMessage,
    SocketType,
    UnlinkBody,
)

u32 = st.integers(min_value=0, max_value=2**32 - 1)
i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
metadata = st.builds(
    LinkMetadata,
    socket_type=st.integers(min_value=0, max_value=0xFFFF),
    credits=i32,
    custom=st.dictionaries(st.text(min_size=1, max_size=10), st.binary(max_size=20), max_size=4),
)
bodies = st.one_of(
    st.builds(
        ErrorBody, code=st.sampled_from(ErrorCode), dest_clock=u32, text=st.text(max_size=40)
    ),
    st.builds(DataBody, payload=st.binary(max_size=64)),
    st.builds(LinkBody, metadata=metadata),
    st.builds(
        LinkAckBody,
        decision=st.sampled_from(LinkDecision),
        dest_clock=u32,
        metadata=st.none() | metadata,
    ),
    st.builds(UnlinkBody, sent=u32),
    st.builds(FlowBody, credits=i32),
    st.builds(
        ControlBody,
        kind=st.integers(min_value=0x33, max_value=0xFF),
        payload=st.binary(max_size=32),
    ),
)
messages = st.builds(SocketMessage, src_tag=u32, dst_tag=u32, clock=u32, body=bodies)


def header(kind: int, remaining: int, *, version: int = 1, protocol: int = 1) -> bytes:
    return version.to_bytes(2, "big") + bytes((protocol, kind)) + remaining.to_bytes(4, "big")


def frame(kind: int, body: bytes, **fields: int) -> bytes:
    """A message with a zero socket header and a remaining length that matches ``body``."""
    return header(kind, 12 + len(body), **fields) + bytes(12) + body


def socket_header(src: int, dst: int, clock: int) -> bytes:
    return src.to_bytes(4, "big") + dst.to_bytes(4, "big") + clock.to_bytes(4, "big")


# --------------------------------------------------------------------------- exact bytes
# Fixed header and socket extended header: notes "Message structure" (version 2 B,
# protocol 1 B with sockets = 0x01, type 1 B, remaining length 4 B; source and destination
# tags 4 B each) plus gossamer's link clock. Type numbers: notes "Message Types".


def test_flow_with_negative_credits() -> None:
    # Reference (c) worked example: the receiver's setCapacity(0) after 25 sends leaves
    # the sender at -25 credits, i.e. a FLOW of -25.
    msg = SocketMessage(src_tag=9, dst_tag=7, clock=3, body=FlowBody(credits=-25))
    wire = header(0x06, 16) + socket_header(9, 7, 3) + b"\xff\xff\xff\xe7"
    assert exon.encode(msg) == wire
    assert exon.decode(wire) == msg


def test_link_carries_socket_type_credits_and_custom_metadata() -> None:
    # Java defaults (reference (c) "Socket options"): capacity 250 is the initial credit.
    meta = LinkMetadata(socket_type=SocketType.PUSH, credits=250, custom={"k": b"v1"})
    msg = SocketMessage(src_tag=1, dst_tag=2, clock=0, body=LinkBody(metadata=meta))
    body = b"\x00\x01" + (250).to_bytes(4, "big") + b"\x01" + b"\x01k" + b"\x00\x02v1"
    wire = header(0x03, 12 + len(body)) + socket_header(1, 2, 0) + body
    assert exon.encode(msg) == wire
    assert exon.decode(wire) == msg


def test_linkack_with_and_without_metadata() -> None:
    # Notes "Establishing a link": B answers a LINK with its decision and metadata; A then
    # answers with its decision only.
    meta = LinkMetadata(socket_type=SocketType.PULL, credits=100)
    reply = SocketMessage(
        src_tag=2,
        dst_tag=1,
        clock=5,
        body=LinkAckBody(decision=LinkDecision.SUCCESS, dest_clock=4, metadata=meta),
    )
    body = (
        b"\x00"
        + (4).to_bytes(4, "big")
        + b"\x01"
        + b"\x00\x02"
        + (100).to_bytes(4, "big")
        + b"\x00"
    )
    assert exon.encode(reply) == header(0x04, 12 + len(body)) + socket_header(2, 1, 5) + body
    refusal = SocketMessage(
        src_tag=1,
        dst_tag=2,
        clock=4,
        body=LinkAckBody(decision=LinkDecision.INCOMPATIBLE, dest_clock=5),
    )
    body = b"\xff" + (5).to_bytes(4, "big") + b"\x00"
    wire = header(0x04, 12 + len(body)) + socket_header(1, 2, 4) + body
    assert exon.encode(refusal) == wire
    assert exon.decode(wire) == refusal
    assert LinkDecision.INCOMPATIBLE.fatal and not LinkDecision.TEMPORARILY_UNAVAILABLE.fatal


def test_socket_not_found_error_comes_from_the_missing_socket() -> None:
    # Notes "Socket Not Found": the source tag is the missing socket's, the destination
    # tag the asker's; a missing socket has no clock.
    msg = SocketMessage(
        src_tag=42,
        dst_tag=7,
        clock=exon.NO_CLOCK,
        body=ErrorBody(code=ErrorCode.SOCKET_NOT_FOUND, dest_clock=3, text="no socket 42"),
    )
    body = b"\x01" + (3).to_bytes(4, "big") + b"no socket 42"
    wire = header(0x01, 12 + len(body)) + socket_header(42, 7, 0xFFFFFFFF) + body
    assert exon.encode(msg) == wire
    assert exon.decode(wire) == msg


@pytest.mark.parametrize(
    ("body", "kind", "payload"),
    [
        (DataBody(payload=b"hello"), 0x02, b"hello"),
        (UnlinkBody(sent=10), 0x05, b"\x00\x00\x00\x0a"),
        (ErrorBody(code=ErrorCode.SOCKET_NOT_LINKED, dest_clock=1), 0x01, b"\x02\x00\x00\x00\x01"),
        (ControlBody(kind=0x40, payload=b"sub"), 0x40, b"sub"),
    ],
)
def test_simple_bodies(body: exon.Body, kind: int, payload: bytes) -> None:
    msg = SocketMessage(src_tag=1, dst_tag=2, clock=0, body=body)
    wire = header(kind, 12 + len(payload)) + socket_header(1, 2, 0) + payload
    assert exon.encode(msg) == wire
    assert exon.decode(wire) == msg


def test_type_numbers_follow_the_notes() -> None:
    assert [t.value for t in exon.MessageType][:6] == [1, 2, 3, 4, 5, 6]
    assert [t.name for t in exon.MessageType][:6] == [
        "ERROR",
        "DATA",
        "LINK",
        "LINKACK",
        "UNLINK",
        "FLOW",
    ]
    assert (ErrorCode.SOCKET_NOT_FOUND, ErrorCode.SOCKET_NOT_LINKED) == (1, 2)


# --------------------------------------------------------------------------- properties


@given(messages)
def test_round_trip(msg: SocketMessage) -> None:
    data = exon.encode(msg)
    assert exon.decode(data) == msg
    assert exon.frame_length(data) == len(data)


@given(st.binary(max_size=80))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    try:
        msg = exon.decode(data)
    except DecodeError:
        return
    assert exon.encode(msg) == data


@given(st.binary(min_size=12, max_size=60), st.integers(min_value=1, max_value=0xFF))
def test_random_bodies_behind_a_valid_header_raise_only_decode_error(
    rest: bytes, kind: int
) -> None:
    data = header(kind, len(rest)) + rest
    try:
        msg = exon.decode(data)
    except DecodeError:
        return
    assert exon.encode(msg) == data


@given(messages)
def test_every_truncation_and_trailing_garbage_is_rejected(msg: SocketMessage) -> None:
    data = exon.encode(msg)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            exon.decode(data[:cut])
    with pytest.raises(DecodeError, match="does not match"):
        exon.decode(data + b"\x00")


# --------------------------------------------------------------------------- malformed


def test_remaining_length_must_match() -> None:
    good = exon.encode(SocketMessage(src_tag=1, dst_tag=2, clock=0, body=FlowBody(credits=1)))
    longer = good[:4] + (17).to_bytes(4, "big") + good[8:] + b"\x00"
    with pytest.raises(DecodeError, match="trailing bytes after FLOW body"):
        exon.decode(longer)  # consistent length, but a FLOW body is 4 bytes
    with pytest.raises(DecodeError, match="does not match"):
        exon.decode(good[:4] + (15).to_bytes(4, "big") + good[8:])
    with pytest.raises(DecodeError, match="shorter than the socket header"):
        exon.decode(header(0x02, 4) + b"\x00" * 4)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (frame(0x02, b"", version=2), "unsupported middleware version 2"),
        (frame(0x02, b"", protocol=2), "protocol 0x02"),
        (frame(0x07, b""), "unknown socket message type 0x07"),
        (frame(0x00, b""), "unknown socket message type 0x00"),
        (frame(0x01, b"\x09" + bytes(4)), "unknown error code 0x09"),
        (frame(0x01, b"\x01" + bytes(4) + b"\xff"), "error text is not UTF-8"),
        (frame(0x04, b"\x05" + bytes(5)), "unknown link decision 5"),
        (frame(0x04, b"\x00" + bytes(4) + b"\x02"), "metadata flag"),
        (frame(0x03, bytes(6) + b"\x01" + b"\x00" + b"\x00\x00"), "empty custom"),
        (
            frame(0x03, bytes(6) + b"\x02" + b"\x01a\x00\x00" * 2),
            "duplicate custom metadata key 'a'",
        ),
        (frame(0x03, bytes(6) + b"\x01" + b"\x02\xff\xfe\x00\x00"), "not UTF-8"),
        (frame(0x03, bytes(6) + b"\x01" + b"\x01a\x00\x05abc"), "truncated: metadata value"),
        (frame(0x06, b"\x00\x00\x00"), "truncated: credits"),
    ],
)
def test_malformed_messages_say_why(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        exon.decode(data)


def test_offsets_point_into_the_whole_message() -> None:
    data = frame(0x01, b"\x09" + bytes(4))
    with pytest.raises(DecodeError) as info:
        exon.decode(data)
    assert info.value.offset == 20  # the error code byte, right after both headers


def test_limits_are_enforced_on_decode() -> None:
    small = ExonLimits(max_frame=64, max_custom_entries=1, max_custom_bytes=4, max_error_text=3)
    with pytest.raises(DecodeError, match="exceeds 64"):
        exon.decode(header(0x02, 60) + bytes(60), limits=small)
    too_many = frame(0x03, bytes(6) + b"\x02" + b"\x01a\x00\x00\x01b\x00\x00")
    with pytest.raises(DecodeError, match="2 custom metadata entries exceed 1"):
        exon.decode(too_many, limits=small)
    too_big = frame(0x03, bytes(6) + b"\x01" + b"\x01a\x00\x04abcd")
    with pytest.raises(DecodeError, match="exceeds 4 bytes"):
        exon.decode(too_big, limits=small)
    long_text = frame(0x01, b"\x01" + bytes(4) + b"abcd")
    with pytest.raises(DecodeError, match="error text of 4 bytes exceeds 3"):
        exon.decode(long_text, limits=small)


def test_a_huge_remaining_length_fails_before_any_allocation() -> None:
    data = header(0x02, 0xFFFFFFF0) + bytes(12)
    with pytest.raises(DecodeError, match="exceeds"):
        exon.frame_length(data)
    with pytest.raises(DecodeError, match="exceeds"):
        exon.decode(data)


def test_encoder_refuses_unencodable_values() -> None:
    def msg(body: exon.Body, **fields: int) -> SocketMessage:
        return SocketMessage(
            src_tag=fields.get("src_tag", 1), dst_tag=2, clock=fields.get("clock", 0), body=body
        )

    flow = FlowBody(credits=1)
    cases: list[tuple[SocketMessage, str]] = [
        (msg(flow, src_tag=-1), "src_tag"),
        (msg(flow, clock=2**32), "clock"),
        (msg(FlowBody(credits=2**31)), "credits"),
        (msg(UnlinkBody(sent=-1)), "sent"),
        (msg(ControlBody(kind=0x32, payload=b"")), "0x33..0xff"),
        (msg(LinkBody(metadata=LinkMetadata(socket_type=0x10000, credits=0))), "socket_type"),
        (msg(LinkBody(metadata=LinkMetadata(socket_type=1, credits=0, custom={"": b""}))), "keys"),
        (msg(ErrorBody(code=ErrorCode.SOCKET_NOT_FOUND, dest_clock=0, text="x" * 2000)), "text"),
        (msg(DataBody(payload=bytes(1 << 20))), "exceeds"),
    ]
    for bad, reason in cases:
        buf = bytearray(b"keep")
        with pytest.raises(ValueError, match=reason):
            exon.push_socket_message(buf, bad)
        assert buf == b"keep"  # a failed push leaves the buffer as it was


# --------------------------------------------------------------------------- streams


@given(st.lists(messages, min_size=1, max_size=5), st.data())
def test_frame_reader_handles_any_split(msgs: list[SocketMessage], data: st.DataObject) -> None:
    stream = b"".join(exon.encode(msg) for msg in msgs)
    cuts = sorted(data.draw(st.sets(st.integers(min_value=0, max_value=len(stream)), max_size=8)))
    reader = exon.FrameReader()
    received: list[SocketMessage] = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        received += reader.feed(stream[previous:cut])
        previous = cut
    assert received == msgs
    assert reader.buffered == 0


def test_frame_reader_byte_by_byte_and_coalesced() -> None:
    msgs = [
        SocketMessage(src_tag=1, dst_tag=2, clock=0, body=DataBody(payload=b"a" * 10)),
        SocketMessage(src_tag=1, dst_tag=2, clock=0, body=FlowBody(credits=5)),
    ]
    stream = b"".join(exon.encode(msg) for msg in msgs)
    reader = exon.FrameReader()
    out: list[SocketMessage] = []
    for i in range(len(stream)):
        out += reader.feed(stream[i : i + 1])
    assert out == msgs
    assert exon.FrameReader().feed(stream) == msgs


def test_frame_reader_rejects_garbage_and_oversized_frames_early() -> None:
    reader = exon.FrameReader(limits=ExonLimits(max_frame=100))
    with pytest.raises(DecodeError, match="exceeds 100"):
        reader.feed(header(0x02, 1000))  # refused from the header alone
    with pytest.raises(DecodeError, match="version"):
        exon.FrameReader().feed(b"GET / HTTP/1.1\r\n")


def _data(src: int, dst: int, clock: int, payload: bytes) -> SocketMessage:
    return SocketMessage(src_tag=src, dst_tag=dst, clock=clock, body=DataBody(payload=payload))


def test_frame_scanner_groups_data_of_one_link_into_runs() -> None:
    flow = SocketMessage(src_tag=1, dst_tag=2, clock=7, body=FlowBody(credits=3))
    msgs = [
        _data(1, 2, 7, b"a"),
        _data(1, 2, 7, b"bb"),
        _data(1, 2, 8, b"c"),  # another incarnation: another run
        flow,
        _data(1, 2, 8, b"d"),
    ]
    stream = b"".join(exon.encode(msg) for msg in msgs)
    scanner = exon.FrameScanner()
    items = list(scanner.feed(stream[:-1])) + list(scanner.feed(stream[-1:]))
    assert [type(item).__name__ for item in items] == [
        "DataRun", "DataRun", "Frame", "DataRun",
    ]
    first = items[0]
    assert isinstance(first, exon.DataRun)
    assert (first.src_tag, first.dst_tag, first.clock, first.payloads) == (1, 2, 7, [b"a", b"bb"])
    assert [first.message(0), first.message(1)] == msgs[:2]
    assert items[2] == exon.Frame(decoded=flow, size=len(exon.encode(flow)))
    assert scanner.buffered == 0 and scanner.lost is None


def test_frame_scanner_reports_a_malformed_frame_and_goes_on() -> None:
    bad = frame(0x01, b"\x09" + bytes(4))  # unknown error code, framed correctly
    good = exon.encode(_data(1, 2, 0, b"x"))
    items = list(exon.FrameScanner().feed(bad + good))
    assert isinstance(items[0], exon.Frame) and items[0].size == len(bad)
    assert isinstance(items[0].decoded, DecodeError)
    assert "error code" in items[0].decoded.reason
    assert isinstance(items[1], exon.DataRun) and items[1].payloads == [b"x"]


def test_frame_scanner_stops_where_framing_is_lost_until_reset() -> None:
    good = exon.encode(_data(1, 2, 0, b"x"))
    garbage = b"GET / HTTP/1.1\r\n"
    scanner = exon.FrameScanner()
    items = list(scanner.feed(good + garbage + good))
    assert [type(item).__name__ for item in items] == ["DataRun"]
    assert scanner.lost is not None
    assert scanner.unread == len(garbage + good)
    assert "version" in scanner.lost.reason
    assert list(scanner.feed(good)) == []  # a lost stream yields nothing more
    scanner.reset()
    assert len(list(scanner.feed(good))) == 1


def test_pull_leaves_following_bytes() -> None:
    one = exon.encode(SocketMessage(src_tag=1, dst_tag=2, clock=0, body=UnlinkBody(sent=3)))
    buf = Buffer(one + b"next")
    assert exon.pull_socket_message(buf).body == UnlinkBody(sent=3)
    assert buf.pull_rest() == b"next"
