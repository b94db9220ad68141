"""The node daemon's configuration: ``gossamer node --config node.toml`` (``docs/node.md``).

A TOML file names the cluster, its seeds and its key (``[cluster]``), this node
(``[node]``), where its services listen (``[ports]``) and the protocols' settings
(``[discovery]``, ``[views]``, ``[gossip]``, ``[link]``, ``[gateway]``: each takes the
fields of its core's config dataclass, ``gossamer.daemon.protocols``). Nothing is guessed:
the cluster's name, the key and the node's name and address are required, and there is
no default key (the daemon speaks only the sealed wire: agreed views have no other).

Every problem raises ``ConfigError`` whose message starts with the key path
(``cluster.seeds: 'x' is not host:port``) and whose ``key`` attribute holds it.
``GOSSAMER__<SECTION>__<KEY>=<value>`` overrides one key before validation and
``GOSSAMER_KEY`` replaces the key file (``gossamer.daemon.tables``). Relative paths are
relative to the file's directory.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

import tomli_w

from gossamer._types import Address
from gossamer.addresses import format_address, parse_address
from gossamer.daemon.protocols import NODE_DISCOVERY, PROTOCOLS, VIEWS, plain
from gossamer.daemon.tables import (
    Table,
    apply_env,
    fail,
    read_document,
    read_key,
    without_none,
)
from gossamer.errors import ConfigError
from gossamer.proto.gateway.core import GatewayConfig
from gossamer.proto.link import LinkConfig, Transport
from gossamer.wire.mode import KEY_ENV, Wire

__all__ = [
    "DEFAULT_PORTS",
    "KEY_ENV",
    "ClusterSection",
    "DaemonConfig",
    "NodeSection",
    "Ports",
    "load_daemon_config",
    "parse_daemon_config",
]

#: A node's ports when ``[ports]`` does not say: discovery's unicast port is the node's
#: cluster address (what seeds name); the gateway's is 신경's usual 4567.
DEFAULT_PORTS: Final = {
    "discovery": 7400, "discovery_broadcast": 7401, "views": 7402, "gossip": 7403,
    "link": 7404, "gateway": 4567,
}
_SECTIONS: Final = ("cluster", "node", "ports", "discovery", "views", "gossip", "link", "gateway")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSection:
    """``[cluster]``: which cluster this node belongs to and how it gets in.

    ``seeds``: discovery addresses (``host:port``) of any members; a new node joins a
    running cluster by naming one (or, with ``discovery.broadcast_address``, by finding
    one on its subnet). ``bootstrap``: this node may found the cluster, which
    it does when, ``bootstrap_wait`` seconds after it starts, it has heard of no member
    (and of no other founder candidate with a smaller name). ``key`` is the group key
    (from ``key_file`` or ``GOSSAMER_KEY``), bound to ``name`` (``gossamer.Wire``).
    """

    name: str
    seeds: tuple[Address, ...] = ()
    bootstrap: bool = False
    bootstrap_wait: float = 3.0
    key_file: Path | None = None
    key: bytes = field(repr=False)

    def wire(self) -> Wire:
        """The sealed wire every service of the node speaks."""
        return Wire(key=self.key, cluster=self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSection:
    """``[node]``: this member's name (unique in the cluster), the address every service
    binds and others reach it at, its trace file (none: not traced) and its seed."""

    name: str
    address: str
    trace: Path | None = None
    seed: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Ports:
    """``[ports]``: one port per service (0: any free port, reported in ``ready``)."""

    discovery: int = DEFAULT_PORTS["discovery"]
    discovery_broadcast: int = DEFAULT_PORTS["discovery_broadcast"]
    views: int = DEFAULT_PORTS["views"]
    gossip: int = DEFAULT_PORTS["gossip"]
    link: int = DEFAULT_PORTS["link"]
    gateway: int = DEFAULT_PORTS["gateway"]

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Service:
    """A service section: whether it runs and its core's settings."""

    enabled: bool = True
    protocol: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoverySection:
    """``[discovery]``: ``broadcast_address`` is the subnet's broadcast address; without
    it nothing is broadcast (loopback, or the machine's own namespace) and each
    ``pelotari?`` goes as unicast to the seeds instead."""

    broadcast_address: str | None = None
    protocol: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewaySection(Service):
    """``[gateway]``: the 신경 gateway applications connect to; ``db`` keeps its queues
    durable (SQLite), none keeps them in memory."""

    db: Path | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonConfig:
    """The whole validated configuration of one node daemon."""

    cluster: ClusterSection
    node: NodeSection
    ports: Ports = field(default_factory=Ports)
    discovery: DiscoverySection = field(default_factory=DiscoverySection)
    views: Mapping[str, Any] = field(default_factory=dict)
    gossip: Service = field(default_factory=Service)
    link: Service = field(default_factory=Service)
    gateway: GatewaySection = field(default_factory=GatewaySection)

    def to_toml(self) -> str:
        """The resolved configuration as TOML (``--check``): every default filled in,
        the key never written (only where it comes from)."""
        c, n = self.cluster, self.node
        document = {
            "cluster": {
                "name": c.name, "seeds": [format_address(s) for s in c.seeds],
                "bootstrap": c.bootstrap, "bootstrap_wait": c.bootstrap_wait,
                "key_file": None if c.key_file is None else str(c.key_file),
            },
            "node": {"name": n.name, "address": n.address,
                     "trace": None if n.trace is None else str(n.trace), "seed": n.seed},
            "ports": self.ports.as_dict(),
            "discovery": {"broadcast_address": self.discovery.broadcast_address,
                          **_resolved("discovery", self.discovery.protocol)},
            "views": plain(VIEWS.resolved(self.views)),
            "gossip": {"enabled": self.gossip.enabled,
                       **_resolved("gossip", self.gossip.protocol)},
            "link": {"enabled": self.link.enabled, **_resolved("link", {
                **self.link.protocol, "max_message": self.link_options().get("max_message")})},
            "gateway": {"enabled": self.gateway.enabled,
                        "db": None if self.gateway.db is None else str(self.gateway.db),
                        **_resolved("gateway", self.gateway.protocol)},
        }
        return tomli_w.dumps(without_none(document))

    def gateway_config(self) -> GatewayConfig:
        """The gateway's configuration: ``[gateway]``, named after this node (its name in
        the cluster's views is its name among the gateways)."""
        return GatewayConfig(node_id=self.node.name, **self.gateway.protocol)

    def link_options(self) -> dict[str, Any]:
        """``open_node``'s options from ``[link]``. Where the gateway runs too and
        ``max_message`` is not set over TCP, it is the gateway's ``cluster.max_batch``:
        one link message carries one batch of the gateway's cluster layer."""
        options = dict(self.link.protocol)
        transport = options.pop("transport")
        tcp = transport is Transport.TCP
        if self.gateway.enabled and options.get("max_message") is None and tcp:
            options["max_message"] = self.gateway_config().cluster.max_batch
        return {**options, "transport": transport.value}


