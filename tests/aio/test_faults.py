"""gossamer.aio.faults: FaultPlan applied to real sockets on 127.0.0.1.

A fault scenario that injected nothing is a failed test (DESIGN.md, "The
simulator"), so every scenario asserts that its faults were counted and traced.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from gossamer._types import Address
from gossamer.aio.datagram import open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.sockets import udp_socket
from gossamer.faults import FaultPlan
from gossamer.proto.ping import PingConfig, PingCore
from gossamer.testing.aio import Runner, until
from gossamer.trace import MemorySink, Tracer

LOCALHOST = "127.0.0.1"


async def ping_over_faults(
    out_a: FaultPlan | None,
    *,
    in_b: FaultPlan | None = None,
    count: int = 10,
    max_retries: int = 8,
    seed: int = 7,
    also: Callable[[PingCore, PingCore], bool] = lambda a, b: True,
) -> tuple[PingCore, PingCore, FaultInjector, FaultInjector | None, MemorySink]:
    """Two ping nodes on loopback; node a's outgoing datagrams (and optionally
    node b's incoming ones) go through fault plans. Returns when both are done and
    ``also(a, b)`` holds (20 s at most: ``TimeoutError`` otherwise)."""
    loop = asyncio.get_running_loop()
    sink = MemorySink()
    sock_a, sock_b = udp_socket(LOCALHOST), udp_socket(LOCALHOST)
    now = loop.time()
    settings: dict[str, Any] = {
        "count": count,
        "interval": 0.005,
        "timeout": 0.01,
        "max_retries": max_retries,
        "start": now,
    }
    core_a = PingCore(
        PingConfig(node_id="a", targets=[("b", sock_b.getsockname())], **settings),
        tracer=Tracer(sink, run="t", node="a"),
        rng=random.Random(seed),
    )
    core_b = PingCore(
        PingConfig(node_id="b", targets=[("a", sock_a.getsockname())], **settings),
        tracer=Tracer(sink, run="t", node="b"),
        rng=random.Random(seed + 1),
    )
    faults_a = FaultInjector(
        out_a, rng=random.Random(seed + 2), tracer=Tracer(sink, run="t", node="a")
    )
    faults_b = (
        FaultInjector(
            incoming=in_b, rng=random.Random(seed + 3), tracer=Tracer(sink, run="t", node="b")
        )
        if in_b is not None
        else None
    )
    async with (
        await open_datagram(core_a, sock_a, faults=faults_a),
        await open_datagram(core_b, sock_b, faults=faults_b),
    ):
        await until(lambda: core_a.done and core_b.done and also(core_a, core_b))
    return core_a, core_b, faults_a, faults_b, sink


def _net_faults(sink: MemorySink, fault: str) -> list[Any]:
    return [e for e in sink.select(layer="net", kind="fault") if e.attrs["fault"] == fault]


def test_pings_complete_through_drops_by_retransmission(run: Runner) -> None:
    async def main() -> None:
        core_a, core_b, faults, _, sink = await ping_over_faults(FaultPlan(drop=0.3), count=15)
        for core in (core_a, core_b):
            assert core.counters.delivered == 15
            assert core.counters.lost == 0
        assert faults.counts["drop"] > 0
        assert core_a.counters.retransmitted + core_b.counters.retransmitted > 0
        traced = _net_faults(sink, "drop")
        assert len(traced) == faults.counts["drop"]
        assert {e.node for e in traced} == {"a"}
        assert all(e.attrs["direction"] == "out" and e.size for e in traced)
        # Only datagrams of node a went through the plan, and all of them did.
        assert faults.seen["out"] == core_a.counters.sent

    run(main())


def test_duplicates_are_injected_and_counted_by_the_core(run: Runner) -> None:
    async def main() -> None:
        # b gets every PONG of a twice; a gets every PONG of b twice (b answers both PING
        # copies). At least: a PING retransmitted on a slow machine adds more. A node is
        # done at the first copy of its last PONG, so the sockets stay open until the
        # second copies are counted too (a core that never counts them times out).
        core_a, core_b, faults, _, sink = await ping_over_faults(
            FaultPlan(duplicate=1.0),
            also=lambda a, b: a.counters.duplicates >= 10 and b.counters.duplicates >= 10,
        )
        assert faults.counts == {"duplicate": core_a.counters.sent}
        assert len(_net_faults(sink, "duplicate")) == core_a.counters.sent
        assert core_b.counters.duplicates >= 10
        assert core_a.counters.duplicates >= 10
        assert core_a.counters.delivered == core_b.counters.delivered == 10

    run(main())


def test_delay_and_reorder_hold_copies_on_the_loop(run: Runner) -> None:
    async def main() -> None:
        plan = FaultPlan(delay=0.004, reorder=0.5, reorder_by=0.008)
        core_a, core_b, faults, _, sink = await ping_over_faults(plan, max_retries=10)
        assert core_a.counters.delivered == core_b.counters.delivered == 10
        assert faults.counts["delay"] == faults.seen["out"]
        assert faults.counts["reorder"] > 0
        assert faults.held == 0  # every held copy was released before the driver closed
        delayed = _net_faults(sink, "reorder")
        assert delayed and all(float(e.attrs["delays"]) >= 0.008 for e in delayed)

    run(main())


def test_incoming_plan_drops_before_the_core_sees_anything(run: Runner) -> None:
    async def main() -> None:
        core_a, core_b, faults_a, faults_b, sink = await ping_over_faults(
            None, in_b=FaultPlan(drop=1.0), count=3, max_retries=1
        )
        assert faults_b is not None
        assert faults_a.injected == 0 and faults_a.seen == {"out": 0, "in": 0}
        assert core_b.counters.received == 0
        assert faults_b.counts == {"drop": faults_b.seen["in"]}
        assert faults_b.seen["in"] == core_a.counters.sent
        assert core_a.counters.lost == 3 and core_b.counters.lost == 3
        assert {e.attrs["direction"] for e in _net_faults(sink, "drop")} == {"in"}

    run(main())


def test_same_seed_same_faults(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        plan = FaultPlan(drop=0.2, duplicate=0.2, delay=0.001, reorder=0.3, reorder_by=0.002)

        async def one_run() -> tuple[dict[str, int], list[tuple[bytes, Address]]]:
            delivered: list[tuple[bytes, Address]] = []
            injector = FaultInjector(plan, rng=random.Random(99))
            for i in range(200):
                injector.apply(
                    "out",
                    i.to_bytes(2, "big"),
                    (LOCALHOST, 9),
                    lambda d, a: delivered.append((d, a)),
                    loop,
                )
            await until(lambda: injector.held == 0)
            return dict(injector.counts), sorted(delivered)

        outcomes = [await one_run(), await one_run()]
        assert outcomes[0] == outcomes[1]
        counts = outcomes[0][0]
        assert set(counts) == {"drop", "duplicate", "delay", "reorder"}
        assert len(outcomes[0][1]) == 200 - counts["drop"] + counts["duplicate"]

    run(main())


def test_closing_the_driver_discards_held_copies(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sink = MemorySink()
        receiver = udp_socket(LOCALHOST)
        target = receiver.getsockname()
        core = PingCore(
            PingConfig(
                node_id="a",
                targets=[("b", target)],
                count=3,
                interval=0.002,
                timeout=10.0,
                start=loop.time(),
            ),
            tracer=Tracer(sink, run="t", node="a"),
            rng=random.Random(1),
        )
        faults = FaultInjector(FaultPlan(delay=5.0), rng=random.Random(2))
        driver = await open_datagram(core, udp_socket(LOCALHOST), faults=faults)
        await until(lambda: faults.held == 3)
        driver.close()
        await driver.wait_closed()
        assert faults.held == 0
        assert faults.counts == {"delay": 3}
        assert driver.counters.sent == 0
        receiver.setblocking(False)
        with pytest.raises(BlockingIOError):
            receiver.recv(100)
        receiver.close()

    run(main())
