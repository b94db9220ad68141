"""Scenario ``ping``: every node pings others over UDP, retransmitting on loss.

The foundation's demonstration of the sans-I/O contract under faults: with
``--drop`` the pings still complete through retransmission unless retries run out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from gossamer.proto.ping import PingConfig, PingCore, PingLost, PongReceived
from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.scenarios import (
    Param,
    Scenario,
    Summarize,
    check_nodes_exist,
    node_at_list,
    non_negative_float,
    partition_spec,
    positive_int,
    register,
)

PORT = 7000


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> Summarize:
    # Validate the timing parameters once, before any node exists.
    PingConfig(
        node_id="check",
        count=params["count"],
        interval=params["interval"],
        timeout=params["timeout"],
        max_retries=params["retries"],
    )
    subnets = min(params["subnets"], nodes)
    for i in range(nodes):
        sim.network.add_host(f"h{i}", subnet=i % subnets)
    ids = [f"n{i}" for i in range(nodes)]
    hosts = list(sim.network.hosts.values())

    def factory_for(i: int) -> Any:
        # Node i pings the nodes after it in turn, so every node is both pinger and ponger.
        others = [(ids[j % nodes], (hosts[j % nodes].ip, PORT)) for j in range(i + 1, i + nodes)]

        def factory(ctx: NodeContext) -> PingCore:
            config = PingConfig(
                node_id=ctx.node_id,
                targets=others,
                count=params["count"],
                interval=params["interval"],
                timeout=params["timeout"],
                max_retries=params["retries"],
                start=ctx.now,
            )
            return PingCore(config, tracer=ctx.tracer, rng=ctx.rng)

        return factory

    for i in range(nodes):
        sim.add_node(ids[i], hosts[i], PORT, factory_for(i))

    crashes = params["crash"]
    check_nodes_exist(sim, [n for n, _ in crashes], "crash")
    for node_id, when in crashes:
        sim.crash(node_id, when)
    restarts = params["restart"]
    check_nodes_exist(sim, [n for n, _ in restarts], "restart")
    for node_id, when in restarts:
        sim.restart(node_id, when)
    if params["partition"] is not None:
        isolated, start, end = params["partition"]
        check_nodes_exist(sim, isolated, "partition")
        sim.partition(isolated, start, end)

    def summarize() -> dict[str, Any]:
        rtts = sorted(
            e.rtt for n in sim.nodes.values() for e in n.events if isinstance(e, PongReceived)
        )
        lost = sum(isinstance(e, PingLost) for n in sim.nodes.values() for e in n.events)
        retransmits = sum(
            n.core.counters.retransmitted for n in _live(sim) if isinstance(n.core, PingCore)
        )
        result: dict[str, Any] = {
            "pings_answered": len(rtts),
            "pings_lost": lost,
            "retransmissions_by_live_nodes": retransmits,
        }
        if rtts:
            quantiles = (
                statistics.quantiles(rtts, n=100, method="inclusive")
                if len(rtts) > 1
                else rtts * 99
            )
            result["rtt_ms_p50"] = round(quantiles[49] * 1000, 3)
            result["rtt_ms_p99"] = round(quantiles[98] * 1000, 3)
        return result

    return summarize


def _live(sim: Simulator) -> list[SimNode]:
    return [n for n in sim.nodes.values() if n.alive]


SCENARIO = register(
    Scenario(
        name="ping",
        description="every node pings the others over UDP and retransmits with back-off",
        default_duration=10.0,
        params=(
            Param(name="count", parse=positive_int, default=10, help="pings sent by each node"),
            Param(
                name="interval", parse=non_negative_float, default=0.1, help="seconds between pings"
            ),
            Param(
                name="timeout",
                parse=non_negative_float,
                default=0.2,
                help="first retransmission timeout, doubling",
            ),
            Param(
                name="retries", parse=int, default=4, help="retransmissions before a ping is lost"
            ),
            Param(
                name="subnets",
                parse=positive_int,
                default=1,
                help="subnets the hosts are spread over",
            ),
            Param(
                name="crash",
                parse=node_at_list,
                default=[],
                shown="none",
                help="NODE@SECONDS[,...]: crash nodes",
            ),
            Param(
                name="restart",
                parse=node_at_list,
                default=[],
                shown="none",
                help="NODE@SECONDS[,...]: restart crashed nodes",
            ),
            Param(
                name="partition",
                parse=partition_spec,
                default=None,
                shown="none",
                help="NODE,NODE@FROM-TO: cut these nodes off from the rest",
            ),
        ),
        setup=_setup,
    )
)
