"""Prototari discovery, heartbeats, delivery and leave (sans-I/O).

``DiscoveryCore`` is one node (``core.py``); ``table.py`` is its per-address
state table; ``ratelimit.py`` bounds how often it answers. The asyncio node is
``gossamer.aio.discovery``; the simulator scenario is ``discovery``.
"""

from gossamer.proto.discovery.core import (
    LAYER,
    DiscoveryConfig,
    DiscoveryCore,
    DiscoveryCounters,
    DiscoveryEvent,
    PeerDown,
    PeerUp,
    Received,
)
from gossamer.proto.discovery.ratelimit import AnswerLimiter
from gossamer.proto.discovery.table import TRANSITIONS, Action, Input, PeerState, transition

__all__ = [
    "LAYER",
    "TRANSITIONS",
    "Action",
    "AnswerLimiter",
    "DiscoveryConfig",
    "DiscoveryCore",
    "DiscoveryCounters",
    "DiscoveryEvent",
    "Input",
    "PeerDown",
    "PeerState",
    "PeerUp",
    "Received",
    "transition",
]
