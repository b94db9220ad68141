"""Bounded raw-Snappy ("block" format) helpers.

Chatter compresses its gossip with ``snappy::Compress``: the raw block format, a varint32
length preamble followed by tagged literal/copy elements, with no stream identifier and
no CRC (chatter-as-coded.md §5). Any raw Snappy encoder interoperates, because Chatter's
checksum covers the *uncompressed* bytes; cramjam's encoder happens to reproduce
snappy 1.1.1's bytes on every golden vector.

The decompressor allocates what the preamble claims before it looks at the data
(Chatter's NIF allocates up to 4 GiB this way, §12.7). ``decompress`` therefore reads
the preamble itself and refuses a claim above ``max_size`` *before* handing anything to
the decompressor.
"""

from __future__ import annotations

import cramjam

from gossamer.errors import DecodeError

__all__ = ["compress", "compress_view", "decompress", "decompressed_length"]

# The preamble is a varint32: at most 5 bytes, value below 2**32.
_PREAMBLE_MAX_BYTES = 5
_U32_LIMIT = 1 << 32


def compress(data: bytes | bytearray | memoryview) -> bytes:
    """``data`` as one raw Snappy block."""
    return bytes(cramjam.snappy.compress_raw(data))


def compress_view(data: bytes | bytearray | memoryview) -> memoryview:
    """``data`` as one raw Snappy block, as a view of the compressor's own buffer.

    Saves ``compress``'s copy when the block is only read once (hashed, encrypted).
    """
    return memoryview(cramjam.snappy.compress_raw(data))


def decompressed_length(data: bytes | bytearray | memoryview, *, max_size: int) -> int:
    """The uncompressed length that the raw Snappy block ``data`` claims in its preamble.

    Raises ``DecodeError`` if the preamble is truncated, longer than a varint32, or
    claims more than ``max_size`` bytes. Nothing is allocated.
    """
    size = len(data)
    # Blocks below 16 KiB have a one- or two-byte preamble: read those without a loop.
    if size and data[0] < 0x80:
        value = data[0]
    elif size > 1 and data[1] < 0x80:
        value = (data[0] & 0x7F) | (data[1] << 7)
    else:
        value = 0
        for index in range(min(size, _PREAMBLE_MAX_BYTES)):
            byte = data[index]
            value |= (byte & 0x7F) << (7 * index)
            if byte < 0x80:
                break
        else:
            if size < _PREAMBLE_MAX_BYTES:
                raise DecodeError("truncated Snappy length preamble", offset=0)
            raise DecodeError("Snappy length preamble is longer than a varint32", offset=0)
    if value >= _U32_LIMIT:
        raise DecodeError("Snappy length preamble exceeds 32 bits", offset=0, claimed=value)
    if value > max_size:
        raise DecodeError(
            "Snappy block claims more than the decompression bound",
            offset=0,
            claimed=value,
            max_size=max_size,
        )
    return value


def decompress(data: bytes | bytearray | memoryview, *, max_size: int) -> bytes:
    """Decompress one raw Snappy block of at most ``max_size`` uncompressed bytes.

    The preamble is checked against ``max_size`` before decompressing. Raises only
    ``DecodeError`` on a corrupt or oversized block.
    """
    claimed = decompressed_length(data, max_size=max_size)
    try:
        out = bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise DecodeError(f"corrupt Snappy block: {exc}") from None
    if len(out) != claimed:  # the decompressor checks this too; never trust it blindly
        raise DecodeError("Snappy block length differs from its preamble", claimed=claimed)
    return out
