"""The gossip driver on real TCP sockets, on 127.0.0.1 only (no multicast outside namespaces).

Multicast between real hosts is in ``tests/netns/test_gossip_hosts.py``; here nodes run the
tree over TCP: a broadcast reaches every node once, a dead or absent peer is routed around
(connect refused, connect timeout), and the original wire works the same.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping

import pytest

from gossamer.aio.gossip import GossipNode
from gossamer.proto.gossip import GossipConfig, MessageHandler, WireMode
from gossamer.testing import free_ports
from gossamer.testing.aio import Runner, until
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire.chatter import NetID

KEY = b"aio-test-key-of-exactly-32-bytes"


def handler(sink: list[object]) -> MessageHandler:
    def encode(p: object, ids: Mapping[NetID, int]) -> bytes:
        assert isinstance(p, tuple)
        return str(p[1]).encode()

    return MessageHandler(
        name="hello",
        encode_with=encode,
        decode_with=lambda b, ids: ("hello", b.decode()),
        dispatch=sink.append,
    )


def make_nodes(
    ports: list[int], trace: MemorySink, got: dict[int, list[object]], **settings: object
) -> list[GossipNode]:
    nodes = []
    for port in ports:
        config = GossipConfig(
            my_addr="127.0.0.1",
            my_port=port,
            key=KEY if settings.get("wire") is not WireMode.ORIGINAL else b"compat",
            multicast=False,
            **settings,  # type: ignore[arg-type]
        )
        got[port] = []
        nodes.append(
            GossipNode(
                config,
                handlers=[handler(got[port])],
                tracer=Tracer(trace, run="aio", node=str(config.netid)),
            )
        )
    return nodes


@pytest.mark.parametrize("wire", [WireMode.SEALED, WireMode.ORIGINAL])
def test_a_broadcast_reaches_every_node_once_over_tcp(run: Runner, wire: WireMode) -> None:
    run(_reaches_every_node(wire))


async def _reaches_every_node(wire: WireMode) -> None:
    ports = free_ports(7)
    trace = MemorySink()
    got: dict[int, list[object]] = {}
    nodes = make_nodes(ports, trace, got, wire=wire)
    for node in nodes:
        await node.start()
    try:
        dests = [node.netid for node in nodes]
        msg = nodes[0].broadcast(dests, ("hello", "over tcp"))
        await until(lambda: all(got[p] for p in ports[1:]))
        await asyncio.sleep(0.2)  # anything more now would be a duplicate
        assert all(got[p] == [("hello", "over tcp")] for p in ports[1:])
        assert got[ports[0]] == []
        sends = [e for e in trace.select(layer="gossip", kind="send") if e.msg == msg]
        assert len(sends) == 6 and {e.attrs["via"] for e in sends} == {"tcp"}
        if wire is WireMode.SEALED:
            await until(lambda: all(n.core.pending_hops == 0 for n in nodes))  # all ACKed
            hops = [int(e.attrs["hop"]) for e in trace.select(layer="gossip", kind="deliver")]
            assert max(hops) <= 3  # ceil(log2 7)
        assert {p.netid for p in nodes[0].peers()} == {n.netid for n in nodes[1:]}
    finally:
        for node in nodes:
            await node.close()


def test_refused_and_silent_peers_are_routed_around(run: Runner) -> None:
    run(_routed_around())


async def _routed_around() -> None:
    ports = free_ports(5)
    trace = MemorySink()
    got: dict[int, list[object]] = {}
    nodes = make_nodes(ports, trace, got, ack_timeout=0.3, connect_timeout=0.3)
    # A listener that accepts and never answers: a hung process (no ACK ever comes).
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    hung = NetID("127.0.0.1", silent.getsockname()[1])
    absent = NetID("127.0.0.1", free_ports(1)[0])  # nothing listens: connect refused
    for node in nodes:
        await node.start()
    try:
        dests = [hung, absent, *(n.netid for n in nodes)]
        nodes[0].broadcast(dests, ("hello", "around"))
        await until(lambda: all(got[p] for p in ports[1:]))
        assert all(got[p] == [("hello", "around")] for p in ports[1:])
        await until(lambda: sum(n.core.counters.replanned for n in nodes) >= 2, timeout=5.0)
        reasons = {e.attrs["reason"] for e in trace.select(layer="gossip", kind="replan")}
        assert reasons <= {"timeout", "stream_failed"} and reasons
    finally:
        silent.close()
        for node in nodes:
            await node.close()


def test_a_dispatch_that_raises_is_counted_and_the_node_goes_on(run: Runner) -> None:
    run(_dispatch_raises())


async def _dispatch_raises() -> None:
    ports = free_ports(2)
    trace = MemorySink()
    got: dict[int, list[object]] = {}
    nodes = make_nodes(ports, trace, got)

    def boom(payload: object) -> None:
        raise RuntimeError("handler bug")

    nodes[1].register(
        MessageHandler(
            name="hello",
            encode_with=lambda p, ids: b"x",
            decode_with=lambda b, ids: ("hello", b.decode()),
            dispatch=boom,
        )
    )
    for node in nodes:
        await node.start()
    try:
        received = []

        async def collect() -> None:
            async for event in nodes[1].deliveries():
                received.append(event.payload)

        task = asyncio.create_task(collect())
        nodes[0].broadcast([nodes[1].netid], ("hello", "a"))
        nodes[0].broadcast([nodes[1].netid], ("hello", "b"))
        await until(lambda: len(received) == 2)
        assert nodes[1].dispatch_errors == 2
        assert isinstance(nodes[1].last_dispatch_error, RuntimeError)
    finally:
        for node in nodes:
            await node.close()
    await asyncio.wait_for(task, 5.0)  # deliveries() ends when the node closes
