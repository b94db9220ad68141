"""gossamer.aio.gateway_client against a real gateway on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
import socket
from typing import Any

import pytest

from gossamer.aio.gateway_client import (
    GatewayInvalidError,
    Message,
    VersionString,
    open_gateway_client,
)
from gossamer.aio.gateway_server import GatewayServer, open_gateway_server
from gossamer.aio.opening import Opening
from gossamer.errors import ClosedError, NetworkError, NoRouteError, TimedOutError
from gossamer.proto.gateway.core import GatewayConfig
from gossamer.testing.aio import Runner

HOST = "127.0.0.1"


def server_on(port: int = 0, host: str = HOST, **config: Any) -> Opening[GatewayServer]:
    return open_gateway_server(GatewayConfig(**config), host=host, port=port,
                               rng=random.Random(1))


def test_send_broadcast_query_queue_and_ack(run: Runner) -> None:
    async def main() -> None:
        async with server_on(password="pw") as server:
            dsn = f"singyeong://app:pw@{HOST}:{server.port}"
            async with open_gateway_client(dsn, client_id="w1", metadata={
                "region": "eu", "version": VersionString("1.10.0"), "busy": False,
            }) as worker, open_gateway_client(f"{dsn}/?encoding=msgpack",
                                              client_id="p") as producer:
                assert not worker.restricted and worker.client_id == "w1"
                assert worker.address == (HOST, server.port)
                nodes = await producer.query_nodes(
                    {"application": "app", "ops": [{"version": {"$gte": "1.9.0"}}]})
                assert [n["client_id"] for n in nodes] == ["w1"]
                assert nodes[0]["metadata"]["busy"] is False
                await producer.send({"x": 1}, to={"application": "app", "ops": [
                    {"region": "eu"}]}, nonce="s1")
                message = await worker.receive(3)
                assert (message.event, message.nonce, message.data) == ("SEND", "s1", {"x": 1})
                assert message.sender is None  # the protocol does not name it
                await worker.send("all", to={"application": "app"}, broadcast=True)
                got = {(await c.receive(3)).data for c in (worker, producer)}
                assert got == {"all"}
                message_id = await producer.queue(
                    "jobs", {"application": "app", "ops": [{"busy": False}]}, {"job": 7})
                assert isinstance(message_id, str)
                await worker.queue_request("jobs")
                job = await worker.receive(3)
                assert (job.event, job.queue, job.id, job.data, job.attempt) == (
                    "QUEUE", "jobs", message_id, {"job": 7}, 1)
                assert job.id is not None
                await worker.ack("jobs", job.id)
                await worker.queue_cancel("jobs")
                await worker.update_metadata({"busy": True})
                with pytest.raises(GatewayInvalidError, match="invalid query"):
                    await producer.query_nodes({"ops": [{"busy": {"$bogus": 1}}]})
                nodes = await producer.query_nodes({"ops": [{"busy": True}]})
                assert [n["client_id"] for n in nodes] == ["w1"]
                assert server.core is not None and server.core.queues.stats()["jobs"] == {
                    "ready": 0, "inflight": 0, "dead": 0, "waiting": 0}
                assert server.rejected["invalid query"] == 1

    run(main())


def test_reconnect_keeps_client_id_and_restores_metadata(run: Runner) -> None:
    async def main() -> None:
        first = await server_on(heartbeat_interval_ms=500)
        port = first.port
        dsn = f"singyeong://app@{HOST}:{port}"
        client = await open_gateway_client(dsn, client_id="sticky", metadata={"shard": 3},
                                           reconnect_base=0.05, reconnect_max=0.2)
        await client.update_metadata({"shard": 4, "role": "cache"})
        await asyncio.sleep(0.05)
        await first.close()  # goodbye: the client reconnects at once, and keeps trying
        second = await server_on(port=port, heartbeat_interval_ms=500)
        await client.wait_ready(5)
        assert client.goodbyes == 1 and client.core.counters.readies == 2
        async with open_gateway_client(dsn, client_id="observer",
                                       metadata={"me": True}) as observer:
            nodes = await observer.query_nodes({"application": "app", "ops": [{"shard": 4}]})
            assert [n["client_id"] for n in nodes] == ["sticky"]
            assert nodes[0]["metadata"]["role"] == "cache"
            # Dispatches sent while disconnected are delivered after the next ready.
            await second.close()
            await asyncio.sleep(0.05)
            await observer.send("later", to={"application": "app", "ops": [{"me": True}]})
            third = await server_on(port=port, heartbeat_interval_ms=500)
            await client.wait_ready(5)
            await observer.wait_ready(5)
            assert (await observer.receive(5)).data == "later"
            # Heartbeats keep both alive past the 0.75 s deadline.
            await asyncio.sleep(1.0)
            assert client.ready and client.core.counters.heartbeats >= 3
        await client.close()
        await third.close()

    run(main())


def test_timeouts_close_and_iteration_follow_the_api(run: Runner) -> None:
    async def main() -> None:
        async with server_on() as server:
            dsn = f"singyeong://app@{HOST}:{server.port}"
            async with open_gateway_client(dsn, client_id="a", metadata={"who": "a"}) as a, \
                    open_gateway_client(dsn, client_id="b") as b:
                with pytest.raises(TimedOutError) as info:
                    await a.receive(timeout=0.05)
                assert isinstance(info.value.__cause__, TimeoutError)
                for n in range(3):
                    await b.send(n, to={"application": "app", "ops": [{"who": "a"}]})
                first = await a.receive(5)
                assert first.data == 0
                while a.pending_messages() < 2:
                    await asyncio.sleep(0.01)
                got: list[Any] = []

                async def consume() -> None:
                    async for message in a:
                        assert isinstance(message, Message)
                        got.append(message.data)

                consumer = asyncio.create_task(consume())
                while len(got) < 2:
                    await asyncio.sleep(0.01)
                await a.close()
                await asyncio.wait_for(consumer, 5)  # iteration ended with the close
                assert got == [1, 2] and a.closed
                await a.close()  # idempotent
                with pytest.raises(ClosedError):
                    await a.send(1, to={"application": "app"})
                with pytest.raises(ClosedError):
                    await a.receive(timeout=1)

    run(main())


def test_no_route_is_raised_where_a_route_was_asked_for(run: Runner) -> None:
    async def main() -> None:
        async with server_on() as server:
            dsn = f"singyeong://app@{HOST}:{server.port}"
            async with open_gateway_client(dsn, client_id="lonely") as client:
                nobody = {"application": "app", "ops": [{"who": "nobody"}]}
                await client.send("lost", to=nobody, nonce="n1")
                await client.query_nodes({"application": "app"})  # the refusal has arrived
                assert server.rejected["no_route"] == 1
                with pytest.raises(NoRouteError) as info:
                    await client.send("next", to={"application": "app"})
                assert info.value.fields["nonce"] == "n1"
                assert isinstance(info.value.__cause__, GatewayInvalidError)
                await client.send("now it goes", to={"application": "app"})
                assert (await client.receive(5)).data == "now it goes"

    run(main())


@pytest.mark.parametrize("host", ["localhost", "::1"])
def test_gateway_on_localhost_and_ipv6(run: Runner, host: str) -> None:
    async def main() -> None:
        async with server_on(host=host) as server:
            assert server.address[0] == ("127.0.0.1" if host == "localhost" else "::1")
            named = "localhost" if host == "localhost" else "[::1]"
            async with open_gateway_client(f"singyeong://app@{named}:{server.port}") as client:
                await client.send("hi", to={"application": "app"})
                assert (await client.receive(5)).data == "hi"

    run(main())


def test_open_errors_are_gossamer_errors_with_a_cause(run: Runner) -> None:
    async def main() -> None:
        with socket.socket() as holder:
            holder.bind((HOST, 0))
            holder.listen()
            taken = holder.getsockname()[1]
            with pytest.raises(NetworkError) as bind_failed:
                await server_on(port=taken)
            assert isinstance(bind_failed.value.__cause__, OSError)
        with socket.socket() as free:
            free.bind((HOST, 0))
            port = free.getsockname()[1]
        with pytest.raises(TimedOutError) as info:
            await open_gateway_client(f"singyeong://app@{HOST}:{port}", open_timeout=0.3,
                                      reconnect_base=0.05)
        assert isinstance(info.value.__cause__, TimeoutError)
        assert "last_error" in info.value.fields

    run(main())
