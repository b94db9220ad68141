"""Each protocol section of a configuration file, mapped 1:1 onto the core's config dataclass.

The lab app's host file (``docs/lab-app.md``) and the node daemon's (``docs/node.md``)
share it. A lab host file's ``[discovery]``, ``[gossip]``, ``[isis]``, ``[link]`` and
``[gateway]`` hold two kinds of keys: the lab's own (``enabled``, the workload: ``rate``, ``size``,
``members``, ``push_to``, ...) and the protocol's, whose names, types and units are the
fields of the core's config dataclass (:class:`~gossamer.proto.discovery.core.DiscoveryConfig`,
:class:`~gossamer.proto.gossip.config.GossipConfig`, :class:`~gossamer.proto.isis.core.IsisConfig`,
the link :class:`~gossamer.proto.link.LinkConfig`,
:class:`~gossamer.proto.gateway.core.GatewayConfig`). Every such field can be set, except
the ``managed`` ones the node derives from the rest of the file (addresses, ports, member
lists, the key and the wire). A nested dataclass field is a sub-table.

Nothing here names a protocol field other than the managed ones and the lab's defaults:
:func:`gossamer.params.overrides` reads the dataclass's fields and type hints, so a field
added or renamed in a core is a key of its section at once.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gossamer.errors import ConfigError
from gossamer.params import Sources, overrides
from gossamer.proto.discovery.core import DiscoveryConfig
from gossamer.proto.gateway.core import GatewayConfig
from gossamer.proto.gossip.config import GossipConfig
from gossamer.proto.isis.core import IsisConfig, Member
from gossamer.proto.link import LinkConfig, Transport
from gossamer.proto.views import Member as ViewsMember
from gossamer.proto.views import ViewsConfig

__all__ = ["NODE_DISCOVERY", "PROTOCOLS", "VIEWS", "Protocol", "plain"]

_HERE: Final = ("127.0.0.1", 7000)


@dataclass(frozen=True, slots=True, kw_only=True)
class Protocol:
    """How one section's protocol keys map onto its core configuration.

    ``managed``: fields the node sets itself (not keys of the section). ``defaults``: the
    lab's values where they differ from the core's (lab-speed timers, multicast off
    unless asked). ``probe``: placeholder values of the required managed fields, so that
    the core's own checks (``__post_init__``) run when the file is read.
    """

    config: type[Any]
    managed: frozenset[str]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    probe: Mapping[str, Any] = field(default_factory=dict)

    def settings(self, table: Mapping[str, Any], section: str) -> dict[str, Any]:
        """The typed protocol settings of ``table`` (the lab's defaults filled in),
        checked by the core; ``ConfigError`` keyed ``section.field`` otherwise."""
        sources = Sources(table={**self.defaults, **table})
        values = overrides(self.config, sources, fixed=dict.fromkeys(self.managed), where=section)
        try:
            self.config(**{**values, **self.probe})
        except ConfigError as exc:
            named = [
                n for n in exc.fields if n in {f.name for f in dataclasses.fields(self.config)}
            ]
            key = f"{section}.{named[0]}" if len(named) == 1 else section
            error = ConfigError(f"{key}: {exc.reason}")
            error.key = key  # type: ignore[attr-defined]
            raise error from exc
        return values


    def resolved(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every settable field of the core's configuration with ``values`` (checked
        settings) applied: what a section means once the core's defaults are filled in."""
        config = self.config(**{**values, **self.probe})
        return {
            f.name: getattr(config, f.name)
            for f in dataclasses.fields(self.config)
            if f.init and f.name not in self.managed
        }


PROTOCOLS: Final[Mapping[str, Protocol]] = {
    "discovery": Protocol(
        config=DiscoveryConfig,
        managed=frozenset(
            {
                "address", "broadcast_address", "broadcast_port", "broadcast_targets",
                "interface", "listen_port", "names", "node_id", "wire", "start",
            }
        ),
        defaults={
            "broadcast_interval": 1.0,
            "inactive_time": 3.0,
            "heartbeat_wait": 0.5,
        },
        probe={"address": _HERE, "broadcast_address": _HERE[0]},
    ),
    "gossip": Protocol(
        config=GossipConfig,
        managed=frozenset({"my_addr", "my_port", "key", "wire", "cluster"}),
        # Multicast only when the file asks (the lab does between namespace hosts only).
        defaults={"multicast": False, "multicast_addr": "239.7.7.7", "multicast_port": 7199},
        probe={"my_addr": _HERE[0], "key": bytes(32)},
    ),
    "isis": Protocol(
        config=IsisConfig,
        managed=frozenset({"me", "members", "wire"}),
        probe={"me": 1, "members": (Member(id=1, name="probe", addr=_HERE),)},
    ),
    "link": Protocol(
        config=LinkConfig,
        # The node's links are sealed with the cluster key (``wire``); Exon's constants
        # are the Java original's, for the links of ``--wire original`` only (``exon``).
        managed=frozenset({"address", "node_id", "names", "wire", "exon"}),
        defaults={"transport": Transport.TCP},
        probe={"address": _HERE},
    ),
    "gateway": Protocol(
        config=GatewayConfig,
        managed=frozenset({"node_id", "trace_name"}),
    ),
}


#: The node daemon's ``[discovery]``: quicker failure detection than the lab app's. A
#: daemon's group is on agreed views, where a member wrongly suspected (a stall longer
#: than the probe) is excluded and rejoins as its next incarnation: a cost, not a split.
#: The lab app's static ISIS group can never re-admit a removed member, so it keeps the
#: slower timers. A peer silent for 0.5 s is probed; three missed waits of 0.3 s (each with
#: three ``hor?``) remove it: at most 1.4 s after it was last heard (docs/node.md).
NODE_DISCOVERY: Final = dataclasses.replace(
    PROTOCOLS["discovery"],
    defaults={"broadcast_interval": 1.0, "inactive_time": 0.5, "heartbeat_wait": 0.3},
)


#: The node daemon's ``[views]`` (``gossamer.daemon.config``): agreed membership, whose
#: member, founders and seeds the daemon derives; not a lab section.
_PROBE_MEMBER: Final = ViewsMember(name="probe", incarnation=1, address=_HERE)
VIEWS: Final = Protocol(
    config=ViewsConfig,
    managed=frozenset({"me", "initial", "seeds"}),
    probe={"me": _PROBE_MEMBER, "initial": (_PROBE_MEMBER,)},
)


def plain(value: Any) -> Any:
    """``value`` as TOML can hold it: enums by value, dataclasses as tables."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value
