"""Agreed, dynamic group membership (a group membership service): every surviving member
installs the same sequence of views, a view is decided by a majority of the one before it
(primary partition), joiners start from a state a member hands them, and a restarted
process rejoins as a new incarnation. ``docs/cluster.md`` states the guarantees and the
argument; ``core`` has the protocol.
"""

from gossamer.proto.views.core import COUNTERS, LAYER, ViewsCore
from gossamer.proto.views.model import (
    Blocked,
    Excluded,
    FlushRequired,
    Member,
    StateNeeded,
    Unblocked,
    View,
    ViewInstalled,
    ViewsConfig,
    ViewsEvent,
)

__all__ = [
    "COUNTERS",
    "LAYER",
    "Blocked",
    "Excluded",
    "FlushRequired",
    "Member",
    "StateNeeded",
    "Unblocked",
    "View",
    "ViewInstalled",
    "ViewsConfig",
    "ViewsCore",
    "ViewsEvent",
]
