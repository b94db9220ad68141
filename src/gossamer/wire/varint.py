"""Chatter's VarInt: unsigned little-endian base-128 (protobuf-style LEB128).

Encoding (chatter-as-coded.md §2, ``Serializer.encode_uint``): while ``v >= 128`` emit
``0x80 | (v % 128)`` and set ``v //= 128``; then emit ``v`` with the top bit clear. The
spec's prose says "``> 128``", which leaves 128 undefined; the code uses ``>= 128``, so
``128 -> 80 01``. The encoder always emits the minimal form and has no width limit.

Decoding accepts non-minimal forms (``80 00`` is 0), because Chatter does and a peer may
send them, but unlike Chatter it is **bounded**: at most ``max_bytes`` bytes (10 by
default, enough for any 64-bit value), and input that ends on a byte with the
continuation bit set is a ``DecodeError`` (Chatter returns a bare integer there and
crashes its caller, §2).
"""

from __future__ import annotations

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer

__all__ = ["MAX_VARINT_BYTES", "decode_uint", "encode_uint", "pull_uint", "push_uint"]

#: Default bound on the length of one VarInt: 10 bytes hold any value below 2**70,
#: which covers every 64-bit value.
MAX_VARINT_BYTES = 10

# One-byte encodings, shared so that the common case allocates nothing.
_SMALL: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))


def encode_uint(n: int) -> bytes:
    """The minimal VarInt encoding of ``n``. Raises ``ValueError`` if ``n`` is negative."""
    if 0 <= n < 128:
        return _SMALL[n]
    if 128 <= n < 16384:  # sizes of most messages and gossips: two bytes, no loop
        return bytes((0x80 | (n & 0x7F), n >> 7))
    if n < 0:
        raise ValueError(f"a VarInt cannot encode a negative value ({n})")
    out = bytearray()
    while n >= 128:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    out.append(n)
    return bytes(out)


def push_uint(buf: bytearray, n: int) -> None:
    """Append the minimal VarInt encoding of ``n`` to ``buf``."""
    buf += encode_uint(n)


def decode_uint(
    data: bytes | bytearray | memoryview, offset: int = 0, *, max_bytes: int = MAX_VARINT_BYTES
) -> tuple[int, int]:
    """Read one VarInt from ``data`` at ``offset``; return ``(value, next offset)``.

    Bytes after the VarInt are not looked at. Raises only ``DecodeError``: when the
    input ends inside the VarInt (including empty input), when the VarInt is longer
    than ``max_bytes``, or when ``offset`` is outside ``data``.
    """
    end = len(data)
    if not 0 <= offset <= end:
        raise DecodeError("VarInt offset outside the data", offset=offset)
    value = 0
    shift = 0
    pos = offset
    limit = min(end, offset + max_bytes)
    while pos < limit:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    if pos - offset >= max_bytes:
        raise DecodeError(
            f"VarInt longer than {max_bytes} bytes", offset=offset, max_bytes=max_bytes
        )
    raise DecodeError("truncated VarInt: input ends on a continuation byte", offset=offset)


def pull_uint(buf: Buffer, what: str = "VarInt", *, max_bytes: int = MAX_VARINT_BYTES) -> int:
    """Read one VarInt from ``buf`` (see ``decode_uint``). Raises only ``DecodeError``."""
    start = buf.position
    value = 0
    for index in range(max_bytes):
        if buf.eof():
            raise DecodeError(f"truncated {what}: input ends on a continuation byte", offset=start)
        byte = buf.pull_uint8(what)
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return value
    raise DecodeError(f"{what} longer than {max_bytes} bytes", offset=start, max_bytes=max_bytes)
