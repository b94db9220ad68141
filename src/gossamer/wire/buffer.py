"""A bounded read cursor over bytes, the base of every ``pull_x`` decoder.

Every read is bounds-checked and raises ``DecodeError`` with the offset, so a
decoder built on ``Buffer`` cannot raise ``IndexError`` or ``struct.error`` on
short input, and cannot allocate more than the input it was given.
"""

from __future__ import annotations

import struct

from gossamer.errors import DecodeError

__all__ = ["Buffer"]

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class Buffer:
    """Reads big-endian integers and byte strings from ``data``, left to right."""

    __slots__ = ("_data", "_end", "position")

    def __init__(self, data: bytes | bytearray | memoryview, *, offset: int = 0) -> None:
        self._data = bytes(data) if not isinstance(data, bytes) else data
        self._end = len(self._data)
        if not 0 <= offset <= self._end:
            raise DecodeError("offset outside the data", offset=offset)
        self.position = offset

    @property
    def remaining(self) -> int:
        """Bytes not yet read."""
        return self._end - self.position

    def eof(self) -> bool:
        return self.position >= self._end

    def _take(self, n: int, what: str) -> int:
        start = self.position
        if n < 0 or start + n > self._end:
            raise DecodeError(
                f"truncated: {what} needs {n} bytes, {self._end - start} left", offset=start
            )
        self.position = start + n
        return start

    def pull_bytes(self, n: int, what: str = "bytes") -> bytes:
        start = self._take(n, what)
        return self._data[start : start + n]

    def pull_rest(self) -> bytes:
        start = self.position
        self.position = self._end
        return self._data[start:]

    def pull_uint8(self, what: str = "uint8") -> int:
        return self._data[self._take(1, what)]

    def pull_uint16(self, what: str = "uint16") -> int:
        return int(_U16.unpack_from(self._data, self._take(2, what))[0])

    def pull_uint32(self, what: str = "uint32") -> int:
        return int(_U32.unpack_from(self._data, self._take(4, what))[0])

    def pull_uint64(self, what: str = "uint64") -> int:
        return int(_U64.unpack_from(self._data, self._take(8, what))[0])

    def expect_end(self, what: str = "message") -> None:
        """Raise unless every byte was consumed (trailing garbage is malformed)."""
        if self.position != self._end:
            raise DecodeError(
                f"{self._end - self.position} trailing bytes after {what}", offset=self.position
            )
