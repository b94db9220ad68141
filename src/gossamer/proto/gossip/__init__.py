"""Chatter broadcast: the log-depth distribution tree with the multicast shortcut (sans-I/O).

- ``core``: ``GossipCore``, one node (broadcast, receive, forward, re-plan).
- ``config``: ``GossipConfig`` (Chatter's settings, from the environment too).
- ``handlers``: ``MessageHandler`` and ``HandlerRegistry`` (Chatter's payload types).
- ``planner``: multicast groups, ``build_tree`` chunks, next hops.
- ``peers``: the bounded, expiring peer database and multicast domains.
- ``dedupe``: deliver each broadcast once.
- ``messages``, ``framing``: what the envelope carries, and messages on a TCP stream.
- ``hops``: the state table of one TCP hop (ACK, timeout, failure, re-plan).

See ``docs/gossip.md``.
"""

from gossamer.proto.gossip.config import GossipConfig
from gossamer.proto.gossip.core import (
    LAYER,
    Delivered,
    GossipCore,
    GossipCounters,
    StreamSend,
)
from gossamer.proto.gossip.handlers import (
    HandlerRegistry,
    MessageHandler,
    bytes_handler,
    no_netids,
    text_handler,
)
from gossamer.proto.gossip.peers import PeerDB, PeerInfo
from gossamer.wire.mode import WireMode

__all__ = [
    "LAYER",
    "Delivered",
    "GossipConfig",
    "GossipCore",
    "GossipCounters",
    "HandlerRegistry",
    "MessageHandler",
    "PeerDB",
    "PeerInfo",
    "StreamSend",
    "WireMode",
    "bytes_handler",
    "no_netids",
    "text_handler",
]
