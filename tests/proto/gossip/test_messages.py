"""What the envelope carries: GOSSIP (hop, grouping, Chatter's G) and ACK."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.proto.gossip.messages import (
    MAX_HOP,
    AckPayload,
    GossipPayload,
    decode_payload,
    encode_ack,
    gossip_header,
)
from gossamer.wire.chatter import BroadcastID, Gossip, NetID, encode_gossip, type_tag

ORIGIN = NetID("10.0.0.1", 29999)
DIST = (NetID("10.0.1.1", 29999), NetID("10.0.1.2", 29999), NetID("10.0.2.1", 29999))


def gossip(dist: tuple[NetID, ...] = DIST) -> Gossip:
    return Gossip(
        current=BroadcastID(ORIGIN, 300),
        type_tag=type_tag("hello"),
        content=b"world",
        seen=(BroadcastID(NetID("10.0.0.2", 29999), 4),),
        distribution=dist,
    )


def test_gossip_round_trips_with_hop_and_grouping() -> None:
    g = gossip()
    data = gossip_header(7, (2, 1)) + encode_gossip(g)
    decoded = decode_payload(data)
    assert decoded == GossipPayload(hop=7, groups=(2, 1), gossip=g)
    assert decode_payload(gossip_header(1) + encode_gossip(g)) == GossipPayload(
        hop=1, groups=(), gossip=g
    )


def test_ack_round_trips_with_the_ackers_sightings() -> None:
    assert decode_payload(encode_ack(2**40)) == AckPayload(seq=2**40)
    assert decode_payload(encode_ack(3, DIST)) == AckPayload(seq=3, seen=DIST)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\x07", "unknown gossip payload kind"),
        (encode_ack(5) + b"\x00", "disagrees"),
        (encode_ack(5, DIST)[:-1], "disagrees"),
        (b"\x01\x00\x00", "hop count 0"),
        (gossip_header(1, (2, 2)) + encode_gossip(gossip()), "do not add up"),
        (b"\x01\x01\x01\x00" + encode_gossip(gossip()), "empty group"),
        (gossip_header(1) + encode_gossip(gossip())[:-8], "truncated"),
    ],
)
def test_malformed_payloads_are_decode_errors(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        decode_payload(data)


def test_the_header_refuses_impossible_hops() -> None:
    with pytest.raises(ValueError, match="hop"):
        gossip_header(0)
    with pytest.raises(ValueError, match="hop"):
        gossip_header(MAX_HOP + 1)


@given(st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_payload(data)


@given(st.binary(max_size=60), st.integers(0, 200))
def test_corrupted_messages_raise_only_decode_error(noise: bytes, at: int) -> None:
    good = bytearray(gossip_header(3, (2, 1)) + encode_gossip(gossip()))
    at %= len(good)
    good[at : at + len(noise)] = noise
    with contextlib.suppress(DecodeError):
        decode_payload(bytes(good))
