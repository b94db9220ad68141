"""Benchmark: the simulator at scale, as ratios against the run of the smallest size.

Runs the ``gossip`` and ``discovery`` scenarios with their default parameters (apart from
``--nodes``) at growing node counts, each run in a fresh process so that its peak memory
is its own, and records per run:

- wall time and CPU time (user + system of the process, which is the steadier figure
  on a shared machine), best of ``--rounds`` rounds taken in interleaved order;
- events: trace events written and datagrams delivered (what the simulator processed);
- peak resident memory, and that minus the memory of a process that only imported the
  simulator, per node.

The cost model it checks: with the defaults, subnets and broadcast addressees are bounded
(see the scenario modules), so events grow linearly with nodes, and CPU time per event
should stay flat; the table gives both ratios to the smallest size.

Run from the repository root: ``python -m bench.sim_scale [--quick] [--sizes 250,2000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._report import machine, table, update_section

SCENARIOS = ("gossip", "discovery")
SIZES = (250, 500, 1000, 2000, 5000, 10000)
QUICK_SIZES = (20, 40, 80)


def child(scenario: str, nodes: int) -> dict[str, Any]:
    """One run, in this process: what the parent records (``nodes`` 0: imports only)."""
    from gossamer.sim import scenarios
    from gossamer.sim.run import SimRequest, run_simulation

    if not nodes:
        scenarios.scenarios()  # imports every scenario and the cores they run
        return {"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    with tempfile.TemporaryDirectory() as out:
        wall, cpu = time.perf_counter(), time.process_time()
        result = run_simulation(SimRequest(scenario=scenario, nodes=nodes, seed=1, out=Path(out)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    summary = result.summary
    check = (
        summary["coverage_min"] == 1.0 and not summary["violations"]
        if scenario == "gossip"
        else summary["nodes_never_full"] == 0 and summary["false_removals"] == 0
    )
    return {
        "wall": wall,
        "cpu": cpu,
        "events": result.events,
        "delivered": result.stats.get("datagrams_delivered", 0),
        "subnets": result.metadata["params"]["subnets"],
        "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "ok": bool(check),
    }


def measure(scenario: str, nodes: int) -> dict[str, Any]:
    """``child`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.sim_scale", "--child", scenario, str(nodes)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if done.returncode:
        raise RuntimeError(f"{scenario} with {nodes} nodes failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(
    scenarios: list[str], sizes: list[int], rounds: int
) -> dict[str, dict[int, dict[str, Any]]]:
    """Best of ``rounds`` per scenario and size; rounds go through every size in turn."""
    best: dict[str, dict[int, dict[str, Any]]] = {s: {} for s in scenarios}
    for r in range(rounds):
        for scenario in scenarios:
            for nodes in sizes:
                got = measure(scenario, nodes)
                print(
                    f"round {r + 1}: {scenario} {nodes} nodes: {got['cpu']:.1f} s CPU, "
                    f"{got['wall']:.1f} s wall, {got['events']:,} events, "
                    f"{got['rss_kb'] / 1024:.0f} MB",
                    flush=True,
                )
                kept = best[scenario].get(nodes)
                if kept is None or got["cpu"] < kept["cpu"]:
                    got["rss_kb"] = min(got["rss_kb"], kept["rss_kb"]) if kept else got["rss_kb"]
                    best[scenario][nodes] = got
    return best


DEFAULTS = {
    "gossip": "30 simulated seconds, subnets of 32 nodes, 4 measured broadcasts to at most "
    "128 addressees, at most 128 peers per node; *checks pass*: every measured broadcast "
    "reached every addressee exactly once",
    "discovery": "60 simulated seconds, subnets of 128 nodes, max_peers 64; *checks pass*: "
    "every node reached its target view and nothing was removed falsely",
}


def report(
    scenario: str, by_size: dict[int, dict[str, Any]], base_kb: int, command: str, load: str
) -> str:
    """The ``sim-scale-<scenario>`` section of ``docs/benchmarks.md``."""
    rows = []
    sizes = sorted(by_size)
    first = by_size[sizes[0]]
    for nodes in sizes:
        got = by_size[nodes]
        per_node_kb = max(0, got["rss_kb"] - base_kb) / nodes
        rows.append([
            f"{nodes:,}",
            got["subnets"],
            f"{got['events']:,}",
            f"{got['delivered']:,}",
            f"{got['cpu']:.1f}",
            f"{got['wall']:.1f}",
            f"{got['rss_kb'] / 1024:.0f}",
            f"{per_node_kb:.0f}",
            f"{nodes / sizes[0]:.0f}x",
            f"{got['events'] / first['events']:.1f}x",
            f"{got['cpu'] / first['cpu']:.1f}x",
            f"{(got['cpu'] / got['events']) / (first['cpu'] / first['events']):.2f}x",
            "yes" if got["ok"] else "NO",
        ])  # fmt: skip
    header = [
        "nodes", "subnets", "trace events", "datagrams", "CPU s", "wall s", "peak MB",
        "KB/node", "nodes ratio", "events ratio", "CPU ratio", "CPU/event ratio", "checks pass",
    ]  # fmt: skip
    return "\n".join(
        [
            f"## simulator at scale: {scenario}",
            "",
            f"`{command}` on {machine()}, 2 CPUs shared with other jobs ({load}). Each run in its",
            "own process with the scenario's defaults apart from `--nodes`, traces written to",
            f"files: {DEFAULTS[scenario]}. CPU time is user + system of the run (best of the",
            "rounds), the steadier figure on a shared machine; ratios are to the smallest size.",
            "KB/node: peak resident memory less that of a process that only imported the",
            f"simulator ({base_kb / 1024:.0f} MB), per node.",
            "",
            table(header, rows),
            "",
            "Cost model: with the defaults the events grow linearly with the nodes (events",
            "ratio = nodes ratio), and so do the calls made per event (profiled at 1,000 and",
            "5,000 gossip nodes: the same calls per event, function by function). Three causes",
            "made CPU per event grow with the size of a run, and are gone: the cyclic garbage",
            "collector, whose youngest generation counts allocations while a simulation's",
            "objects live for simulated time, so that a larger run promoted ever more of them",
            "into full collections of the whole heap (21 of them, 28% of the CPU, for 5,000",
            "gossip nodes; `Simulator.run` now sizes that generation by the node count);",
            "4,096-entry caches that more nodes thrashed (the network's broadcast and multicast",
            "tests, an address parse per datagram in discovery); and memory: each gossip node",
            "kept its own codec caches and one AES-GCM cipher per sender it heard (2.6 KB of",
            "OpenSSL state each, which tracemalloc does not see), where the nodes now share one",
            "codec and one keyring. What remains is a deeper event queue (a logarithm of the",
            "events in flight) and a working set far larger than the caches. What is",
            "quadratic by design is bounded by the defaults: a subnet's broadcast or multicast",
            "reaches all its nodes (and in gossip carries a seen list as long as the subnet),",
            "and a gossip broadcast's receivers record every addressee. `--param subnets=1`",
            "(one LAN) or, in gossip, `--param destinations=N` (to everyone) bring the square",
            "back.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--sizes", help="comma-separated node counts")
    parser.add_argument("--rounds", type=int, default=1, help="rounds (best CPU time kept)")
    parser.add_argument("--no-write", action="store_true", help="print, do not update docs")
    parser.add_argument("--child", nargs=2, metavar=("SCENARIO", "NODES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return 0
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else list(QUICK_SIZES if args.quick else SIZES)
    )
    load = f"load average {os.getloadavg()[0]:.1f} at the start"
    base_kb = measure("gossip", 0)["rss_kb"]
    scenarios = args.scenarios.split(",")
    best = run(scenarios, sizes, args.rounds)
    command = "python -m bench.sim_scale" + (" --quick" if args.quick else "")
    if args.scenarios != ",".join(SCENARIOS):
        command += f" --scenarios {args.scenarios}"
    if args.sizes:
        command += f" --sizes {args.sizes}"
    if args.rounds != 1:
        command += f" --rounds {args.rounds}"
    load += f", {os.getloadavg()[0]:.1f} at the end"
    for scenario, by_size in best.items():
        markdown = report(scenario, by_size, base_kb, command, load)
        print(markdown)
        if not args.no_write:
            update_section(f"sim-scale-{scenario}", markdown)
    failed = [(s, n) for s, by in best.items() for n, got in by.items() if not got["ok"]]
    if failed:
        print(f"checks failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
