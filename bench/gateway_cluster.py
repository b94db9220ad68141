"""Gateway cluster: how nodes learn each other's clients, measured both ways.

    .venv/bin/python -m bench.gateway_cluster [--quick]

Three gateway servers on 127.0.0.1 in this process, joined by sealed links
(``gossamer.aio.gateway_cluster``), and ``gossamer`` clients; every figure is compared
with the same work on one gateway in the same run (one process, so the three servers
share a core: the ratios, not the absolute rates, are the result).

Two shapes of clustering:

(a) **replicas** (what ``proto.gateway.cluster`` implements): every node holds every
    client's metadata, spread as deltas over the links. A routed SEND is decided
    locally and travels once, to the receiver's node.
(b) **fan-out** (the reference's ``Cluster.query``): a SEND's query goes to every other
    node, which answers with its matching clients, and the origin picks among the
    merged answers. Measured here as its extra work per SEND: a query sent over a REQ
    link to each peer's REP socket in parallel, matched there against that node's own
    clients (``Directory.match``), the matches sent back. Its SEND costs that *plus*
    the delivery hop (a).

Figures:

- routed SEND latency (one at a time, p50 / p99): sender on n0, receiver on n1,
  against both on one gateway; the fan-out's query round trip;
- routed SEND throughput (``count`` pipelined in windows of 1,000, until the receiver
  has all): cluster against one gateway; the fan-out's query rounds per second with 16
  in flight per peer;
- metadata update cost: ``count`` UPDATE_METADATA from one client until both other
  nodes hold the last value (a), against the same updates on one gateway (b's cost: a
  fan-out cluster replicates nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from bench._report import command, machine, publish, quick_parser, table
from bench._timing import latency_row, one_at_a_time, p50_p99, rate_row, routed_sends

HOST = "127.0.0.1"
WINDOW = 1_000
APP = "bench"
TARGET = {"application": APP, "ops": [
    {"path": "/role", "op": "$eq", "to": {"value": "sink"}},
    {"path": "/load", "op": "$lt", "to": {"value": 100}},
]}


@contextlib.asynccontextmanager
async def gateways(count: int) -> AsyncIterator[list[Any]]:
    from gossamer.aio.gateway_cluster import open_gateway_cluster
    from gossamer.aio.gateway_server import open_gateway_server
    from gossamer.aio.link import open_node
    from gossamer.proto.gateway.cluster import ClusterConfig
    from gossamer.proto.gateway.core import GatewayConfig
    from gossamer.testing import sealed_wire

    wire = sealed_wire()
    limits = ClusterConfig()
    async with contextlib.AsyncExitStack() as stack:
        members = []
        for i in range(count):
            node = await stack.enter_async_context(
                open_node(HOST, 0, wire=wire, max_message=limits.max_batch))
            config = GatewayConfig(node_id=f"n{i}", metadata_rate=1e6, metadata_burst=1e6)
            server = await stack.enter_async_context(open_gateway_server(config, port=0))
            cluster = await stack.enter_async_context(open_gateway_cluster(server, node))
            members.append((node, server, cluster))
        for _n, _s, a in members:
            for node, _s2, b in members:
                if a is not b:
                    await a.add_peer(b.name, node.address)
        yield members


async def _client(server: Any, client_id: str, **metadata: Any) -> Any:
    from gossamer.aio.gateway_client import open_gateway_client

    host, port = server.address
    return await open_gateway_client(f"singyeong://{APP}@{host}:{port}",
                                     client_id=client_id, metadata=metadata)


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.001)


async def metadata_rate(client: Any, cores: list[Any], count: int) -> float:
    """UPDATE_METADATA per second until every core in ``cores`` holds the last one."""

    def seen() -> bool:
        for core in cores:
            held = core.directory.by_identity.get((APP, "updater"))
            if held is None or core.directory.values(held).get("n") != count - 1:
                return False
        return True

    start = time.perf_counter()
    for n in range(count):
        await client.update_metadata({"n": n})
    await _until(seen)
    return count / (time.perf_counter() - start)


async def fan_out(members: list[Any], count: int) -> tuple[list[float], float]:
    """Shape (b): the per-SEND query round trip to every other node, over links."""
    from gossamer.aio.link import Message

    origin_node = members[0][0]
    serving = []
    for node, server, _cluster in members[1:]:
        rep = node.socket("rep", tag="bench-query")
        core = server.core

        async def answer(rep: Any = rep, core: Any = core) -> None:
            async for request in rep:
                assert isinstance(request, Message)
                query, _text = core._query(orjson.loads(request.data))
                matched = [c for c in core.directory.match(query) if c.node is None]
                await rep.send(orjson.dumps([[c.app_id, c.client_id] for c in matched]))

        serving.append((rep, asyncio.ensure_future(answer())))

    async def requester(tag: str) -> list[Any]:
        sockets = []
        for node, _server, _cluster in members[1:]:
            req = origin_node.socket("req", tag=f"{tag}>{node.address[1]}")
            await req.link(node.address, "bench-query", timeout=10.0)
            sockets.append(req)
        return sockets

    body = orjson.dumps(TARGET)

    async def ask(req: Any) -> bytes:
        await req.send(body)
        reply = await req.receive(timeout=10.0)
        assert isinstance(reply, Message)
        return reply.data

    one = await requester("lat")

    async def query_round(_i: int) -> None:
        await asyncio.gather(*(ask(req) for req in one))

    latencies = await one_at_a_time(query_round, count // 10)
    flows = [await requester(f"thr{i}") for i in range(16)]
    per_flow = count // len(flows)

    async def flow(sockets: list[Any]) -> None:
        for _ in range(per_flow):
            await asyncio.gather(*(ask(req) for req in sockets))

    start = time.perf_counter()
    await asyncio.gather(*(flow(sockets) for sockets in flows))
    rate = per_flow * len(flows) / (time.perf_counter() - start)
    for rep, task in serving:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await rep.close(timeout=0.1)
    return latencies, rate


async def measure(count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with gateways(1) as (solo,):
        server = solo[1]
        sender = await _client(server, "sender", role="source", load=1)
        receiver = await _client(server, "receiver", role="sink", load=5)
        out["one_lat"], out["one_thr"] = await routed_sends(
            sender, receiver, count, target=TARGET, window=WINDOW)
        updater = await _client(server, "updater")
        out["one_meta"] = await metadata_rate(updater, [server.core], count)
        for client in (sender, receiver, updater):
            await client.close()
    async with gateways(3) as members:
        servers = [m[1] for m in members]
        sender = await _client(servers[0], "sender", role="source", load=1)
        receiver = await _client(servers[1], "receiver", role="sink", load=5)
        await _until(lambda: all(len(s.core.directory) == 2 for s in servers))
        await _until(lambda: all(
            s.core.directory.values(s.core.directory.by_identity[(APP, "receiver")]).get(
                "load") == 5 for s in servers))
        out["clu_lat"], out["clu_thr"] = await routed_sends(
            sender, receiver, count, target=TARGET, window=WINDOW)
        updater = await _client(servers[2], "updater")
        out["clu_meta"] = await metadata_rate(updater, [s.core for s in servers], count)
        out["fan_lat"], out["fan_thr"] = await fan_out(members, count)
        for client in (sender, receiver, updater):
            await client.close()
    return out


def main(argv: list[str] | None = None) -> int:
    args = quick_parser("bench.gateway_cluster").parse_args(argv)
    from gossamer.aio.loop import run

    count = 2_000 if args.quick else 20_000
    r = run(measure(count))

    rows = [
        latency_row("routed SEND latency p50 / p99 (µs)", r["one_lat"], r["clu_lat"],
                    f"{p50_p99(r['clu_lat'])} + query round trip {p50_p99(r['fan_lat'])}"),
        rate_row("routed SEND throughput (msg/s)", r["one_thr"], r["clu_thr"],
                 f"≤ {r['fan_thr']:,.0f} (query rounds/s alone, 16 in flight)"),
        rate_row("metadata updates/s (until every node holds the last)", r["one_meta"],
                 r["clu_meta"], f"{r['one_meta']:,.0f} (nothing replicated)"),
    ]
    how = command("bench.gateway_cluster", args.quick)
    publish(
        "gateway-cluster",
        "신경 gateway cluster: replicas against query fan-out",
        f"`{how}` on {machine()}, uvloop, 127.0.0.1, one process: three gateway "
        "servers joined by sealed links (or one server alone), gossamer clients; a routed "
        f"SEND has a 2-op query; {count // 10:,} one-at-a-time SENDs for latency, "
        f"{count:,} pipelined (windows of {WINDOW:,}) for throughput, {count:,} metadata "
        "updates. (a) replicas: "
        "what the gateway does; (b) fan-out: a SEND's query asked of both other nodes "
        "over REQ/REP links and matched there, before the delivery hop of (a).",
        table(["figure", "one gateway", "(a) replicas, 3 nodes", "(b) fan-out, 3 nodes",
               "(a) / one gateway"], rows),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
