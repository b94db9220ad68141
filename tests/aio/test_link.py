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
from gossamer.aio.link import LinkError, Message, Receipt
from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.testing import sealed_wire
from gossamer.testing.aio import Runner
from gossamer.trace import MemorySink, Tracer

#: One group key for the module's sockets (links are sealed by default).
WIRE = sealed_wire()



def test_push_pull_with_credits(run: Runner) -> None:
    async def main() -> None:
        sink = MemorySink()
        node = await link.open_node(wire=WIRE, tracer=Tracer(sink, run="t", node="pull"))
        pull = node.socket("pull", tag="jobs", capacity=10, batch=0.5)
        push = await link.socket("push", wire=WIRE, tag="feeder")
        await push.link(pull.address, "jobs", timeout=5)
        assert push.statistics().established == 1

        async def produce() -> None:
            for i in range(500):
                await push.send(b"job %d" % i)

        task = asyncio.create_task(produce())
        got = [await pull.receive(timeout=5) for _ in range(500)]
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
        pull = await link.socket("pull", wire=WIRE, tag=7, transport="udp", capacity=50)
        push = await link.socket("push", wire=WIRE, tag=8, transport="udp")
        await push.link(pull.address, 7, timeout=5)

        async def produce() -> None:
            for i in range(2000):
                await push.send(b"%d" % i)

        task = asyncio.create_task(produce())
        got = [await pull.receive(timeout=5) for _ in range(2000)]
        await task
        assert got == [b"%d" % i for i in range(2000)]  # exactly once, in order
        await push.close()
        await pull.close()

    aio_loop.run(main())


def test_req_rep_round_trips_and_stale_replies(run: Runner) -> None:
    async def main() -> None:
        rep = await link.socket("rep", wire=WIRE, tag="service")
        req = await link.socket("req", wire=WIRE, tag="client")
        await req.link(rep.address, "service", timeout=5)

        async def serve() -> None:
            while True:
                question = await rep.receive()
                assert isinstance(question, bytes)
                await rep.send(question.upper())

        server = asyncio.create_task(serve())
        for word in (b"ping", b"hello", b"again"):
            await req.send(word)
            assert await req.receive(timeout=5) == word.upper()
        with pytest.raises(LocalProtocolError):
            await req.send(b"one")
            await req.send(b"two")  # must receive first
        assert await req.receive(timeout=5) == b"ONE"
        server.cancel()
        await req.close()
        await rep.close()

    run(main())


def test_dealer_router_routes_replies_by_id(run: Runner) -> None:
    async def main() -> None:
        node = await link.open_node(wire=WIRE)
        router = node.socket("router", tag="hub")
        dealers = [node.socket("dealer", tag=f"worker{i}") for i in range(3)]
        for dealer in dealers:
            await dealer.link(node.address, "hub", timeout=5)  # same node: loops back
        for i, dealer in enumerate(dealers):
            await dealer.send(b"hello %d" % i, envelope=(i,))
        for _ in range(3):
            message = await router.receive_message(timeout=5)
            assert isinstance(message, Message) and message.routing_id is not None
            await router.send(b"welcome " + message.data, to=message.routing_id,
                              envelope=message.envelope)
        for i, dealer in enumerate(dealers):
            reply = await dealer.receive_message(timeout=5)
            assert isinstance(reply, Message)
            assert (reply.data, reply.envelope) == (b"welcome hello %d" % i, (i,))
        await node.close()

    run(main())


