"""The lab's application on one host: discovery, gossip, ISIS (+ snapshots), links, a
gateway and its clients in one process, with a built-in workload.

``run_app(config)`` is ``gossamer lab app --config FILE`` (``docs/lab-app.md`` has the
configuration and the process contract), the program ``gossamer lab run`` starts on each
host. It is an application of the library, not the cluster node (``gossamer node``, the
daemon, runs no workload: ``docs/lab-app.md``): it composes the public drivers of
``gossamer.aio`` exactly as their own commands do; no protocol decision is made here.
What the app adds is the composition and the application on top:

- discovery's ``peer_down`` (a crash or a leave of another node) removes that member
  from the ISIS group (``IsisService.remove_member``) and drops it from the gossip
  destinations, which are the peers discovery reports up (all peers without discovery);
- the workload, from ``node.start_at`` for ``node.duration`` seconds, at the configured
  rates, through the public APIs only: ISIS bank transfers (or counters), gossip
  broadcasts, link PUSHes, gateway SENDs and queue pushes between its own clients;
- with a ``[cluster]`` section (the lab's ``cluster`` and ``queues`` scenarios), no
  service of its own: only 신경 clients of its host's ``gossamer node`` daemon and their
  workload (``gossamer.lab.cluster_clients``, ``gossamer.lab.queue_clients``);
- every trace event goes through ``PeerNames`` (drivers name peers ``ip:port``, the
  analysis wants node ids) to one durable ``JsonlSink``;
- ``[faults]`` through ``LabFaults`` on its UDP drivers (discovery, ISIS);
- the status lines on standard output (``ready``, ``progress`` every second, four times
  a second after the workload, with ``idle``; ``done``),
  and the clean shutdown on SIGTERM/SIGINT or after ``duration + linger``.

``isis.broken_order = true`` inserts ``_BrokenOrder``, a TEST-ONLY layer that swaps
consecutive ISIS deliveries before they reach the application and the trace: the
"deliberately broken node" the analysis's total-order checker must catch. The protocol
cores are never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TextIO

from gossamer._types import Address
from gossamer.addresses import format_address
from gossamer.aio.discovery import Discovery, open_discovery
from gossamer.aio.faults import Direction, FaultInjector
from gossamer.aio.gateway_client import GatewayClient, Message, open_gateway_client
from gossamer.aio.gateway_server import GatewayServer, open_gateway_server
from gossamer.aio.gossip import Gossip, open_gossip
from gossamer.aio.link import Node, Socket, open_node
from gossamer.daemon.process import StatusLines, seeded, stop_on_signals
from gossamer.errors import ClosedError, GossamerError, LinkError
from gossamer.faults import FaultPlan
from gossamer.lab.cluster_clients import ClusterClients
from gossamer.lab.config import NodeConfig, PeerConfig
from gossamer.lab.group_member import LabGroup
from gossamer.lab.isis_member import IsisMember, StaticMember
from gossamer.lab.queue_clients import QueueClients
from gossamer.proto.discovery import DiscoveryConfig, PeerDown, PeerUp
from gossamer.proto.gateway.core import GatewayConfig
from gossamer.proto.gossip import GossipConfig, text_handler
from gossamer.proto.isis import Delivered, Member
from gossamer.proto.views import Member as ViewsMember
from gossamer.store.queues import SqliteQueueStore
from gossamer.trace.peer_names import PeerNames
from gossamer.trace.schema import TraceEvent
from gossamer.trace.sink import JsonlSink, Tracer, TraceSink

__all__ = ["APPLICATION", "QUEUE", "LabFaults", "run_app"]

#: The gateway application id of the node's clients, and the queue they share.
APPLICATION = "lab"
QUEUE = "lab-jobs"
#: Every member's starting balance in the bank workload.
INITIAL_BALANCE = 1_000_000
#: The shutdown must be over within 5 s of SIGTERM (docs/lab-app.md); this leaves margin.
SHUTDOWN_BUDGET = 3.5
#: Seconds between progress lines once the workload is over (the lab is waiting for
#: every node to be idle, and stops them as soon as they all are).
SETTLE_REPORT = 0.25
LINK_TAG = "lab"


# -- trace layers ---------------------------------------------------------------------------


class _BrokenOrder:
    """TEST ONLY (``isis.broken_order``): swaps each pair of consecutive ISIS deliveries.

    As a trace sink it holds an ``isis``/``deliver`` event back until the next one and
    writes the later first (both stamped with the later time, so that the trace's own
    order, ``(t, file, line)``, shows the inversion); ``pass_event`` does the same to
    the ``Delivered`` events the application sees. This is the deliberately broken node
    of issue #10, never a behaviour of the protocol core.
    """

    def __init__(self, inner: TraceSink) -> None:
        self.inner = inner
        self._trace_held: TraceEvent | None = None
        self._app_held: Delivered | None = None

    def emit(self, event: TraceEvent) -> None:
        if event.layer != "isis" or event.kind != "deliver":
            self.inner.emit(event)
        elif self._trace_held is None:
            self._trace_held = event
        else:
            held, self._trace_held = self._trace_held, None
            self.inner.emit(event)
            self.inner.emit(dataclasses.replace(held, t=event.t))

    def pass_event(self, event: Delivered, deliver: Callable[[Delivered], None]) -> None:
        if self._app_held is None:
            self._app_held = event
            return
        held, self._app_held = self._app_held, None
        deliver(event)
        deliver(held)

    def flush(self, deliver: Callable[[Delivered], None]) -> None:
        """Let the last held delivery through (in its place: nothing follows it)."""
        if self._trace_held is not None:
            held, self._trace_held = self._trace_held, None
            self.inner.emit(held)
        if self._app_held is not None:
            held_app, self._app_held = self._app_held, None
            deliver(held_app)


# -- faults ----------------------------------------------------------------------------------


class LabFaults(FaultInjector):
    """``[faults]`` for one UDP driver: the plan on outgoing datagrams, and partitions.

    A partition drops every datagram to or from one of its peers (both directions, so
    one side's configuration suffices) while ``start_at + from <= now < start_at + to``;
    each such datagram is counted and traced as fault ``drop`` with
    ``attrs.reason = partition``.
    """

    def __init__(
        self,
        config: NodeConfig,
        owners: Mapping[Address, str],
        *,
        rng: random.Random,
        tracer: Tracer,
    ) -> None:
        f = config.faults
        # docs/lab-app.md: "delay_rate of the datagrams are held delay_ms longer" is the
        # FaultPlan's reorder (a fraction held back a fixed time, overtaken by the rest).
        plan = FaultPlan(
            drop=f.drop,
            duplicate=f.duplicate,
            reorder=f.delay_rate if f.delay_ms else 0.0,
            reorder_by=f.delay_ms / 1000.0,
        )
        outgoing = None if plan.is_clean and not f.partitions else plan
        # A clean incoming plan makes the driver pass received datagrams through
        # ``blocked``, so one side's partition cuts both directions.
        incoming = FaultPlan() if f.partitions else None
        super().__init__(outgoing, incoming=incoming, rng=rng, tracer=tracer)
        self.owners = dict(owners)
        start = config.node.start_at
        self.windows = [
            (set(p.peers), start + p.start, start + p.end)
            for p in f.partitions
            if start is not None
        ]

    def partitioned(self, addr: Address, now: float) -> bool:
        owner = self.owners.get(addr)
        if owner is None:
            return False
        return any(owner in peers and lo <= now < hi for peers, lo, hi in self.windows)

    def blocked(self, direction: Direction, addr: Address) -> str | None:
        if self.windows and self.partitioned(addr, time.monotonic()):
            return "partition"
        return None


# -- the node --------------------------------------------------------------------------------


class _Counts:
    __slots__ = ("delivered", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.delivered = 0


class LabApp:
    """The running composition; ``run_app`` drives it."""

    def __init__(self, config: NodeConfig, out: TextIO) -> None:
        self.config = config
        self.wire = config.node.wire_config()
        self.status = StatusLines(out, config.node.id)
        n = config.node
        self.sink = JsonlSink(n.trace, durable=True)
        names: dict[str, str] = {}
        self.owners: dict[Address, str] = {}
        for peer_id, address, ports in [
            (n.id, n.address, config.ports),
            *((p.id, p.address, p.ports) for p in config.peers),
        ]:
            for port in ports.as_dict().values():
                names[f"{address}:{port}"] = peer_id
                self.owners[(address, port)] = peer_id
        layered: TraceSink = PeerNames(self.sink, names)
        self.broken: _BrokenOrder | None = None
        if config.isis.enabled and config.isis.broken_order:
            self.broken = _BrokenOrder(layered)
            layered = self.broken
        self.tracer = Tracer(layered, run=n.run, node=n.id)
        self.counts = _Counts()
        self.stop = asyncio.Event()
        self.stopping = False
        self.injectors: list[LabFaults] = []
        self.up: set[str] = set()
        self.discovery: Discovery | None = None
        self.isis: IsisMember | None = None  # static, or on agreed views (``[isis] views``)
        self.gossip: Gossip | None = None
        self.link_node: Node | None = None
        self.pull: Socket | None = None
        self.push: Socket | None = None
        self.gateway: GatewayServer | None = None
        self.store: SqliteQueueStore | None = None
        self.clients: list[GatewayClient] = []
        self.cluster: ClusterClients | QueueClients | None = None
        self.tasks: set[asyncio.Task[Any]] = set()

    # -- helpers ---------------------------------------------------------------

    def rng(self, salt: int) -> random.Random:
        return seeded(self.config.node.seed, salt)

    def spawn(self, coro: Awaitable[Any]) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def faults(self, salt: int) -> LabFaults | None:
        if not self.config.faults.active:
            return None
        injector = LabFaults(self.config, self.owners, rng=self.rng(salt), tracer=self.tracer)
        self.injectors.append(injector)
        return injector

    def peer_ids(self) -> list[str]:
        if self.discovery is None:
            return [p.id for p in self.config.peers]
        return sorted(self.up)

    # -- start -----------------------------------------------------------------

    async def start(self) -> None:
        c = self.config
        if c.discovery.enabled:
            await self._start_discovery()
        if c.isis.enabled:
            await self._start_isis()
        if c.gossip.enabled:
            self.gossip = await open_gossip(
                GossipConfig(my_addr=c.node.address, my_port=c.ports.gossip, **c.gossip.protocol),
                wire=self.wire, handlers=[text_handler()], tracer=self.tracer, rng=self.rng(3),
            )
            self.spawn(self._count_gossip(self.gossip))
        if c.link.enabled:
            await self._start_link()
        if c.gateway.enabled:
            await self._start_gateway()
        if c.cluster.enabled:
            # The cluster and queues scenarios: clients of this host's daemon, no server
            # of our own.
            workload = QueueClients if c.cluster.workload == "queues" else ClusterClients
            self.cluster = workload(c.cluster, self.tracer, self._delivered)
            await self.cluster.open(self.rng)

    async def _start_discovery(self) -> None:
        c, d = self.config, self.config.discovery
        names = {
            (p.address, p.ports.discovery): p.id for p in c.peers
        }
        if d.broadcast_address is not None:
            # Namespace hosts: a real subnet broadcast to the shared broadcast port, and
            # a unicast copy to each seed behind the router (which forwards no broadcast).
            seeds = tuple((p.address, p.ports.discovery) for p in c.peers if p.id in d.seeds)
            broadcast = d.broadcast_address
            targets = ((broadcast, c.ports.discovery_broadcast), *seeds) if seeds else ()
        else:
            # Loopback: nothing may be broadcast in the machine's own namespace, so each
            # "broadcast" goes as unicast to every peer's broadcast port.
            broadcast = c.node.address
            targets = tuple((p.address, p.ports.discovery_broadcast) for p in c.peers)
        config = DiscoveryConfig(
            address=(c.node.address, c.ports.discovery), broadcast_address=broadcast,
            broadcast_port=c.ports.discovery_broadcast, broadcast_targets=targets,
            names=names, node_id=c.node.id, **d.protocol,
        )
        self.discovery = await open_discovery(
            config, wire=self.wire, tracer=self.tracer, rng=self.rng(1), faults=self.faults(11),
        )
        self.spawn(self._follow_peers(self.discovery))

    async def _follow_peers(self, discovery: Discovery) -> None:
        async for event in discovery.events():
            self._on_peer(event)

    async def _count_gossip(self, gossip: Gossip) -> None:
        async for _delivered in gossip:
            self._delivered()

    def _on_peer(self, event: PeerUp | PeerDown) -> None:
        if isinstance(event, PeerUp):
            self.up.add(event.name)
            return
        self.up.discard(event.name)
        if event.local and event.reason == "leave":
            return  # our own leave: we are shutting down
        if self.isis is not None and event.name in self.config.isis.members and not self.stopping:
            self.isis.suspect(event.name)

    async def _start_isis(self) -> None:
        c = self.config

        def where(node_id: str) -> Address:
            if node_id == c.node.id:
                return (c.node.address, c.ports.isis)
            peer: PeerConfig = c.peer(node_id)
            return (peer.address, peer.ports.isis)

        members = tuple(
            Member(id=i, name=name, addr=where(name))
            for i, name in enumerate(c.isis.members, start=1)
        )
        if c.isis.views:
            founders = [
                ViewsMember(name=m.name, incarnation=1, address=m.addr) for m in members
            ]  # fmt: skip
            self.isis = LabGroup(
                next(m for m in founders if m.name == c.node.id), founders, wire=self.wire,
                isis=c.isis.protocol, snapshots=c.isis.snapshots, initial=INITIAL_BALANCE,
                tracer=self.tracer, rng=self.rng(4), faults=self.faults(12),
                on_delivered=self._on_isis,
            )  # fmt: skip
        else:
            self.isis = StaticMember(
                next(m.id for m in members if m.name == c.node.id), members, wire=self.wire,
                isis=c.isis.protocol, snapshots=c.isis.snapshots, initial=INITIAL_BALANCE,
                tracer=self.tracer, rng=self.rng(4), bank_rng=self.rng(2),
                faults=self.faults(12), on_delivered=self._on_isis,
            )  # fmt: skip
        await self.isis.start()

    def _on_isis(self, event: Delivered) -> None:
        if self.broken is not None:
            self.broken.pass_event(event, self._isis_delivered)
        else:
            self._isis_delivered(event)

    def _isis_delivered(self, event: Delivered) -> None:
        self._delivered()

    def _delivered(self) -> None:
        self.counts.delivered += 1

    async def _start_link(self) -> None:
        c = self.config
        options = dict(c.link.protocol)
        options["transport"] = options["transport"].value
        self.link_node = await open_node(
            c.node.address, c.ports.link, tracer=self.tracer, seed=c.node.seed, wire=self.wire,
            **options,
        )
        self.pull = self.link_node.socket("pull", tag=LINK_TAG, capacity=c.link.credit)
        self.spawn(self._pull_loop(self.pull))
        if c.link.push_to:
            self.push = self.link_node.socket("push", tag=f"{LINK_TAG}-push", capacity=0)
            for peer_id in c.link.push_to:
                peer = c.peer(peer_id)
                self.spawn(self._link_to(self.push, (peer.address, peer.ports.link)))

    async def _pull_loop(self, pull: Socket) -> None:
        while True:
            try:
                await pull.receive()
            except LinkError:
                continue
            except ClosedError:
                return
            self._delivered()

    async def _link_to(self, push: Socket, address: Address) -> None:
        # The peer may not listen yet: keep asking until it does (or we stop).
        while not self.stopping:
            try:
                await push.link(address, LINK_TAG, timeout=5.0)
                return
            except (LinkError, TimeoutError, OSError):
                await asyncio.sleep(0.2)

    async def _start_gateway(self) -> None:
        c = self.config
        assert c.gateway.db is not None
        self.store = SqliteQueueStore(c.gateway.db)
        self.gateway = await open_gateway_server(
            GatewayConfig(node_id=c.node.id, **c.gateway.protocol), host=c.node.address,
            port=c.ports.gateway,
            store=self.store, tracer=self.tracer, rng=self.rng(5),
        )
        dsn = f"singyeong://{APPLICATION}@{format_address(self.gateway.address)}"
        for index in range(c.gateway.clients):
            client = await open_gateway_client(
                dsn, client_id=f"{c.node.id}-c{index}",
                metadata={"host": c.node.id, "index": index,
                          "region": "eu" if index % 2 == 0 else "us"},
                rng=self.rng(100 + index), open_timeout=5.0, tracer=self.tracer,
            )
            self.clients.append(client)
            self.spawn(self._consume(client))

    async def _consume(self, client: GatewayClient) -> None:
        await client.queue_request(QUEUE)
        while True:
            try:
                message: Message = await client.receive()
            except ClosedError:
                return
            if message.event == "QUEUE" and message.queue and message.id:
                await client.ack(message.queue, message.id)
                self._delivered()
                await client.queue_request(QUEUE)
            elif message.event in ("SEND", "BROADCAST"):
                self._delivered()

    # -- workload --------------------------------------------------------------

    async def workload(self, until: float) -> None:
        c = self.config
        jobs: list[Awaitable[None]] = []
        if self.isis is not None:
            jobs.append(_every(c.isis.rate, until, self._isis_send))
            if c.isis.snapshots and c.isis.snapshot_every > 0:
                jobs.append(_every(1.0 / c.isis.snapshot_every, until, self._snapshot))
        if self.gossip is not None:
            jobs.append(_every(c.gossip.rate, until, self._gossip_send))
        if self.push is not None:
            jobs.append(_every(c.link.rate, until, self._link_send))
        if self.clients:
            jobs.append(_every(c.gateway.rate, until, self._gateway_send))
        if self.cluster is not None:
            jobs.append(_every(c.cluster.rate, until, self._cluster_step))
        await asyncio.gather(*jobs)

    async def _isis_send(self, k: int) -> None:
        assert self.isis is not None
        if await self.isis.send(k):
            self.counts.sent += 1

    async def _cluster_step(self, k: int) -> None:
        assert self.cluster is not None
        if await self.cluster.step(k):
            self.counts.sent += 1

    async def _snapshot(self, k: int) -> None:
        assert self.isis is not None
        self.isis.initiate_snapshot()

    async def _gossip_send(self, k: int) -> None:
        assert self.gossip is not None
        c = self.config
        dests = [f"{p.address}:{p.ports.gossip}" for p in c.peers if p.id in self.peer_ids()]
        payload = f"{c.node.id}/{k}:".ljust(c.gossip.size, "x")
        await self.gossip.send(("text", payload), to=dests)
        self.counts.sent += 1

    async def _link_send(self, k: int) -> None:
        assert self.push is not None
        data = f"{self.config.node.id}/{k}".encode().ljust(self.config.link.size, b".")
        try:
            await self.push.send(data, timeout=1.0)
        except (TimeoutError, LinkError):
            return  # not sent (no credit or no link): nothing to count
        self.counts.sent += 1

    async def _gateway_send(self, k: int) -> None:
        client = self.clients[k % len(self.clients)]
        node_id = self.config.node.id
        payload = {"from": client.client_id, "k": k}
        if k % 2 == 0:
            target = {"application": APPLICATION, "ops": [{"region": "eu"}]}
            try:
                await client.send(payload, to=target, nonce=f"{node_id}/{k}")
            except GossamerError:
                return  # closed, or an earlier send found no route
        else:
            target = {"application": APPLICATION, "ops": [{"host": node_id}]}
            try:
                await client.queue(QUEUE, target, payload, timeout=2.0)
            except (TimeoutError, ConnectionError, GossamerError):
                return
        self.counts.sent += 1

    # -- progress, partitions --------------------------------------------------

    async def progress(self) -> None:
        # Every second during the workload; four times a second afterwards, when the
        # lab waits for every node to report ``idle`` before it stops them.
        n = self.config.node
        end = (time.monotonic() if n.start_at is None else n.start_at) + n.duration
        while True:
            await asyncio.sleep(1.0 if time.monotonic() < end else SETTLE_REPORT)
            pending = self.in_flight()
            self.status(
                "progress", sent=self.counts.sent, delivered=self.counts.delivered,
                faults=sum(i.injected for i in self.injectors),
                peers=len(self.peer_ids()), pending=pending, idle=pending == 0,
            )

    def in_flight(self) -> int:
        """Work this node has started and not finished: ISIS messages held back or not
        yet acknowledged by every member, sends a snapshot holds back, gateway queue
        messages not yet consumed and acked. 0 when the node is idle."""
        count = 0
        if self.isis is not None:
            count += self.isis.in_flight()
        if isinstance(self.cluster, QueueClients):
            count += self.cluster.pending()
        return count + self._queue_backlog()

    def _queue_backlog(self) -> int:
        """Gateway queue messages not yet consumed and acked (0 without a gateway)."""
        core = self.gateway.core if self.gateway is not None else None
        if core is None:
            return 0
        stats = core.queues.stats().get(QUEUE) or {}
        return int(stats.get("ready", 0)) + int(stats.get("inflight", 0))

    async def partitions(self) -> None:
        """Trace ``partition`` and ``heal`` (layer net) at each window's edges."""
        start = self.config.node.start_at
        if start is None:
            return
        edges = sorted(
            [(start + p.start, "partition", p) for p in self.config.faults.partitions]
            + [(start + p.end, "heal", p) for p in self.config.faults.partitions],
            key=lambda edge: edge[0],
        )
        for at, fault, part in edges:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            self.tracer(time.monotonic(), "net", "fault",
                        attrs={"fault": fault, "peers": ",".join(part.peers)})

    # -- shutdown --------------------------------------------------------------

    async def shutdown(self, *, drain: float) -> None:
        """Leave and close everything, within ``SHUTDOWN_BUDGET`` seconds in all.

        Traced: ``net``/``stop`` when the shutdown begins (the node neither sends nor
        delivers anything new from then on: a *clean* stop, where a crash is a
        ``net``/``fault``), and, with ISIS, ``isis``/``stop`` once ISIS is closed, with
        what it left unfinished (``IsisCore.trace_stop``).
        """
        self.stopping = True
        self.tracer(time.monotonic(), "net", "stop", attrs={"pending": str(self.in_flight())})
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SHUTDOWN_BUDGET):
                await self._drain_queues(drain)
                await self._close_all()
        if self.broken is not None:
            self.broken.flush(self._isis_delivered)
        # Whatever did not close in time is closed hard: the process is exiting.
        if self.discovery is not None:
            self.discovery.abort()
        if self.isis is not None:
            self.isis.abort()
        if self.store is not None:
            self.store.close()
        self.sink.close()

    async def _drain_queues(self, seconds: float) -> None:
        # Give queued gateway messages a moment to be consumed and acked, so that a
        # SIGTERM during the workload does not strand them (the analysis's
        # gateway.queues would call them lost).
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._queue_backlog():
            await asyncio.sleep(0.05)

    async def _close_all(self) -> None:
        if self.discovery is not None:
            await self.discovery.close()  # agur! to every peer
        if self.isis is not None:
            await self.isis.close()
        if self.gossip is not None:
            await self.gossip.close()
        if self.link_node is not None:
            await self.link_node.close(timeout=0.5)
        if self.clients:
            await asyncio.gather(*(c.close() for c in self.clients), return_exceptions=True)
        if self.cluster is not None:
            await self.cluster.close()
        if self.gateway is not None:
            await self.gateway.close()


