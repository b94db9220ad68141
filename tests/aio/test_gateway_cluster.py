"""gossamer.aio.gateway_cluster: three gateway servers on 127.0.0.1 joined by sealed links.

Real clients (``gossamer.open_gateway_client``) connect to different nodes and route to
each other: SEND, BROADCAST (each match exactly once), QUERY_NODES and the HTTP API over
the whole cluster, CLIENT_CONNECTED / CLIENT_DISCONNECTED everywhere, a removed peer's
clients gone, a slow node not overrun (its peers' outboxes bounded, SENDs refused with
``node_busy`` rather than queued without bound), op 7 load balancing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gossamer.aio import loop as aio_loop
from gossamer.aio.gateway_client import GatewayClient, open_gateway_client
from gossamer.aio.gateway_cluster import GatewayCluster, open_gateway_cluster
from gossamer.aio.gateway_server import GatewayServer, open_gateway_server
from gossamer.aio.link import Node, open_node
from gossamer.errors import ConfigError, NoRouteError
from gossamer.proto.gateway.cluster import ClusterConfig
from gossamer.proto.gateway.core import GatewayConfig
from gossamer.testing import sealed_wire
from gossamer.testing.aio import until

from .test_gateway_singyeong_py import SCRIPT, check_received, singyeong_venv

HOST = "127.0.0.1"
APP = "shop"


def run(main: Callable[[], Coroutine[Any, Any, None]], timeout: float = 60.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await main()

    aio_loop.run(bounded())


@dataclass
class Member:
    node: Node
    server: GatewayServer
    cluster: GatewayCluster

    @property
    def name(self) -> str:
        return self.cluster.name

    @property
    def dsn(self) -> str:
        host, port = self.server.address
        return f"singyeong://{APP}@{host}:{port}"

    def clients(self) -> set[str]:
        core = self.server.core
        assert core is not None
        return {c.client_id for c in core.directory.clients.values()}


@contextlib.asynccontextmanager
async def gateways(
    count: int = 3, *, capacity: int = 64, **config: Any
) -> AsyncIterator[list[Member]]:
    wire = sealed_wire()
    cluster_config = config.pop("cluster", ClusterConfig())
    async with contextlib.AsyncExitStack() as stack:
        members = []
        for i in range(count):
            node = await stack.enter_async_context(
                open_node(HOST, 0, wire=wire, max_message=cluster_config.max_batch)
            )
            server = await stack.enter_async_context(open_gateway_server(
                GatewayConfig(node_id=f"n{i}", cluster=cluster_config, **config), port=0))
            cluster = await stack.enter_async_context(
                open_gateway_cluster(server, node, capacity=capacity))
            members.append(Member(node, server, cluster))
        for a in members:
            for b in members:
                if a is not b:
                    await a.cluster.add_peer(b.name, b.node.address)
        yield members


async def connect(member: Member, client_id: str, **options: Any) -> GatewayClient:
    return await open_gateway_client(member.dsn, client_id=client_id, **options)


async def converged(members: list[Member], clients: set[str]) -> None:
    await until(lambda: all(m.clients() == clients for m in members))


def test_send_broadcast_and_queries_span_the_cluster() -> None:
    async def main() -> None:
        async with gateways() as (n0, n1, n2):
            front = await connect(n0, "front")
            eu = await connect(n1, "eu", metadata={"region": "eu", "load": 5})
            us = await connect(n2, "us", metadata={"region": "us", "load": 2})
            await converged([n0, n1, n2], {"front", "eu", "us"})
            await until(lambda: all(
                m.server.core is not None and any(
                    m.server.core.directory.values(c).get("load") == 2
                    for c in m.server.core.directory.clients.values())
                for m in (n0, n1, n2)))

            await front.send({"order": 1}, to={"application": APP, "ops": [
                {"path": "/region", "op": "$eq", "to": {"value": "eu"}}]}, nonce="o1")
            message = await eu.receive(timeout=10.0)
            assert (message.event, message.nonce, message.data) == ("SEND", "o1", {"order": 1})

            # A selector over the whole cluster: the least loaded client is on n2.
            await eu.send("least", to={"application": APP, "selector": {"$min": "load"}})
            assert (await us.receive(timeout=10.0)).data == "least"

            await us.send("sale!", to={"application": APP}, broadcast=True, nonce="b1")
            for client in (front, eu, us):
                got = await client.receive(timeout=10.0)
                assert (got.event, got.data) == ("BROADCAST", "sale!")
            await front.query_nodes({"application": APP})  # nothing else in flight
            for client in (front, eu, us):  # exactly once each
                with pytest.raises(TimeoutError):
                    await client.receive(timeout=0.3)

            nodes = await front.query_nodes({"application": APP, "ops": [
                {"path": "/load", "op": "$gte", "to": {"value": 1}}]})
            assert sorted((n["client_id"], n["metadata"]["load"]) for n in nodes) == [
                ("eu", 5), ("us", 2)]

            # The HTTP API answers for the whole cluster too.
            host, port = n0.server.address
            reader, writer = await asyncio.open_connection(host, port)
            body = json.dumps({"application": APP}).encode()
            writer.write(b"POST /api/v1/query HTTP/1.1\r\nHost: x\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            response = await reader.read()
            writer.close()
            listed = json.loads(response.split(b"\r\n\r\n", 1)[1])
            assert sorted(c["client_id"] for c in listed) == ["eu", "front", "us"]
            for client in (front, eu, us):
                await client.close()

    run(main)


def test_client_updates_are_seen_on_every_node_and_a_removed_peer_leaves() -> None:
    async def main() -> None:
        async with gateways() as (n0, n1, n2):
            watcher = await connect(n0, "watcher", receive_client_updates=True)
            first = await watcher.receive(timeout=10.0)  # its own CLIENT_CONNECTED
            assert first.event == "CLIENT_CONNECTED"
            remote = await connect(n2, "remote")
            joined = await watcher.receive(timeout=10.0)
            assert (joined.event, joined.data) == (
                "CLIENT_CONNECTED", {"app": APP, "client_id": "remote"})
            await remote.close()
            left = await watcher.receive(timeout=10.0)
            assert (left.event, left.data) == (
                "CLIENT_DISCONNECTED", {"app": APP, "client_id": "remote"})

            other = await connect(n1, "other", metadata={"name": "other"})
            assert (await watcher.receive(timeout=10.0)).data["client_id"] == "other"
            await n0.cluster.remove_peer("n1")
            gone = await watcher.receive(timeout=10.0)
            assert (gone.event, gone.data["client_id"]) == ("CLIENT_DISCONNECTED", "other")
            assert n0.clients() == {"watcher"}
            await watcher.send("x", to={"application": APP, "ops": [
                {"path": "/name", "op": "$eq", "to": {"value": "other"}}]}, nonce="lost")
            await watcher.query_nodes({"application": APP})  # the refusal has arrived
            with pytest.raises(NoRouteError) as refused:
                await watcher.send("y", to={"application": APP})
            assert refused.value.fields["nonce"] == "lost"
            await other.close()
            await watcher.close()

    run(main)


def test_a_slow_node_is_not_overrun_and_nothing_is_lost_silently() -> None:
    async def main() -> None:
        limit, capacity, batch = 20, 2, 4
        config = ClusterConfig(peer_deliveries=limit, batch_records=batch)
        async with gateways(cluster=config, capacity=capacity) as (n0, n1, _n2):
            sender = await connect(n0, "sender")
            receiver = await connect(n1, "receiver", metadata={"role": "sink"})
            await converged([n0, n1], {"sender", "receiver"})
            n1.cluster.pause()  # n1 stops taking its peers' messages
            to = {"application": APP, "ops": [
                {"path": "/role", "op": "$eq", "to": {"value": "sink"}}]}
            total = 500
            for n in range(total):
                await sender.send(n, to=to, nonce=n)
            await sender.query_nodes({"application": APP})  # every refusal has arrived
            core = n0.server.core
            assert core is not None
            # n0 sent what n1's credits allowed (capacity batches of `batch` records, and
            # one the sender task holds), kept at most `limit` deliveries for n1, and
            # refused the rest to the sender: explicitly, with the nonce.
            assert core.peer_backlog("n1")[0] <= limit
            refused = {i.nonce for i in sender.invalids if i.error == "node_busy"}
            assert len(refused) >= total - limit - (capacity + 2) * batch
            assert n0.server.rejected["node_busy"] == len(refused)
            assert len(refused) < total

            n1.cluster.resume()
            expected = [n for n in range(total) if n not in refused]
            got = [(await receiver.receive(timeout=10.0)).data for _ in expected]
            assert got == expected  # in order, and nothing lost without a word
            for client in (sender, receiver):
                await client.close()

    run(main)


def test_a_node_whose_links_went_down_is_linked_again_and_converges() -> None:
    async def main() -> None:
        async with gateways() as (n0, n1, n2):
            front = await connect(n0, "front")
            back = await connect(n1, "back", metadata={"role": "b"})
            await converged([n0, n1, n2], {"front", "back"})
            core = n0.server.core
            assert core is not None
            # A SEND in flight at the cut: n0 sent its batch, n1 has not taken it.
            n1.cluster.pause()
            await front.send("cut", to={"application": APP, "ops": [{"role": "b"}]})
            await until(lambda: core._peers["n1"].in_flight == 1)
            # n1 leaves the cluster's links (its peers keep it as a peer) and comes back:
            # the batch n1 had not taken is lost with its socket.
            await n1.cluster.close()
            assert n1.clients() == {"back"}
            assert core.peer_backlog("n1")[0] == 1  # n0 still holds it, unacknowledged
            await back.update_metadata({"role": "c"})  # a change its peers cannot see yet
            async with open_gateway_cluster(n1.server, n1.node) as again:
                for other in (n0, n2):
                    await again.add_peer(other.name, other.node.address)
                # n0 sends the lost batch again: delivered, once (a second copy would
                # arrive before "again", on the same link).
                message = await back.receive(timeout=10.0)
                assert (message.data, message.nonce) == ("cut", None)
                assert core.cluster_retransmit["resent"] > 0
                await converged([n0, n1, n2], {"front", "back"})
                await until(lambda: all(
                    m.server.core is not None and m.server.core.query_clients(
                        {"application": APP, "ops": [{"role": "c"}]}) for m in (n0, n2)))
                await front.send("again", to={"application": APP, "ops": [{"role": "c"}]})
                assert (await back.receive(timeout=10.0)).data == "again"
                await until(lambda: core.peer_backlog("n1") == (0, 0))  # acknowledged
                await back.send("back", to={"application": APP, "ops": [
                    {"path": "/role", "op": "$ne", "to": {"value": "c"}}]})
                assert (await front.receive(timeout=10.0)).data == "back"
            for client in (front, back):
                await client.close()

    run(main)


def test_op7_moves_clients_off_a_node_holding_too_many() -> None:
    async def main() -> None:
        async with gateways() as members:
            n0 = members[0]
            crowd = [await connect(n0, f"c{i}") for i in range(6)]
            await converged(members, {f"c{i}" for i in range(6)})
            for member in members:
                member.cluster.set_nodes([m.name for m in members])
            # 6 against 0 and 0: trunc(6 - (0 + 0.5 + 1)) = 4 are told to go.
            await until(lambda: n0.server.core is not None and n0.server.core.balanced >= 4)
            core = n0.server.core
            assert core is not None and core.balanced == 4
            for client in crowd:
                await client.close()

    run(main)


def test_the_node_must_carry_a_whole_batch() -> None:
    async def main() -> None:
        async with open_node(HOST, 0, wire=sealed_wire()) as node, \
                open_gateway_server(GatewayConfig(node_id="x"), port=0) as server:
            with pytest.raises(ConfigError):
                await open_gateway_cluster(server, node)

    run(main)


@pytest.mark.slow
def test_singyeong_py_clients_on_different_nodes_route_as_on_one(tmp_path: Path) -> None:
    """singyeong-py's A on n0, its B on n1, a gossamer client on n2: the exchange of
    ``test_gateway_singyeong_py`` gives the same deliveries as on one gateway."""
    python = singyeong_venv()
    script = tmp_path / "sy_client.py"
    script.write_text(SCRIPT)

    async def main() -> list[dict[str, object]]:
        async with gateways(password="pw") as (n0, n1, n2):
            host, port = n2.server.address
            dsn = f"singyeong://gossamer:pw@{host}:{port}"
            async with open_gateway_client(dsn, client_id="g",
                                           metadata={"langs": ["py", "ex"]}) as ours:
                await converged([n0, n1, n2], {"g"})
                proc = await asyncio.create_subprocess_exec(
                    str(python), str(script), str(n0.server.port), "1.5",
                    str(n1.server.port),
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                )
                assert proc.stdout is not None
                ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 20))
                assert ready == {"ready": True}
                for member in (n0, n1, n2):
                    core = member.server.core
                    assert core is not None
                    assert sorted(c.app_id for c in core.directory.clients.values()) == [
                        "gossamer", "pyapp", "pyapp"]
                await ours.send({"n": 8}, to={"application": "pyapp", "ops": [
                    {"path": "/ver", "op": "$gte", "to": {"value": "1.10.0"}}]},
                    nonce="from-gossamer")
                from_them = await ours.receive(5)
                assert (from_them.nonce, from_them.data) == ("to-gossamer", {"n": 5})
                out, err = await asyncio.wait_for(proc.communicate(), 30)
                assert proc.returncode == 0, err.decode()[-2000:]
                return [json.loads(line) for line in out.decode().splitlines() if line]

    check_received(aio_loop.run(main()))
