"""gossamer.aio.link: each socket pattern over real sockets on 127.0.0.1.

TCP tests run on uvloop and on the default loop; UDP runs on uvloop (the default
loop's datagram transport is the slow one, see performance-baselines.md). Timing
assertions are about order, never about wall-clock speed.
"""

from __future__ import annotations

import asyncio
import socket as pysocket

import pytest

from gossamer.aio import link
from gossamer.aio import loop as aio_loop
from gossamer.aio.link import Message, Receipt, open_node, open_socket
from gossamer.errors import (
    ClosedError,
    ConfigError,
    LinkError,
    LocalProtocolError,
    NetworkError,
    NoRouteError,
    TimedOutError,
)
from gossamer.testing import sealed_wire
from gossamer.testing.aio import Runner
from gossamer.trace import MemorySink, Tracer

#: One group key for the module's sockets (links are sealed by default).
WIRE = sealed_wire()


async def _data(sock: link.Socket, timeout: float = 5) -> bytes:
    """The next message's data (no receipts expected)."""
    message = await sock.receive(timeout=timeout)
    assert isinstance(message, Message)
    return message.data


def test_push_pull_with_credits(run: Runner) -> None:
    async def main() -> None:
        sink = MemorySink()
        node = await open_node(wire=WIRE, tracer=Tracer(sink, run="t", node="pull"))
        pull = node.socket("pull", tag="jobs", capacity=10, batch=0.5)
        push = await open_socket("push", wire=WIRE, tag="feeder")
        await push.link(pull.address, "jobs", timeout=5)
        assert push.statistics().established == 1

        async def produce() -> None:
            for i in range(500):
                await push.send(b"job %d" % i)

        task = asyncio.create_task(produce())
        got = [await _data(pull) for _ in range(500)]
        await task
        assert got == [b"job %d" % i for i in range(500)]
        stats = pull.statistics()
        assert stats.taken == 500 and stats.peak_queued_bytes <= 10 * len(b"job 499")
        assert push.statistics().would_block > 0  # flow control did hold it back
        kinds = {e.kind for e in sink.events}
        assert {"link_up", "deliver"} <= kinds
        await push.close()
        await node.close()
        assert [e.attrs["reason"] for e in sink.events if e.kind == "link_down"] == ["unlinked"]

    run(main())


def test_push_pull_over_udp_with_the_reliable_channel() -> None:
    async def main() -> None:
        pull = await open_socket("pull", wire=WIRE, tag=7, transport="udp", capacity=50)
        push = await open_socket("push", wire=WIRE, tag=8, transport="udp")
        await push.link(pull.address, 7, timeout=5)

        async def produce() -> None:
            for i in range(2000):
                await push.send(b"%d" % i)

        task = asyncio.create_task(produce())
        got = [await _data(pull) for _ in range(2000)]
        await task
        assert got == [b"%d" % i for i in range(2000)]  # exactly once, in order
        await push.close()
        await pull.close()

    aio_loop.run(main())


def test_req_rep_round_trips_and_stale_replies(run: Runner) -> None:
    async def main() -> None:
        rep = await open_socket("rep", wire=WIRE, tag="service")
        req = await open_socket("req", wire=WIRE, tag="client")
        await req.link(rep.address, "service", timeout=5)

        async def serve() -> None:
            while True:
                question = await _data(rep, timeout=30)
                await rep.send(question.upper())

        server = asyncio.create_task(serve())
        for word in (b"ping", b"hello", b"again"):
            await req.send(word)
            assert await _data(req) == word.upper()
        with pytest.raises(LocalProtocolError):
            await req.send(b"one")
            await req.send(b"two")  # must receive first
        assert await _data(req) == b"ONE"
        server.cancel()
        await req.close()
        await rep.close()

    run(main())


def test_dealer_router_routes_replies_by_id(run: Runner) -> None:
    async def main() -> None:
        node = await open_node(wire=WIRE)
        router = node.socket("router", tag="hub")
        dealers = [node.socket("dealer", tag=f"worker{i}") for i in range(3)]
        for dealer in dealers:
            await dealer.link(node.address, "hub", timeout=5)  # same node: loops back
        for i, dealer in enumerate(dealers):
            await dealer.send(b"hello %d" % i, envelope=(i,))
        for _ in range(3):
            message = await router.receive(timeout=5)
            assert isinstance(message, Message) and message.routing_id is not None
            await router.send(b"welcome " + message.data, to=message.routing_id,
                              envelope=message.envelope)
        for i, dealer in enumerate(dealers):
            reply = await dealer.receive(timeout=5)
            assert isinstance(reply, Message)
            assert (reply.data, reply.envelope) == (b"welcome hello %d" % i, (i,))
        await node.close()

    run(main())


