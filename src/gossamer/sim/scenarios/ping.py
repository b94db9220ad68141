"""Scenario ``ping``: every node pings others over UDP, retransmitting on loss.

The foundation's demonstration of the sans-I/O contract under faults: with
``--drop`` the pings still complete through retransmission unless retries run out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from gossamer.proto.ping import PingConfig, PingCore, PingLost, PongReceived
from gossamer.sim import scenarios as sc
from gossamer.sim.engine import NodeContext, SimNode, Simulator

PORT = 7000


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> sc.Summarize:
    # Validate the timing parameters once, before any node exists.
    PingConfig(
        node_id="check",
        count=params["count"],
        interval=params["interval"],
        timeout=params["timeout"],
        max_retries=params["retries"],
    )
    subnets = sim.network.subnets
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

    sc.schedule_faults(sim, params)

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


SCENARIO = sc.register(
    sc.Scenario(
        name="ping",
        description="every node pings the others over UDP and retransmits with back-off",
        default_duration=10.0,
        params=(
            *sc.param_table(
                ("count", sc.positive_int, 10, "pings sent by each node"),
                ("interval", sc.non_negative_float, 0.1, "seconds between pings"),
                ("timeout", sc.non_negative_float, 0.2, "first retransmission timeout, doubling"),
                ("retries", int, 4, "retransmissions before a ping is lost"),
            ),
            sc.subnets_param(),
            *sc.fault_params(),
        ),
        setup=_setup,
    )
)
