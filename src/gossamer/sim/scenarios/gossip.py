"""Scenario ``gossip``: Chatter broadcasts over a tree of TCP hops and per-subnet multicast.

    gossamer sim --scenario gossip --nodes N --param subnets=S --param broadcasts=B
                 --param size=BYTES --param multicast=on|off --param crashed=FRACTION
                 --param destinations=D

Timeline: every node boots at 0; with multicast on, every node announces itself
``announce`` times (a broadcast to nobody, which still multicasts on its LAN) so that LAN
peers see each other; ``warmup`` broadcasts from random nodes let nodes learn the other
subnets; then ``crashed`` of the nodes crash, and ``broadcasts`` measured broadcasts of
``size`` bytes go from random live nodes, ``interval`` apart. Each broadcast is addressed
to everyone, or to ``destinations`` nodes drawn at random when there are more nodes than
that. The summary checks that every live addressee delivered every measured broadcast
exactly once, reports depth, TCP messages and bytes, redundant receptions, and checks
bounded state.

Cost. A multicast reaches its whole subnet and carries its sender's seen list (a subnet's
worth of entries), so the announcements cost a subnet's size squared per subnet; every
receiver of a broadcast records every addressee it carries as a peer; and every node keeps
a session per sender it hears. Unless told otherwise the scenario therefore keeps subnets
at 32 nodes (``subnets`` defaults to one per 32 nodes), addresses each broadcast to at
most 128 nodes and lets a node remember at most 128 peers (the core's ``max_peers``): a
run then costs time and memory linear in the node count (``bench/sim_scale.py``). None of
these bounds changes a run of at most 32 nodes. ``--param destinations=N`` addresses
everyone, at a cost quadratic in N.

Transports in the simulator: each node is its core under the multi-connection contract
(``gossamer.proto.gossip.connections.GossipConnections``) on the simulator's TCP
(``gossamer.sim.streams``): one connection per next hop, opened on first use, bytes in
order and never lost, partitions stalling them. Multicast datagrams go to the group
(224.1.1.1:29999, per subnet) through the engine, and the fault plan (``--drop``,
``--dup``, ``--delay``, ``--reorder``) applies to them and not to TCP, which hides loss.
A crashed node's host answers what reaches it with a reset, so a next hop that crashed
is re-planned as soon as the bytes sent to it come back refused (``stream_failed``).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.proto.gossip import (
    GossipConfig,
    GossipCore,
    MessageHandler,
    WireMode,
)
from gossamer.proto.gossip.connections import GossipConnections, TransportCore
from gossamer.sim.engine import NodeContext, Simulator
from gossamer.sim.scenarios import (
    Param,
    Scenario,
    Summarize,
    non_negative_float,
    positive_int,
    register,
    subnets_param,
)
from gossamer.sim.streams import StreamNetwork, StreamPort
from gossamer.trace.schema import TraceEvent
from gossamer.trace.sink import TraceSink
from gossamer.wire.chatter import ChatterCodec, NetID
from gossamer.wire.keyring import DEFAULT_CACHE_SIZE, Keyring
from gossamer.wire.mode import parse_wire

__all__ = [
    "GROUP",
    "PORT",
    "GossipSim",
    "GossipStats",
    "TransportCore",
    "sim_content",
    "sim_handler",
]

PORT = 29999
GROUP = "224.1.1.1"
#: Nodes per subnet, and addressees per broadcast, unless told otherwise (see "Cost").
LAN = 32
DESTINATIONS = 128
#: Peers a node remembers at most, unless told otherwise (see "Cost").
MAX_PEERS = 128
#: The simulator's stand-in key: simulated traffic never leaves the process.
SIM_KEY = b"gossamer-simulation-key-32-bytes"


def sim_content(label: str, size: int, *, extra: bytes = b"") -> bytes:
    """``size`` bytes: ``label|``, ``extra``, then bytes that do not compress (derived from the
    label, so runs are reproducible). Chatter's format compresses what it carries, and
    padding that compresses to nothing would flatter it."""
    head = label.encode() + b"|" + extra
    filler = random.Random(label).randbytes(max(0, size - len(head)))
    return head + filler


def sim_handler() -> MessageHandler:
    """The payload type of simulated broadcasts: ``("sim", label, size)``, carried as
    ``sim_content(label, size)``."""

    def encode(payload: object, id_map: Mapping[NetID, int]) -> bytes:
        assert isinstance(payload, tuple)
        return sim_content(str(payload[1]), int(payload[2]))

    def decode(data: bytes, index_map: Mapping[int, NetID]) -> object:
        label, _, _ = data.partition(b"|")
        return ("sim", label.decode(errors="replace"), len(data))

    return MessageHandler(name="sim", encode_with=encode, decode_with=decode)


@dataclass(slots=True)
class _Copy:
    """One node's view of one broadcast (``GossipStats``)."""

    first_hop: int | None = None
    first_t: float | None = None
    #: Who the first copy came from, and how (for drawing the tree).
    first_peer: str | None = None
    first_via: str | None = None
    receptions: int = 0
    tcp_receptions: int = 0
    deliveries: int = 0


