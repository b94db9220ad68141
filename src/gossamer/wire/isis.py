"""Wire format of ISIS total-order multicast and its Chandy–Lamport snapshot markers.

Byte for byte the layout of the original (reference (a) "Wire formats"): structs of
big-endian ``uint32`` fields, ``type`` first, one message per UDP datagram::

    DataMessage    (type 1, 16 B)  type | sender | msg_id | data (4 bytes: the uint32)
    AckMessage     (type 2, 20 B)  type | sender | msg_id | proposed_seq | proposer
    SeqMessage     (type 3, 20 B)  type | sender | msg_id | final_seq | final_seq_proposer
    SeqAckMessage  (type 4, 16 B)  type | sender | msg_id | ack_sender
    MarkerMessage  (type 5,  8 B)  type | sender
    SnapshotMarker (type 6, 12 B)  type | sender | snapshot_id          (gossamer extension)
    DataMessage    (type 7, 16 B + n)  type | sender | msg_id | n | data (n bytes)
                                                                          (gossamer extension)

A ``DataMessage`` carries ``bytes``. The original's payload is one ``uint32``: its
4 big-endian bytes are exactly the field, so a 4-byte payload is encoded as type 1,
byte for byte the original's message, and any other length (0 to
:data:`MAX_DATA_SIZE`) as type 7, the same fields and a ``uint32`` length before the
bytes. The encoding is canonical (a 4-byte payload is never type 7), so decoding and
re-encoding give the same bytes. Only gossamer members on the sealed wire send type 7;
a core on the original wire refuses payloads that are not 4 bytes before they are sent.

Why :data:`MAX_DATA_SIZE` is 512: gossamer members batch several messages into one
datagram of at most ``IsisConfig.batch_bytes`` (1,400 bytes by default), which the
envelope then seals (55 bytes plus the member's name), so that a sealed datagram fits
an Ethernet payload (1,472 bytes) unfragmented. A 512-byte payload makes a 528-byte
message: two of the largest, with their Acks and Seqs, still share one datagram, and
smaller ones share it by the dozen.

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
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer

__all__ = [
    "MAX_DATA_SIZE",
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
    "decode_batch",
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
#: The largest payload of one multicast (module docstring: why 512).
MAX_DATA_SIZE = 512
#: The original's payload: one uint32, 4 bytes.
ORIGINAL_DATA_SIZE = 4


class IsisType(IntEnum):
    DATA = 1
    ACK = 2
    SEQ = 3
    SEQ_ACK = 4
    MARKER = 5
    SNAPSHOT_MARKER = 6
    DATA_BYTES = 7


@dataclass(frozen=True, slots=True, kw_only=True)
class DataMessage:
    """A multicast payload from ``sender``, its ``msg_id``-th (1-based per sender).

    ``data`` is the payload, 0 to :data:`MAX_DATA_SIZE` bytes; the original's uint32 is
    its 4 big-endian bytes (type 1 on the wire, any other length type 7)."""

    sender: int
    msg_id: int
    data: bytes


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
    IsisType.DATA: (struct.Struct(">II4s"), DataMessage, ("sender", "msg_id", "data")),
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
#: Type 7 after ``type``: sender, msg_id, the payload's length; then the payload.
_DATA_BYTES = struct.Struct(">III")
#: Bytes of a type 7 message before its payload.
DATA_HEADER_SIZE = 4 + _DATA_BYTES.size

#: The largest message (a Data of :data:`MAX_DATA_SIZE` bytes): a big enough receive buffer.
MAX_SIZE = DATA_HEADER_SIZE + MAX_DATA_SIZE


def _kind(raw: int, offset: int) -> IsisType:
    try:
        return IsisType(raw)
    except ValueError:
        raise DecodeError(f"unknown message type {raw}", offset=offset) from None


def _data_length(length: int, offset: int) -> int:
    if length > MAX_DATA_SIZE or length == ORIGINAL_DATA_SIZE:
        # 4 bytes are always type 1 (canonical encoding); more is over the limit.
        raise DecodeError(
            f"a type 7 payload of {length} bytes (0 to {MAX_DATA_SIZE}, never 4)",
            offset=offset,
            length=length,
        )
    return length


def message_size(prefix: bytes) -> int | None:
    """Total size of the message whose first bytes are ``prefix``.

    Returns ``None`` while too few bytes are known (4, or 16 for a type 7 Data, whose
    length field says the rest). Raises ``DecodeError`` for an unknown type or a payload
    length out of bounds. Lets a stream reader know how many bytes to wait for.
    """
    if len(prefix) < 4:
        return None
    kind = _kind(int(_U32.unpack_from(prefix)[0]), 0)
    if kind is IsisType.DATA_BYTES:
        if len(prefix) < DATA_HEADER_SIZE:
            return None
        return DATA_HEADER_SIZE + _data_length(int(_U32.unpack_from(prefix, 12)[0]), 12)
    return 4 + _LAYOUTS[kind][0].size


def push_isis(buf: bytearray, msg: IsisMessage) -> None:
    """Append ``msg`` to ``buf``. Raises ``ValueError`` if a field does not fit in 32 bits
    or a payload is longer than :data:`MAX_DATA_SIZE`."""
    if isinstance(msg, DataMessage) and len(msg.data) != ORIGINAL_DATA_SIZE:
        if len(msg.data) > MAX_DATA_SIZE:
            raise ValueError(f"a payload of {len(msg.data)} bytes is over {MAX_DATA_SIZE}")
        for name, value in (("sender", msg.sender), ("msg_id", msg.msg_id)):
            if not 0 <= value <= _U32_MAX:
                raise ValueError(f"{name}={value} does not fit in an unsigned 32-bit field")
        buf += _U32.pack(IsisType.DATA_BYTES)
        buf += _DATA_BYTES.pack(msg.sender, msg.msg_id, len(msg.data))
        buf += msg.data
        return
    kind = _TYPE_OF[type(msg)]
    layout, _, names = _LAYOUTS[kind]
    values = [getattr(msg, name) for name in names]
    for name, value in zip(names, values, strict=True):
        if isinstance(value, int) and not 0 <= value <= _U32_MAX:
            raise ValueError(f"{name}={value} does not fit in an unsigned 32-bit field")
    buf += _U32.pack(kind)
    buf += layout.pack(*values)


def pull_isis(buf: Buffer) -> IsisMessage:
    """Read one message from ``buf``, leaving any following bytes. Raises only ``DecodeError``."""
    start = buf.position
    kind = _kind(buf.pull_uint32("type"), start)
    if kind is IsisType.DATA_BYTES:
        sender = buf.pull_uint32("sender")
        msg_id = buf.pull_uint32("msg_id")
        length = _data_length(buf.pull_uint32("payload length"), start + 12)
        return DataMessage(sender=sender, msg_id=msg_id, data=buf.pull_bytes(length, "payload"))
    layout, cls, names = _LAYOUTS[kind]
    body = buf.pull_bytes(layout.size, f"{kind.name.lower()} message body")
    values = layout.unpack(body)
    return cls(**dict(zip(names, values, strict=True)))


def _push_encode(msg: IsisMessage) -> bytes:
    buf = bytearray()
    push_isis(buf, msg)
    return bytes(buf)


# -- the fast paths: one precompiled struct per message, type field included ------------
#
# ``encode`` and ``decode_batch`` run for every message a group member sends or receives,
# so they pack and unpack each message with one ``struct`` call and build no intermediate
# objects. Anything unusual (an out-of-range field, a bad type, a short or malformed
# batch) falls back to the general code above, which raises exactly its own errors: the
# fast paths change no output and no error.

_DATA_1 = struct.Struct(">III4s")
_ACK = struct.Struct(">IIIII")  # also SeqMessage's layout
_SEQ_ACK = struct.Struct(">IIII")


def _encode_data(msg: IsisMessage) -> bytes:
    assert isinstance(msg, DataMessage)
    if len(msg.data) != ORIGINAL_DATA_SIZE:
        return _push_encode(msg)
    return _DATA_1.pack(IsisType.DATA, msg.sender, msg.msg_id, msg.data)


def _encode_ack(msg: IsisMessage) -> bytes:
    assert isinstance(msg, AckMessage)
    return _ACK.pack(IsisType.ACK, msg.sender, msg.msg_id, msg.proposed_seq, msg.proposer)


def _encode_seq(msg: IsisMessage) -> bytes:
    assert isinstance(msg, SeqMessage)
    return _ACK.pack(IsisType.SEQ, msg.sender, msg.msg_id, msg.final_seq, msg.final_seq_proposer)


def _encode_seq_ack(msg: IsisMessage) -> bytes:
    assert isinstance(msg, SeqAckMessage)
    return _SEQ_ACK.pack(IsisType.SEQ_ACK, msg.sender, msg.msg_id, msg.ack_sender)


_ENCODERS: dict[type[IsisMessage], Callable[[IsisMessage], bytes]] = {
    DataMessage: _encode_data,
    AckMessage: _encode_ack,
    SeqMessage: _encode_seq,
    SeqAckMessage: _encode_seq_ack,
    MarkerMessage: _push_encode,
    SnapshotMarker: _push_encode,
}


def encode(msg: IsisMessage) -> bytes:
    """``msg``'s bytes; ``ValueError`` as :func:`push_isis` for a field that does not fit."""
    try:
        return _ENCODERS[type(msg)](msg)
    except (struct.error, KeyError):
        return _push_encode(msg)  # raises the general path's error


