"""The A3M original's messages (``wire.a3m``): bytes written by hand from protobuf's
encoding rules, strict decoding, and the translation to gossamer's link records."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.wire import a3m
from gossamer.wire.a3m import A3MMessage, A3MType, TagBook
from gossamer.wire.exon import (
    NO_CLOCK,
    ControlBody,
    DataBody,
    ErrorBody,
    ErrorCode,
    FlowBody,
    LinkAckBody,
    LinkBody,
    LinkDecision,
    LinkMetadata,
    SocketMessage,
    UnlinkBody,
)

# Field 1 "a", field 2 "b", field 3 b"\x02" (LINK); clock 0 and an empty body are
# proto3 defaults, which are not written.
LINK_MIN = bytes.fromhex("0a0161" "120162" "1a0102")
# INT32_MIN as an int32 varint: ten bytes (a negative int32 is sign-extended to 64 bits).
MISSING = bytes.fromhex("2080808080f8ffffffff01")


def test_the_envelope_bytes_are_protobufs() -> None:
    msg = A3MMessage(src_tag="a", dst_tag="b", kind=A3MType.LINK, clock=0)
    assert a3m.encode_message(msg) == LINK_MIN
    assert a3m.decode_message(LINK_MIN) == msg
    error = A3MMessage(src_tag="a", dst_tag="b", kind=A3MType.ERROR, clock=a3m.MISSING_CLOCK,
                       body=b"x")
    wire = bytes.fromhex("0a0161" "120162" "1a0101") + MISSING + bytes.fromhex("2a0178")
    assert a3m.encode_message(error) == wire
    assert a3m.decode_message(wire) == error


def test_fields_are_a_map_of_oneof_values() -> None:
    # {"credits": 0}: entry (field 1) = key (field 1) "credits", value (field 2) = Value
    # with int32_value (field 1) 0, written although 0, as a oneof member is.
    wire = bytes.fromhex("0a0d" "0a07") + b"credits" + bytes.fromhex("1202" "0800")
    assert a3m.encode_fields({"credits": 0}) == wire
    assert a3m.decode_fields(wire) == {"credits": 0}
    # A string value is field 4, a bool field 5.
    assert a3m.decode_fields(a3m.encode_fields({"code": "3", "on": True})) == {
        "code": "3", "on": True}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (LINK_MIN + bytes.fromhex("3001"), "fields A3M does not define"),  # field 6
        (bytes.fromhex("0a00120162" "1a0102"), "source tag of 0 bytes"),
        (bytes.fromhex("0a0161" "1a0102"), "destination tag of 0 bytes"),
        (bytes.fromhex("0a0161120162" "1a020202"), "type of 2 bytes"),
        (bytes.fromhex("0a0161120162"), "type of 0 bytes"),
        (bytes.fromhex("0a0161120162" "1a0107"), "unknown message type 0x07"),
        (bytes.fromhex("0a0161120162" "1a0100"), "unknown message type 0x00"),
        (bytes.fromhex("0a02c328120162" "1a0102"), "bad UTF-8"),
        (bytes.fromhex("0a05"), "not a valid protobuf"),  # cut short
        (bytes(1401), "exceeds 1400"),
    ],
)
def test_malformed_messages_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        a3m.decode_message(data)


def test_custom_control_types_pass_and_reserved_ones_do_not() -> None:
    for kind in (0x33, a3m.SUBSCRIBE, a3m.UNSUBSCRIBE, 0xFF):
        msg = A3MMessage(src_tag="s", dst_tag="d", kind=kind, clock=3, body=b"..")
        assert a3m.decode_message(a3m.encode_message(msg)).kind == kind
    with pytest.raises(ValueError, match="one byte"):
        a3m.encode_message(A3MMessage(src_tag="s", dst_tag="d", kind=0x100, clock=0))
    with pytest.raises(ValueError, match="1 to 255 bytes"):
        a3m.encode_message(A3MMessage(src_tag="", dst_tag="d", kind=2, clock=0))


def _translate(msg: SocketMessage) -> tuple[A3MMessage, SocketMessage]:
    book = TagBook()
    out = a3m.from_link_message(msg, book)
    return out, a3m.to_link_message(a3m.decode_message(a3m.encode_message(out)), book)


META = LinkMetadata(socket_type=2, credits=250)


@pytest.mark.parametrize(
    ("body", "kind", "fields"),
    [
        (LinkBody(metadata=META), A3MType.LINK, {"protocolId": 2, "credits": 250}),
        (LinkAckBody(decision=LinkDecision.SUCCESS, dest_clock=4, metadata=META),
         A3MType.LINKREPLY, {"protocolId": 2, "credits": 250, "replyCode": 0,
                             "destClockId": 4}),
        (LinkAckBody(decision=LinkDecision.SUCCESS, dest_clock=4), A3MType.LINKREPLY,
         {"replyCode": 0, "destClockId": 4}),
        (LinkAckBody(decision=LinkDecision.TEMPORARILY_UNAVAILABLE, dest_clock=0xFFFF_FFFE),
         A3MType.LINKREPLY, {"replyCode": 2, "destClockId": -2}),
        (LinkAckBody(decision=LinkDecision.CLOSED, dest_clock=1), A3MType.LINKREPLY,
         {"replyCode": -4, "destClockId": 1}),
        (ErrorBody(code=ErrorCode.SOCKET_NOT_FOUND, dest_clock=7), A3MType.ERROR,
         {"code": "1", "destClockId": 7}),
        (ErrorBody(code=ErrorCode.SOCKET_NOT_LINKED, dest_clock=NO_CLOCK), A3MType.ERROR,
         {"code": "3", "destClockId": a3m.MISSING_CLOCK}),
    ],
)
def test_handshake_and_error_messages_are_field_maps(
    body: object, kind: A3MType, fields: dict[str, object]
) -> None:
    book = TagBook()
    msg = SocketMessage(src_tag=book.tag("push"), dst_tag=book.tag("pull"), clock=9,
                        body=body)  # type: ignore[arg-type]
    out, back = _translate(msg)
    assert (out.kind, out.src_tag, out.dst_tag, out.clock) == (kind, str(msg.src_tag),
                                                               str(msg.dst_tag), 9)
    assert a3m.decode_fields(out.body) == fields
    assert back.body == msg.body and back.clock == 9


def test_flow_unlink_data_and_control_bodies() -> None:
    for body, raw in [
        (FlowBody(credits=-25), bytes.fromhex("ffffffe7")),
        (UnlinkBody(sent=300), bytes.fromhex("0000012c")),
        (DataBody(payload=b"\x00\x00\x00\x05job"), b"\x00\x00\x00\x05job"),
        (ControlBody(kind=a3m.SUBSCRIBE, payload=b"xy"), b"xy"),
    ]:
        out, back = _translate(SocketMessage(src_tag=5, dst_tag=6, clock=1, body=body))
        assert out.body == raw and back.body == body


def test_clocks_are_int32_and_the_missing_socket_clock_is_no_clock() -> None:
    out, back = _translate(SocketMessage(src_tag=5, dst_tag=6, clock=NO_CLOCK,
                                         body=FlowBody(credits=1)))
    assert out.clock == a3m.MISSING_CLOCK and back.clock == NO_CLOCK
    out, back = _translate(SocketMessage(src_tag=5, dst_tag=6, clock=0xFFFF_FFFE,
                                         body=FlowBody(credits=1)))
    assert out.clock == -2 and back.clock == 0xFFFF_FFFE
    with pytest.raises(ValueError, match="missing socket"):
        a3m.from_link_message(SocketMessage(src_tag=5, dst_tag=6, clock=1 << 31,
                                            body=FlowBody(credits=1)), TagBook())


@pytest.mark.parametrize(
    ("kind", "body", "reason"),
    [
        (A3MType.FLOW, b"\x00\x00\x01", "must be 4"),
        (A3MType.UNLINK, b"\xff\xff\xff\xff", "negative count"),
        (A3MType.LINK, a3m.encode_fields({"protocolId": 1}), "'credits'"),
        (A3MType.LINK, a3m.encode_fields({"protocolId": "1", "credits": 1}), "'protocolId'"),
        (A3MType.LINKREPLY, a3m.encode_fields({"replyCode": 9, "destClockId": 0}), "reply code 9"),
        (A3MType.LINKREPLY, a3m.encode_fields({"replyCode": 0}), "'destClockId'"),
        # SOCK_NAVAIL: defined by the original, never sent.
        (A3MType.ERROR, a3m.encode_fields({"code": "2", "destClockId": 0}),
         "not one the original sends"),
        (A3MType.ERROR, a3m.encode_fields({"code": 1, "destClockId": 0}), "decimal string"),
        (A3MType.LINK, b"\x0a\x03\x0a\x01k", "has no value"),
    ],
)
def test_bodies_the_original_never_sends_are_refused(kind: int, body: bytes, reason: str) -> None:
    msg = A3MMessage(src_tag="a", dst_tag="b", kind=kind, clock=0, body=body)
    with pytest.raises(DecodeError, match=reason):
        a3m.to_link_message(msg, TagBook())


def test_what_the_original_wire_cannot_say_is_refused() -> None:
    book = TagBook()
    custom = LinkMetadata(socket_type=1, credits=0, custom={"receipts": b"1"})
    for body in (LinkBody(metadata=custom),
                 ErrorBody(code=ErrorCode.INVALID_FORMAT, dest_clock=0),
                 ErrorBody(code=ErrorCode.SOCKET_NOT_FOUND, dest_clock=0, text="why")):
        with pytest.raises(ValueError):
            a3m.from_link_message(SocketMessage(src_tag=1, dst_tag=2, clock=0, body=body), book)


def test_tag_book_names_both_ways_and_refuses_collisions() -> None:
    book = TagBook()
    jobs = book.tag("jobs")
    assert jobs == TagBook.number("jobs") and book.name(jobs) == "jobs"
    book.register(7, "seven")
    assert book.tag("seven") == 7 and book.name(7) == "seven"
    assert book.name(99) == "99" and book.tag("99") == 99
    with pytest.raises(ValueError, match="already taken"):
        book.register(7, "other")
    book.register(TagBook.number("clash"), "decoy")
    with pytest.raises(DecodeError, match="collides"):
        book.tag("clash")


def test_pattern_payloads() -> None:
    assert a3m.join_order(5, b"x") == b"\x00\x00\x00\x05x"
    assert a3m.split_order(b"\x00\x00\x00\x05x") == (5, b"x")
    with pytest.raises(DecodeError, match="order counter"):
        a3m.split_order(b"\x00\x00")
    published = a3m.encode_published(b"sport/", b"goal")
    assert published == b"\x00\x00\x00\x06sport/\x00\x00\x00\x04goal"
    assert a3m.decode_published(published) == (b"sport/", b"goal")
    for bad in (published[:-1], published + b"!", b"\x00\x00\x00\xffab"):
        with pytest.raises(DecodeError):
            a3m.decode_published(bad)
    subs = a3m.encode_subscriptions([b"a", b""])
    assert subs == b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x00"
    assert a3m.decode_subscriptions(subs) == (b"a", b"")
    with pytest.raises(DecodeError, match="exceed"):
        a3m.decode_subscriptions(b"\x7f\xff\xff\xff")
    routed = a3m.encode_routed([3, -1, ("node", "tag")], b"body")
    assert a3m.decode_routed(routed) == ((3, -1, ("node", "tag")), b"body")
    with pytest.raises(DecodeError, match="exceed"):
        a3m.decode_routed(a3m.encode_routed([1] * 16, b"") + b"\x0a\x02\x08\x01")


def test_a_router_reads_a_bare_payload_as_a_body_without_routing_ids() -> None:
    """As the original ROUTER reads what a REQ sends, and sends what a REQ expects."""
    assert a3m.read_routed(b"ask 1") == ((), b"ask 1")  # not a routed message
    assert a3m.read_routed(a3m.encode_routed([5], b"ask 1")) == ((5,), b"ask 1")
    with pytest.raises(DecodeError, match="exceed"):  # routed, but beyond the limits
        a3m.read_routed(a3m.encode_routed([1] * 16, b"") + b"\x0a\x02\x08\x01")
    assert a3m.encode_routed_or_bare([], b"reply") == b"reply"
    assert a3m.encode_routed_or_bare([5], b"reply") == a3m.encode_routed([5], b"reply")


@given(st.binary(max_size=300))
def test_the_decoders_raise_only_decode_error(data: bytes) -> None:
    book = TagBook()
    for decode in (a3m.decode_fields, a3m.decode_published, a3m.decode_subscriptions,
                   a3m.decode_routed, a3m.read_routed,
                   lambda d: a3m.to_link_message(a3m.decode_message(d), book)):
        with contextlib.suppress(DecodeError):
            decode(data)
