"""Benchmark: gossamer's Chatter broadcast against the original Chatter and push gossip.

Simulated (``gossamer.sim``), N = 1024 nodes on two topologies:

- **TCP only**: 8 subnets, no multicast (every hop of the tree is a TCP message);
- **8 x 128 multicast**: 8 subnets of 128 nodes, multicast on inside each subnet.

Contenders, each on the same topology and seed:

- **gossamer**: ``gossamer.proto.gossip.GossipCore`` (envelope wire, defaults);
- **Chatter as coded**: the released algorithm with its TCP receive bug, which drops every
  TCP message (chatter-as-coded.md §7), so the tree never gets past the first hop;
- **Chatter as coded minus the TCP bug**: the same algorithm with TCP messages processed,
  every other behaviour as coded (no duplicate suppression, every hop multicasts, the
  one-directional grouping, no failure handling);
- **push gossip, fanout 3**: memberlist/Serf-style (``bench/gossip_baselines.py``).

Phases per run: with multicast, every node announces itself twice (as a broadcast to
nobody); ``warmup`` broadcasts to everyone from random nodes let the tree protocols learn the
subnets; then the measured phases, each ``broadcasts`` broadcasts to everyone from random
live nodes: clean; 10 % loss of multicast datagrams (multicast topology); 5 % of the nodes
crashed. Figures are per broadcast (means, except depth: the maximum): coverage of the live
nodes, depth (hops from the origin to the last first reception), TCP (or UDP) messages and
their bytes, multicast datagrams, redundant receptions (copies beyond each node's first),
duplicate deliveries (a node dispatching one broadcast twice), time to full coverage.

Run from the repository root: ``.venv/bin/python -m bench.gossip [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench._report import machine, table, update_section
from bench.gossip_baselines import ChatterAsCoded, PushGossip
from gossamer.faults import FaultPlan
from gossamer.proto.gossip import GossipCore
from gossamer.sim.engine import NodeContext, Simulator
from gossamer.sim.network import Network
from gossamer.sim.scenarios.gossip import SIM_KEY, GossipParams, GossipSim, TransportCore
from gossamer.trace.sink import NullSink
from gossamer.wire.chatter import NetID

CONTENDERS = ("gossamer", "gossamer-1copy", "chatter-as-coded", "chatter-minus-tcp-bug", "push-3")
LABELS = {
    "gossamer": "gossamer",
    "gossamer-1copy": "gossamer, 1 multicast copy",
    "chatter-as-coded": "Chatter as coded (TCP bug)",
    "chatter-minus-tcp-bug": "Chatter as coded minus the TCP bug",
    "push-3": "push gossip, fanout 3",
}
PHASES = ("clean", "multicast loss 10%", "5% crashed")


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    nodes: int
    subnets: int
    warmup: int
    broadcasts: int
    size: int
    seed: int


@dataclass(slots=True)
class Result:
    contender: str
    topology: str
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    warmup_tcp: list[int] = field(default_factory=list)


def factory(contender: str, cluster_ref: list[GossipSim]) -> Callable[[NodeContext, NetID], Any]:
    def make(ctx: NodeContext, netid: NetID) -> TransportCore:
        cluster = cluster_ref[0]
        if contender.startswith("gossamer"):
            return cluster.gossamer_core(ctx, netid)
        if contender.startswith("chatter"):
            return ChatterAsCoded(
                netid,
                tracer=ctx.tracer,
                rng=ctx.rng,
                key=b"bench",
                tcp_bug=contender == "chatter-as-coded",
                multicast=cluster.params.multicast,
            )
        return PushGossip(
            netid,
            cluster.netids,
            tracer=ctx.tracer,
            rng=ctx.rng,
            key=SIM_KEY,
            epoch=ctx.incarnation,
        )

    return make


def aggregate(cluster: GossipSim, msgs: list[str]) -> dict[str, Any]:
    live = cluster.live()
    rows = [cluster.stats.figures(m, live) for m in msgs if m in cluster.stats.broadcasts]
    if not rows:
        return {}

    def mean(key: str) -> float:
        return float(sum(r[key] for r in rows)) / len(rows)

    return {
        "n": len(rows),
        "coverage": mean("coverage"),
        "coverage_min": min(r["coverage"] for r in rows),
        "depth": max(r["depth"] for r in rows),
        "unicast": mean("tcp_sends") + mean("udp_sends"),
        "unicast_bytes": mean("tcp_bytes") + mean("udp_bytes"),
        "multicast": mean("multicast_sends"),
        "multicast_datagrams": mean("multicast_datagrams"),
        "multicast_bytes": mean("multicast_bytes"),
        "redundant": mean("redundant"),
        "dup_deliveries": max(r["max_deliveries"] for r in rows),
        "replans": sum(r["replans"] for r in rows),
        "time": max(r["time_to_cover"] for r in rows),
    }


class AckCounter:
    """ACKs sent by gossamer cores, and their bytes (ACKs are not traced as sends).

    A crashed node's core is gone with its counters: its last reading is kept.
    """

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.last: dict[str, tuple[int, int]] = {}

    def totals(self) -> tuple[int, int]:
        for node_id, node in self.sim.nodes.items():
            core = getattr(node.core, "core", None)
            if isinstance(core, GossipCore):
                self.last[node_id] = (core.counters.acks_sent, core.counters.ack_bytes)
        return (
            sum(count for count, _ in self.last.values()),
            sum(size for _, size in self.last.values()),
        )


def run(contender: str, topology: str, setup: Setup) -> Result:
    started = time.perf_counter()
    multicast = topology == "multicast"
    gc.collect()
    gc.freeze()  # a simulation of a thousand cores makes long-lived objects by the million
    sim = Simulator(
        seed=setup.seed,
        run=f"bench-{contender}-{topology}",
        network=Network(subnets=setup.subnets),
        sink_for=lambda node: NullSink(),
    )
    ref: list[GossipSim] = []
    params = GossipParams(
        subnets=setup.subnets,
        multicast=multicast,
        ack_timeout=0.5,
        copies=1 if contender == "gossamer-1copy" else None,
    )
    cluster = GossipSim(sim, setup.nodes, params, core_factory=factory(contender, ref))
    ref.append(cluster)
    result = Result(contender=contender, topology=topology)
    acks = AckCounter(sim)
    t = 0.1
    tree = contender != "push-3"
    if multicast and tree:
        t = cluster.schedule_announces(t, 2)
        sim.run(t)
    if tree and multicast:  # without multicast there is nothing to learn
        for k in range(setup.warmup):
            warm: list[str] = []
            t = cluster.schedule_broadcasts(
                t, 1, label=f"warmup{k}", size=setup.size, interval=1.0, collect=warm
            )
            sim.run(t)
            result.warmup_tcp.append(round(aggregate(cluster, warm).get("unicast", 0)))
    for phase in PHASES:
        if phase == "multicast loss 10%":
            if not multicast or not tree:
                continue  # push gossip sends no multicast: the loss would not touch it
            cluster.multicast_faults = FaultPlan(drop=0.1)
        if phase == "5% crashed":
            cluster.schedule_crashes(t, 0.05)
            t += 0.5
        msgs: list[str] = []
        acks_before = acks.totals()
        t = cluster.schedule_broadcasts(
            t, setup.broadcasts, label=phase, size=setup.size, interval=1.0, collect=msgs
        )
        t += 3.0  # let re-planned chunks and push rounds finish
        sim.run(t)
        cluster.multicast_faults = FaultPlan()
        figures = aggregate(cluster, msgs)
        acks_after = acks.totals()
        if figures:
            figures["acks"] = (acks_after[0] - acks_before[0]) / figures["n"]
            figures["ack_bytes"] = (acks_after[1] - acks_before[1]) / figures["n"]
        result.phases[phase] = figures
    if multicast and tree:
        assert sim.fault_counts.get("drop", 0) > 0, "the loss phase injected no loss"
    assert sim.fault_counts.get("crash", 0) > 0, "the crash phase crashed nobody"
    gc.unfreeze()
    result.seconds = time.perf_counter() - started
    return result


def fmt(value: float, digits: int = 1) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def report(results: list[Result], setup: Setup, command: str) -> tuple[str, list[str]]:
    n, s = setup.nodes, setup.subnets
    lines = [
        "## Gossip broadcast (`bench/gossip.py`)",
        "",
        f"Simulated, N = {n} nodes, seed {setup.seed}, {setup.size}-byte payloads; per "
        f"phase {setup.broadcasts} broadcasts to everyone from random live nodes (figures per "
        f"broadcast: means, depth the maximum). *TCP only*: {s} subnets, no multicast. "
        f"*Multicast*: {s} subnets of {n // s}, multicast inside each. The tree protocols "
        f"first ran {setup.warmup} warm-up broadcasts (and two announcements per node with "
        "multicast). *Unicast* counts TCP messages, or UDP datagrams for push gossip; "
        "gossamer's hop ACKs are counted apart. A *multicast send* is one datagram to the "
        "group (gossamer sends a second copy 2 ms later by default). "
        f"{machine()}.",
        "",
    ]
    failures: list[str] = []
    for topology, title in (("tcp", "TCP only"), ("multicast", f"{s} x {n // s} multicast")):
        rows: list[list[object]] = []
        for r in results:
            if r.topology != topology:
                continue
            for phase, f in r.phases.items():
                if not f:
                    continue
                rows.append(
                    [
                        LABELS[r.contender],
                        phase,
                        f"{f['coverage'] * 100:.1f}% (min {f['coverage_min'] * 100:.1f}%)",
                        f["depth"],
                        fmt(f["unicast"]),
                        fmt(f["unicast_bytes"] / 1024),
                        f"{fmt(f.get('acks', 0.0))} / {fmt(f.get('ack_bytes', 0.0) / 1024)}",
                        f"{fmt(f['multicast'])} ({fmt(f['multicast_datagrams'])})",
                        fmt(f["redundant"]),
                        f["dup_deliveries"],
                        f"{f['time']:.2f}",
                    ]
                )
        lines += [
            f"### {title}",
            "",
            table(
                [
                    "contender",
                    "phase",
                    "coverage of live nodes",
                    "depth",
                    "unicast msgs",
                    "unicast KiB",
                    "ACKs / KiB",
                    "multicast sends (datagrams)",
                    "redundant receptions",
                    "max deliveries per node",
                    "time to cover (s)",
                ],
                rows,
            ),
            "",
        ]
    # Ratios and targets.
    by = {(r.contender, r.topology): r for r in results}
    ratio_rows: list[list[object]] = []
    for topology in ("tcp", "multicast"):
        g = by.get(("gossamer", topology))
        if g is None:
            continue
        gc_ = g.phases["clean"]
        for other in ("chatter-as-coded", "chatter-minus-tcp-bug", "push-3"):
            o = by.get((other, topology))
            if o is None:
                continue
            oc = o.phases["clean"]
            total_g = gc_["unicast_bytes"] + gc_["multicast_bytes"] + gc_.get("ack_bytes", 0.0)
            total_o = oc["unicast_bytes"] + oc["multicast_bytes"] + oc.get("ack_bytes", 0.0)
            ratio_rows.append(
                [
                    "TCP only" if topology == "tcp" else "multicast",
                    LABELS[other],
                    f"{gc_['coverage'] / oc['coverage']:.2f}x" if oc["coverage"] else "inf",
                    f"{oc['unicast'] / gc_['unicast']:.2f}x" if gc_["unicast"] else "-",
                    f"{total_o / total_g:.2f}x" if total_g else "-",
                    f"{oc['redundant'] / gc_['redundant']:.1f}x"
                    if gc_["redundant"]
                    else f"{oc['redundant']:.0f} vs 0",
                ]
            )
    lines += [
        "### gossamer against each baseline (clean phase)",
        "",
        "How many times the baseline's figure gossamer's is: coverage (gossamer / baseline), "
        "and the baseline's cost over gossamer's for unicast messages, all bytes sent "
        "(unicast messages, every multicast datagram and gossamer's ACKs) and redundant "
        "receptions.",
        "",
        table(
            ["topology", "baseline", "coverage", "unicast msgs", "bytes sent", "redundant"],
            ratio_rows,
        ),
        "",
    ]
    targets: list[list[object]] = []
    for topology in ("tcp", "multicast"):
        g = by.get(("gossamer", topology))
        if g is None:
            continue
        bound = math.ceil(math.log2(n)) if topology == "tcp" else math.ceil(math.log2(s)) + 2
        clean, crashed = g.phases["clean"], g.phases["5% crashed"]
        checks = [
            (
                "full coverage without faults",
                clean["coverage_min"] == 1.0,
                f"{clean['coverage_min'] * 100:.1f}%",
            ),
            (f"depth <= {bound}", clean["depth"] <= bound, str(clean["depth"])),
            (
                ">= 99% of live nodes with 5% crashed",
                crashed["coverage_min"] >= 0.99,
                f"{crashed['coverage_min'] * 100:.2f}%",
            ),
        ]
        for name, ok, got in checks:
            targets.append(
                [
                    "TCP only" if topology == "tcp" else "multicast",
                    name,
                    got,
                    "met" if ok else "**missed**",
                ]
            )
            if not ok:
                failures.append(f"{topology}: {name} ({got})")
        if g.warmup_tcp:
            targets.append(
                [
                    "TCP only" if topology == "tcp" else "multicast",
                    "TCP messages per warm-up broadcast",
                    " ".join(str(x) for x in g.warmup_tcp),
                    "(convergence)",
                ]
            )
    lines += [
        "### Targets (gossamer)",
        "",
        table(["topology", "target", "measured", ""], targets),
        "",
    ]
    times = ", ".join(f"{LABELS[r.contender]} / {r.topology}: {r.seconds:.0f} s" for r in results)
    lines += [f"Simulation wall time: {times}.", "", f"Re-run: `{command}`."]
    return "\n".join(lines), failures


def tree(nodes: int = 48, subnets: int = 4, warmup: int = 8, seed: int = 3) -> str:
    """A Mermaid picture of one gossamer broadcast's tree after ``warmup`` broadcasts."""
    sim = Simulator(
        seed=seed, run="tree", network=Network(subnets=subnets), sink_for=lambda node: NullSink()
    )
    cluster = GossipSim(sim, nodes, GossipParams(subnets=subnets, ack_timeout=0.5))
    t = cluster.schedule_announces(0.1, 2)
    t = cluster.schedule_broadcasts(t, warmup, label="warm", size=64, interval=1.0)
    msgs: list[str] = []
    cluster.schedule_broadcasts(t, 1, label="pictured", size=64, interval=1.0, collect=msgs)
    sim.run(t + 3.0)
    record = cluster.stats.broadcasts[msgs[0]]

    def name(node: str) -> str:
        return "n" + node.split(":", maxsplit=1)[0].replace(".", "_")

    def short(node: str) -> str:
        return ".".join(node.split(":", maxsplit=1)[0].split(".")[2:])

    lines = ["flowchart LR", f'  {name(record.origin)}(["{short(record.origin)} origin"])']
    by_multicast: dict[str, list[str]] = {}
    for node, copy in sorted(record.copies.items(), key=lambda kv: kv[1].first_t or 0.0):
        if copy.first_peer is None:
            continue
        if copy.first_via == "multicast":
            by_multicast.setdefault(copy.first_peer, []).append(node)
        else:
            lines.append(
                f'  {name(copy.first_peer)} -- "tcp, hop {copy.first_hop}" --> '
                f'{name(node)}["{short(node)}"]'
            )
    for sender, receivers in by_multicast.items():
        hop = record.copies[receivers[0]].first_hop
        subnet = short(sender).split(".")[0]
        members = " ".join(sorted((short(r).split(".")[1] for r in receivers), key=int))
        lines.append(
            f'  {name(sender)} -. "multicast, hop {hop}" .-> '
            f'M{name(sender)}["subnet {subnet}: .{members.replace(" ", " .")}"]'
        )
    figures = cluster.stats.figures(msgs[0], cluster.live())
    lines.append(
        f"  %% {nodes} nodes in {subnets} subnets: depth {figures['depth']}, "
        f"{figures['tcp_sends']} TCP messages, {figures['multicast_sends']} multicast sends"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="64 nodes, a few seconds")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--no-write", action="store_true", help="print, do not update the doc")
    parser.add_argument("--tree", action="store_true", help="print one broadcast's tree (Mermaid)")
    args = parser.parse_args()
    if args.tree:
        print(tree())
        return
    if args.quick:
        setup = Setup(
            nodes=args.nodes or 64, subnets=4, warmup=4, broadcasts=2, size=256, seed=args.seed
        )
    else:
        setup = Setup(
            nodes=args.nodes or 1024, subnets=8, warmup=30, broadcasts=8, size=1024, seed=args.seed
        )
    results = []
    for topology in ("tcp", "multicast"):
        for contender in args.contenders.split(","):
            if contender == "gossamer-1copy" and topology == "tcp":
                continue  # the same as gossamer without multicast
            result = run(contender, topology, setup)
            print(
                f"{contender:>22} {topology:>9} {result.seconds:6.1f}s "
                f"warm-up TCP {result.warmup_tcp}",
                flush=True,
            )
            for phase, figures in result.phases.items():
                print(
                    f"{'':>33} {phase:>20}: "
                    + ", ".join(
                        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in figures.items()
                    ),
                    flush=True,
                )
            results.append(result)
    command = ".venv/bin/python -m bench.gossip" + (" --quick" if args.quick else "")
    markdown, failures = report(results, setup, command)
    if not args.no_write and not args.quick:
        update_section("gossip", markdown)
    print(markdown)
    if failures:
        print("targets missed: " + "; ".join(failures))


if __name__ == "__main__":
    random.seed(0)
    main()