def _resolved(section: str, values: Mapping[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = plain(PROTOCOLS[section].resolved(values))
    return table


def parse_daemon_config(
    data: Mapping[str, Any], *, base: Path | None = None, env: Mapping[str, str] | None = None
) -> DaemonConfig:
    """Validate a parsed TOML document after applying the ``env`` overrides (module
    docstring); ``base`` anchors relative paths (default: the working directory)."""
    base = Path.cwd() if base is None else base
    env = {} if env is None else env
    top = Table(apply_env(data, env), "")
    for name in _SECTIONS:
        top.raw(name, {})
    top.finish()

    t = Table(top.data.get("cluster", {}), "cluster")
    name = t.string("name")
    seeds = tuple(_seed(t.key("seeds"), text) for text in t.strings("seeds", ()))
    bootstrap = t.boolean("bootstrap", False)
    bootstrap_wait = t.number("bootstrap_wait", 3.0)
    key_file = t.path_value("key_file", base, None)
    t.finish()
    key = read_key(key_file, env, setting="cluster.key_file")
    try:
        Wire(key=key, cluster=name)
    except ConfigError as exc:
        raise fail("cluster.name", exc.reason) from None
    cluster = ClusterSection(
        name=name, seeds=seeds, bootstrap=bootstrap, bootstrap_wait=bootstrap_wait,
        key_file=key_file, key=key,
    )

    t = Table(top.data.get("node", {}), "node")
    node_name = t.string("name")
    node = NodeSection(
        name=node_name,
        address=t.string("address"),
        trace=t.path_value("trace", base, None),
        seed=t.integer("seed", zlib.crc32(node_name.encode()), low=None),
    )
    t.finish()

    t = Table(top.data.get("ports", {}), "ports")
    ports = Ports(**{
        port: t.integer(port, default, low=0, high=65535) for port, default in DEFAULT_PORTS.items()
    })
    t.finish()
    taken: dict[int, str] = {}
    for port_name, port in ports.as_dict().items():
        if port and port in taken:
            raise fail(f"ports.{port_name}", f"is {port}, like ports.{taken[port]}")
        taken[port] = port_name

    t = Table(top.data.get("discovery", {}), "discovery")
    discovery = DiscoverySection(
        broadcast_address=t.string("broadcast_address", None),
        protocol=t.protocol(NODE_DISCOVERY),
    )
    t.finish()
    if not seeds and not bootstrap and discovery.broadcast_address is None:
        raise fail("cluster.seeds", "names no member, bootstrap is false and nothing is "
                   "broadcast: this node could never find the cluster (name any member, "
                   "set discovery.broadcast_address, or set bootstrap = true to found)")

    t = Table(top.data.get("views", {}), "views")
    views = t.protocol(VIEWS)
    t.finish()

    services: dict[str, Service] = {}
    for section in ("gossip", "link"):
        t = Table(top.data.get(section, {}), section)
        services[section] = Service(enabled=t.boolean("enabled", True), protocol=t.protocol())
        t.finish()

    t = Table(top.data.get("gateway", {}), "gateway")
    gateway = GatewaySection(
        enabled=t.boolean("enabled", True), db=t.path_value("db", base, None),
        protocol=t.protocol(),
    )
    t.finish()
    config = DaemonConfig(
        cluster=cluster, node=node, ports=ports, discovery=discovery, views=views,
        gossip=services["gossip"], link=services["link"], gateway=gateway,
    )
    if gateway.enabled and config.link.enabled:
        _check_batches_fit(config)
    return config


def _check_batches_fit(config: DaemonConfig) -> None:
    """The gateways of the cluster talk over the link node: a link message must hold a
    whole batch of their cluster layer."""
    batch = config.gateway_config().cluster.max_batch
    settings = {**config.link.protocol, "max_message": config.link_options().get("max_message")}
    limit = LinkConfig(address=("127.0.0.1", 1), **settings).message_limit
    if limit < batch:
        raise fail("link.max_message", f"is {limit} bytes, less than a gateway batch "
                   f"(gateway.cluster.max_batch = {batch}): raise it, or lower the batch")


def _seed(key: str, text: str) -> Address:
    try:
        host, port = parse_address(text)
    except ConfigError:
        raise fail(key, f"{text!r} is not host:port") from None
    if port == 0:
        raise fail(key, f"{text!r} names no port")
    return host, port


def load_daemon_config(path: str | Path, env: Mapping[str, str] | None = None) -> DaemonConfig:
    """Read, override (``env``, default ``os.environ``) and validate a node's TOML file."""
    path = Path(path)
    return parse_daemon_config(
        read_document(path), base=path.resolve().parent, env=os.environ if env is None else env
    )