#: Per fixed-size type after the type field: its size and how its fields become a message.
_DECODERS: dict[int, tuple[int, struct.Struct, Callable[..., IsisMessage]]] = {
    IsisType.DATA: (
        16,
        struct.Struct(">II4s"),
        lambda s, m, d: DataMessage(sender=s, msg_id=m, data=d),
    ),
    IsisType.ACK: (
        20,
        struct.Struct(">IIII"),
        lambda s, m, p, q: AckMessage(sender=s, msg_id=m, proposed_seq=p, proposer=q),
    ),
    IsisType.SEQ: (
        20,
        struct.Struct(">IIII"),
        lambda s, m, f, p: SeqMessage(sender=s, msg_id=m, final_seq=f, final_seq_proposer=p),
    ),
    IsisType.SEQ_ACK: (
        16,
        struct.Struct(">III"),
        lambda s, m, a: SeqAckMessage(sender=s, msg_id=m, ack_sender=a),
    ),
}


def decode_batch(data: bytes) -> list[IsisMessage]:
    """Every message of a datagram holding one or more back to back (a batch), in order.

    All or nothing: ``DecodeError``, the one :func:`pull_isis` raises, when any message
    is malformed, truncated or of an unknown type, or the datagram is empty.
    """
    messages: list[IsisMessage] = []
    append = messages.append
    decoders = _DECODERS
    u32 = _U32.unpack_from
    end = len(data)
    pos = 0
    try:
        while pos < end:
            kind = u32(data, pos)[0]
            layout = decoders.get(kind)
            if layout is None:
                if kind != IsisType.DATA_BYTES:
                    break  # markers and errors: the general path
                sender, msg_id, length = _DATA_BYTES.unpack_from(data, pos + 4)
                start = pos + DATA_HEADER_SIZE
                pos = start + length
                if length > MAX_DATA_SIZE or length == ORIGINAL_DATA_SIZE or pos > end:
                    break
                append(DataMessage(sender=sender, msg_id=msg_id, data=bytes(data[start:pos])))
                continue
            size, body, make = layout
            append(make(*body.unpack_from(data, pos + 4)))
            pos += size
        else:
            if messages and pos == end:
                return messages
    except struct.error:
        pass
    return _pull_all(data)


def _pull_all(data: bytes) -> list[IsisMessage]:
    """:func:`decode_batch` by the general path (which raises what is wrong)."""
    buf = Buffer(data)
    messages = [pull_isis(buf)]
    while not buf.eof():
        messages.append(pull_isis(buf))
    return messages


def decode(data: bytes) -> IsisMessage:
    """Decode exactly one datagram; its size must be the exact size of its type.

    Reads at most one message whatever the input's length; the rest is reported as
    trailing bytes.
    """
    buf = Buffer(data)
    msg = pull_isis(buf)
    buf.expect_end(f"{type(msg).__name__}")
    return msg
