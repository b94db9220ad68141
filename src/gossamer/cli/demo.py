"""``./run demo``: the main job on a fresh machine.

Until the lab exists this is a simulated run of the foundation's ping scenario
under faults (loss, duplication, delay, a crash and a partition), followed by a
readable summary of what happened and where the traces are.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gossamer.cli.trace_cmd import format_summary, summarize
from gossamer.faults import FaultPlan
from gossamer.sim.run import SimRequest, replay_command, run_simulation

DEMO_DIR = Path("runs/demo")


def main() -> int:
    request = SimRequest(
        scenario="ping",
        nodes=24,
        seed=7,
        out=DEMO_DIR,
        faults=FaultPlan(drop=0.15, duplicate=0.05, delay=0.02),
        params={"subnets": "3", "crash": "n5@0.4", "partition": "n10,n11@0.2-1.5", "count": "12"},
    )
    print("gossamer demo: 24 simulated nodes on 3 subnets ping each other over UDP")
    print("faults: 15% loss, 5% duplication, up to 20 ms extra delay, n5 crashes at 0.4 s,")
    print("        n10 and n11 are partitioned from 0.2 s to 1.5 s\n")
    result = run_simulation(request)
    summary = result.summary
    print(f"pings answered        {summary['pings_answered']}")
    print(f"pings lost            {summary['pings_lost']}  (mostly those sent to the crashed n5)")
    print(f"retransmissions       {summary['retransmissions_by_live_nodes']}")
    p50, p99 = summary.get("rtt_ms_p50", "-"), summary.get("rtt_ms_p99", "-")
    print(f"round trip p50 / p99  {p50} ms / {p99} ms")
    faults = ", ".join(f"{k} {v}" for k, v in result.fault_counts.items())
    print(f"faults injected       {faults}\n")
    counts, files, _ = summarize(result.run_dir)
    print(format_summary(counts, files))
    print(f"\ntraces: {result.run_dir}/<node>.jsonl")
    print(f"parameters and counts: {result.run_dir}/run.json")
    print(f"replay: {replay_command(request)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
