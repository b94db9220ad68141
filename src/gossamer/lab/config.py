"""A lab host's configuration: a TOML file, environment overrides, validated with clear errors.

``load_config(path)`` reads the file ``gossamer lab app --config`` is given (its format is
``docs/lab-app.md``; the lab writes it with ``NodeConfig.to_toml()``). Every problem raises
``gossamer.errors.ConfigError`` whose message starts with the key path
(``isis.rate: must be >= 0``) and whose ``key`` field holds it. Nothing is guessed: the
node's id, run, trace path and address are required, and so is the group key
(``node.key_file``) when the wire is sealed (``node.wire``, the default) and any
protocol is enabled: every protocol of the node seals with it.

Environment overrides: ``GOSSAMER__<SECTION>__<KEY>=<value>`` replaces (or adds) one
key of one section before validation; the value is parsed as a TOML value and, if that
fails, taken as a plain string (``GOSSAMER__FAULTS__DROP=0.1``,
``GOSSAMER__NODE__RUN=demo``). ``GOSSAMER_KEY`` (as ``--key-file`` takes it: 64 hex
digits, 32 raw bytes or a passphrase) replaces the key file's content.

A section's ``enabled`` defaults to whether the section is present in the file (an
environment override alone does not switch a service on). Each protocol section also
takes every field of its core's config dataclass (``gossamer.daemon.protocols``), kept
typed and checked in the section's ``protocol`` mapping for the node to pass on.
Relative paths (``trace``, ``key_file``, ``db``) are relative to the configuration
file's directory.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, TypeVar

import tomli_w

from gossamer.daemon.protocols import plain
from gossamer.daemon.tables import (
    REQUIRED,
    Table,
    apply_env,
    fail,
    num,
    read_document,
    read_key,
    without_none,
)
from gossamer.errors import ConfigError
from gossamer.wire.mode import (
    DEFAULT_CLUSTER,
    KEY_ENV,
    Wire,
    WireMode,
    parse_wire,
)

__all__ = [
    "DEFAULT_PORTS",
    "KEY_ENV",
    "PORT_NAMES",
    "WORKLOADS",
    "ClusterSection",
    "DiscoverySection",
    "FaultsSection",
    "GatewaySection",
    "GossipSection",
    "IsisSection",
    "LinkSection",
    "NodeConfig",
    "NodeSection",
    "Partition",
    "PeerConfig",
    "Ports",
    "load_config",
    "parse_config",
]

#: The service ports of one node, in the order of the ``[ports]`` table.
PORT_NAMES: Final = ("discovery", "discovery_broadcast", "gossip", "isis", "link", "gateway")
#: The lab's ports, 7100 and up in ``PORT_NAMES`` order: the ``[ports]`` defaults, and what
#: every node uses inside network namespaces (each host has its own address there).
DEFAULT_PORTS: Final = {name: 7100 + i for i, name in enumerate(PORT_NAMES)}
#: The client workloads of a ``[cluster]`` section.
WORKLOADS: Final = ("routing", "queues")

_T = TypeVar("_T")


# -- the sections --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Ports:
    """One node's ports (the defaults are the lab's, not the protocols')."""

    discovery: int = DEFAULT_PORTS["discovery"]
    discovery_broadcast: int = DEFAULT_PORTS["discovery_broadcast"]
    gossip: int = DEFAULT_PORTS["gossip"]
    isis: int = DEFAULT_PORTS["isis"]
    link: int = DEFAULT_PORTS["link"]
    gateway: int = DEFAULT_PORTS["gateway"]

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in PORT_NAMES}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSection:
    """``[node]``: who this node is, where it traces, and its timeline."""

    id: str
    run: str
    trace: Path
    address: str
    seed: int
    start_at: float | None = None
    duration: float = 0.0
    linger: float = 5.0
    exit_when_done: bool = True
    wire: WireMode = WireMode.SEALED
    key_file: Path | None = None
    key: bytes | None = field(default=None, repr=False)
    cluster: str = DEFAULT_CLUSTER

    def wire_config(self) -> Wire:
        """The wire every protocol of the node speaks (sealed with ``key``, or original)."""
        return Wire(mode=self.wire, key=self.key, cluster=self.cluster)


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerConfig:
    """``[[peers]]``: one other node of the run."""

    id: str
    address: str
    ports: Ports = field(default_factory=Ports)
    subnet: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    """``[[faults.partition]]``: UDP to and from ``peers`` is dropped in
    ``[start, end)`` seconds after ``node.start_at`` (TOML keys ``from`` and ``to``)."""

    peers: tuple[str, ...]
    start: float
    end: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultsSection:
    """``[faults]``: faults this node injects into its own UDP datagrams."""

    drop: float = 0.0
    delay_ms: float = 0.0
    delay_rate: float = 0.0
    duplicate: float = 0.0
    partitions: tuple[Partition, ...] = ()

    @property
    def active(self) -> bool:
        return bool(
            self.drop or self.duplicate or (self.delay_ms and self.delay_rate) or self.partitions
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Section:
    """What every protocol section has: ``enabled`` and its core's settings, the fields of
    the protocol's config dataclass given in the section (``gossamer.daemon.protocols``)."""

    enabled: bool = False
    protocol: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoverySection(_Section):
    """``[discovery]``: Prototari with lab-speed timers."""

    broadcast_address: str | None = None
    #: Peers behind a router (another broadcast domain) that also get every broadcast,
    #: as unicast to their discovery port: how nodes on two subnets find each other.
    seeds: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GossipSection(_Section):
    """``[gossip]``: Chatter broadcasts (sealed with the node's key)."""

    rate: float = 2.0
    size: int = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class IsisSection(_Section):
    """``[isis]``: total-order multicast (with snapshots and the bank workload)."""

    members: tuple[str, ...] = ()
    rate: float = 10.0
    #: On agreed views (``gossamer.lab.group_member``) rather than a static group.
    views: bool = False
    snapshots: bool = True
    snapshot_every: float = 0.0
    broken_order: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSection(_Section):
    """``[link]``: PUSH to ``push_to`` peers' PULL sockets over TCP links."""

    push_to: tuple[str, ...] = ()
    rate: float = 50.0
    size: int = 100
    credit: int = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewaySection(_Section):
    """``[gateway]``: a gateway with durable queues and in-process application clients."""

    db: Path | None = None
    clients: int = 3
    rate: float = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSection:
    """``[cluster]``: the app as the client workload of a cluster of ``gossamer node``
    daemons (the lab's ``cluster`` scenario): ``clients`` gateway clients connect to
    ``gateway`` (``host:port``, this host's daemon) instead of an in-process server and
    route across the cluster by metadata. ``host`` is this host's name, ``hosts`` every
    host of the cluster (the routing queries name them). ``workload`` is ``routing``
    (``gossamer.lab.cluster_clients``) or ``queues`` (producers and consumers of a
    replicated queue, ``gossamer.lab.queue_clients``); ``rate`` is its steps per second,
    ``work`` the seconds a queue consumer spends on a message before its ack (on
    average)."""

    enabled: bool = False
    workload: str = "routing"
    gateway: str = ""
    host: str = ""
    hosts: tuple[str, ...] = ()
    clients: int = 2
    rate: float = 4.0
    work: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """The whole validated configuration of one node."""

    node: NodeSection
    ports: Ports = field(default_factory=Ports)
    peers: tuple[PeerConfig, ...] = ()
    faults: FaultsSection = field(default_factory=FaultsSection)
    discovery: DiscoverySection = field(default_factory=DiscoverySection)
    gossip: GossipSection = field(default_factory=GossipSection)
    isis: IsisSection = field(default_factory=IsisSection)
    link: LinkSection = field(default_factory=LinkSection)
    gateway: GatewaySection = field(default_factory=GatewaySection)
    cluster: ClusterSection = field(default_factory=ClusterSection)

    def peer(self, peer_id: str) -> PeerConfig:
        for peer in self.peers:
            if peer.id == peer_id:
                return peer
        raise KeyError(peer_id)

    @property
    def all_ids(self) -> tuple[str, ...]:
        """This node and every peer, sorted (the default ISIS group)."""
        return tuple(sorted([self.node.id, *(p.id for p in self.peers)]))

    def to_toml(self) -> str:
        """This configuration as TOML that ``load_config`` reads back to an equal value
        (the key itself is never written; only its file). A field that is ``None`` is
        left out: TOML has no null, and an absent key means the default."""
        n = self.node
        f = self.faults
        w = self.gateway
        document = {
            "node": {
                "id": n.id, "run": n.run, "trace": str(n.trace), "address": n.address,
                "seed": n.seed, "start_at": n.start_at, "duration": n.duration,
                "linger": n.linger, "exit_when_done": n.exit_when_done, "wire": n.wire.value,
                "key_file": None if n.key_file is None else str(n.key_file),
                "cluster": n.cluster,
            },
            "ports": self.ports.as_dict(),
            "peers": [{"id": p.id, "address": p.address, "ports": p.ports.as_dict(),
                       "subnet": p.subnet} for p in self.peers],
            "faults": {
                "drop": f.drop, "delay_ms": f.delay_ms, "delay_rate": f.delay_rate,
                "duplicate": f.duplicate,
                "partition": [{"peers": list(part.peers), "from": part.start, "to": part.end}
                              for part in f.partitions],
            },
            "discovery": _fields(self.discovery),
            "gossip": _fields(self.gossip),
            "isis": _fields(self.isis),
            "link": _fields(self.link),
            "gateway": {**_fields(w), "db": None if w.db is None else str(w.db)},
            "cluster": {f.name: getattr(self.cluster, f.name) for f in fields(self.cluster)},
        }
        try:
            return tomli_w.dumps(without_none(document))
        except (TypeError, ValueError) as exc:  # a non-finite number or an unknown type
            raise ConfigError(f"cannot write the configuration as TOML: {exc}") from exc


def _fields(section: Any) -> dict[str, Any]:
    """A section's keys: the lab's fields, then its protocol settings."""
    values = {f.name: getattr(section, f.name) for f in fields(section) if f.name != "protocol"}
    table: dict[str, Any] = plain({**values, **section.protocol})
    return table


# -- reading -------------------------------------------------------------------------------

def _ports(table: Table) -> Ports:
    ports = Ports(**{
        name: table.integer(name, DEFAULT_PORTS[name], low=1, high=65535)
        for name in PORT_NAMES
    })
    table.finish()
    return ports


def _section(data: Mapping[str, Any], name: str, present: bool) -> tuple[Table, bool]:
    table = Table(data.get(name, {}), name)
    return table, table.boolean("enabled", present)


def parse_config(
    data: Mapping[str, Any],
    *,
    base: Path | None = None,
    env: Mapping[str, str] | None = None,
    present: Sequence[str] | None = None,
) -> NodeConfig:
    """Validate a parsed TOML document (after applying ``env`` overrides).

    ``base`` anchors relative paths (default: the working directory); ``present`` is
    the sections the file itself had (their ``enabled`` default is true), by default
    those of ``data``.
    """
    base = Path.cwd() if base is None else base
    env = {} if env is None else env
    had = set(data) if present is None else set(present)
    data = apply_env(data, env)
    top = Table(data, "")

    t = Table(top.raw("node", REQUIRED), "node")
    node_id = t.string("id")
    node = NodeSection(
        id=node_id,
        run=t.string("run"),
        trace=t.path_value("trace", base),
        address=t.string("address"),
        seed=t.integer("seed", zlib.crc32(node_id.encode()), low=None),
        start_at=t.number("start_at", None, low=None),
        duration=t.number("duration", 0.0),
        linger=t.number("linger", 5.0),
        exit_when_done=t.boolean("exit_when_done", True),
        wire=_wire(t),
        key_file=t.path_value("key_file", base, None),
        cluster=t.string("cluster", DEFAULT_CLUSTER),
    )
    t.finish()

    ports = _ports(Table(top.raw("ports", {}), "ports"))
    by_port: dict[int, str] = {}
    for name, port in ports.as_dict().items():
        if port in by_port:
            raise fail(f"ports.{name}", f"is {port}, like ports.{by_port[port]}")
        by_port[port] = name

    peers = _peers(top.raw("peers", []), node_id)
    known = {p.id for p in peers}

    def check_ids(key: str, ids: Sequence[str], *, self_ok: bool) -> None:
        for item in ids:
            if item == node_id and not self_ok:
                raise fail(key, f"names this node ({item!r})")
            if item != node_id and item not in known:
                raise fail(key, f"{item!r} is not a peer of this node")

    faults = _faults(top.raw("faults", {}), check_ids)

    t, enabled = _section(data, "discovery", "discovery" in had)
    discovery = DiscoverySection(
        enabled=enabled,
        broadcast_address=t.string("broadcast_address", None),
        seeds=tuple(t.strings("seeds", ())),
        protocol=t.protocol(),
    )
    check_ids("discovery.seeds", discovery.seeds, self_ok=False)
    t.finish()

    t, enabled = _section(data, "gossip", "gossip" in had)
    gossip = GossipSection(
        enabled=enabled,
        rate=t.number("rate", 2.0),
        size=t.integer("size", 200, low=1, high=1 << 20),
        protocol=t.protocol(),
    )
    t.finish()

    t, enabled = _section(data, "isis", "isis" in had)
    members = t.strings("members", None)
    if members is None:
        members = tuple(sorted([node_id, *known]))
    isis = IsisSection(
        enabled=enabled,
        members=members,
        rate=t.number("rate", 10.0),
        views=t.boolean("views", False),
        snapshots=t.boolean("snapshots", True),
        snapshot_every=t.number("snapshot_every", 0.0),
        broken_order=t.boolean("broken_order", False),
        protocol=t.protocol(),
    )
    if enabled:
        check_ids("isis.members", members, self_ok=True)
        if node_id not in members:
            raise fail("isis.members", f"must include this node ({node_id!r})")
        if isis.snapshots and len(members) > 255:
            raise fail("isis.members", "the bank workload takes at most 255 members")
    t.finish()

    t, enabled = _section(data, "link", "link" in had)
    link = LinkSection(
        enabled=enabled,
        push_to=t.strings("push_to", ()),
        rate=t.number("rate", 50.0),
        size=t.integer("size", 100, low=1, high=1 << 20),
        credit=t.integer("credit", 16, low=1, high=(1 << 31) - 1),
        protocol=t.protocol(),
    )
    check_ids("link.push_to", link.push_to, self_ok=False)
    t.finish()

    t, enabled = _section(data, "gateway", "gateway" in had)
    db = t.path_value("db", base, None)
    gateway = GatewaySection(
        enabled=enabled,
        db=db,
        clients=t.integer("clients", 3, low=0, high=1000),
        rate=t.number("rate", 5.0),
        protocol=t.protocol(),
    )
    if enabled and db is None:
        raise fail("gateway.db", "is required when the gateway is enabled")
    t.finish()

    t, enabled = _section(data, "cluster", "cluster" in had)
    cluster = ClusterSection(
        enabled=enabled,
        workload=t.string("workload", "routing"),
        gateway=t.string("gateway", ""),
        host=t.string("host", node_id),
        hosts=tuple(t.strings("hosts", ())),
        clients=t.integer("clients", 2, low=1, high=1000),
        rate=t.number("rate", 4.0),
        work=t.number("work", 0.0),
    )
    if cluster.workload not in WORKLOADS:
        raise fail("cluster.workload", f"must be one of {', '.join(WORKLOADS)}")
    if enabled and not cluster.gateway:
        raise fail("cluster.gateway", "is required: the host:port of this host's daemon")
    t.finish()

    top.used.update({"ports", "peers", "faults", "discovery", "gossip", "isis", "link",
                     "gateway", "cluster"})
    top.finish()
    # Every protocol seals with the key (the node builds its wire whatever runs: a
    # gateway-only node needs it too); Chatter's original wire encrypts with it too.
    sealing = (discovery, gossip, isis, link, gateway, cluster)
    if gossip.enabled or (
        node.wire is WireMode.SEALED and any(section.enabled for section in sealing)
    ):
        node = replace(node, key=read_key(node.key_file, env, setting="node.key_file"))
    return NodeConfig(
        node=node, ports=ports, peers=peers, faults=faults, discovery=discovery,
        gossip=gossip, isis=isis, link=link, gateway=gateway, cluster=cluster,
    )


def _peers(raw: Any, node_id: str) -> tuple[PeerConfig, ...]:
    if not isinstance(raw, list):
        raise fail("peers", "must be an array of tables ([[peers]])")
    peers: list[PeerConfig] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        t = Table(item, f"peers[{index}]")
        peer_id = t.string("id")
        if peer_id == node_id:
            raise fail(t.key("id"), f"is this node's own id ({peer_id!r})")
        if peer_id in seen:
            raise fail(t.key("id"), f"{peer_id!r} is listed twice")
        seen.add(peer_id)
        peers.append(PeerConfig(
            id=peer_id,
            address=t.string("address"),
            ports=_ports(Table(t.raw("ports", {}), t.key("ports"))),
            subnet=t.integer("subnet", None),
        ))
        t.finish()
    return tuple(peers)


def _faults(raw: Any, check_ids: Callable[..., None]) -> FaultsSection:
    t = Table(raw, "faults")
    parts_raw = t.raw("partition", [])
    if not isinstance(parts_raw, list):
        raise fail("faults.partition", "must be an array of tables ([[faults.partition]])")
    parts: list[Partition] = []
    for index, item in enumerate(parts_raw):
        p = Table(item, f"faults.partition[{index}]")
        peers = p.strings("peers")
        check_ids(p.key("peers"), peers, self_ok=False)
        start = p.number("from")
        end = p.number("to")
        if end <= start:
            raise fail(p.key("to"), f"must be > from ({num(start)})")
        p.finish()
        parts.append(Partition(peers=peers, start=start, end=end))
    faults = FaultsSection(
        drop=t.number("drop", 0.0, high=1.0),
        delay_ms=t.number("delay_ms", 0.0),
        delay_rate=t.number("delay_rate", 0.0, high=1.0),
        duplicate=t.number("duplicate", 0.0, high=1.0),
        partitions=tuple(parts),
    )
    t.finish()
    return faults


def _wire(t: Table) -> WireMode:
    try:
        return parse_wire(t.string("wire", "sealed"))
    except ConfigError:
        raise fail(t.key("wire"), "must be 'sealed' or 'original'") from None


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> NodeConfig:
    """Read, override (``env``, default ``os.environ``) and validate a host's TOML file."""
    path = Path(path)
    return parse_config(
        read_document(path), base=path.resolve().parent, env=os.environ if env is None else env
    )
