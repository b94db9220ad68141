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

from gossamer.aio.gossip import Gossip, open_gossip
from gossamer.errors import ClosedError, ConfigError, NetworkError, TimedOutError
from gossamer.proto.gossip import GossipConfig, MessageHandler, WireMode
from gossamer.testing.aio import Runner, until
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire.chatter import NetID
from gossamer.wire.mode import Wire

KEY = b"aio-test-key-of-exactly-32-bytes"


def free_ports(count: int) -> list[int]:
    socks = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
    ports = [s.getsockname()[1] for s in socks]
    for sock in socks:
        sock.close()
    return ports


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


async def open_nodes(
    count: int,
    trace: MemorySink,
    got: dict[int, list[object]],
    *,
    wire: WireMode = WireMode.SEALED,
    **settings: object,
) -> list[Gossip]:
    """``count`` open nodes on 127.0.0.1 (any free ports), multicast off; each one's
    ``hello`` deliveries go to ``got[i]``."""
    nodes = []
    key = KEY if wire is WireMode.SEALED else b"compat"
    for i in range(count):
        config = GossipConfig(
            my_addr="127.0.0.1",
            my_port=0,
            multicast=False,
            **settings,  # type: ignore[arg-type]
        )
        got[i] = []
        node = await open_gossip(
            config,
            wire=Wire(mode=wire, key=key),
            handlers=[handler(got[i])],
            tracer=Tracer(trace, run="aio", node=f"n{i}"),
        )
        nodes.append(node)
    return nodes


@pytest.mark.parametrize("wire", [WireMode.SEALED, WireMode.ORIGINAL])
def test_a_broadcast_reaches_every_node_once_over_tcp(run: Runner, wire: WireMode) -> None:
    run(_reaches_every_node(wire))


async def _reaches_every_node(wire: WireMode) -> None:
    trace = MemorySink()
    got: dict[int, list[object]] = {}
    nodes = await open_nodes(7, trace, got, wire=wire)
    try:
        dests = [node.netid for node in nodes]
        msg = await nodes[0].send(("hello", "over tcp"), to=dests)
        await until(lambda: all(got[i] for i in range(1, 7)), timeout=10)
        await asyncio.sleep(0.2)  # anything more now would be a duplicate
        assert all(got[i] == [("hello", "over tcp")] for i in range(1, 7))
        assert got[0] == []
        sends = [e for e in trace.select(layer="gossip", kind="send") if e.msg == msg]
        assert len(sends) == 6 and {e.attrs["via"] for e in sends} == {"tcp"}
        if wire is WireMode.SEALED:
            await until(lambda: all(n.core.pending_hops == 0 for n in nodes))  # all ACKed
            hops = [int(e.attrs["hop"]) for e in trace.select(layer="gossip", kind="deliver")]
            assert max(hops) <= 3  # ceil(log2 7)
        assert [(await n.receive(timeout=5)).msg for n in nodes[1:]] == [msg] * 6
        assert {p.netid for p in nodes[0].peers()} == {n.netid for n in nodes[1:]}
    finally:
        for node in nodes:
            await node.close()


def test_refused_and_silent_peers_are_routed_around(run: Runner) -> None:
    run(_routed_around())


async def _routed_around() -> None:
    trace = MemorySink()
    got: dict[int, list[object]] = {}
    nodes = await open_nodes(5, trace, got, ack_timeout=0.3, connect_timeout=0.3)
    # A listener that accepts and never answers: a hung process (no ACK ever comes).
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    hung = NetID("127.0.0.1", silent.getsockname()[1])
    absent = NetID("127.0.0.1", free_ports(1)[0])  # nothing listens: connect refused
    try:
        dests = [hung, absent, *(n.netid for n in nodes)]
        await nodes[0].send(("hello", "around"), to=dests)
        await until(lambda: all(got[i] for i in range(1, 5)), timeout=10)
        assert all(got[i] == [("hello", "around")] for i in range(1, 5))
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
    trace = MemorySink()
    got: dict[int, list[object]] = {}
    nodes = await open_nodes(2, trace, got)

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
    try:
        received = []

        async def collect() -> None:
            async for event in nodes[1]:
                received.append(event.data)

        task = asyncio.create_task(collect())
        await nodes[0].send(("hello", "a"), to=nodes[1].netid)
        await nodes[0].send(("hello", "b"), to=[nodes[1].netid])
        await until(lambda: len(received) == 2)
        assert nodes[1].dispatch_errors == 2
        assert isinstance(nodes[1].last_dispatch_error, RuntimeError)
    finally:
        for node in nodes:
            await node.close()
    await asyncio.wait_for(task, 5.0)  # iteration ends when the node closes


def test_bytes_by_name_with_receive_timeout_and_close(run: Runner) -> None:
    async def main() -> None:
        wire = Wire(key=KEY)
        config = GossipConfig(my_addr="localhost", my_port=0, multicast=False)
        async with open_gossip(config, wire=wire) as a, open_gossip(config, wire=wire) as b:
            assert a.address[0] == "127.0.0.1" and a.netid == NetID(*a.address)
            with pytest.raises(TimedOutError) as timed_out:
                await b.receive(timeout=0.05)
            assert isinstance(timed_out.value.__cause__, TimeoutError)
            msg = await a.send(b"plain bytes", to=f"localhost:{b.address[1]}")
            delivered = await b.receive(timeout=5)
            assert (delivered.msg, delivered.data) == (msg, b"plain bytes")
            assert delivered.sender == a.netid and not b.rejected
            await a.send(b"kept after close", to=b.netid)
            await until(lambda: b.core.counters.delivered == 2)
        assert a.closed and b.closed
        assert (await b.receive()).data == b"kept after close"
        with pytest.raises(ClosedError):
            await b.receive()
        assert [d async for d in b] == []
        with pytest.raises(ClosedError):
            await a.send(b"late", to=b.netid)
        await a.close()  # idempotent

    run(main())


def test_a_port_in_use_is_a_network_error_and_no_key_is_refused(run: Runner) -> None:
    async def main() -> None:
        with socket.create_server(("127.0.0.1", 0)) as squatter:
            taken = squatter.getsockname()[1]
            config = GossipConfig(my_addr="127.0.0.1", my_port=taken, multicast=False)
            with pytest.raises(NetworkError) as error:
                await open_gossip(config, wire=Wire(key=KEY))
            assert isinstance(error.value.__cause__, OSError)
        with pytest.raises(ConfigError, match="no key"):
            open_gossip(GossipConfig(my_addr="127.0.0.1", multicast=False))
        with pytest.raises(NetworkError, match="cannot resolve"):
            await open_gossip(
                GossipConfig(my_addr="no-such-host.invalid", multicast=False), wire=Wire(key=KEY)
            )

    run(main())
