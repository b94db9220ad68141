"""Wire format of ISIS total-order multicast and its Chandy–Lamport snapshot markers.

Byte for byte the layout of the original (reference (a) "Wire formats"): fixed-size
structs of big-endian ``uint32`` fields, ``type`` first, one message per UDP datagram::

    DataMessage    (type 1, 16 B)  type | sender | msg_id | data
    AckMessage     (type 2, 20 B)  type | sender | msg_id | proposed_seq | proposer
    SeqMessage     (type 3, 20 B)  type | sender | msg_id | final_seq | final_seq_proposer
    SeqAckMessage  (type 4, 16 B)  type | sender | msg_id | ack_sender
    MarkerMessage  (type 5,  8 B)  type | sender
    SnapshotMarker (type 6, 12 B)  type | sender | snapshot_id          (gossamer extension)

``sender`` in Ack, Seq and SeqAck is the sender *of the data message* (the original
routes replies by the ids inside messages, not by the UDP source address). Ids are
the original's 1-based host indexes; the codec accepts any ``uint32`` and leaves
meaning (unknown ids, zero) to the core.

The original sends markers over TCP (one connection per marker) and allows one
snapshot per process lifetime, so its marker carries no snapshot id. gossamer keeps
type 5 for compatibility and adds type 6, same style, carrying a ``snapshot_id`` so
that several snapshots (possibly started by different initiators) can be told apart.

Because every type has a fixed size and ``type`` comes first, a byte stream of
messages frames itself: :func:`message_size` gives the size from the first four
bytes, and :func:`pull_isis` reads one message from a buffer that holds several.

Where the original ``CHECK``-aborts on a datagram of the wrong size or type
(reference (a), bug 7), gossamer raises ``DecodeError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer

__all__ = [
    "MAX_SIZE",
    "MULTICAST_PORT",
    "SNAPSHOT_PORT",
    "AckMessage",
    "DataMessage",
    "IsisMessage",
    "IsisType",
    "MarkerMessage",
    "SeqAckMessage",
    "SeqMessage",
    "SnapshotMarker",
    "decode",
    "encode",
    "message_size",
    "pull_isis",
    "push_isis",
]

#: UDP port of all multicast traffic in the original (reference (a) "Ports").
MULTICAST_PORT = 10001
#: TCP port of the original's snapshot markers.
SNAPSHOT_PORT = 10002

_U32_MAX = (1 << 32) - 1


class IsisType(IntEnum):
    DATA = 1
    ACK = 2
    SEQ = 3
    SEQ_ACK = 4
    MARKER = 5
    SNAPSHOT_MARKER = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class DataMessage:
    """A multicast payload from ``sender``, its ``msg_id``-th (1-based per sender)."""

    sender: int
    msg_id: int
    data: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AckMessage:
    """``proposer`` proposes ``proposed_seq`` for data message (``sender``, ``msg_id``)."""

    sender: int
    msg_id: int
    proposed_seq: int
    proposer: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqMessage:
    """The agreed order of data message (``sender``, ``msg_id``)."""

    sender: int
    msg_id: int
    final_seq: int
    final_seq_proposer: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqAckMessage:
    """``ack_sender`` received the SeqMessage for (``sender``, ``msg_id``)."""

    sender: int
    msg_id: int
    ack_sender: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkerMessage:
    """Chandy–Lamport marker of the original (one snapshot per lifetime, no id)."""

    sender: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotMarker:
    """gossamer's marker: names the snapshot it belongs to."""

    sender: int
    snapshot_id: int


IsisMessage = DataMessage | AckMessage | SeqMessage | SeqAckMessage | MarkerMessage | SnapshotMarker

# type -> (struct of the fields after ``type``, dataclass, field names in wire order)
_LAYOUTS: dict[IsisType, tuple[struct.Struct, type[IsisMessage], tuple[str, ...]]] = {
    IsisType.DATA: (struct.Struct(">III"), DataMessage, ("sender", "msg_id", "data")),
    IsisType.ACK: (
        struct.Struct(">IIII"),
        AckMessage,
        ("sender", "msg_id", "proposed_seq", "proposer"),
    ),
    IsisType.SEQ: (
        struct.Struct(">IIII"),
        SeqMessage,
        ("sender", "msg_id", "final_seq", "final_seq_proposer"),
    ),
    IsisType.SEQ_ACK: (struct.Struct(">III"), SeqAckMessage, ("sender", "msg_id", "ack_sender")),
    IsisType.MARKER: (struct.Struct(">I"), MarkerMessage, ("sender",)),
    IsisType.SNAPSHOT_MARKER: (struct.Struct(">II"), SnapshotMarker, ("sender", "snapshot_id")),
}
_TYPE_OF: dict[type[IsisMessage], IsisType] = {cls: kind for kind, (_, cls, _) in _LAYOUTS.items()}
_U32 = struct.Struct(">I")

#: The largest message (Ack and Seq, 20 bytes): a big enough receive buffer.
MAX_SIZE = 4 + max(layout.size for layout, _, _ in _LAYOUTS.values())


def message_size(prefix: bytes) -> int | None:
    """Total size of the message whose first bytes are ``prefix``.

    Returns ``None`` while fewer than 4 bytes are known. Raises ``DecodeError`` for an
    unknown type. Lets a stream reader know how many bytes to wait for.
    """
    if len(prefix) < 4:
        return None
    raw = int(_U32.unpack_from(prefix)[0])
    try:
        kind = IsisType(raw)
    except ValueError:
        raise DecodeError(f"unknown message type {raw}", offset=0) from None
    return 4 + _LAYOUTS[kind][0].size


def push_isis(buf: bytearray, msg: IsisMessage) -> None:
    """Append ``msg`` to ``buf``. Raises ``ValueError`` if a field does not fit in 32 bits."""
    kind = _TYPE_OF[type(msg)]
    layout, _, names = _LAYOUTS[kind]
    values = [getattr(msg, name) for name in names]
    for name, value in zip(names, values, strict=True):
        if not 0 <= value <= _U32_MAX:
            raise ValueError(f"{name}={value} does not fit in an unsigned 32-bit field")
    buf += _U32.pack(kind)
    buf += layout.pack(*values)


def pull_isis(buf: Buffer) -> IsisMessage:
    """Read one message from ``buf``, leaving any following bytes. Raises only ``DecodeError``."""
    start = buf.position
    raw = buf.pull_uint32("type")
    try:
        kind = IsisType(raw)
    except ValueError:
        raise DecodeError(f"unknown message type {raw}", offset=start) from None
    layout, cls, names = _LAYOUTS[kind]
    body = buf.pull_bytes(layout.size, f"{kind.name.lower()} message body")
    values = layout.unpack(body)
    return cls(**dict(zip(names, values, strict=True)))


def encode(msg: IsisMessage) -> bytes:
    buf = bytearray()
    push_isis(buf, msg)
    return bytes(buf)


def decode(data: bytes) -> IsisMessage:
    """Decode exactly one datagram; its size must be the exact size of its type.

    Reads at most :data:`MAX_SIZE` bytes whatever the input's length; the rest is
    reported as trailing bytes.
    """
    buf = Buffer(data)
    msg = pull_isis(buf)
    buf.expect_end(f"{type(msg).__name__}")
    return msg
