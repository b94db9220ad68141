"""A command of the cluster's order cut to the size one multicast carries.

The total order multicasts payloads of at most ``gossamer.wire.isis.MAX_DATA_SIZE``
(512) bytes; a queue command (a Push with its payload) may be larger. ``split`` cuts an
encoded command into chunks that each fit, ``decode`` reads one back. A chunk is
``GOC1``, ``uint16 index``, ``uint16 total``, ``uint8 len(key)``, ``key``, then the
chunk's bytes. ``key`` names the command: the proposing incarnation and its own
number (``name#incarnation/n``), unique in the cluster. The receiver puts a command
together when its last missing chunk is delivered (``gossamer.daemon.queues``): every
member sees the chunks in the same order, so every member completes it at the same
position.

``decode`` raises ``DecodeError`` only.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from gossamer.errors import DecodeError
from gossamer.wire.isis import MAX_DATA_SIZE

__all__ = ["MAGIC", "MAX_CHUNKS", "Chunk", "decode", "split"]

MAGIC: Final = b"GOC1"
_HEAD: Final = struct.Struct(">HHB")
#: A command has at most this many chunks (about 30 MiB).
MAX_CHUNKS: Final = 65_535


class Chunk(NamedTuple):
    """Chunk ``number`` (from 0) of the ``total`` of command ``key``."""

    key: str
    number: int
    total: int
    data: bytes


def split(key: str, command: bytes, *, size: int = MAX_DATA_SIZE) -> list[bytes]:
    """``command`` as chunks of at most ``size`` bytes each (``ValueError`` when the key
    is longer than 255 bytes or the command needs more than ``MAX_CHUNKS``)."""
    raw_key = key.encode()
    if not 0 < len(raw_key) <= 255:
        raise ValueError("a chunk key is 1 to 255 bytes")
    room = size - len(MAGIC) - _HEAD.size - len(raw_key)
    if room < 1:
        raise ValueError("the chunk size leaves no room for data")
    pieces = [command[i:i + room] for i in range(0, len(command), room)] or [b""]
    if len(pieces) > MAX_CHUNKS:
        raise ValueError(f"a command of more than {MAX_CHUNKS} chunks")
    total = len(pieces)
    return [MAGIC + _HEAD.pack(i, total, len(raw_key)) + raw_key + piece
            for i, piece in enumerate(pieces)]


def decode(data: bytes) -> Chunk:
    """The chunk in ``data``; ``DecodeError`` naming what is wrong otherwise."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _HEAD.size:
        raise DecodeError("not an order chunk", size=len(data))
    index, total, key_length = _HEAD.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _HEAD.size
    if total == 0 or index >= total or len(data) < start + key_length or key_length == 0:
        raise DecodeError("malformed order chunk", index=index, total=total)
    try:
        key = data[start:start + key_length].decode()
    except UnicodeDecodeError as exc:
        raise DecodeError("order chunk key is not UTF-8") from exc
    return Chunk(key, index, total, data[start + key_length:])
