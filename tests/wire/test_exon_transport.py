"""Exon datagrams: the layout the Java original writes (``EOMiddleware.netSend``),
checked byte by byte, and the strict decoder's refusals."""

from __future__ import annotations

import struct

import pytest

from gossamer.errors import DecodeError
from gossamer.wire import exon_transport as et


def _java(src: bytes, dst: bytes, kind: int, body: bytes) -> bytes:
    # What netSend puts in its buffer: putInt(len) put(id) twice, putInt(type), body.
    return struct.pack(">i", len(src)) + src + struct.pack(">i", len(dst)) + dst + struct.pack(
        ">i", kind
    ) + body


CASES = [
    (et.ReqSlots(0, 2500, 0, 10.0), 1, struct.pack(">qqqd", 0, 2500, 0, 10.0)),
    (et.Slots(0, 7, 2500), 2, struct.pack(">qqq", 0, 7, 2500)),
    (et.Token(5, 7, b"hello"), 3, struct.pack(">qq", 5, 7) + b"hello"),
    (et.Ack(7, (5,)), 4, struct.pack(">qq", 7, 5)),
    (et.Ack(7, (5, 6, 9)), 4, struct.pack(">qqqq", 7, 5, 6, 9)),
]


@pytest.mark.parametrize(("body", "kind", "raw"), CASES)
def test_the_layout_is_the_originals(body: et.Body, kind: int, raw: bytes) -> None:
    data = _java(b"node-a", b"node-b", kind, raw)
    datagram = et.ExonDatagram("node-a", "node-b", body)
    assert et.encode(datagram) == data
    assert et.decode(data) == datagram


def test_token_fast_path_and_mtu() -> None:
    top = et.max_payload("a", "bb")
    assert top == 1400 - 4 - 1 - 4 - 2 - 4 - 16
    data = et.encode_token("a", "bb", 1, 2, b"x" * top)
    assert len(data) == et.MTU
    assert et.decode(data) == et.ExonDatagram("a", "bb", et.Token(1, 2, b"x" * top))
    with pytest.raises(ValueError, match="MTU"):
        et.encode_token("a", "bb", 1, 2, b"x" * (top + 1))
    with pytest.raises(DecodeError, match="exceeds"):
        et.decode(data + b"x")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated source id length"),
        (struct.pack(">i", 0), "source id length 0"),
        (struct.pack(">i", -1) + b"a", "source id length -1"),
        (struct.pack(">i", 3) + b"ab", "truncated source id"),
        (struct.pack(">i", 1) + b"\xff" + struct.pack(">i", 1) + b"b", "not UTF-8"),
        (_java(b"a", b"b", 5, b""), "unknown Exon message type 5"),
        (_java(b"a", b"b", 1, struct.pack(">qqqd", 0, 1, 0, 1.0) + b"\0"), "REQSLOTS of 33"),
        (_java(b"a", b"b", 1, struct.pack(">qqqd", 0, 1, 0, float("nan"))), "RTT"),
        (_java(b"a", b"b", 1, struct.pack(">qqqd", 0, -1, 0, 1.0)), "negative"),
        (_java(b"a", b"b", 2, struct.pack(">qq", 0, 1)), "SLOTS of 16"),
        (_java(b"a", b"b", 3, struct.pack(">q", 0)), "TOKEN of 8"),
        (_java(b"a", b"b", 4, struct.pack(">q", 0)), "ACK of 8"),
        (_java(b"a", b"b", 4, struct.pack(">qq", 0, 1) + b"\0"), "ACK of 17"),
        (_java(b"a", b"b", 3, struct.pack(">qq", -5, 1)), "negative"),
    ],
)
def test_bad_datagrams_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        et.decode(data)


def test_values_the_format_cannot_carry() -> None:
    with pytest.raises(ValueError, match="source id"):
        et.encode(et.ExonDatagram("", "b", et.Slots(0, 0, 0)))
    with pytest.raises(ValueError, match="at least one slot"):
        et.encode(et.ExonDatagram("a", "b", et.Ack(0, ())))
    with pytest.raises(ValueError, match="RTT"):
        et.encode(et.ExonDatagram("a", "b", et.ReqSlots(0, 0, 0, float("inf"))))
    with pytest.raises(ValueError, match="2\\*\\*63"):
        et.encode(et.ExonDatagram("a", "b", et.Slots(-1, 0, 0)))