@dataclass(slots=True)
class _Broadcast:
    origin: str
    t: float
    copies: dict[str, _Copy] = field(default_factory=dict)
    tcp_sends: int = 0
    tcp_bytes: int = 0
    udp_sends: int = 0
    udp_bytes: int = 0
    multicast_sends: int = 0
    multicast_datagrams: int = 0
    multicast_bytes: int = 0
    replans: int = 0


class GossipStats:
    """A trace sink that keeps per-broadcast figures of ``layer=gossip`` events.

    The same figures ``gossamer.analysis.checks.gossip`` computes from trace files, kept in
    memory so that large simulations need no files: for each broadcast (``msg``) the origin,
    each node's first hop and receptions, deliveries, and the sends by transport.
    """

    def __init__(self) -> None:
        self.broadcasts: dict[str, _Broadcast] = {}
        self.drops: Counter[str] = Counter()

    def emit(self, event: TraceEvent) -> None:
        if event.layer != "gossip":
            return
        msg = event.msg
        if event.kind == "drop":
            self.drops[event.attrs.get("reason", "?")] += 1
            return
        if msg is None:
            return
        if event.kind == "broadcast":
            self.broadcasts[msg] = _Broadcast(origin=event.node, t=event.t)
            return
        record = self.broadcasts.get(msg)
        if record is None:
            return
        kind = event.kind
        if kind == "send":
            via = event.attrs.get("via")
            if via == "multicast":
                copies = int(event.attrs.get("copies", "1"))
                record.multicast_sends += 1
                record.multicast_datagrams += copies
                record.multicast_bytes += (event.size or 0) * copies
            elif via == "tcp":
                record.tcp_sends += 1
                record.tcp_bytes += event.size or 0
            else:
                record.udp_sends += 1
                record.udp_bytes += event.size or 0
        elif kind == "recv":
            copy = record.copies.get(event.node)
            if copy is None:
                copy = record.copies[event.node] = _Copy()
            copy.receptions += 1
            if event.attrs.get("via") == "tcp":
                copy.tcp_receptions += 1
            hop_text = event.attrs.get("hop")
            hop = int(hop_text) if hop_text else None
            if copy.first_t is None:
                copy.first_t = event.t
                copy.first_peer = event.peer
                copy.first_via = event.attrs.get("via")
            if hop is not None and (copy.first_hop is None or hop < copy.first_hop):
                copy.first_hop = hop
        elif kind == "deliver":
            copy = record.copies.get(event.node)
            if copy is None:
                copy = record.copies[event.node] = _Copy()
            copy.deliveries += 1
        elif kind == "replan":
            record.replans += 1

    def figures(
        self, msg: str, live: Sequence[str], addressed: Collection[str] | None = None
    ) -> dict[str, Any]:
        """Coverage of ``live`` nodes (the origin excluded; only those in ``addressed``
        when given), depth, sends and redundancy."""
        record = self.broadcasts[msg]
        targets = [
            node
            for node in live
            if node != record.origin and (addressed is None or node in addressed)
        ]
        delivered = [n for n in targets if (c := record.copies.get(n)) and c.deliveries]
        hops = [c.first_hop for c in record.copies.values() if c.first_hop is not None]
        receptions = sum(c.receptions for c in record.copies.values())
        receivers = sum(1 for c in record.copies.values() if c.receptions)
        times = [c.first_t for c in record.copies.values() if c.first_t is not None]
        return {
            "msg": msg,
            "origin": record.origin,
            "coverage": len(delivered) / len(targets) if targets else 1.0,
            "missing": len(targets) - len(delivered),
            "depth": max(hops, default=0),
            "tcp_sends": record.tcp_sends,
            "tcp_bytes": record.tcp_bytes,
            "udp_sends": record.udp_sends,
            "udp_bytes": record.udp_bytes,
            "multicast_sends": record.multicast_sends,
            "multicast_datagrams": record.multicast_datagrams,
            "multicast_bytes": record.multicast_bytes,
            "redundant": receptions - receivers,
            "max_deliveries": max((c.deliveries for c in record.copies.values()), default=0),
            "max_tcp_receptions": max(
                (c.tcp_receptions for c in record.copies.values()), default=0
            ),
            "replans": record.replans,
            "time_to_cover": (max(times) - record.t) if times else 0.0,
        }


