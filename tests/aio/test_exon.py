"""Exon nodes on 127.0.0.1: both directions at once, every message exactly once, also
with 10 % of the datagrams dropped by the fault injector (and the drops counted)."""

from __future__ import annotations

import asyncio
import random
import socket
from collections import Counter

import pytest

from gossamer.aio.exon import ExonNode, open_exon
from gossamer.aio.faults import FaultInjector
from gossamer.errors import ClosedError, NoRouteError, TimedOutError
from gossamer.faults import FaultPlan
from gossamer.proto.link.exon_core import ExonConfig, ExonMessage
from gossamer.testing.aio import Runner, until
from gossamer.wire import exon_transport as wire

COUNT = 400


async def _exchange(a: ExonNode, b: ExonNode) -> tuple[list[ExonMessage], list[ExonMessage]]:
    for i in range(COUNT):
        a.send("b", b"a->b %d" % i)
        b.send("a", b"b->a %d" % i)
    got_b = [await b.receive(timeout=30.0) for _ in range(COUNT)]
    got_a = [await a.receive(timeout=30.0) for _ in range(COUNT)]
    return got_a, got_b


@pytest.mark.parametrize("drop", [0.0, 0.1])
def test_every_message_once_both_ways(run: Runner, drop: float) -> None:
    async def main() -> None:
        faults = [FaultInjector(FaultPlan(drop=drop), rng=random.Random(seed)) for seed in (1, 2)]
        config = ExonConfig(in_transit=64, slots=128)
        async with (
            open_exon("a", config=config, faults=faults[0]) as a,
            open_exon("b", config=config, faults=faults[1]) as b,
        ):
            a.register("b", b.address)
            b.register("a", a.address)
            got_a, got_b = await _exchange(a, b)
            assert Counter(m.data for m in got_b) == Counter(b"a->b %d" % i for i in range(COUNT))
            assert Counter(m.data for m in got_a) == Counter(b"b->a %d" % i for i in range(COUNT))
            assert {m.node for m in got_a} == {"b"} and {m.node for m in got_b} == {"a"}
            with pytest.raises(TimedOutError):
                await b.receive(timeout=0.3)  # nothing twice
            # Every TOKEN is acknowledged in the end (a lost ACK costs a retransmission).
            await until(lambda: a.pending("b") == 0 and b.pending("a") == 0)
            assert not a.rejected and not b.rejected
            drops = sum(f.counts.get("drop", 0) for f in faults)
            retransmitted = a.core.counters["retransmissions"] + b.core.counters["retransmissions"]
            if drop:
                assert drops > 0 and retransmitted > 0
                assert sum(f.seen["out"] for f in faults) > 4 * COUNT
            else:
                assert drops == 0

    run(main())


def test_errors_and_close(run: Runner) -> None:
    async def main() -> None:
        a = await open_exon("a")
        with pytest.raises(NoRouteError):
            a.send("nobody", b"x")
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for junk in (b"junk", wire.encode(wire.ExonDatagram("x", "not-a", wire.Slots(0, 0, 1)))):
            sock.sendto(junk, a.address)
        sock.close()
        await until(lambda: sum(a.rejected.values()) == 2)
        assert a.rejected == {"malformed": 1, "not_for_me": 1}
        a.send("a", b"to myself")
        assert await a.receive(timeout=1.0) == ExonMessage("a", b"to myself")
        a.send("a", b"kept")
        waiting = asyncio.create_task(anext(aiter(a)))
        assert await waiting == ExonMessage("a", b"kept")
        waiting = asyncio.create_task(a.receive())
        await asyncio.sleep(0.01)
        await a.close()
        with pytest.raises(ClosedError):
            await waiting  # a receive waiting when the node closed
        await a.close()
        with pytest.raises(ClosedError):
            a.send("a", b"x")
        with pytest.raises(ClosedError):
            await a.receive(timeout=1.0)

    run(main())
