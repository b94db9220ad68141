"""Datagrams of the Exon transport, exactly as the Java original sends them.

Exon (HASLab's exactly-once messaging over UDP, in its "mobility" fork that A3M runs
on) moves each message in a 4-way exchange between a sender and a receiver node:
REQSLOTS (the sender asks for slots), SLOTS (the receiver grants them), TOKEN (one
message, in one granted slot) and ACK. Every datagram names both nodes by string id.
Big-endian throughout::

    +-----------+--------+-----------+--------+----------+---------------------+
    | i32 len   | src id | i32 len   | dst id | i32 type | body                |
    +-----------+--------+-----------+--------+----------+---------------------+

    REQSLOTS 1: i64 s (sender clock), i64 n (slots wanted), i64 l (lowest slot
                still in use), f64 rtt (the sender's RTT estimate, ms)
    SLOTS    2: i64 s (the request's s), i64 r (receiver clock), i64 n (granted)
    TOKEN    3: i64 s (slot), i64 r (receiver clock), payload (the rest)
    ACK      4: i64 r (receiver clock), i64 slot x k (k >= 1)

The original reads into a 1400-byte buffer, so a longer datagram arrives truncated
(a TOKEN's payload silently cut): :data:`MTU` bounds what :func:`encode` makes and
what :func:`decode` takes; :func:`max_payload` is the largest TOKEN payload between
two ids.

Decoding is stricter than the original, which reads what it can and ignores the
rest: a datagram is one exact message (no trailing bytes, whole ACK entries), ids
are 1 to :data:`MAX_ID` bytes of UTF-8, the type is known, clocks, slots and counts
are not negative and the RTT is a finite number >= 0. The original never sends
anything else (its clocks start at 0 and grow). Node ids are compared as strings;
the Java code writes its *own* id's length in UTF-16 units, so only ASCII ids
interoperate with it, which :func:`encode` does not enforce (gossamer peers
understand any UTF-8 id).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from gossamer.errors import DecodeError

__all__ = [
    "MAX_ID",
    "MTU",
    "Ack",
    "Body",
    "ExonDatagram",
    "ExonType",
    "ReqSlots",
    "Slots",
    "Token",
    "decode",
    "encode",
    "encode_token",
    "max_payload",
]

#: The original's datagram buffer: nothing longer is sent or read.
MTU = 1400
#: The longest node id in bytes (so that two ids and a TOKEN header leave room).
MAX_ID = 255

_I32 = struct.Struct(">i")
_REQSLOTS = struct.Struct(">qqqd")
_SLOTS = struct.Struct(">qqq")
_TOKEN = struct.Struct(">qq")
_I64 = struct.Struct(">q")
_I64_MAX = (1 << 63) - 1


class ExonType(IntEnum):
    """The message type, the i32 after the two ids."""

    REQSLOTS = 1
    SLOTS = 2
    TOKEN = 3
    ACK = 4


@dataclass(frozen=True, slots=True)
class ReqSlots:
    """The sender asks ``dst`` for ``n`` slots (``n == 0``: it closes its send record
    and the receiver may forget the slots below ``l``)."""

    s: int
    n: int
    l: int  # noqa: E741 (the original's name)
    rtt: float


@dataclass(frozen=True, slots=True)
class Slots:
    """The receiver grants ``n`` slots ending at ``s + n``, under its clock ``r``
    (``n == 0``: a probe, to learn whether the sender still needs its slots)."""

    s: int
    r: int
    n: int


@dataclass(frozen=True, slots=True)
class Token:
    """One message in slot ``s`` of the receive record with clock ``r``."""

    s: int
    r: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Ack:
    """The receiver took (or had taken) the TOKENs of these slots, under clock ``r``."""

    r: int
    slots: tuple[int, ...]


Body = ReqSlots | Slots | Token | Ack


@dataclass(frozen=True, slots=True)
class ExonDatagram:
    """One Exon datagram from node ``src`` to node ``dst``."""

    src: str
    dst: str
    body: Body


def _id_bytes(node_id: str, what: str) -> bytes:
    raw = node_id.encode()
    if not 1 <= len(raw) <= MAX_ID:
        raise ValueError(f"{what} id must be 1 to {MAX_ID} bytes of UTF-8, not {len(raw)}")
    return raw


@lru_cache(maxsize=1024)
def _head(src: str, dst: str, kind: ExonType) -> bytes:
    # Cached: a node sends to a few peers, each datagram starting with the same ids.
    a = _id_bytes(src, "source")
    b = _id_bytes(dst, "destination")
    return b"".join((_I32.pack(len(a)), a, _I32.pack(len(b)), b, _I32.pack(kind)))


def _check_counts(*values: int) -> None:
    for value in values:
        if not 0 <= value <= _I64_MAX:
            raise ValueError(f"clocks, slots and counts are 0 to 2**63-1, not {value}")


def max_payload(src: str, dst: str) -> int:
    """The largest TOKEN payload from ``src`` to ``dst`` that fits in :data:`MTU`."""
    return MTU - 12 - len(src.encode()) - len(dst.encode()) - _TOKEN.size


def encode_token(src: str, dst: str, s: int, r: int, payload: bytes) -> bytes:
    """A TOKEN datagram, without building its dataclasses (the hot path).
    Raises ``ValueError`` when the datagram would exceed :data:`MTU`."""
    _check_counts(s, r)
    out = _head(src, dst, ExonType.TOKEN) + _TOKEN.pack(s, r) + payload
    if len(out) > MTU:
        raise ValueError(f"TOKEN of {len(out)} bytes exceeds the {MTU}-byte MTU")
    return out


def encode(datagram: ExonDatagram) -> bytes:
    """The bytes of ``datagram``. Raises ``ValueError`` for a value the format cannot
    carry (an id out of 1..MAX_ID bytes, a negative or too large number, a non-finite
    or negative RTT, an ACK without slots, more than :data:`MTU` bytes)."""
    body = datagram.body
    if isinstance(body, Token):
        return encode_token(datagram.src, datagram.dst, body.s, body.r, body.payload)
    if isinstance(body, ReqSlots):
        _check_counts(body.s, body.n, body.l)
        if not (math.isfinite(body.rtt) and body.rtt >= 0):
            raise ValueError(f"RTT must be finite and >= 0, not {body.rtt}")
        tail = _REQSLOTS.pack(body.s, body.n, body.l, body.rtt)
        kind = ExonType.REQSLOTS
    elif isinstance(body, Slots):
        _check_counts(body.s, body.r, body.n)
        tail = _SLOTS.pack(body.s, body.r, body.n)
        kind = ExonType.SLOTS
    else:
        if not body.slots:
            raise ValueError("an ACK carries at least one slot")
        _check_counts(body.r, *body.slots)
        tail = struct.pack(f">{1 + len(body.slots)}q", body.r, *body.slots)
        kind = ExonType.ACK
    out = _head(datagram.src, datagram.dst, kind) + tail
    if len(out) > MTU:
        raise ValueError(f"datagram of {len(out)} bytes exceeds the {MTU}-byte MTU")
    return out


def _pull_id(data: bytes, offset: int, what: str) -> tuple[str, int]:
    if len(data) - offset < 4:
        raise DecodeError(f"truncated {what} id length", offset=offset)
    (length,) = _I32.unpack_from(data, offset)
    if not 1 <= length <= MAX_ID:
        raise DecodeError(f"{what} id length {length} is not 1 to {MAX_ID}", offset=offset)
    start = offset + 4
    if len(data) - start < length:
        raise DecodeError(f"truncated {what} id", offset=start)
    try:
        return data[start:start + length].decode(), start + length
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{what} id is not UTF-8", offset=start) from exc


def _counts(values: tuple[int, ...], offset: int) -> None:
    for value in values:
        if value < 0:
            raise DecodeError(f"negative clock, slot or count {value}", offset=offset)


def decode(data: bytes | bytearray | memoryview) -> ExonDatagram:
    """One Exon datagram. Raises only ``DecodeError`` (with the reason and the offset)."""
    data = data if isinstance(data, bytes) else bytes(data)
    if len(data) > MTU:
        raise DecodeError(f"datagram of {len(data)} bytes exceeds the {MTU}-byte MTU")
    src, offset = _pull_id(data, 0, "source")
    dst, offset = _pull_id(data, offset, "destination")
    if len(data) - offset < 4:
        raise DecodeError("truncated message type", offset=offset)
    (raw_type,) = _I32.unpack_from(data, offset)
    offset += 4
    rest = len(data) - offset
    body: Body
    if raw_type == ExonType.TOKEN:
        if rest < _TOKEN.size:
            raise DecodeError(f"TOKEN of {rest} bytes, shorter than 16", offset=offset)
        s, r = _TOKEN.unpack_from(data, offset)
        _counts((s, r), offset)
        body = Token(s, r, data[offset + _TOKEN.size:])
    elif raw_type == ExonType.REQSLOTS:
        if rest != _REQSLOTS.size:
            raise DecodeError(f"REQSLOTS of {rest} bytes, not 32", offset=offset)
        s, n, low, rtt = _REQSLOTS.unpack_from(data, offset)
        _counts((s, n, low), offset)
        if not (math.isfinite(rtt) and rtt >= 0):
            raise DecodeError(f"REQSLOTS RTT {rtt} is not a finite number >= 0", offset=offset + 24)
        body = ReqSlots(s, n, low, rtt)
    elif raw_type == ExonType.SLOTS:
        if rest != _SLOTS.size:
            raise DecodeError(f"SLOTS of {rest} bytes, not 24", offset=offset)
        s, r, n = _SLOTS.unpack_from(data, offset)
        _counts((s, r, n), offset)
        body = Slots(s, r, n)
    elif raw_type == ExonType.ACK:
        if rest < 16 or rest % 8:
            raise DecodeError(f"ACK of {rest} bytes: not 8 + 8 x k with k >= 1", offset=offset)
        values = struct.unpack_from(f">{rest // 8}q", data, offset)
        _counts(values, offset)
        body = Ack(values[0], tuple(values[1:]))
    else:
        raise DecodeError(f"unknown Exon message type {raw_type}", offset=offset - 4)
    return ExonDatagram(src, dst, body)
