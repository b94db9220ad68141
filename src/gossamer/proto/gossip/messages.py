"""What a gossamer envelope carries for gossip: Chatter's gossip G plus a small header.

In sealed mode (the default) every message is sealed with ``gossamer.wire.envelope``; the
envelope's sender is the sending node's NetID (``"ip:port"``), authenticated, and its payload
is one of::

    GOSSIP  = 0x01 | VarInt hop | VarInt n | n x VarInt group size | G
    ACK     = 0x02 | VarInt acked envelope seq | VarInt m | m x NetID (6 bytes each)

- ``G`` is Chatter's gossip structure, byte for byte (``gossamer.wire.chatter.encode_gossip``).
  Its *current BroadcastID* is the **originator's** (origin NetID and seqno), unchanged at
  every hop: that is how a broadcast is recognised end to end (chatter-as-coded.md §9: Chatter
  put the last hop's id there, so nothing named a broadcast).
- ``hop``: transmissions from the originator; 1 on the originator's own sends.
- group sizes: how the sender grouped the distribution list into multicast groups, in list
  order (the sizes sum to the list's length; ``n = 0`` says nothing). Receivers learn from
  it (``PeerDB.link``).
- ``ACK``: sent back on the same TCP connection once a next hop has accepted a GOSSIP, naming
  it by its envelope seq; an unacknowledged hop is re-planned (``core.py``). It also carries
  the acknowledging node's multicast sightings (its seen list, without seqnos), so that a
  sender learns the multicast group of each next hop it uses: Chatter nodes learnt other
  subnets' groups only from the few TCP messages they happened to receive (§9).

Decoders raise only ``DecodeError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gossamer.errors import DecodeError
from gossamer.wire.chatter import DEFAULT_LIMITS, ChatterCodec, Gossip, Limits, NetID
from gossamer.wire.varint import decode_uint, encode_uint

__all__ = [
    "KIND_ACK",
    "KIND_GOSSIP",
    "MAX_HOP",
    "AckPayload",
    "GossipPayload",
    "decode_payload",
    "encode_ack",
    "gossip_header",
]

KIND_GOSSIP = 0x01
KIND_ACK = 0x02
#: Hop counts above this are malformed: a tree over 2**16 nodes is never that deep.
MAX_HOP = 1 << 16


@dataclass(frozen=True, slots=True, kw_only=True)
class GossipPayload:
    """A decoded GOSSIP: the hop count, the sender's grouping and Chatter's gossip."""

    hop: int
    groups: tuple[int, ...]
    gossip: Gossip


@dataclass(frozen=True, slots=True, kw_only=True)
class AckPayload:
    """A decoded ACK of the message with envelope seq ``seq``, and the acknowledging node's
    multicast sightings."""

    seq: int
    seen: tuple[NetID, ...] = ()


def gossip_header(hop: int, groups: tuple[int, ...] = ()) -> bytes:
    """The bytes of a GOSSIP before G. ``ValueError`` for a hop outside 1..MAX_HOP."""
    if not 1 <= hop <= MAX_HOP:
        raise ValueError(f"hop must be 1 to {MAX_HOP}, got {hop}")
    parts = [bytes((KIND_GOSSIP,)), encode_uint(hop), encode_uint(len(groups))]
    parts += [encode_uint(size) for size in groups]
    return b"".join(parts)


def encode_ack(seq: int, seen: Sequence[NetID] = ()) -> bytes:
    """An ACK of envelope seq ``seq`` carrying the sender's sightings ``seen``."""
    return b"".join(
        (bytes((KIND_ACK,)), encode_uint(seq), encode_uint(len(seen)), *(n.packed for n in seen))
    )


def decode_payload(
    data: bytes, *, limits: Limits = DEFAULT_LIMITS, codec: ChatterCodec | None = None
) -> GossipPayload | AckPayload:
    """Decode an envelope payload with ``codec`` (a new one by default). Raises only
    ``DecodeError``."""
    if not data:
        raise DecodeError("empty gossip payload")
    kind = data[0]
    if kind == KIND_ACK:
        seq, pos = decode_uint(data, 1)
        if seq >= 1 << 64:
            raise DecodeError("ACK seq above 64 bits", offset=1)
        count, pos = decode_uint(data, pos)
        if count > limits.max_list_length:
            raise DecodeError("ACK seen list above the limit", offset=pos, count=count)
        if len(data) - pos != 6 * count:
            raise DecodeError(
                "ACK seen list length disagrees with its count", offset=pos, count=count
            )
        seen = tuple(NetID.unpack(data[at : at + 6]) for at in range(pos, len(data), 6))
        return AckPayload(seq=seq, seen=seen)
    if kind != KIND_GOSSIP:
        raise DecodeError(f"unknown gossip payload kind 0x{kind:02x}", offset=0)
    hop, pos = decode_uint(data, 1)
    if not 1 <= hop <= MAX_HOP:
        raise DecodeError(f"hop count {hop} outside 1..{MAX_HOP}", offset=1)
    count, pos = decode_uint(data, pos)
    if count > limits.max_list_length or count > len(data) - pos:
        raise DecodeError("group count exceeds the limit or the input", offset=pos, count=count)
    sizes = []
    for _ in range(count):
        size, pos = decode_uint(data, pos)
        if size == 0:
            raise DecodeError("empty group in the grouping", offset=pos)
        sizes.append(size)
    gossip = (codec or ChatterCodec()).decode_gossip(memoryview(data)[pos:], limits=limits)
    if sizes and sum(sizes) != len(gossip.distribution):
        raise DecodeError(
            "group sizes do not add up to the distribution list",
            total=sum(sizes),
            listed=len(gossip.distribution),
        )
    return GossipPayload(hop=hop, groups=tuple(sizes), gossip=gossip)
