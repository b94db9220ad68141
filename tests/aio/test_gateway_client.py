"""gossamer.aio.gateway_client against a real gateway on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from gossamer.aio import loop as aio_loop
from gossamer.aio.gateway_client import GatewayClient, GatewayInvalidError, VersionString
from gossamer.aio.gateway_server import GatewayServer
from gossamer.proto.gateway.core import GatewayConfig

HOST = "127.0.0.1"


def run(main: Callable[[], Coroutine[Any, Any, None]], timeout: float = 30.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await main()

    aio_loop.run(bounded())


def server_on(port: int = 0, **config: Any) -> GatewayServer:
    return GatewayServer(GatewayConfig(**config), host=HOST, port=port, rng=random.Random(1))


def test_send_broadcast_query_queue_and_ack() -> None:
    async def main() -> None:
        async with server_on(password="pw") as server:
            dsn = f"singyeong://app:pw@{HOST}:{server.port}"
            async with GatewayClient(dsn, client_id="w1", metadata={
                "region": "eu", "version": VersionString("1.10.0"), "busy": False,
            }) as worker, GatewayClient(f"{dsn}/?encoding=msgpack", client_id="p") as producer:
                assert not worker.restricted and worker.client_id == "w1"
                nodes = await producer.query_nodes(
                    {"application": "app", "ops": [{"version": {"$gte": "1.9.0"}}]})
                assert [n["client_id"] for n in nodes] == ["w1"]
                assert nodes[0]["metadata"]["busy"] is False
                await producer.send({"application": "app", "ops": [{"region": "eu"}]},
                                    {"x": 1}, nonce="s1")
                message = await worker.recv(3)
                assert (message.event, message.nonce, message.payload) == ("SEND", "s1", {"x": 1})
                await worker.broadcast({"application": "app"}, "all")
                got = {(await c.recv(3)).payload for c in (worker, producer)}
                assert got == {"all"}
                message_id = await producer.queue(
                    "jobs", {"application": "app", "ops": [{"busy": False}]}, {"job": 7})
                assert isinstance(message_id, str)
                await worker.queue_request("jobs")
                job = await worker.recv(3)
                assert (job.event, job.queue, job.id, job.payload, job.attempt) == (
                    "QUEUE", "jobs", message_id, {"job": 7}, 1)
                await worker.ack("jobs", job.id)
                await worker.queue_cancel("jobs")
                await worker.update_metadata({"busy": True})
                with pytest.raises(GatewayInvalidError, match="invalid query"):
                    await producer.query_nodes({"ops": [{"busy": {"$bogus": 1}}]})
                nodes = await producer.query_nodes({"ops": [{"busy": True}]})
                assert [n["client_id"] for n in nodes] == ["w1"]
                assert server.core is not None and server.core.queues.stats()["jobs"] == {
                    "ready": 0, "inflight": 0, "dead": 0, "waiting": 0}

    run(main)


def test_reconnect_keeps_client_id_and_restores_metadata() -> None:
    async def main() -> None:
        first = server_on(heartbeat_interval_ms=500)
        await first.start()
        port = first.port
        dsn = f"singyeong://app@{HOST}:{port}"
        client = GatewayClient(dsn, client_id="sticky", metadata={"shard": 3},
                               reconnect_base=0.05, reconnect_max=0.2)
        await client.connect()
        await client.update_metadata({"shard": 4, "role": "cache"})
        await asyncio.sleep(0.05)
        await first.close()  # goodbye: the client reconnects at once, and keeps trying
        second = server_on(port=port, heartbeat_interval_ms=500)
        await second.start()
        await client.wait_ready(5)
        assert client.goodbyes == 1 and client.core.counters.readies == 2
        async with GatewayClient(dsn, client_id="observer", metadata={"me": True}) as observer:
            nodes = await observer.query_nodes({"application": "app", "ops": [{"shard": 4}]})
            assert [n["client_id"] for n in nodes] == ["sticky"]
            assert nodes[0]["metadata"]["role"] == "cache"
            # Dispatches sent while disconnected are delivered after the next ready.
            await second.close()
            await asyncio.sleep(0.05)
            await observer.send({"application": "app", "ops": [{"me": True}]}, "later")
            third = server_on(port=port, heartbeat_interval_ms=500)
            await third.start()
            await client.wait_ready(5)
            await observer.wait_ready(5)
            assert (await observer.recv(5)).payload == "later"
            # Heartbeats keep both alive past the 0.75 s deadline.
            await asyncio.sleep(1.0)
            assert client.ready and client.core.counters.heartbeats >= 3
        await client.close()
        await third.close()

    run(main)
