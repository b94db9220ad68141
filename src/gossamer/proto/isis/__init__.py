"""ISIS total-order multicast over UDP with retransmission (sans-I/O).

``IsisCore`` is one group member; ``docs/isis.md`` describes the protocol as built,
its guarantees under loss, duplication, reordering and crashes, and how it differs
from the original C++ program.
"""

from gossamer.proto.isis.core import (
    Delivered,
    Discarded,
    FaultFlags,
    IsisConfig,
    IsisCore,
    IsisCounters,
    Member,
    MemberRemoved,
    members_from,
)
from gossamer.proto.isis.holdback import HoldBackQueue, PendingMsg
from gossamer.proto.isis.hostfile import HostEntry, parse_hostfile
from gossamer.proto.isis.retransmit import RetransmitSchedule

__all__ = [
    "Delivered",
    "Discarded",
    "FaultFlags",
    "HoldBackQueue",
    "HostEntry",
    "IsisConfig",
    "IsisCore",
    "IsisCounters",
    "Member",
    "MemberRemoved",
    "PendingMsg",
    "RetransmitSchedule",
    "members_from",
    "parse_hostfile",
]