class _Tee:
    """Sends each event to a node's own sink and to the shared statistics."""

    __slots__ = ("sinks",)

    def __init__(self, *sinks: TraceSink) -> None:
        self.sinks = sinks

    def emit(self, event: TraceEvent) -> None:
        for sink in self.sinks:
            sink.emit(event)


CoreFactory = Callable[[NodeContext, NetID], TransportCore]


@dataclass(frozen=True, slots=True, kw_only=True)
class GossipParams:
    """The scenario's parameters (see ``SCENARIO``)."""

    subnets: int = 1
    broadcasts: int = 4
    size: int = 64
    multicast: bool = True
    crashed: float = 0.0
    announce: int = 2
    warmup: int = 0
    interval: float = 1.0
    wire: WireMode = WireMode.SEALED
    copies: int | None = None
    ack_timeout: float = 0.5
    #: Addressees of each warmup and measured broadcast (``None``: everyone).
    destinations: int | None = None
    #: Peers a node remembers at most (``None``: the core's default).
    max_peers: int | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> GossipParams:
        return cls(**{k: v for k, v in values.items() if k in cls.__slots__})


class GossipSim:
    """Builds a gossip cluster on a ``Simulator`` and schedules its phases.

    Also used by ``bench/gossip.py`` with other cores (``core_factory``) on the same
    topology. ``multicast_faults`` (the engine's fault plan, which only datagrams meet)
    may be changed between phases.
    """

    def __init__(
        self,
        sim: Simulator,
        nodes: int,
        params: GossipParams,
        *,
        core_factory: CoreFactory | None = None,
    ) -> None:
        if not 0.0 <= params.crashed < 1.0:
            raise ConfigError("crashed must be a fraction in [0, 1)", crashed=params.crashed)
        self.sim = sim
        self.params = params
        self.stats = GossipStats()
        self.streams = StreamNetwork(sim)
        self.rng = random.Random(sim.rng.getrandbits(64))
        self.netids: list[NetID] = []
        self.node_ids: list[str] = []
        self.measured: list[str] = []
        self.crashed: list[str] = []
        #: The addressees of the broadcasts not addressed to everyone, by trace id.
        self.addressed: dict[str, frozenset[str]] = {}
        # Deliveries are counted from the traces (``stats``): the engine need not keep them.
        sim.keep_events = False
        self._factory = core_factory or self.gossamer_core
        # What every node's core may share (``GossipCore``: caches of pure functions of the
        # key and the bytes): one copy for the cluster instead of one per node, each
        # session's cipher derived once for all its receivers (memory linear in the nodes).
        self._codec = ChatterCodec()
        self._keyring: Keyring | None = None
        subnets = max(1, min(params.subnets, nodes))
        if subnets > sim.network.subnets:
            raise ConfigError("the network has fewer subnets than asked", subnets=subnets)
        for i in range(nodes):
            host = sim.network.add_host(f"h{i}", subnet=i % subnets)
            netid = NetID(host.ip, PORT)
            self.netids.append(netid)
            self.node_ids.append(str(netid))
        for netid, node_id in zip(self.netids, self.node_ids, strict=True):
            found = sim.network.host_by_ip(netid.host)
            assert found is not None
            node = self.streams.add_node(
                node_id,
                found,
                PORT,
                self._wrap(netid),
                groups=(GROUP,) if params.multicast else (),
            )
            node.tracer.sink = _Tee(node.tracer.sink, self.stats)

    @property
    def multicast_faults(self) -> FaultPlan:
        return self.sim.faults

    @multicast_faults.setter
    def multicast_faults(self, plan: FaultPlan) -> None:
        self.sim.faults = plan

    def gossamer_core(self, ctx: NodeContext, netid: NetID) -> TransportCore:
        """The default core: ``GossipCore`` configured from the scenario's parameters."""
        p = self.params
        config = GossipConfig(
            my_addr=netid.host,
            my_port=netid.port,
            key=SIM_KEY if p.wire is WireMode.SEALED else b"simulation",
            wire=p.wire,
            multicast=p.multicast,
            multicast_copies=p.copies,
            ack_timeout=p.ack_timeout,
            # A restarted node must not reuse its seqnos (receivers would drop them).
            # Small seqnos the first time (short VarInts); each restart starts 2**32 higher.
            first_seqno=((ctx.incarnation - 1) << 32) + 1,
        )
        if p.max_peers is not None:
            config = dataclasses.replace(config, max_peers=p.max_peers)
        if self._keyring is None and p.wire is WireMode.SEALED:
            # A session per node and incarnation: room for every node's first two.
            sessions = max(DEFAULT_CACHE_SIZE, 2 * len(self.node_ids))
            self._keyring = config.keyring(cache_size=sessions)
        return GossipCore(
            config,
            tracer=ctx.tracer,
            rng=ctx.rng,
            handlers=[sim_handler()],
            epoch=ctx.incarnation,
            codec=self._codec,
            keyring=self._keyring,
        )

    def _wrap(self, netid: NetID) -> Callable[[NodeContext], GossipConnections]:
        def factory(ctx: NodeContext) -> GossipConnections:
            return GossipConnections(self._factory(ctx, netid), own=(netid.host, netid.port))

        return factory

    # -- workload ------------------------------------------------------------------------

    def schedule_announces(self, start: float, rounds: int, spread: float = 0.5) -> float:
        """Every node broadcasts to nobody ``rounds`` times (multicast only); returns the
        time after the last round."""
        for r in range(rounds):
            for node_id in self.node_ids:
                when = start + r * (spread + 0.5) + self.rng.uniform(0.0, spread)
                self.broadcast_at(node_id, [], when, label=f"announce-{r}")
        return start + rounds * (spread + 0.5)

    def broadcast_at(
        self,
        origin: str,
        dests: Sequence[NetID],
        when: float,
        *,
        label: str,
        size: int = 16,
        collect: list[str] | None = None,
    ) -> None:
        """Have ``origin`` broadcast ``("sim", label, size)`` at ``when``; its trace id is
        appended to ``collect`` when given."""
        payload = ("sim", label, size)
        everyone = len(dests) == len(self.netids)

        def request(node: GossipConnections, now: float) -> None:
            msg = node.core.broadcast(dests, payload, now)
            if collect is None:
                self.stats.broadcasts.pop(msg, None)  # not measured: no figures kept
            else:
                collect.append(msg)
                if not everyone:
                    self.addressed[msg] = frozenset(map(str, dests))

        self.streams.local(origin, request, when)

    def schedule_broadcasts(
        self,
        start: float,
        count: int,
        *,
        label: str,
        size: int,
        interval: float,
        collect: list[str] | None = None,
    ) -> float:
        """``count`` broadcasts from random nodes alive at ``start``, each to everyone or
        to ``params.destinations`` random nodes (when there are more)."""
        crashed = set(self.crashed)
        alive = [n for n in self.node_ids if n not in crashed]
        bound = self.params.destinations
        for k in range(count):
            origin = self.rng.choice(alive)
            dests = self.netids
            if bound is not None and bound < len(dests):
                dests = self.rng.sample(dests, bound)
            self.broadcast_at(
                origin,
                dests,
                start + k * interval,
                label=f"{label}-{k}",
                size=size,
                collect=collect,
            )
        return start + count * interval

    def schedule_crashes(self, when: float, fraction: float) -> None:
        """Crash ``fraction`` of the nodes at ``when`` (chosen now, at random)."""
        count = round(fraction * len(self.node_ids))
        self.crashed = sorted(self.rng.sample(self.node_ids, count))
        for node_id in self.crashed:
            self.sim.crash(node_id, when)

    def live(self) -> list[str]:
        return [n for n in self.node_ids if self.sim.nodes[n].alive]

    def summary(self, msgs: Sequence[str] | None = None) -> dict[str, Any]:
        """Figures and property checks over the measured broadcasts (or ``msgs``)."""
        live = self.live()
        msgs = list(self.measured if msgs is None else msgs)
        rows = [
            self.stats.figures(msg, live, self.addressed.get(msg))
            for msg in msgs
            if msg in self.stats.broadcasts
        ]
        violations: list[str] = []
        for row in rows:
            if row["max_deliveries"] > 1:
                violations.append(f"{row['msg']} delivered {row['max_deliveries']} times")
        pending = 0
        peers = 0
        for node_id in live:
            port = self.sim.nodes[node_id].core
            if isinstance(port, StreamPort) and isinstance(port.inner, GossipConnections):
                core = port.inner.core
                if isinstance(core, GossipCore):
                    pending += core.pending_hops
                    peers = max(peers, len(core.peers_db))
        return {
            "broadcasts": len(rows),
            "coverage_min": min((r["coverage"] for r in rows), default=1.0),
            "coverage_mean": _mean(r["coverage"] for r in rows),
            "depth_max": max((r["depth"] for r in rows), default=0),
            "tcp_sends_mean": _mean(r["tcp_sends"] for r in rows),
            "tcp_bytes_mean": _mean(r["tcp_bytes"] for r in rows),
            "multicast_sends_mean": _mean(r["multicast_sends"] for r in rows),
            "redundant_mean": _mean(r["redundant"] for r in rows),
            "replans": sum(r["replans"] for r in rows),
            "max_tcp_receptions": max((r["max_tcp_receptions"] for r in rows), default=0),
            "pending_hops_at_end": pending,
            "max_peers_known": peers,
            "crashed": len(self.crashed),
            "live": len(live),
            "violations": violations,
            "per_broadcast": rows,
        }


