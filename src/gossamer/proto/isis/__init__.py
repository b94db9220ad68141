"""ISIS total-order multicast over UDP with retransmission (sans-I/O).

``IsisCore`` is one group member; ``docs/isis.md`` describes the protocol as built,
its guarantees under loss, duplication, reordering and crashes, and how it differs
from the original C++ program.
"""

from gossamer.proto.isis.core import (
    ACK_DELAY_FRACTION,
    TUNABLES,
    Delivered,
    Discarded,
    IsisConfig,
    IsisCore,
    IsisCounters,
    Member,
    MemberRemoved,
    members_from,
    payload,
    payload_digest,
    tunable_defaults,
)
from gossamer.proto.isis.holdback import HoldBackQueue, PendingMsg
from gossamer.proto.isis.hostfile import HostEntry, parse_hostfile
from gossamer.proto.isis.retransmit import RetransmitSchedule

__all__ = [
    "ACK_DELAY_FRACTION",
    "TUNABLES",
    "Delivered",
    "Discarded",
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
    "payload",
    "payload_digest",
    "tunable_defaults",
]
