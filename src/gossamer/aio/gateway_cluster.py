"""Gateway servers on several nodes as one 신경 gateway, over sealed links.

Opened as every gossamer service is (``docs/api.md``)::

    async with open_node("10.0.0.1", 7100, wire=Wire(key=cluster_key)) as node, \\
            open_gateway_server(GatewayConfig(node_id="n1"), port=4567) as server, \\
            open_gateway_cluster(server, node) as cluster:
        await cluster.add_peer("n2", "10.0.0.2:7100")   # returns once linked
        cluster.set_nodes(["n1", "n2", "n3"])           # op 7 load balancing
        ...
        await cluster.remove_peer("n2")                 # its clients leave routing

Everything the cluster decides is in the sans-I/O gateway core
(``gossamer.proto.gateway.cluster``; the core's ``add_peer``, ``remove_peer``,
``set_nodes``, ``peer_receive``, ``peer_batch``); this is its transport over Exon/A3M
links (``gossamer.aio.link``), sealed with the node's wire (the cluster key):

- one PULL socket, tag ``gateway``, takes every peer's messages; its ``capacity`` is
  the credit each peer gets, so a node holds at most ``peers x capacity`` unread
  messages of at most ``ClusterConfig.max_batch`` bytes, however fast its peers send.
  A message is taken only after the core has handled the one before;
- one PUSH socket per peer (tag ``gateway>NAME``) linked to the peer's PULL, and one
  task per peer that takes the core's next batch for it only when the link has credit.
  So what a slow peer cannot take waits in the core's bounded outbox, where the core
  refuses SENDs to that peer's clients (op 3 ``node_busy``) once the bound is reached.

A link that fails is linked again (every ``relink_delay`` seconds); the core then sends
again, in order, every batch the peer has not acknowledged (the receiver drops those it
already took), and both sides exchange snapshots, so the replicas converge and nothing
is lost with the link (``docs/gateway.md``, "Clustering"); a SEND to a client of an
unreachable peer waits in the outbox meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Iterable

from gossamer.addresses import AddressLike
from gossamer.aio._pump import now
from gossamer.aio.gateway_server import GatewayServer
from gossamer.aio.link import Message, Node, Socket
from gossamer.aio.opening import Opening
from gossamer.errors import ClosedError, ConfigError, LinkError, TimedOutError
from gossamer.proto.gateway.core import GatewayCore

__all__ = ["GatewayCluster", "open_gateway_cluster"]

log = logging.getLogger("gossamer.gateway.cluster")

#: The tag of every node's inbound socket.
TAG = "gateway"


class _Peer:
    def __init__(self, name: str, address: AddressLike, push: Socket) -> None:
        self.name = name
        self.address = address
        self.push = push
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []


class GatewayCluster:
    """One gateway server's membership of a cluster. Open it with
    :func:`open_gateway_cluster`."""

    def __init__(
        self,
        server: GatewayServer,
        node: Node,
        *,
        capacity: int = 64,
        link_timeout: float = 10.0,
        relink_delay: float = 0.5,
    ) -> None:
        if server.core is None:
            raise ConfigError("open the gateway server before its cluster")
        limit = node.core.config.message_limit
        if limit < server.config.cluster.max_batch:
            raise ConfigError(
                "the node's max_message must hold a batch (ClusterConfig.max_batch)",
                max_message=limit,
                max_batch=server.config.cluster.max_batch,
            )
        self.server = server
        self.node = node
        self._peers: dict[str, _Peer] = {}
        self.capacity = capacity
        self.link_timeout = link_timeout
        self._pull: Socket | None = None
        self.relink_delay = relink_delay
        self._reader: asyncio.Task[None] | None = None
        self._intake = asyncio.Event()
        self._intake.set()
        self._closed = False

    @property
    def core(self) -> GatewayCore:
        core = self.server.core
        assert core is not None
        return core

    @property
    def name(self) -> str:
        """This node's name in the cluster (``GatewayConfig.node_id``); the names of its
        peers are ``core.peers``."""
        return self.core.node

    async def _open(self) -> GatewayCluster:
        self._pull = self.node.socket("pull", tag=TAG, capacity=self.capacity)
        self._reader = asyncio.ensure_future(self._read(self._pull))
        self.server.flush_listeners.append(self._wake_peers)
        return self

    # -- membership ------------------------------------------------------------------

    async def add_peer(self, name: str, address: AddressLike) -> None:
        """Exchange clients and traffic with the gateway ``name`` whose link node is at
        ``address``; returns once linked (``LinkError``, ``TimedOutError`` after
        ``link_timeout``: the peer is then not added). The peer must add this node too
        for traffic to flow both ways; whichever adds first, the replicas converge."""
        if self._closed:
            raise ClosedError("the gateway cluster is closed")
        if name in self._peers:
            return
        push = self.node.socket("push", tag=f"{TAG}>{name}", capacity=0)
        try:
            await push.link(address, TAG, timeout=self.link_timeout)
        except BaseException:
            await push.close(timeout=0.0)
            raise
        peer = self._peers[name] = _Peer(name, address, push)
        self.server.call(lambda at: self.core.add_peer(name, at))
        peer.tasks = [asyncio.ensure_future(self._send(peer)),
                      asyncio.ensure_future(self._watch(peer))]
        peer.wake.set()

    async def remove_peer(self, name: str) -> None:
        """Stop exchanging with ``name``: its clients leave routing at once
        (CLIENT_DISCONNECTED to the watchers); the link is closed."""
        peer = self._peers.pop(name, None)
        if not self.server.closed:
            self.server.call(lambda at: self.core.remove_peer(name, at))
        if peer is None:
            return
        for task in peer.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await peer.push.close(timeout=1.0)

    def set_nodes(self, nodes: Iterable[str]) -> None:
        """The cluster's current node list (this node included): op 7 load balancing
        compares this node's clients with the others' every second."""
        listed = tuple(nodes)
        self.server.call(lambda at: self.core.set_nodes(listed, at))

    def pause(self) -> None:
        """Stop taking the peers' messages (as a node too busy to read them would): the
        links' credits run out, the peers' senders wait, then their bounded outboxes
        refuse SENDs to this node's clients. Messages already taken are handled."""
        self._intake.clear()

    def resume(self) -> None:
        """Take the peers' messages again (``pause``)."""
        self._intake.set()

    async def close(self) -> None:
        """Close every link (the server stays open). Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError):
            self.server.flush_listeners.remove(self._wake_peers)
        for name in list(self._peers):
            await self.remove_peer(name)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._pull is not None:
            await self._pull.close(timeout=1.0)

    # -- pumping ---------------------------------------------------------------------

    def _wake_peers(self) -> None:
        """After each flush of the core: wake the senders of the peers with records."""
        peers = self._peers
        for name in self.core.peers_waiting():
            peer = peers.get(name)
            if peer is not None:
                peer.wake.set()

    async def _read(self, pull: Socket) -> None:
        """Feed each peer message to the core; the next is taken only after it, so the
        link's credits bound what peers can have in flight to this node."""
        server = self.server
        core = self.core
        try:
            async for message in pull:
                await self._intake.wait()
                if isinstance(message, Message) and not server.closed:
                    server.call(functools.partial(core.peer_receive, message.data))
        except ClosedError:
            return

    async def _send(self, peer: _Peer) -> None:
        """Send the core's batches for ``peer``, each when the link has credit."""
        core = self.core
        batch: bytes | None = None
        while True:
            if batch is None:
                batch = core.peer_batch(peer.name, now())
            if batch is None:
                peer.wake.clear()
                await peer.wake.wait()
                continue
            try:
                await peer.push.send(batch)
                batch = None
            except (LinkError, TimedOutError) as exc:
                # Sent once linked again (the core also resends it: the peer drops the
                # copy it already has).
                log.warning("sending to %s failed (%s)", peer.name, exc)
                await asyncio.sleep(self.relink_delay)
            except ClosedError:
                return

    async def _watch(self, peer: _Peer) -> None:
        """Link again to ``peer`` whenever its link is down (every ``relink_delay``
        seconds); once linked, ``add_peer`` again makes the core send again what the
        peer has not acknowledged (lost with the link, perhaps), then our snapshot, and
        ask for theirs."""
        push = peer.push
        while True:
            await asyncio.sleep(self.relink_delay)
            if push.core.established:
                continue
            try:
                await push.link(peer.address, TAG, timeout=self.link_timeout)
            except (LinkError, TimedOutError):
                continue
            except ClosedError:
                return
            log.info("linked to %s again", peer.name)
            self.server.call(lambda at: self.core.add_peer(peer.name, at))
            peer.wake.set()


def open_gateway_cluster(
    server: GatewayServer,
    node: Node,
    *,
    capacity: int = 64,
    link_timeout: float = 10.0,
    relink_delay: float = 0.5,
) -> Opening[GatewayCluster]:
    """Join the open gateway ``server`` to a cluster over the link ``node`` (opened with
    the cluster's wire and a ``max_message`` of at least ``ClusterConfig.max_batch``);
    await it or use it with ``async with`` (links closed on the way out, the server
    left open). ``capacity``: the credits (messages in flight) each peer gets."""
    cluster = GatewayCluster(
        server, node, capacity=capacity, link_timeout=link_timeout, relink_delay=relink_delay
    )
    return Opening(cluster._open)
