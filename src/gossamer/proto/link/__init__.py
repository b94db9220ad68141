"""Exon/A3M links: LINK/LINKACK handshakes, credit flow control, socket patterns (sans-I/O).

The names a driver or an application uses, from the modules that define them:
``node`` (:class:`LinkNode`), ``socket`` (:class:`LinkSocket`), ``config``, ``events``
and, for TCP, ``tcp`` (:class:`StreamEndpoint`).
"""

from gossamer.proto.link.config import LinkConfig, SocketOptions, Transport
from gossamer.proto.link.events import (
    Connect,
    Event,
    LinkDown,
    LinkStatistics,
    LinkUp,
    Message,
    Readable,
    Receipt,
    RequestFailed,
    SocketStatistics,
    Writable,
)
from gossamer.proto.link.node import LinkNode
from gossamer.proto.link.socket import LinkSocket
from gossamer.proto.link.tcp import StreamEndpoint

__all__ = [
    "Connect",
    "Event",
    "LinkConfig",
    "LinkDown",
    "LinkNode",
    "LinkSocket",
    "LinkStatistics",
    "LinkUp",
    "Message",
    "Readable",
    "Receipt",
    "RequestFailed",
    "SocketOptions",
    "SocketStatistics",
    "StreamEndpoint",
    "Transport",
    "Writable",
]
