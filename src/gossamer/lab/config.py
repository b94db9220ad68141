"""The node configuration: a TOML file, environment overrides, validated with clear errors.

``load_config(path)`` reads the file ``gossamer node --config`` is given (its format is
``docs/node.md``; the lab writes it with ``NodeConfig.to_toml()``). Every problem raises
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
takes every field of its core's config dataclass (``gossamer.lab.protocols``), kept
typed and checked in the section's ``protocol`` mapping for the node to pass on.
Relative paths (``trace``, ``key_file``, ``db``) are relative to the configuration
file's directory.
"""

from __future__ import annotations

import math
import os
import tomllib
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, TypeVar

import tomli_w

from gossamer.errors import ConfigError
from gossamer.lab.protocols import PROTOCOLS, plain
from gossamer.wire.mode import (
    DEFAULT_CLUSTER,
    KEY_ENV,
    Wire,
    WireMode,
    parse_key,
    parse_wire,
)

__all__ = [
    "DEFAULT_PORTS",
    "KEY_ENV",
    "PORT_NAMES",
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

_ENV_PREFIX = "GOSSAMER__"

#: The service ports of one node, in the order of the ``[ports]`` table.
PORT_NAMES: Final = ("discovery", "discovery_broadcast", "gossip", "isis", "link", "gateway")
#: The lab's ports, 7100 and up in ``PORT_NAMES`` order: the ``[ports]`` defaults, and what
#: every node uses inside network namespaces (each host has its own address there).
DEFAULT_PORTS: Final = {name: 7100 + i for i, name in enumerate(PORT_NAMES)}

_T = TypeVar("_T")


def _fail(key: str, problem: str) -> ConfigError:
    # The key leads the message; it is also kept as ``key`` for callers (not as a
    # ``fields`` entry, which ``str()`` would repeat after the message).
    error = ConfigError(f"{key}: {problem}")
    error.key = key  # type: ignore[attr-defined]
    return error


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
    the protocol's config dataclass given in the section (``gossamer.lab.protocols``)."""

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
        }
        try:
            return tomli_w.dumps(_without_none(document))
        except (TypeError, ValueError) as exc:  # a non-finite number or an unknown type
            raise ConfigError(f"cannot write the configuration as TOML: {exc}") from exc


def _fields(section: Any) -> dict[str, Any]:
    """A section's keys: the lab's fields, then its protocol settings."""
    values = {f.name: getattr(section, f.name) for f in fields(section) if f.name != "protocol"}
    table: dict[str, Any] = plain({**values, **section.protocol})
    return table


def _without_none(value: Any) -> Any:
    """``value`` with every ``None`` left out of its tables and arrays, and empty arrays of
    tables dropped (TOML has no null; ``load_config`` reads an absent key as the default)."""
    if isinstance(value, Mapping):
        kept = {k: _without_none(v) for k, v in value.items() if v is not None}
        return {k: v for k, v in kept.items() if v != []}
    if isinstance(value, list | tuple):
        return [_without_none(v) for v in value if v is not None]
    if isinstance(value, Path):
        return str(value)
    return value


# -- reading -------------------------------------------------------------------------------

_REQUIRED: Any = object()


