"""Length-prefixed frames for byte streams (TCP).

::

    +-------------------+---------------------+
    | length (u32 BE)   | payload (length B)  |
    +-------------------+---------------------+

A stream has no message boundaries: one read may hold several frames
(coalesced) or part of one (split). ``FrameDecoder`` accepts chunks of any
size and returns each complete payload once. Every decoder is bounded by a
maximum frame size given by its caller: a length above it is malformed and is
rejected as soon as its 4-byte header arrives, before any payload is buffered,
so a peer cannot make a receiver allocate more than ``max_size`` plus one read.

``FrameDecoder`` is the one place in ``wire`` that keeps state between calls:
that state is only the bytes of the unfinished frame, which a stream codec
cannot avoid. After a ``DecodeError`` the stream has lost its framing; the
decoder refuses every later chunk, and the connection should be closed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer

__all__ = [
    "DEFAULT_MAX_FRAME",
    "HEADER_SIZE",
    "MAX_FRAME_LIMIT",
    "FrameDecoder",
    "encode_frame",
    "encode_frames",
    "pull_frame",
    "push_frame",
]

_HEADER = struct.Struct(">I")

#: Bytes of the length prefix.
HEADER_SIZE = _HEADER.size

#: The largest payload the 32-bit length can describe.
MAX_FRAME_LIMIT = (1 << 32) - 1

#: A generous default bound (1 MiB); protocols pass their own, usually far smaller.
DEFAULT_MAX_FRAME = 1 << 20


def _check_bound(max_size: int) -> None:
    if not 0 <= max_size <= MAX_FRAME_LIMIT:
        raise ValueError(f"max_size must be 0 to {MAX_FRAME_LIMIT}")


def push_frame(buf: bytearray, payload: bytes, *, max_size: int = DEFAULT_MAX_FRAME) -> None:
    """Append ``payload`` as one frame to ``buf``.

    Raises ``ValueError`` when the payload is larger than ``max_size``: sending
    a frame the peer's decoder must reject is the local caller's mistake.
    """
    _check_bound(max_size)
    if len(payload) > max_size:
        raise ValueError(f"payload of {len(payload)} bytes exceeds the frame bound {max_size}")
    buf += _HEADER.pack(len(payload))
    buf += payload


def encode_frame(payload: bytes, *, max_size: int = DEFAULT_MAX_FRAME) -> bytes:
    """One frame as bytes."""
    buf = bytearray()
    push_frame(buf, payload, max_size=max_size)
    return bytes(buf)


def encode_frames(payloads: Iterable[bytes], *, max_size: int = DEFAULT_MAX_FRAME) -> bytes:
    """Several frames joined, ready for one ``write`` (one system call for many messages)."""
    buf = bytearray()
    for payload in payloads:
        push_frame(buf, payload, max_size=max_size)
    return bytes(buf)


def pull_frame(buf: Buffer, *, max_size: int = DEFAULT_MAX_FRAME) -> bytes:
    """Read one complete frame from ``buf``. Raises only ``DecodeError``.

    For framed data that is already whole (a file, a test vector); streams use
    ``FrameDecoder``.
    """
    start = buf.position
    length = buf.pull_uint32("frame length")
    if length > max_size:
        raise DecodeError(f"frame of {length} bytes exceeds the bound {max_size}",
                          offset=start, length=length, max_size=max_size)
    return buf.pull_bytes(length, "frame payload")


class FrameDecoder:
    """Reassembles frames from stream chunks of any size.

    ``feed(chunk)`` returns the payloads completed by that chunk, in order.
    ``close()`` checks that the stream ended between frames. Raises only
    ``DecodeError``: for a length above ``max_size`` (at the frame's header,
    before buffering its payload), for a truncated last frame at ``close()``,
    and for any call after an error. When one chunk holds complete frames and
    then a bad header, ``feed`` returns those frames and sets ``failed``; the
    next ``feed`` or ``close`` raises. A caller that wants to stop at once
    checks ``failed`` after each ``feed``.
    """

    __slots__ = ("_buffer", "_failed", "consumed", "max_size")

    def __init__(self, *, max_size: int = DEFAULT_MAX_FRAME) -> None:
        _check_bound(max_size)
        self.max_size = max_size
        #: Bytes of the stream consumed into complete frames so far (for error offsets).
        self.consumed = 0
        self._buffer = bytearray()
        self._failed: DecodeError | None = None

    @property
    def failed(self) -> DecodeError | None:
        """The error that broke the framing, or ``None`` while the stream is sound."""
        return self._failed

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buffer)

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``chunk``; return every payload it completes."""
        if self._failed is not None:
            raise DecodeError("the stream lost its framing at an earlier error",
                              offset=self._failed.offset)
        buffer = self._buffer
        buffer += chunk
        frames: list[bytes] = []
        position = 0
        end = len(buffer)
        # Frames are cut from one buffer by index and the consumed prefix is
        # deleted once per chunk, so a chunk holding many small frames costs one
        # copy per frame, not one per frame per remaining byte.
        while end - position >= HEADER_SIZE:
            (length,) = _HEADER.unpack_from(buffer, position)
            if length > self.max_size:
                self._failed = DecodeError(
                    f"frame of {length} bytes exceeds the bound {self.max_size}",
                    offset=self.consumed + position, length=length, max_size=self.max_size,
                )
                self.consumed += position
                del buffer[:]
                if frames:
                    # The frames before the bad header are good and in order: hand
                    # them out; the error is raised by the next call (see ``failed``).
                    return frames
                raise self._failed
            stop = position + HEADER_SIZE + length
            if stop > end:
                break
            frames.append(bytes(buffer[position + HEADER_SIZE : stop]))
            position = stop
        if position:
            del buffer[:position]
            self.consumed += position
        return frames

    def close(self) -> None:
        """The stream ended: raise ``DecodeError`` if it ended inside a frame."""
        if self._failed is not None:
            raise DecodeError("the stream lost its framing at an earlier error",
                              offset=self._failed.offset)
        if self._buffer:
            self._failed = DecodeError(
                f"stream ended inside a frame ({len(self._buffer)} bytes of it received)",
                offset=self.consumed,
            )
            raise self._failed
