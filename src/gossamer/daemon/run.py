"""``run_daemon(config)``: one member of a gossamer cluster, serving applications.

``gossamer node --config node.toml`` (``docs/node.md``). The daemon runs no workload of
its own: applications use the cluster through the 신경 gateway on its node (and through
the library APIs). It composes the public drivers of ``gossamer.aio``:

- discovery (Prototari) finds the other nodes: by the subnet's broadcast where
  ``discovery.broadcast_address`` is given, plus unicast to the seeds; without it, only
  by unicast to the seeds (loopback, or the machine's own namespace: nothing broadcast);
- the membership layer (``gossamer.aio.membership``) turns discovery's word into agreed
  views with ISIS total order flushed through them (``open_group``: virtual synchrony):
  cards, ``join_request``/``suspect``, founding or joining, incarnations;
- gossip (Chatter, no multicast unless configured) and a link node (Exon/A3M, sealed
  with the cluster key) carry the node-to-node traffic;
- the gateway server (one per node; the queues' store is ``gateway.db`` when given), joined
  to the other nodes' gateways over the link node (``gossamer.aio.gateway_cluster``),
  its queues in the cluster queue mode (on the total order, below):
  :class:`~gossamer.daemon.gateway_peers.GatewayPeers` adds every member that joins a
  view as a peer and removes every member that leaves, so a client connected to any
  node reaches the clients of every node.

**On the total order** rides the node's :attr:`Daemon.queues`
(:class:`~gossamer.daemon.queues.ClusterQueues`, ``Membership``'s ``Replicated``: every
``Delivered`` is applied to it in order, joiners start from the members' state): the
gateway's queues, replicated on every member (``docs/node.md``, "Queues on the
cluster"); ``Daemon.multicast`` multicasts in the order. The gateway
(:attr:`Daemon.gateway`, its cluster layer :attr:`Daemon.gateway_cluster`) follows the
agreed view through :meth:`Daemon.on_view`; :meth:`Daemon.gateway_event` sees every
``ClientJoined``/``ClientLeft`` of this node's own clients.

It prints one JSON status line per event on standard output: ``ready`` (its name,
incarnation and every service's address), ``view`` (each view it installs),
``progress`` every second (view id and members, peers, gateway clients and peers,
blocked, and ``ordered``: the count and digest of the total order), and
``done`` once stopped; SIGTERM or SIGINT stops it cleanly (discovery's leave, the
gateway's goodbye to clients, the trace flushed). Traces go to ``node.trace``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import sys
import time
from typing import Any, Final, TextIO

from gossamer._types import Address
from gossamer.addresses import format_address
from gossamer.aio.discovery import Discovery, open_discovery
from gossamer.aio.gateway_cluster import GatewayCluster, open_gateway_cluster
from gossamer.aio.gateway_server import GatewayServer, open_gateway_server
from gossamer.aio.gossip import Gossip, open_gossip
from gossamer.aio.link import Node, open_node
from gossamer.aio.membership import Card, Membership, clock_incarnation
from gossamer.daemon.config import DaemonConfig
from gossamer.daemon.gateway_peers import GatewayPeers
from gossamer.daemon.process import StatusLines, seeded, stop_on_signals
from gossamer.daemon.queues import ClusterQueues
from gossamer.errors import ClosedError
from gossamer.proto.discovery import DiscoveryConfig
from gossamer.proto.gateway.core import ClientJoined, ClientLeft
from gossamer.proto.gossip import GossipConfig
from gossamer.proto.snapshot_group import SnapshotGroupEvent
from gossamer.proto.views import Member, View, ViewInstalled
from gossamer.store.queues import SqliteQueueStore
from gossamer.trace.peer_names import PeerNames
from gossamer.trace.sink import JsonlSink, NullSink, Tracer, TraceSink

#: ``IsisConfig`` options of ISIS in the node's group: what one turn of the event loop
#: sends to a member shares a datagram (``batch_turn``). Under load a command's Data, Acks
#: and Seqs to a member then leave together (one ``sendto`` instead of several, the
#: largest cost per command); alone, a message waits for no timer, only for its turn's end.
ISIS_OPTIONS: Final[dict[str, Any]] = {"batch_turn": True}

__all__ = ["Daemon", "run_daemon"]

#: Seconds between progress lines.
PROGRESS_EVERY = 1.0
#: Closing must be over well within 5 s of SIGTERM (the lab's budget for its processes).
SHUTDOWN_BUDGET = 3.5


class Daemon:
    """One running node (``run_daemon`` drives it)."""

    def __init__(self, config: DaemonConfig, out: TextIO) -> None:
        self.config = config
        self.status = StatusLines(out, config.node.name)
        self.wire = config.cluster.wire()
        n = config.node
        self.sink = None if n.trace is None else JsonlSink(n.trace, durable=True)
        #: Peers' endpoints -> their names, filled by the membership from the cards: the
        #: trace names peers as the analysis joins them (by node name).
        self.peer_names: dict[str, str] = {}
        sink: TraceSink = (
            NullSink() if self.sink is None else PeerNames(self.sink, self.peer_names)
        )
        self.tracer = Tracer(sink, run=config.cluster.name, node=n.name)
        self.incarnation = clock_incarnation()
        self.stop = asyncio.Event()
        self.discovery: Discovery | None = None
        self.membership: Membership | None = None
        self.gossip: Gossip | None = None
        self.link: Node | None = None
        self.gateway: GatewayServer | None = None
        self.gateway_cluster: GatewayCluster | None = None
        self.gateway_peers: GatewayPeers | None = None
        self.store: SqliteQueueStore | None = None
        self.view: View | None = None
        #: The state on the cluster's total order (module docstring): the queues,
        #: created in ``start``.
        self.queues: ClusterQueues | None = None
        self.clients = 0
        self.tasks: set[asyncio.Task[Any]] = set()

    def rng(self, salt: int) -> random.Random:
        """Random stream ``salt`` of this incarnation: ``node.seed`` makes a run
        reproducible, and the incarnation keeps a restarted node from drawing what its
        previous incarnation drew (its link ids, its nonces) again."""
        return seeded(self.config.node.seed * 1_000_003 + self.incarnation, salt)

    # -- start -----------------------------------------------------------------------

    async def start(self) -> None:
        c = self.config
        host = c.node.address
        services: dict[str, Address] = {}
        if c.gateway.db is not None:
            self.store = SqliteQueueStore(c.gateway.db)
        gateway_config = dataclasses.replace(
            c.gateway_config(), trace_name=f"{c.node.name}#{self.incarnation}"
        )
        # The queues ride on the cluster's order, on every member (a node without a
        # gateway holds them too: it counts in the majorities). Their store is theirs,
        # not the gateway's, which decides nothing about queues in that mode.
        self.queues = ClusterQueues(
            name=c.node.name, incarnation=self.incarnation, store=self.store,
            config=gateway_config.queues, wire=self.wire, tracer=self.tracer,
            address_of=self.queues_address,
        )
        services.update(await self.queues.start(host))
        if c.gateway.enabled:
            self.gateway = await open_gateway_server(
                gateway_config, host=host, port=c.ports.gateway, tracer=self.tracer,
                rng=self.rng(5), on_event=self.gateway_event,
            )
            self.queues.attach(self.gateway)
            services["gateway"] = self.gateway.address
        if c.link.enabled:
            self.link = await open_node(host, c.ports.link, tracer=self.tracer,
                                        seed=self.rng(4).getrandbits(64), wire=self.wire,
                                        **c.link_options())
            services["link"] = self.link.address
        if self.gateway is not None and self.link is not None:
            # Open before the first card goes out: a peer may link to us at once.
            self.gateway_cluster = await open_gateway_cluster(self.gateway, self.link)
            self.gateway_peers = GatewayPeers(self.gateway_cluster, self.card_of)
        if c.gossip.enabled:
            self.gossip = await open_gossip(
                GossipConfig(my_addr=host, my_port=c.ports.gossip, **c.gossip.protocol),
                wire=self.wire, tracer=self.tracer, rng=self.rng(3),
            )
            services["gossip"] = self.gossip.address
        discovery = self._discovery_config()
        self.discovery = await open_discovery(
            discovery, wire=self.wire, tracer=self.tracer, rng=self.rng(1)
        )
        services["discovery"] = self.discovery.address
        self.membership = Membership(
            self.discovery, cluster=c.cluster.name, wire=self.wire,
            me=Member(name=c.node.name, incarnation=self.incarnation,
                      address=(host, c.ports.views)),
            bootstrap=c.cluster.bootstrap, bootstrap_wait=c.cluster.bootstrap_wait,
            views_options=c.views, isis_options=ISIS_OPTIONS,
            services=services, replicated=self.queues,
            on_view=self.on_view, on_event=self.group_event,
            targets=self.discovery.config.broadcast_targets,
            tracer=self.tracer, rng=self.rng(2), names=self.peer_names,
        )
        await self.membership.start()
        if self.queues is not None:
            self.queues.send = self.multicast
            learning = asyncio.ensure_future(self.queues.keep_learning())
            self.tasks.add(learning)

    def _discovery_config(self) -> DiscoveryConfig:
        c, d = self.config, self.config.discovery
        seeds = c.cluster.seeds
        if d.broadcast_address is not None:
            # A subnet's broadcast, and a unicast copy to each seed (another subnet's
            # nodes, behind a router that forwards no broadcast) and to each node the
            # membership learns of.
            broadcast = d.broadcast_address
            targets: tuple[Address, ...] = ((broadcast, c.ports.discovery_broadcast), *seeds)
            listen = None
        else:
            # Nothing may be broadcast: each "broadcast" goes as unicast to the seeds
            # (and the nodes the membership learns of), whose unicast port takes it
            # like the broadcast port would.
            broadcast = c.node.address
            targets = seeds
            listen = c.ports.discovery_broadcast
        return DiscoveryConfig(
            address=(c.node.address, c.ports.discovery), broadcast_address=broadcast,
            broadcast_port=c.ports.discovery_broadcast, listen_port=listen,
            broadcast_targets=targets, node_id=c.node.name, **d.protocol,
        )

    # -- what the next layers attach to -----------------------------------------------

    def on_view(self, event: ViewInstalled) -> None:
        """A view was installed here (after ``replicated`` saw it): the gateway's peers
        follow it (in the background)."""
        self.view = event.view
        if self.queues is not None:
            self.queues.on_view(event.view)
        self.status("view", id=event.view.id, members=_members(event.view),
                    agreed_by=list(event.agreed_by))
        if self.gateway_peers is not None:
            self.gateway_peers.on_view(event.view)

    def group_event(self, event: SnapshotGroupEvent) -> None:
        """The group's other events (``Blocked``, ``Unblocked``, ``Excluded``...): the
        queues refuse while the node may not order."""
        if self.queues is not None:
            self.queues.on_group_event(event)

    async def multicast(self, data: bytes) -> None:
        """``data`` in the cluster's total order (``ClosedError`` when not a member)."""
        group = None if self.membership is None else self.membership.group
        if group is None or group.closed:
            raise ClosedError("not a member of the cluster's group")
        await group.send(data)

    def queues_address(self, member: str, service: str) -> Address | None:
        """Where member ``name#incarnation`` serves ``service`` (``queues``,
        ``queues_state``), as its card says, if this node holds it."""
        name, _, incarnation = member.rpartition("#")
        card = self.card_of(name, int(incarnation)) if incarnation.isdigit() else None
        return None if card is None else card.services.get(service)

    def card_of(self, name: str, incarnation: int) -> Card | None:
        """The card of member ``name#incarnation``, if this node holds it."""
        assert self.membership is not None
        for card in self.membership.cards.values():
            if card.name == name and card.incarnation == incarnation:
                return card
        return None

    def gateway_event(self, event: object) -> None:
        """The gateway's ``ClientJoined``/``ClientLeft`` for its own clients (counted for the
        progress lines)."""
        if isinstance(event, ClientJoined):
            self.clients += 1
        elif isinstance(event, ClientLeft):
            self.clients -= 1

    # -- running -----------------------------------------------------------------------

    def ready(self) -> None:
        assert self.membership is not None
        me = self.membership.me
        addresses = {"views": me.address, **self.membership.services}
        self.status("ready", cluster=self.config.cluster.name, incarnation=me.incarnation,
                    addresses={k: format_address(v) for k, v in addresses.items()})

    async def progress(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            assert self.membership is not None and self.discovery is not None
            group = self.membership.group
            self.status(
                "progress", incarnation=self.membership.me.incarnation,
                state=self.membership.state,
                view=None if self.view is None else self.view.id,
                members=None if self.view is None else _members(self.view),
                peers=len(self.discovery.peers()), clients=self.clients,
                gateway_peers=None if self.gateway_peers is None
                else sorted(self.gateway_peers.linked),
                blocked=bool(group is not None and not group.closed and group.blocked),
                ordered=self.ordered(),
            )

    def ordered(self) -> dict[str, Any]:
        """The replicated state, equal at members that applied the same sequence."""
        queues = self.queues
        assert queues is not None
        # The history's digest, not the state's: kept as it goes, nothing to compute.
        stats = queues.machine.book.stats().values()
        return {"count": queues.machine.position, "digest": queues.machine.chain,
                "messages": sum(q["ready"] + q["inflight"] + q["dead"] for q in stats),
                "syncing": queues.syncing, "refusing": queues.refusing}

    async def shutdown(self) -> None:
        """Close every service within ``SHUTDOWN_BUDGET``. Traced first: ``net``/``stop``,
        a *clean* stop (a crash is a ``net``/``fault``), after which the node starts
        nothing new; what was in flight then is unfinished, not lost (docs/analysis.md):
        ``isis``/``stop`` (``IsisCore.trace_stop``) names it once the group is closed."""
        self.tracer(time.monotonic(), "net", "stop")
        if self.queues is not None:
            self.queues.stop_proposing()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SHUTDOWN_BUDGET):
                await self._close_all()
        if self.discovery is not None:
            self.discovery.abort()
        group = None if self.membership is None else self.membership.group
        if group is not None and group.core.isis is not None:
            # What total order leaves in flight, so that the analysis calls it unfinished
            # at a clean stop rather than lost.
            group.core.isis.trace_stop(time.monotonic())
        if self.store is not None:
            self.store.close()
        if self.sink is not None:
            self.sink.close()

    async def _close_all(self) -> None:
        if self.membership is not None:
            await self.membership.close()
        if self.discovery is not None:
            await self.discovery.close()  # agur! to every peer: they suspect us at once
        if self.gateway_peers is not None:
            await self.gateway_peers.close()
        if self.gateway_cluster is not None:
            await self.gateway_cluster.close()
        if self.gateway is not None:
            await self.gateway.close()  # goodbye (op 7) to every client
        if self.queues is not None:
            await self.queues.close()
        if self.gossip is not None:
            await self.gossip.close()
        if self.link is not None:
            await self.link.close(timeout=0.5)


def _members(view: View) -> list[str]:
    return [f"{m.name}#{m.incarnation}" for m in view.members]


async def run_daemon(config: DaemonConfig, *, out: TextIO | None = None) -> int:
    """Run the node until SIGTERM or SIGINT; returns 0.

    Raises ``NetworkError`` (an ``OSError``) when a port cannot be bound and
    ``GossamerError`` for a configuration the drivers refuse; the caller turns them into
    exit codes.
    """
    daemon = Daemon(config, sys.stdout if out is None else out)
    with stop_on_signals(daemon.stop):
        try:
            await daemon.start()
            daemon.ready()
            progress = asyncio.ensure_future(daemon.progress())
            daemon.tasks.add(progress)
            await daemon.stop.wait()
        finally:
            await daemon.shutdown()
    daemon.status("done")
    return 0
