"""Wire format of Prototari, the pelotari discovery and heartbeat protocol.

Every Prototari datagram is either one of six fixed ASCII control strings or an
application data datagram. Control strings are compared as whole datagrams,
exactly as the original Go library does (``string(buf[:n]) == "pelotari?"``,
reference (b) "Constants and defaults"): no terminator, no trailing newline,
case-sensitive. Anything else is not a control message.

====================  ==================  =================================  ============
kind                  bytes               meaning (spec section)             port
====================  ==================  =================================  ============
``DISCOVER``          ``pelotari?`` (9)   broadcast "anyone there?" (1a)     21451 (bcast)
``RESPOND``           ``aupa!`` (5)       reply to a broadcast (1b)          21450
``CONFIRM``           ``dale!`` (5)       handshake confirmation (1c)        21450
``HEARTBEAT``         ``hor?`` (4)        "there?" (2)                       21450
``HEARTBEAT_REPLY``   ``hemen nago!`` (11) "I'm here" (2)                    21450
``DISCONNECT``        ``agur!`` (5)       leaving (disconnect, spec only)    21450
====================  ==================  =================================  ============

The spec names a "Delivery" part but defines no datagram format for it (and the
original code never implemented it, reference (b)). gossamer defines a minimal
one that cannot be confused with a control string, because every control string
is printable ASCII and a data datagram starts with a NUL byte::

    0      1      2
    +------+------+----------------------------+
    | 0x00 | ver  | payload (0..max bytes)     |
    +------+------+----------------------------+

``ver`` is 1. The payload is opaque and its length is the rest of the datagram
(UDP already delimits it). Like the rest of Prototari, delivery is best effort:
no sequence number, no acknowledgement.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer

__all__ = [
    "BROADCAST_PORT",
    "DATA_MAGIC",
    "DATA_VERSION",
    "MAX_DATAGRAM",
    "UNICAST_PORT",
    "ControlKind",
    "ControlMessage",
    "DataMessage",
    "PrototariMessage",
    "decode",
    "encode",
    "pull_prototari",
    "push_prototari",
]

#: UDP port that receives the ``pelotari?`` broadcasts (spec "The protocol uses two ports").
BROADCAST_PORT = 21451
#: UDP port for every unicast message: responses, handshake, heartbeat, data, disconnect.
UNICAST_PORT = 21450

#: First byte of a data datagram; never the first byte of a control string.
DATA_MAGIC = 0x00
DATA_VERSION = 1
#: Largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP), the default datagram bound.
MAX_DATAGRAM = 65507
_DATA_HEADER = bytes((DATA_MAGIC, DATA_VERSION))


class ControlKind(Enum):
    """The six control strings; the value is the exact datagram."""

    DISCOVER = b"pelotari?"
    RESPOND = b"aupa!"
    CONFIRM = b"dale!"
    HEARTBEAT = b"hor?"
    HEARTBEAT_REPLY = b"hemen nago!"
    DISCONNECT = b"agur!"


_BY_BYTES: dict[bytes, ControlKind] = {kind.value: kind for kind in ControlKind}


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlMessage:
    """One of the fixed control strings."""

    kind: ControlKind


@dataclass(frozen=True, slots=True, kw_only=True)
class DataMessage:
    """An application datagram between registered peers (spec part "Delivery")."""

    payload: bytes


PrototariMessage = ControlMessage | DataMessage


def push_prototari(buf: bytearray, msg: PrototariMessage, *, max_size: int = MAX_DATAGRAM) -> None:
    """Append ``msg`` to ``buf``.

    A Prototari message is a whole datagram: ``buf`` should be empty, and nothing may
    follow. Raises ``ValueError`` when a data datagram would exceed ``max_size``.
    """
    if isinstance(msg, ControlMessage):
        buf += msg.kind.value
        return
    if len(_DATA_HEADER) + len(msg.payload) > max_size:
        raise ValueError(f"data datagram of {len(msg.payload) + 2} bytes exceeds {max_size}")
    buf += _DATA_HEADER
    buf += msg.payload


def pull_prototari(buf: Buffer, *, max_size: int = MAX_DATAGRAM) -> PrototariMessage:
    """Read the rest of ``buf`` as one Prototari datagram. Raises only ``DecodeError``."""
    start = buf.position
    if buf.remaining > max_size:
        raise DecodeError(f"datagram of {buf.remaining} bytes exceeds {max_size}", offset=start)
    if buf.remaining == 0:
        raise DecodeError("empty datagram", offset=start)
    data = buf.pull_rest()
    if data[0] == DATA_MAGIC:
        if len(data) < len(_DATA_HEADER):
            raise DecodeError("truncated: data datagram needs a version byte", offset=start + 1)
        if data[1] != DATA_VERSION:
            raise DecodeError(f"unsupported data datagram version {data[1]}", offset=start + 1)
        return DataMessage(payload=data[2:])
    kind = _BY_BYTES.get(data)
    if kind is None:
        # The Go reference silently ignores such datagrams; saying why is the caller's
        # choice, so the codec reports it and the core may drop it.
        raise DecodeError("not a prototari control string or data datagram", offset=start)
    return ControlMessage(kind=kind)


def encode(msg: PrototariMessage, *, max_size: int = MAX_DATAGRAM) -> bytes:
    """Return ``msg`` as one datagram."""
    buf = bytearray()
    push_prototari(buf, msg, max_size=max_size)
    return bytes(buf)


def decode(data: bytes, *, max_size: int = MAX_DATAGRAM) -> PrototariMessage:
    """Decode exactly one datagram. Raises only ``DecodeError``."""
    return pull_prototari(Buffer(data), max_size=max_size)
