"""Wire format of the demo ping/pong protocol (``gossamer.proto.ping``).

::

    0      2      3      4              8      9
    +------+------+------+--------------+------+-----------------+
    | "GP" | ver  | type | seq (u32 BE) | len  | sender (UTF-8)  |
    +------+------+------+--------------+------+-----------------+

``ver`` is 1; ``type`` is 1 for PING and 2 for PONG; ``len`` is the length of
the sender's node id, 1 to 255 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer

__all__ = [
    "MAGIC",
    "MAX_SIZE",
    "PingMessage",
    "PingType",
    "decode",
    "encode",
    "pull_ping",
    "push_ping",
]

MAGIC = b"GP"
VERSION = 1
MAX_SIZE = 2 + 1 + 1 + 4 + 1 + 255
_HEAD = struct.Struct(">2sBBIB")


class PingType(IntEnum):
    PING = 1
    PONG = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class PingMessage:
    type: PingType
    seq: int
    sender: str


def push_ping(buf: bytearray, msg: PingMessage) -> None:
    """Append ``msg`` to ``buf``. Raises ``ValueError`` for a value that cannot be encoded."""
    sender = msg.sender.encode()
    if not 1 <= len(sender) <= 255:
        raise ValueError("sender id must be 1 to 255 bytes of UTF-8")
    if not 0 <= msg.seq < 1 << 32:
        raise ValueError("seq must fit in 32 bits")
    buf += _HEAD.pack(MAGIC, VERSION, msg.type, msg.seq, len(sender))
    buf += sender


def pull_ping(buf: Buffer) -> PingMessage:
    """Read one message from ``buf``. Raises only ``DecodeError``."""
    if buf.pull_bytes(2, "magic") != MAGIC:
        raise DecodeError("bad magic: not a gossamer ping datagram", offset=0)
    version = buf.pull_uint8("version")
    if version != VERSION:
        raise DecodeError(f"unsupported version {version}", offset=2)
    raw_type = buf.pull_uint8("type")
    try:
        kind = PingType(raw_type)
    except ValueError:
        raise DecodeError(f"unknown message type {raw_type}", offset=3) from None
    seq = buf.pull_uint32("seq")
    length = buf.pull_uint8("sender length")
    if length == 0:
        raise DecodeError("empty sender id", offset=8)
    try:
        sender = buf.pull_bytes(length, "sender").decode()
    except UnicodeDecodeError:
        raise DecodeError("sender id is not UTF-8", offset=9) from None
    return PingMessage(type=kind, seq=seq, sender=sender)


def encode(msg: PingMessage) -> bytes:
    buf = bytearray()
    push_ping(buf, msg)
    return bytes(buf)


def decode(data: bytes) -> PingMessage:
    """Decode exactly one datagram; trailing bytes are malformed."""
    if len(data) > MAX_SIZE:
        raise DecodeError(f"datagram of {len(data)} bytes exceeds {MAX_SIZE}")
    buf = Buffer(data)
    msg = pull_ping(buf)
    buf.expect_end("ping message")
    return msg
