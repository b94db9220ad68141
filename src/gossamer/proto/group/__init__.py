"""A group: agreed views (``proto.views``) with ISIS total order (``proto.isis``) flushed
through them, which gives virtual synchrony (``docs/cluster.md``). The composition of the
two cores, sans-I/O, shared by the simulator and the asyncio driver; ``checks`` has the
checkers of the guarantees."""

from gossamer.proto.group.core import GroupCore, GroupEvent, isis_name, split_state

__all__ = ["GroupCore", "GroupEvent", "isis_name", "split_state"]