def test_pub_sub_by_topic_prefix(run: Runner) -> None:
    async def main() -> None:
        pub = await link.socket("pub", wire=WIRE, tag="news")
        everything = await link.socket("sub", wire=WIRE, tag="all")
        sport = await link.socket("sub", wire=WIRE, tag="sport")
        everything.subscribe(b"")
        sport.subscribe(b"sport.")
        for sub in (everything, sport):
            await sub.link(pub.address, "news", timeout=5)
        await pub.wait_links(2, timeout=5)
        await asyncio.sleep(0.05)  # subscriptions are control messages on their way
        for topic in (b"sport.golf", b"weather.rain", b"sport.chess"):
            await pub.send(topic)
        assert [await everything.receive(timeout=5) for _ in range(3)] == [
            b"sport.golf", b"weather.rain", b"sport.chess"]
        assert [await sport.receive(timeout=5) for _ in range(2)] == [
            b"sport.golf", b"sport.chess"]
        assert sport.try_receive() is None
        for sock in (pub, everything, sport):
            await sock.close()

    run(main())


def test_pair_with_receipts_before_messages(run: Runner) -> None:
    async def main() -> None:
        left = await link.socket("pair", wire=WIRE, tag="left", receipts=True)
        right = await link.socket("pair", wire=WIRE, tag="right")
        await left.link(right.address, "right", timeout=5)
        await left.send(b"first", cookie="c1")
        await right.send(b"reply")
        assert await right.receive(timeout=5) == b"first"
        # The receipt for "first" comes before the message that was waiting.
        receipt = await left.receive(timeout=5)
        if not isinstance(receipt, Receipt):  # the reply may win the race to arrive
            assert receipt == b"reply"
            receipt = await left.receive(timeout=5)
        else:
            assert await left.receive(timeout=5) == b"reply"
        assert isinstance(receipt, Receipt) and receipt.cookie == "c1" and receipt.taken
        third = await link.socket("pair", wire=WIRE, tag="third", retry_limit=0)
        with pytest.raises(LinkError) as info:
            await third.link(right.address, "right", timeout=5)
        assert info.value.cause == "gave_up:refused:temporarily_unavailable"
        for sock in (left, right, third):
            await sock.close()

    run(main())


def test_incompatible_links_and_missing_peers_raise_with_the_reason(run: Runner) -> None:
    async def main() -> None:
        a = await link.socket("push", wire=WIRE, tag="a")
        b = await link.socket("push", wire=WIRE, tag="b")
        with pytest.raises(LinkError) as info:
            await a.link(b.address, "b", timeout=5)
        assert info.value.cause == "refused:incompatible"
        with socket_on_free_port() as port:
            pass  # the port is free again: nobody listens there
        with pytest.raises(LinkError) as info:
            await a.link(("127.0.0.1", port), "b", timeout=5)
        assert info.value.cause.startswith("connect_failed")
        with pytest.raises(ConfigError):
            await a.link(("localhost", 1), "b")
        await a.close()
        await b.close()

    run(main())


def test_blocking_sends_wait_for_credit_with_a_timeout(run: Runner) -> None:
    async def main() -> None:
        pull = await link.socket("pull", wire=WIRE, tag="slow", capacity=2, batch=1.0)
        push = await link.socket("push", wire=WIRE, tag="fast")
        await push.link(pull.address, "slow", timeout=5)
        await push.send(b"1")
        await push.send(b"2")
        with pytest.raises(TimeoutError):
            await push.send(b"3", timeout=0.2)  # not sent: no credit
        assert not push.try_send(b"3")
        assert await pull.receive() == b"1"
        assert await pull.receive() == b"2"  # a full batch: both credits go back
        await push.send(b"3", timeout=5)
        assert await pull.receive(timeout=5) == b"3"
        with pytest.raises(TimeoutError):
            await pull.receive(timeout=0.1)
        stats = push.statistics()
        assert stats.sent == 3 and stats.links[0].credits == 1
        await push.close()
        await pull.close()

    run(main())


def test_a_vanished_peer_fails_the_waiting_request(run: Runner) -> None:
    async def main() -> None:
        rep = await link.socket("rep", wire=WIRE, tag="svc")
        req = await link.socket("req", wire=WIRE, tag="cli")
        await req.link(rep.address, "svc", timeout=5)
        await req.send(b"anyone?")
        await rep.node.close(timeout=0.1)  # the server goes away without answering
        with pytest.raises(LinkError):
            await req.receive(timeout=5)
        await req.close()

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