def test_pub_sub_by_topic_prefix(run: Runner) -> None:
    async def main() -> None:
        pub = await open_socket("pub", wire=WIRE, tag="news")
        everything = await open_socket("sub", wire=WIRE, tag="all")
        sport = await open_socket("sub", wire=WIRE, tag="sport")
        everything.subscribe(b"")
        sport.subscribe(b"sport.")
        for sub in (everything, sport):
            await sub.link(pub.address, "news", timeout=5)
        await pub.wait_links(2, timeout=5)
        await asyncio.sleep(0.05)  # subscriptions are control messages on their way
        for topic in (b"sport.golf", b"weather.rain", b"sport.chess"):
            await pub.send(topic)
        assert [await _data(everything) for _ in range(3)] == [
            b"sport.golf", b"weather.rain", b"sport.chess"]
        assert [await _data(sport) for _ in range(2)] == [
            b"sport.golf", b"sport.chess"]
        assert sport.try_receive() is None
        for sock in (pub, everything, sport):
            await sock.close()

    run(main())


def test_pair_with_receipts_before_messages(run: Runner) -> None:
    async def main() -> None:
        left = await open_socket("pair", wire=WIRE, tag="left", receipts=True)
        right = await open_socket("pair", wire=WIRE, tag="right")
        await left.link(right.address, "right", timeout=5)
        await left.send(b"first", cookie="c1")
        await right.send(b"reply")
        assert await _data(right) == b"first"
        # The receipt for "first" comes before the message that was waiting.
        receipt = await left.receive(timeout=5)
        if not isinstance(receipt, Receipt):  # the reply may win the race to arrive
            assert receipt.data == b"reply"
            receipt = await left.receive(timeout=5)
        else:
            assert await _data(left) == b"reply"
        assert isinstance(receipt, Receipt) and receipt.cookie == "c1" and receipt.taken
        third = await open_socket("pair", wire=WIRE, tag="third", retry_limit=0)
        with pytest.raises(LinkError) as info:
            await third.link(right.address, "right", timeout=5)
        assert info.value.cause == "gave_up:refused:temporarily_unavailable"
        for sock in (left, right, third):
            await sock.close()

    run(main())


def test_incompatible_links_and_missing_peers_raise_with_the_reason(run: Runner) -> None:
    async def main() -> None:
        a = await open_socket("push", wire=WIRE, tag="a")
        b = await open_socket("push", wire=WIRE, tag="b")
        with pytest.raises(LinkError) as info:
            await a.link(b.address, "b", timeout=5)
        assert info.value.cause == "refused:incompatible"
        with socket_on_free_port() as port:
            pass  # the port is free again: nobody listens there
        with pytest.raises(LinkError) as info:
            await a.link(("127.0.0.1", port), "b", timeout=5)
        assert info.value.cause.startswith("connect_failed")
        with pytest.raises(ConfigError):
            await a.link("localhost:port", "b")
        with pytest.raises(NetworkError) as failed:
            await a.link("no-such-host.invalid:1", "b")
        assert failed.value.__cause__ is not None
        await a.close()
        await b.close()

    run(main())


def test_blocking_sends_wait_for_credit_with_a_timeout(run: Runner) -> None:
    async def main() -> None:
        pull = await open_socket("pull", wire=WIRE, tag="slow", capacity=2, batch=1.0)
        push = await open_socket("push", wire=WIRE, tag="fast")
        await push.link(pull.address, "slow", timeout=5)
        await push.send(b"1")
        await push.send(b"2")
        with pytest.raises(TimedOutError) as timed_out:
            await push.send(b"3", timeout=0.2)  # not sent: no credit
        assert isinstance(timed_out.value.__cause__, TimeoutError)
        assert not push.try_send(b"3")
        assert await _data(pull) == b"1"
        assert await _data(pull) == b"2"  # a full batch: both credits go back
        await push.send(b"3", timeout=5)
        assert await _data(pull) == b"3"
        with pytest.raises(TimedOutError) as timed_out:
            await pull.receive(timeout=0.1)
        assert isinstance(timed_out.value.__cause__, TimeoutError)
        stats = push.statistics()
        assert stats.sent == 3 and stats.links[0].credits == 1
        await push.close()
        await pull.close()

    run(main())