def _mean(values: Any) -> float:
    items = list(values)
    return round(sum(items) / len(items), 3) if items else 0.0


def _on_off(text: str) -> bool:
    if text in ("on", "true", "1", "yes"):
        return True
    if text in ("off", "false", "0", "no"):
        return False
    raise ValueError(f"{text!r} is not on or off")


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{text} is not a fraction in [0, 1)")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"{value} is negative")
    return value


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> Summarize:
    p = GossipParams.from_mapping(params)
    cluster = GossipSim(sim, nodes, p)
    t = 0.1
    if p.multicast and p.announce:
        t = cluster.schedule_announces(t, p.announce)
    t = cluster.schedule_broadcasts(t, p.warmup, label="warmup", size=p.size, interval=p.interval)
    if p.crashed:
        cluster.schedule_crashes(t, p.crashed)
    cluster.schedule_broadcasts(
        t + p.interval / 2,
        p.broadcasts,
        label="measured",
        size=p.size,
        interval=p.interval,
        collect=cluster.measured,
    )

    def summarize() -> dict[str, Any]:
        summary = cluster.summary()
        summary.pop("per_broadcast")
        summary["drops"] = dict(sorted(cluster.stats.drops.items()))
        return summary

    return summarize


SCENARIO = register(
    Scenario(
        name="gossip",
        description="Chatter broadcasts: log-depth TCP tree plus per-subnet multicast",
        default_duration=30.0,
        params=(
            subnets_param(LAN),
            Param(name="broadcasts", parse=_count, default=4, help="measured broadcasts"),
            Param(name="size", parse=_count, default=64, help="payload bytes"),
            Param(
                name="multicast",
                parse=_on_off,
                default=True,
                shown="on",
                help="on|off: use the multicast shortcut",
            ),
            Param(
                name="crashed",
                parse=_fraction,
                default=0.0,
                help="fraction of nodes crashed before the measured broadcasts",
            ),
            Param(
                name="announce",
                parse=_count,
                default=2,
                help="multicast-only announcements per node at start",
            ),
            Param(
                name="warmup",
                parse=_count,
                default=0,
                help="broadcasts to everyone before the measured ones",
            ),
            Param(
                name="interval",
                parse=non_negative_float,
                default=1.0,
                help="seconds between broadcasts",
            ),
            Param(
                name="wire",
                parse=parse_wire,
                default=WireMode.SEALED,
                shown="sealed",
                help="sealed|original",
            ),
            Param(
                name="copies",
                parse=positive_int,
                default=None,
                shown="2 (original: 1)",
                help="datagrams per multicast send",
            ),
            Param(
                name="ack_timeout",
                parse=non_negative_float,
                default=0.5,
                help="seconds before an unacknowledged next hop is re-planned",
            ),
            Param(
                name="destinations",
                parse=positive_int,
                default=DESTINATIONS,
                help="addressees of each broadcast, drawn at random when there are more nodes",
            ),
            Param(
                name="max_peers",
                parse=positive_int,
                default=MAX_PEERS,
                help="peers a node remembers at most (the least recently heard go first)",
            ),
        ),
        setup=_setup,
        lan=LAN,
    )
)
