"""How Chatter names things: nodes (:class:`NetID`), broadcasts (:class:`BroadcastID`)
and payload types (:func:`type_tag`), with their checks (chatter-as-coded.md §6)."""

from __future__ import annotations

from dataclasses import dataclass, field

import xxhash

from gossamer.errors import DecodeError

__all__ = [
    "NETID_SIZE",
    "U32_LIMIT",
    "U64_LIMIT",
    "BroadcastID",
    "NetID",
    "check_uint",
    "netid_from_packed",
    "type_tag",
]

U32_LIMIT = 1 << 32
U64_LIMIT = 1 << 64
#: Bytes of a NetID on the wire: four octets, then the big-endian port.
NETID_SIZE = 6


def _pack_ipv4(host: str) -> bytes:
    """The four octets of a canonical dotted IPv4 address; ``ValueError`` otherwise."""
    if not isinstance(host, str):
        raise TypeError(f"NetID host must be a str, not {type(host).__name__}")
    parts = host.split(".")
    if len(parts) != 4:
        raise ValueError(f"NetID host {host!r} is not a dotted IPv4 address")
    octets = bytearray()
    for part in parts:
        # Canonical form only (no leading zeros, no sign, ASCII digits), so that equal
        # addresses compare equal as NetIDs.
        if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
            raise ValueError(f"NetID host {host!r} is not a canonical dotted IPv4 address")
        value = int(part)
        if value > 255:
            raise ValueError(f"NetID host {host!r} is not an IPv4 address (octet above 255)")
        octets.append(value)
    return bytes(octets)


def check_uint(name: str, value: object, limit: int) -> int:
    """``value`` if it is an int in ``[0, limit)``; ``TypeError``/``ValueError`` otherwise."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 0 <= value < limit:
        raise ValueError(f"{name} must be in [0, {limit}), got {value}")
    return value


@dataclass(frozen=True, slots=True)
class NetID:
    """An IPv4 transport address as Chatter names a node: dotted ``host`` and ``port``.

    On the wire it is 6 bytes, the four octets then the big-endian port (§6.1);
    ``packed`` holds them. Raises ``ValueError``/``TypeError`` for a host that is not a
    canonical dotted IPv4 address or a port outside 0-65535 (IPv6 is not in the format).
    """

    host: str
    port: int
    packed: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        octets = _pack_ipv4(self.host)
        port = check_uint("NetID port", self.port, 1 << 16)
        object.__setattr__(self, "packed", octets + port.to_bytes(2, "big"))

    @classmethod
    def parse(cls, text: str) -> NetID:
        """``NetID.parse("10.0.0.1:29999")``: the ``host:port`` form used in the vectors."""
        host, sep, port = text.rpartition(":")
        if not sep or not (port.isascii() and port.isdigit()):
            raise ValueError(f"{text!r} is not host:port")
        return cls(host, int(port))

    @classmethod
    def unpack(cls, packed: bytes) -> NetID:
        """The NetID of a 6-byte wire entry. Raises ``DecodeError`` on a wrong length."""
        if len(packed) != NETID_SIZE:
            raise DecodeError(f"a NetID entry is 6 bytes, got {len(packed)}")
        return netid_from_packed(bytes(packed))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def netid_from_packed(packed: bytes) -> NetID:
    """Build a NetID from 6 trusted bytes without re-validating (every value is valid)."""
    nid = object.__new__(NetID)
    object.__setattr__(nid, "host", "%d.%d.%d.%d" % tuple(packed[:4]))  # noqa: UP031
    object.__setattr__(nid, "port", (packed[4] << 8) | packed[5])
    object.__setattr__(nid, "packed", packed)
    return nid


@dataclass(frozen=True, slots=True)
class BroadcastID:
    """A broadcast's origin and its sequence number (§6.2); seqno is 0 to 2**64-1.

    Chatter's seqno is an unbounded VarInt; gossamer bounds it to 64 bits.
    """

    origin: NetID
    seqno: int

    def __post_init__(self) -> None:
        if not isinstance(self.origin, NetID):
            raise TypeError(f"BroadcastID origin must be a NetID, not {type(self.origin).__name__}")
        check_uint("BroadcastID seqno", self.seqno, U64_LIMIT)


def type_tag(name: str) -> int:
    """The payload type tag of ``name``: XXH32, seed 0, of its UTF-8 bytes (§6.3).

    Chatter hashes ``Atom.to_string`` of the payload's first element: ``"hello"`` for
    ``:hello`` and ``"Elixir.Foo"`` for a module atom ``Foo``.
    """
    return int(xxhash.xxh32_intdigest(name.encode()))