def test_a_vanished_peer_fails_the_waiting_request(run: Runner) -> None:
    async def main() -> None:
        rep = await open_socket("rep", wire=WIRE, tag="svc")
        req = await open_socket("req", wire=WIRE, tag="cli")
        await req.link(rep.address, "svc", timeout=5)
        await req.send(b"anyone?")
        await rep.node.close(timeout=0.1)  # the server goes away without answering
        with pytest.raises(LinkError):
            await req.receive(timeout=5)
        await req.close()

    run(main())


def test_async_with_closes_and_iteration_ends(run: Runner) -> None:
    async def main() -> None:
        async with open_socket("pull", tag="in", wire=WIRE) as pull:
            async with open_socket("push", tag="out", wire=WIRE) as push:
                await push.link(pull.address, "in", timeout=5)
                for word in (b"a", b"b", b"c"):
                    await push.send(word)
                first = await pull.receive(timeout=5)
                assert isinstance(first, Message)
                assert (first.data, first.sender) == (b"a", push.address)
            assert push.closed
            with pytest.raises(ClosedError):
                await push.send(b"late")
            got: list[bytes] = []

            async def consume() -> None:
                async for message in pull:
                    assert isinstance(message, Message)
                    got.append(message.data)

            consumer = asyncio.create_task(consume())
            while len(got) < 2:
                await asyncio.sleep(0.01)
            await pull.close()
            await asyncio.wait_for(consumer, 5)  # the iteration ended with the close
            assert got == [b"b", b"c"]
            await pull.close()  # idempotent
        with pytest.raises(ClosedError):
            await pull.receive(timeout=1)
        assert pull.closed and pull.node.closed

    run(main())


def test_what_arrived_before_close_is_still_received(run: Runner) -> None:
    async def main() -> None:
        async with open_socket("push", tag="out", wire=WIRE) as push:
            pull = await open_socket("pull", tag="in", wire=WIRE)
            await push.link(pull.address, "in", timeout=5)
            await push.send(b"one")
            await push.send(b"two")
            while pull.statistics().queued_bytes < 6:
                await asyncio.sleep(0.01)
            await pull.close()
            assert [await _data(pull), await _data(pull)] == [b"one", b"two"]
            with pytest.raises(ClosedError):
                await pull.receive(timeout=1)
            with pytest.raises(ClosedError):
                pull.try_receive()

    run(main())


@pytest.mark.parametrize("host", ["localhost", "::1"])
def test_nodes_on_localhost_and_ipv6(run: Runner, host: str) -> None:
    async def main() -> None:
        async with open_socket("pull", tag="in", wire=WIRE, host=host) as pull, \
                open_socket("push", tag="out", wire=WIRE, host=host) as push:
            expected = "127.0.0.1" if host == "localhost" else "::1"
            assert pull.address[0] == expected
            port = pull.address[1]
            text = f"{host}:{port}" if host == "localhost" else f"[::1]:{port}"
            await push.link(text, "in", timeout=5)
            await push.send(b"over " + host.encode())
            assert await _data(pull) == b"over " + host.encode()

    run(main())


def test_a_router_send_to_an_unknown_routing_id_raises_no_route(run: Runner) -> None:
    async def main() -> None:
        async with open_socket("router", tag="hub", wire=WIRE) as router:
            with pytest.raises(NoRouteError) as info:
                await router.send(b"to nobody", to=12345)
            assert isinstance(info.value.__cause__, LocalProtocolError)

    run(main())


def test_a_socket_needs_a_wire_and_known_options(run: Runner) -> None:
    async def main() -> None:
        with pytest.raises(ConfigError):
            open_socket("pull", tag="x")
        async with open_node(wire=WIRE) as node:
            with pytest.raises(ConfigError):
                node.socket("pull", tag="x", no_such_option=1)
            with pytest.raises(NetworkError) as info:
                await open_node(port=node.address[1], wire=WIRE)  # the port is taken
            assert isinstance(info.value.__cause__, OSError)

    run(main())


class socket_on_free_port:  # noqa: N801 - a context manager used like a function
    """Reserve a free TCP port on 127.0.0.1, and free it on exit."""

    def __enter__(self) -> int:
        self.sock = pysocket.socket()
        self.sock.bind(("127.0.0.1", 0))
        port: int = self.sock.getsockname()[1]
        return port

    def __exit__(self, *exc_info: object) -> None:
        self.sock.close()
