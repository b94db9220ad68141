"""Exon/A3M links: LINK/LINKACK handshakes, credit flow control, socket patterns (sans-I/O).

The names a driver or an application uses, from the modules that define them:
``node`` (:class:`LinkNode`), ``socket`` (:class:`LinkSocket`), ``config``, ``events``
(every name it exports, re-exported here as asyncio's package re-exports its modules')
and, for TCP, ``tcp`` (:class:`StreamEndpoint`).
"""

from gossamer.proto.link import events
from gossamer.proto.link.config import LinkConfig, SocketOptions, Transport
from gossamer.proto.link.events import *  # noqa: F403 - the list is events.__all__
from gossamer.proto.link.node import LinkNode
from gossamer.proto.link.socket import LinkSocket
from gossamer.proto.link.tcp import StreamEndpoint

__all__ = [
    "LinkConfig",
    "LinkNode",
    "LinkSocket",
    "SocketOptions",
    "StreamEndpoint",
    "Transport",
]
__all__ += events.__all__