class _Table:
    """Typed, checked access to one TOML table; remembers which keys were read."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise _fail(path, f"must be a table, not {_kind(data)}")
        self.data = data
        self.path = path
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def raw(self, name: str, default: Any) -> Any:
        self.used.add(name)
        if name in self.data:
            return self.data[name]
        if default is _REQUIRED:
            raise _fail(self.key(name), "is required")
        return default

    def string(self, name: str, default: Any = _REQUIRED) -> Any:
        value = self.raw(name, default)
        if value is default:
            return value
        if not isinstance(value, str) or not value:
            raise _fail(self.key(name), f"must be a non-empty string, not {_kind(value)}")
        return value

    def boolean(self, name: str, default: Any = _REQUIRED) -> Any:
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise _fail(self.key(name), f"must be true or false, not {_kind(value)}")
        return value

    def number(
        self, name: str, default: Any = _REQUIRED, *, low: float | None = 0.0,
        high: float | None = None, above: float | None = None,
    ) -> Any:
        value = self.raw(name, default)
        if value is None and default is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _fail(self.key(name), f"must be a number, not {_kind(value)}")
        value = float(value)
        if not math.isfinite(value):
            raise _fail(self.key(name), "must be a finite number")
        _bounds(self.key(name), value, low, high, above)
        return value

    def integer(
        self, name: str, default: Any = _REQUIRED, *, low: int | None = 0, high: int | None = None
    ) -> Any:
        value = self.raw(name, default)
        if value is None and default is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise _fail(self.key(name), f"must be an integer, not {_kind(value)}")
        _bounds(self.key(name), value, low, high, None)
        return value

    def strings(self, name: str, default: Any = _REQUIRED) -> Any:
        value = self.raw(name, default)
        if value is default:
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise _fail(self.key(name), "must be a list of non-empty strings")
        if len(set(value)) != len(value):
            raise _fail(self.key(name), "lists an id twice")
        return tuple(value)

    def path_value(self, name: str, base: Path, default: Any = _REQUIRED) -> Any:
        value = self.string(name, default)
        if value is default:
            return value
        path = Path(value).expanduser()
        return path if path.is_absolute() else base / path

    def protocol(self) -> dict[str, Any]:
        """The keys not read yet, as the settings of this section's protocol
        (``gossamer.lab.protocols``): typed, checked by the core, keyed ``section.field``."""
        rest = {k: v for k, v in self.data.items() if k not in self.used}
        self.used.update(rest)
        try:
            return PROTOCOLS[self.path].settings(rest, self.path)
        except ConfigError as exc:
            if getattr(exc, "key", None):
                raise
            key = exc.reason.partition(":")[0]
            raise _fail(key, exc.reason.partition(": ")[2]) from exc

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise _fail(self.key(unknown[0]), "unknown key")


def _bounds(
    key: str, value: float, low: float | None, high: float | None, above: float | None
) -> None:
    if low is not None and value < low:
        raise _fail(key, f"must be >= {_num(low)}")
    if above is not None and value <= above:
        raise _fail(key, f"must be > {_num(above)}")
    if high is not None and value > high:
        raise _fail(key, f"must be <= {_num(high)}")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__)


def _ports(table: _Table) -> Ports:
    ports = Ports(**{
        name: table.integer(name, DEFAULT_PORTS[name], low=1, high=65535)
        for name in PORT_NAMES
    })
    table.finish()
    return ports


def _section(data: Mapping[str, Any], name: str, present: bool) -> tuple[_Table, bool]:
    table = _Table(data.get(name, {}), name)
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
    data = _apply_env(data, env)
    top = _Table(data, "")

    t = _Table(top.raw("node", _REQUIRED), "node")
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

    ports = _ports(_Table(top.raw("ports", {}), "ports"))
    by_port: dict[int, str] = {}
    for name, port in ports.as_dict().items():
        if port in by_port:
            raise _fail(f"ports.{name}", f"is {port}, like ports.{by_port[port]}")
        by_port[port] = name

    peers = _peers(top.raw("peers", []), node_id)
    known = {p.id for p in peers}

    def check_ids(key: str, ids: Sequence[str], *, self_ok: bool) -> None:
        for item in ids:
            if item == node_id and not self_ok:
                raise _fail(key, f"names this node ({item!r})")
            if item != node_id and item not in known:
                raise _fail(key, f"{item!r} is not a peer of this node")

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
        snapshots=t.boolean("snapshots", True),
        snapshot_every=t.number("snapshot_every", 0.0),
        broken_order=t.boolean("broken_order", False),
        protocol=t.protocol(),
    )
    if enabled:
        check_ids("isis.members", members, self_ok=True)
        if node_id not in members:
            raise _fail("isis.members", f"must include this node ({node_id!r})")
        if isis.snapshots and len(members) > 255:
            raise _fail("isis.members", "the bank workload takes at most 255 members")
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
        raise _fail("gateway.db", "is required when the gateway is enabled")
    t.finish()

    top.used.update({"ports", "peers", "faults", "discovery", "gossip", "isis", "link",
                     "gateway"})
    top.finish()
    # Every protocol seals with the key (the node builds its wire whatever runs: a
    # gateway-only node needs it too); Chatter's original wire encrypts with it too.
    sealing = (discovery, gossip, isis, link, gateway)
    if gossip.enabled or (
        node.wire is WireMode.SEALED and any(section.enabled for section in sealing)
    ):
        node = replace(node, key=_key(node.key_file, env))
    return NodeConfig(
        node=node, ports=ports, peers=peers, faults=faults, discovery=discovery,
        gossip=gossip, isis=isis, link=link, gateway=gateway,
    )


def _peers(raw: Any, node_id: str) -> tuple[PeerConfig, ...]:
    if not isinstance(raw, list):
        raise _fail("peers", "must be an array of tables ([[peers]])")
    peers: list[PeerConfig] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        t = _Table(item, f"peers[{index}]")
        peer_id = t.string("id")
        if peer_id == node_id:
            raise _fail(t.key("id"), f"is this node's own id ({peer_id!r})")
        if peer_id in seen:
            raise _fail(t.key("id"), f"{peer_id!r} is listed twice")
        seen.add(peer_id)
        peers.append(PeerConfig(
            id=peer_id,
            address=t.string("address"),
            ports=_ports(_Table(t.raw("ports", {}), t.key("ports"))),
            subnet=t.integer("subnet", None),
        ))
        t.finish()
    return tuple(peers)


def _faults(raw: Any, check_ids: Callable[..., None]) -> FaultsSection:
    t = _Table(raw, "faults")
    parts_raw = t.raw("partition", [])
    if not isinstance(parts_raw, list):
        raise _fail("faults.partition", "must be an array of tables ([[faults.partition]])")
    parts: list[Partition] = []
    for index, item in enumerate(parts_raw):
        p = _Table(item, f"faults.partition[{index}]")
        peers = p.strings("peers")
        check_ids(p.key("peers"), peers, self_ok=False)
        start = p.number("from")
        end = p.number("to")
        if end <= start:
            raise _fail(p.key("to"), f"must be > from ({_num(start)})")
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


def _wire(t: _Table) -> WireMode:
    try:
        return parse_wire(t.string("wire", "sealed"))
    except ConfigError:
        raise _fail(t.key("wire"), "must be 'sealed' or 'original'") from None


def _key(key_file: Path | None, env: Mapping[str, str]) -> bytes:
    """The group key: ``GOSSAMER_KEY`` or the key file (DESIGN.md: never a default key)."""
    text = env.get(KEY_ENV)
    where = KEY_ENV
    try:
        if text:
            key = parse_key(text.encode())
        elif key_file is None:
            raise _fail(
                "node.key_file",
                f"is required on the sealed wire (or {KEY_ENV}); there is no default key",
            )
        else:
            where = "node.key_file"
            try:
                key = parse_key(key_file.read_bytes())
            except OSError as exc:
                raise _fail(where, f"cannot be read ({exc.strerror})") from None
        Wire(key=key)  # the checks every key gets: length, known public keys
    except ConfigError as exc:
        if getattr(exc, "key", None):
            raise
        raise _fail(where, str(exc)) from None
    return key


def _apply_env(data: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    for name in sorted(env):
        if not name.startswith(_ENV_PREFIX):
            continue
        parts = name[len(_ENV_PREFIX):].lower().split("__")
        if len(parts) != 2 or not all(parts):
            raise _fail(name, "must be GOSSAMER__<SECTION>__<KEY>")
        section, key = parts
        if section == "peers":
            raise _fail(name, "peers cannot be overridden from the environment")
        table = out.setdefault(section, {})
        if not isinstance(table, dict):
            raise _fail(name, f"{section} is not a table")
        table[key] = _env_value(env[name])
    return out


def _env_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> NodeConfig:
    """Read, override (``env``, default ``os.environ``) and validate a node's TOML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the configuration {path}: {exc}", path=str(path)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", path=str(path)) from None
    return parse_config(
        data, base=path.resolve().parent, env=os.environ if env is None else env
    )