async def _every(
    rate: float, until: float, action: Callable[[int], Awaitable[None]]
) -> None:
    """Call ``action(k)`` ``rate`` times per second (on a fixed schedule that does not
    drift) until ``until`` (``time.monotonic()``)."""
    if rate <= 0:
        return
    period = 1.0 / rate
    at = time.monotonic()
    k = 0
    while at < until:
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await action(k)
        k += 1
        at += period


async def _until(event: asyncio.Event, deadline: float) -> bool:
    """Wait for ``event`` or ``deadline`` (monotonic); True when the event fired."""
    timeout = deadline - time.monotonic()
    if timeout <= 0:
        return event.is_set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
    return event.is_set()


async def _timeline(node: LabApp) -> None:
    """Wait for ``start_at``, run the workload, linger, and wait for a signal unless
    ``exit_when_done``; a signal ends any step at once."""
    n = node.config.node
    start = time.monotonic() if n.start_at is None else n.start_at
    if await _until(node.stop, start):
        return
    end = start + n.duration
    work = asyncio.ensure_future(node.workload(end))
    stopper = asyncio.ensure_future(node.stop.wait())
    try:
        await asyncio.wait([work, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not work.done():
            work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work  # a failure of the workload is a runtime failure of the node
    if node.stop.is_set() or await _until(node.stop, end + n.linger):
        return
    if not n.exit_when_done:
        await node.stop.wait()


async def run_app(config: NodeConfig, *, out: TextIO | None = None) -> int:
    """Run the lab app until it is done (``exit_when_done``) or signalled; returns 0.

    ``gossamer lab app`` runs it on uvloop where installed: every time it and the drivers
    feed to cores or stamp on traces is ``time.monotonic()``.

    Raises ``OSError`` when a port cannot be bound and ``GossamerError`` for a
    configuration the drivers refuse; the caller turns them into exit codes.
    """
    node = LabApp(config, sys.stdout if out is None else out)
    with stop_on_signals(node.stop):
        try:
            await node.start()
        except BaseException:
            await node.shutdown(drain=0.0)
            raise
        try:
            node.status("ready")
            node.spawn(node.progress())
            node.spawn(node.partitions())
            await _timeline(node)
        finally:
            await node.shutdown(drain=1.0 if node.stop.is_set() else 0.0)
    node.status("done")
    return 0
