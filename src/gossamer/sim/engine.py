"""The discrete-event simulator: protocol cores on a virtual clock.

One ``(time, seq)``-ordered event queue and one seeded ``random.Random`` make a
run a pure function of its inputs: the same scenario, seed and faults give the
same trace, byte for byte. Nothing here iterates a ``set`` of strings (whose
order changes between processes); every collection that is walked is a list or
an insertion-ordered dict.

Each node is a sans-I/O ``DatagramCore`` bound to a host address and a port.
After every input the simulator drains the core's outputs, routes each datagram
through the network (unicast, subnet broadcast, multicast groups), applies the
fault plan per receiver, and re-arms the node's single timer at ``next_deadline()``.

Every injected fault is counted in ``fault_counts`` and traced as
``layer=net, kind=fault`` on the node it happened to, with ``attrs.fault`` naming it.
"""

from __future__ import annotations

import gc
import heapq
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gossamer._types import Address
from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.proto.core import DatagramCore
from gossamer.sim.network import Host, Network, is_multicast
from gossamer.trace.sink import Tracer, TraceSink

__all__ = ["NodeContext", "SimNode", "Simulator"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeContext:
    """What a core factory gets to build (or rebuild, after a restart) a node's core."""

    node_id: str
    host: Host
    port: int
    tracer: Tracer
    rng: random.Random
    now: float
    incarnation: int


CoreFactory = Callable[[NodeContext], DatagramCore]
EventHandler = Callable[["SimNode", object], None]


@dataclass(slots=True, kw_only=True)
class SimNode:
    """A node in the simulation: its address, its core and whether it is up."""

    node_id: str
    host: Host
    port: int
    groups: tuple[str, ...]
    factory: CoreFactory
    #: Every port the node receives on: ``port`` first, then any extra ones.
    ports: tuple[int, ...] = ()
    tracer: Tracer
    core: DatagramCore | None = None
    incarnation: int = 0
    armed_at: float | None = None
    timer_generation: int = 0
    #: The core's events, in order, when the simulator keeps them (``keep_events``).
    events: list[object] = field(default_factory=list)

    @property
    def address(self) -> Address:
        return (self.host.ip, self.port)

    @property
    def alive(self) -> bool:
        return self.core is not None


class Simulator:
    """Runs cores on a virtual clock over a simulated network with faults."""

    #: Objects per node the collector's youngest generation holds while ``run`` runs.
    YOUNG_PER_NODE = 10

    def __init__(
        self,
        *,
        seed: int,
        run: str,
        network: Network,
        faults: FaultPlan | None = None,
        sink_for: Callable[[str], TraceSink],
    ) -> None:
        self.now = 0.0
        self.seed = seed
        self.run_id = run
        self.rng = random.Random(seed)
        self.network = network
        self.faults = faults or FaultPlan()
        self.fault_counts: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()
        self.nodes: dict[str, SimNode] = {}
        self.on_event: EventHandler | None = None
        #: Keep every node's events in ``SimNode.events`` (memory grows with the run); a
        #: scenario that watches them through ``on_event`` instead turns this off.
        self.keep_events = True
        self._sink_for = sink_for
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._by_address: dict[Address, SimNode] = {}
        self._shared: dict[Address, list[SimNode]] = {}
        # Who a broadcast or multicast reaches, by (subnet, port) and (subnet, group, port),
        # in the order the nodes were added: routing costs the receivers, not all nodes.
        self._listeners: dict[tuple[int, int], list[SimNode]] = {}
        self._groups: dict[tuple[int, str, int], list[SimNode]] = {}

    # -- scheduling -----------------------------------------------------------

    def at(self, when: float, action: Callable[..., None], *args: Any) -> None:
        """Run ``action(*args)`` at virtual time ``when`` (not before now).

        Passing the arguments rather than a closure that holds them saves the closure and
        its cells: the queue holds one entry per datagram and segment in flight."""
        self._seq += 1
        heapq.heappush(self._queue, (max(when, self.now), self._seq, action, args))

    def run(self, until: float) -> None:
        """Process events in (time, seq) order up to and including ``until``.

        While it runs, the cyclic garbage collector's youngest generation holds
        ``YOUNG_PER_NODE`` objects per node before a collection: a simulation's objects
        live for simulated time (a datagram in flight, a timer), and the more nodes, the
        more objects are made per simulated second, so with the interpreter's fixed
        threshold (700) a larger run has ever more of them survive into the oldest
        generation, whose collections walk the whole heap: CPU per event grew with the
        node count (``bench/sim_scale.py``). The cores make almost no cyclic garbage,
        so this costs no memory; the previous thresholds are restored on return."""
        queue = self._queue
        thresholds = gc.get_threshold()
        gc.set_threshold(
            max(thresholds[0], self.YOUNG_PER_NODE * len(self.nodes)), *thresholds[1:]
        )
        try:
            while queue and queue[0][0] <= until:
                when, _, action, args = heapq.heappop(queue)
                self.now = when
                action(*args)
        finally:
            gc.set_threshold(*thresholds)
        self.now = max(self.now, until)

    # -- nodes ----------------------------------------------------------------

    def add_node(
        self,
        node_id: str,
        host: Host,
        port: int,
        factory: CoreFactory,
        *,
        groups: Sequence[str] = (),
        extra_ports: Sequence[int] = (),
        start: float = 0.0,
    ) -> SimNode:
        """Add a node listening on ``host:port`` (and on the multicast ``groups``
        at the same port); its core is built by ``factory`` at time ``start``.

        ``extra_ports`` are further ports the node receives unicast and broadcast
        datagrams on (as a second socket would, e.g. Prototari's broadcast port).
        Like ``SO_REUSEPORT`` sockets, several nodes of one host may share an extra
        port: a broadcast reaches all of them, a unicast the first. The node always
        sends from ``port``, which stays exclusive, so receivers see
        ``(host.ip, port)`` as the source."""
        if node_id in self.nodes:
            raise ConfigError(f"duplicate node id {node_id!r}")
        ports = (port, *extra_ports)
        if len(set(ports)) != len(ports):
            raise ConfigError(f"node {node_id!r} lists a port twice", ports=ports)
        if (host.ip, port) in self._by_address or (host.ip, port) in self._shared:
            raise ConfigError(f"address {host.ip}:{port} is already taken")
        for p in extra_ports:
            if (host.ip, p) in self._by_address:
                raise ConfigError(f"address {host.ip}:{p} is already taken")
        for group in groups:
            if not is_multicast(group):
                raise ConfigError(f"{group} is not a multicast address")
        node = SimNode(
            node_id=node_id,
            host=host,
            port=port,
            groups=tuple(groups),
            factory=factory,
            ports=ports,
            tracer=Tracer(self._sink_for(node_id), run=self.run_id, node=node_id),
        )
        self.nodes[node_id] = node
        self._by_address[(host.ip, port)] = node
        for p in extra_ports:
            # Shared like SO_REUSEPORT sockets: every node of the host may listen on it.
            self._shared.setdefault((host.ip, p), []).append(node)
        for p in ports:
            self._listeners.setdefault((host.subnet, p), []).append(node)
        for group in groups:
            self._groups.setdefault((host.subnet, group, port), []).append(node)
        self.at(start, self._boot, node)
        return node

    def node(self, node_id: str) -> SimNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise ConfigError(f"unknown node {node_id!r}") from None

    def _boot(self, node: SimNode) -> None:
        node.incarnation += 1
        context = NodeContext(
            node_id=node.node_id,
            host=node.host,
            port=node.port,
            tracer=node.tracer,
            # A per-node generator derived from the run's one RNG: deterministic, and
            # independent of how many draws other nodes make later.
            rng=random.Random(self.rng.getrandbits(64)),
            now=self.now,
            incarnation=node.incarnation,
        )
        node.core = node.factory(context)
        node.armed_at = None
        self._flush(node)

    def local(
        self, node_id: str, request: Callable[[Any, float], None], when: float | None = None
    ) -> None:
        """Run a local request ``request(core, now)`` on a node at ``when`` (default: now).
        Ignored if the node is down at that time."""
        self.at(self.now if when is None else when, self._local, self.node(node_id), request)

    def _local(self, node: SimNode, request: Callable[[Any, float], None]) -> None:
        if node.core is not None:
            request(node.core, self.now)
            self._flush(node)

    # -- scheduled faults -----------------------------------------------------

    def crash(self, node_id: str, when: float) -> None:
        """Crash a node at ``when``: its core and all its state are lost."""
        node = self.node(node_id)

        def fire() -> None:
            if node.core is None:
                return
            node.core = None
            node.timer_generation += 1
            self._fault(node, "crash")

        self.at(when, fire)

    def restart(self, node_id: str, when: float) -> None:
        """Restart a crashed node at ``when`` with a fresh core from its factory."""
        node = self.node(node_id)

        def fire() -> None:
            if node.core is not None:
                return
            self._fault(node, "restart")
            self._boot(node)

        self.at(when, fire)

    def partition(self, node_ids: Sequence[str], start: float, end: float | None) -> None:
        """Cut the hosts of ``node_ids`` off from the rest between ``start`` and ``end``."""
        hosts = [self.node(n).host.name for n in node_ids]

        def cut() -> None:
            self.network.partition(hosts)
            for node_id in node_ids:
                self._fault(self.nodes[node_id], "partition")

        def heal() -> None:
            self.network.heal(hosts)
            for node_id in node_ids:
                self._fault(self.nodes[node_id], "heal")

        self.at(start, cut)
        if end is not None:
            self.at(end, heal)

    # -- the pump ---------------------------------------------------------------

    def _flush(self, node: SimNode) -> None:
        core = node.core
        if core is None:
            return
        for data, addr in core.datagrams_to_send():
            self._route(node, data, addr)
        events = core.events_received()
        if events:
            if self.keep_events:
                node.events.extend(events)
            if self.on_event is not None:
                for event in events:
                    self.on_event(node, event)
        deadline = core.next_deadline()
        if deadline is not None and deadline != node.armed_at:
            node.armed_at = deadline
            node.timer_generation += 1
            self.at(deadline, self._timer, node, node.timer_generation)
        elif deadline is None:
            node.armed_at = None

    def _timer(self, node: SimNode, generation: int) -> None:
        if node.core is None or generation != node.timer_generation:
            return  # superseded by a later re-arm, or the node crashed
        node.armed_at = None
        node.core.handle_timer(self.now)
        self._flush(node)

    def _route(self, sender: SimNode, data: bytes, addr: Address) -> None:
        ip, port = addr
        self.stats["datagrams_sent"] += 1
        receivers: Sequence[SimNode]
        if is_multicast(ip):
            receivers = self._groups.get((sender.host.subnet, ip, port), ())
        elif self.network.is_broadcast(ip, sender.host):
            receivers = self._listeners.get((sender.host.subnet, port), ())
        else:
            target = self._by_address.get(addr)
            if target is None and addr in self._shared:
                target = self._shared[addr][0]  # a unicast reaches one of the sharers
            receivers = [target] if target is not None else []
            if target is None:
                self.stats["unreachable"] += 1
        for receiver in receivers:
            self._transmit(sender, receiver, data)

    def _transmit(self, sender: SimNode, receiver: SimNode, data: bytes) -> None:
        if not self.network.connected(sender.host, receiver.host):
            self._fault(receiver, "partition_drop", peer=sender.node_id, size=len(data))
            return
        decision = self.faults.decide(self.rng)
        for fault in decision.faults:
            self._fault(receiver, fault, peer=sender.node_id, size=len(data))
        source = sender.address
        for extra in decision.copies:
            delay = self.network.latency(sender.host, receiver.host, self.rng) + extra
            self.at(self.now + delay, self._deliver, receiver, data, source)

    def _deliver(self, receiver: SimNode, data: bytes, source: Address) -> None:
        if receiver.core is None:
            self.stats["lost_to_crashed"] += 1
            return
        self.stats["datagrams_delivered"] += 1
        receiver.core.receive_datagram(data, source, self.now)
        self._flush(receiver)

    def _fault(
        self, node: SimNode, fault: str, *, peer: str | None = None, size: int | None = None
    ) -> None:
        self.fault_counts[fault] += 1
        node.tracer(self.now, "net", "fault", peer=peer, size=size, attrs={"fault": fault})
