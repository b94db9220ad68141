"""Messages on a TCP stream, whatever way the reads cut them.

Chatter's TCP receiver handed each ``recv`` result to the decoder as exactly one message, so
two messages coalesced in one read, or one split over two reads, were rejected and the
connection closed (chatter-as-coded.md §3, §7). A stream has no message boundaries; these
decoders reassemble them.

- Envelope mode: each envelope is one frame of ``gossamer.wire.framing`` (u32 big-endian
  length, then the bytes).
- original-wire mode: Chatter's own header already delimits a message (``0xFF``, then a
  VarInt with the length of what follows, §3), so no prefix is added and the bytes sent are
  exactly Chatter's; ``ChatterStreamDecoder`` reads that header. Each message is still
  written by itself (one write per message), as a Chatter receiver needs (§13).

Both decoders are bounded by ``max_size`` (checked as soon as the length is known, before
buffering the body) and raise only ``DecodeError``. After an error the stream has lost its
framing: every later call raises, and the connection should be closed.
"""

from __future__ import annotations

from gossamer.errors import DecodeError
from gossamer.wire.chatter import SOM
from gossamer.wire.framing import FrameDecoder, encode_frame

__all__ = ["ChatterStreamDecoder", "StreamDecoder", "frame_message", "stream_decoder"]

# A length VarInt of 5 bytes describes up to 2**35 - 1: more than any bound we accept.
_MAX_LENGTH_BYTES = 5


class ChatterStreamDecoder(FrameDecoder):
    """Reassembles Chatter wire messages (``0xFF | VarInt n | n bytes``) from stream chunks.

    ``feed(chunk)`` returns every complete message (header included, ready for
    ``gossamer.wire.chatter.decode_message``) that the chunk completes, in order. The
    bound, the buffer, ``failed`` and ``buffered`` are ``FrameDecoder``'s; only the header
    differs.
    """

    __slots__ = ()

    def _fail(self, reason: str, offset: int, **fields: object) -> DecodeError:
        self._failed = DecodeError(reason, offset=self.consumed + offset, **fields)
        self._buffer.clear()
        return self._failed

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``chunk``; return each message it completes. Raises only ``DecodeError``."""
        if self._failed is not None:
            raise DecodeError(
                "the stream lost its framing at an earlier error", offset=self._failed.offset
            )
        buffer = self._buffer
        buffer += chunk
        out: list[bytes] = []
        pos = 0
        end = len(buffer)
        while pos < end:
            if buffer[pos] != SOM:
                raise self._fail(f"expected 0xff at a message start, got 0x{buffer[pos]:02x}", pos)
            size = 0
            shift = 0
            at = pos + 1
            while True:
                if at >= end:
                    size = -1  # the length VarInt is not complete yet
                    break
                byte = buffer[at]
                at += 1
                size |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if at - pos - 1 >= _MAX_LENGTH_BYTES:
                    raise self._fail("message length VarInt too long", pos + 1)
            if size < 0:
                break
            if at - pos + size > self.max_size:
                raise self._fail(
                    f"message of {at - pos + size} bytes exceeds the bound {self.max_size}",
                    pos,
                    max_size=self.max_size,
                )
            if at + size > end:
                break
            out.append(bytes(buffer[pos : at + size]))
            pos = at + size
        if pos:
            del buffer[:pos]
            self.consumed += pos
        return out


#: Either decoder (a ``ChatterStreamDecoder`` is a ``FrameDecoder``).
StreamDecoder = FrameDecoder


def stream_decoder(*, chatter: bool, max_size: int) -> StreamDecoder:
    """A fresh decoder for one direction of one connection."""
    if chatter:
        return ChatterStreamDecoder(max_size=max_size)
    return FrameDecoder(max_size=max_size)


def frame_message(message: bytes, *, chatter: bool, max_size: int) -> bytes:
    """The bytes that carry ``message`` on a stream (a Chatter message carries itself)."""
    if chatter:
        return message
    return encode_frame(message, max_size=max_size)
