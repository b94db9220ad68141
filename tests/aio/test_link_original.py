"""Links on the original wire over real UDP on 127.0.0.1: a gossamer node
(``open_node(transport="exon", wire=Wire(mode=WireMode.ORIGINAL))``) with an emulated
Java A3M node (``gossamer.testing.a3m_original`` on an asyncio Exon node whose
datagrams, both ways, are dropped at 10 %)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator

import pytest

from gossamer.aio.exon import ExonNode, open_exon
from gossamer.aio.faults import FaultInjector
from gossamer.aio.link import Message, Node, open_node
from gossamer.errors import TimedOutError
from gossamer.faults import FaultPlan
from gossamer.proto.link.exon_core import ExonConfig
from gossamer.testing.a3m_original import OriginalNode
from gossamer.testing.aio import Runner
from gossamer.wire.mode import Wire, WireMode

COUNT = 200
ORIGINAL = Wire(mode=WireMode.ORIGINAL)


async def _drive(orig: OriginalNode, exon: ExonNode, tick: asyncio.Event) -> None:
    """The emulated original's loop: Exon messages in, its messages out, its retries."""
    while True:
        with contextlib.suppress(TimedOutError):
            message = await exon.receive(timeout=0.01)
            orig.receive(message.node, message.data, time.monotonic())
        orig.handle_timer(time.monotonic())
        outbox, orig.outbox = orig.outbox, []
        for node_id, payload in outbox:
            exon.send(node_id, payload)
        tick.set()


@contextlib.asynccontextmanager
async def _pair(
    drop: float,
) -> AsyncIterator[tuple[Node, OriginalNode, asyncio.Event, FaultInjector]]:
    plan = FaultPlan(drop=drop)  # both ways: every datagram of the link passes here
    faults = FaultInjector(plan, incoming=plan, rng=random.Random(5))
    config = ExonConfig(original_numbering=True, renew_records=False)
    async with open_exon("o", config=config, faults=faults) as exon, \
            open_node(transport="exon", wire=ORIGINAL, node_id="g") as node:
        node.register("o", exon.address)
        exon.register("g", node.address)
        orig = OriginalNode("o")
        tick = asyncio.Event()
        task = asyncio.create_task(_drive(orig, exon, tick))
        try:
            yield node, orig, tick, faults
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _until(tick: asyncio.Event, done: object, limit: float = 60.0) -> None:
    async with asyncio.timeout(limit):
        while not done():  # type: ignore[operator]
            tick.clear()
            await tick.wait()


@pytest.mark.parametrize("drop", [0.0, 0.1])
def test_gossamer_push_to_emulated_original_pull(run: Runner, drop: float) -> None:
    async def main() -> None:
        async with _pair(drop) as (node, orig, tick, faults):
            pull = orig.socket("pull", "jobs", capacity=20)
            push = node.socket("push", tag="feeder")
            await push.link(_addr(node, "o"), "jobs", timeout=30.0)
            got: list[bytes] = []

            async def consume() -> None:
                while len(got) < COUNT:
                    await tick.wait()
                    tick.clear()
                    while (message := pull.receive()) is not None:
                        got.append(message)

            consumer = asyncio.create_task(consume())
            for n in range(COUNT):
                await push.send(b"job %d" % n, timeout=30.0)
            await asyncio.wait_for(consumer, 60.0)
            assert got == [b"job %d" % n for n in range(COUNT)]
            assert orig.malformed == 0
            assert (faults.counts.get("drop", 0) > 0) == (drop > 0)

    run(main())


def _addr(node: Node, node_id: str) -> tuple[str, int]:
    exon = node.core.exon
    assert exon is not None
    return exon.core.addresses[node_id]


@pytest.mark.parametrize("drop", [0.0, 0.1])
def test_emulated_original_req_to_gossamer_rep(run: Runner, drop: float) -> None:
    async def main() -> None:
        async with _pair(drop) as (node, orig, tick, faults):
            rep = node.socket("rep", tag="service")
            req = orig.socket("req", "client")
            req.link("g", "service")
            await _until(tick, lambda: len(req.established()) == 1)

            async def serve() -> None:
                async for question in rep:
                    assert isinstance(question, Message)
                    await rep.send(question.data.upper(), timeout=30.0)

            server = asyncio.create_task(serve())
            replies: list[bytes] = []
            for n in range(40):
                assert req.send(b"ask %d" % n)
                await _until(tick, lambda: bool(req.inbox))
                reply = req.receive()
                assert reply is not None
                replies.append(reply)
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await server
            assert replies == [b"ASK %d" % n for n in range(40)]
            assert (faults.counts.get("drop", 0) > 0) == (drop > 0)

    run(main())
