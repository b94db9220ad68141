"""gossamer.daemon.gateway_peers: a node's gateway peers follow the views it installs.

Real gateway servers and link nodes on 127.0.0.1 in this process (as the daemon opens
them), views given by hand: a joined member becomes a peer once its card and its link
are there (tried again meanwhile, without blocking), a member that left is removed, a
member replaced by its next incarnation is removed and added again at its new address.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gossamer.aio.gateway_client import GatewayClient, open_gateway_client
from gossamer.aio.gateway_cluster import GatewayCluster, open_gateway_cluster
from gossamer.aio.gateway_server import GatewayServer, open_gateway_server
from gossamer.aio.link import Node, open_node
from gossamer.aio.membership import Card
from gossamer.daemon.gateway_peers import GatewayPeers
from gossamer.proto.gateway.core import GatewayConfig
from gossamer.proto.views import Member, View
from gossamer.testing import free_ports, sealed_wire
from gossamer.testing.aio import make_runner, until

HOST = "127.0.0.1"
WIRE = sealed_wire()
run = make_runner(use_uvloop=False, timeout=60.0)


@dataclass
class Gateway:
    """One node's gateway, its link node and its cluster layer."""

    name: str
    incarnation: int
    node: Node
    server: GatewayServer
    cluster: GatewayCluster
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    @property
    def member(self) -> Member:
        return Member(name=self.name, incarnation=self.incarnation, address=(HOST, 1))

    def card(self) -> Card:
        return Card(cluster="test", name=self.name, incarnation=self.incarnation,
                    views=(HOST, 1), state="member",
                    services={"gateway": self.server.address, "link": self.node.address})

    def clients(self) -> set[str]:
        assert self.server.core is not None
        return {c.client_id for c in self.server.core.directory.clients.values()}

    async def client(self, client_id: str) -> GatewayClient:
        host, port = self.server.address
        return await self.stack.enter_async_context(open_gateway_client(
            f"singyeong://shop@{host}:{port}", client_id=client_id))


async def open_gateway(name: str, incarnation: int, link_port: int = 0) -> Gateway:
    config = GatewayConfig(node_id=name)
    stack = contextlib.AsyncExitStack()
    node = await stack.enter_async_context(
        open_node(HOST, link_port, wire=WIRE, max_message=config.cluster.max_batch))
    server = await stack.enter_async_context(open_gateway_server(config, port=0))
    cluster = await stack.enter_async_context(open_gateway_cluster(server, node))
    return Gateway(name, incarnation, node, server, cluster, stack)


class Cards:
    """The cards a node holds (``Daemon.card_of`` over ``Membership.cards``)."""

    def __init__(self) -> None:
        self.held: list[Card] = []

    def __call__(self, name: str, incarnation: int) -> Card | None:
        for card in self.held:
            if (card.name, card.incarnation) == (name, incarnation):
                return card
        return None


@contextlib.asynccontextmanager
async def following(gateway: Gateway, cards: Cards) -> AsyncIterator[GatewayPeers]:
    peers = GatewayPeers(gateway.cluster, cards, retry=0.05)
    try:
        yield peers
    finally:
        await peers.close()


def view(number: int, *gateways: Gateway) -> View:
    return View(id=number, members=tuple(g.member for g in gateways))


def test_members_that_join_leave_or_restart_become_peers_or_stop_being() -> None:
    async def main() -> None:
        n0, n1 = await open_gateway("n0", 1), await open_gateway("n1", 1)
        cards = Cards()
        async with n0.stack, following(n0, cards) as p0:
            # n1 joins: its card is not here yet, so n0 tries again until it is.
            p0.on_view(view(2, n0, n1))
            await asyncio.sleep(0.2)
            assert p0.pending() == ["n1"] and p0.linked == {}
            cards.held.append(n1.card())
            await until(lambda: p0.linked == {"n1": 1})
            assert n0.server.core is not None and n0.server.core.peers == ("n1",)
            await n1.cluster.add_peer("n0", n0.node.address)  # n1's own daemon would
            await n1.client("old")
            await until(lambda: n0.clients() == {"old"})

            # n1 restarts (a new process, a new link port, the next incarnation); n0
            # installs a view replacing it: the old one's clients leave routing, the new
            # one's arrive.
            await n1.stack.aclose()
            n1 = await open_gateway("n1", 2)
            async with n1.stack:
                cards.held.append(n1.card())
                p0.on_view(view(3, n0, n1))
                await n1.cluster.add_peer("n0", n0.node.address)
                await n1.client("new")
                await until(lambda: n0.clients() == {"new"})
                assert p0.linked == {"n1": 2}

                # n1 leaves: removed, its clients gone.
                p0.on_view(view(4, n0))
                await until(lambda: n0.clients() == set())
                assert p0.linked == {} and p0.pending() == []
                assert n0.server.core.peers == ()

    run(main())


def test_a_peer_whose_link_is_not_up_yet_is_tried_again_and_a_later_view_wins() -> None:
    async def main() -> None:
        (port,) = free_ports(1)
        n0 = await open_gateway("n0", 1)
        cards = Cards()
        async with n0.stack, following(n0, cards) as p0:
            # Its card is known, but nothing listens at its link address yet.
            late = Card(cluster="test", name="n1", incarnation=1, views=(HOST, 1),
                        state="member", services={"gateway": (HOST, 1), "link": (HOST, port)})
            cards.held.append(late)
            p0.on_view(View(id=2, members=(n0.member, late.member)))
            await asyncio.sleep(0.3)
            assert p0.pending() == ["n1"] and p0.linked == {}
            # It leaves before it was ever linked: the retries stop, nothing is added.
            p0.on_view(view(3, n0))
            await until(lambda: p0.pending() == [])
            assert p0.linked == {}
            # It joins again and its link comes up: linked.
            p0.on_view(View(id=4, members=(n0.member, late.member)))
            n1 = await open_gateway("n1", 1, link_port=port)
            async with n1.stack:
                await until(lambda: p0.linked == {"n1": 1})
                assert n0.server.core is not None and n0.server.core.peers == ("n1",)

    run(main())


def test_a_member_without_a_gateway_is_not_a_peer() -> None:
    async def main() -> None:
        n0 = await open_gateway("n0", 1)
        cards = Cards()
        plain = Card(cluster="test", name="n1", incarnation=1, views=(HOST, 1),
                     state="member", services={"gossip": (HOST, 1)})
        cards.held.append(plain)
        async with n0.stack, following(n0, cards) as p0:
            p0.on_view(View(id=2, members=(n0.member, plain.member)))
            await until(lambda: p0.pending() == [])
            assert p0.linked == {}
            assert n0.server.core is not None and n0.server.core.peers == ()

    run(main())
