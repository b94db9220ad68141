"""``./run demo``: the lab's ``demo`` and ``cluster`` scenarios on real processes, analysed.

Six ``gossamer lab app`` processes run every service (discovery, gossip, ISIS with
snapshots, links, the gateway) for about 25 seconds under 2 % datagram loss, 20 ms
delays, one crash and one partition; then ``gossamer analyze`` checks the traces on
Spark. Network namespaces (two subnets and a router) are used when this runs as root
and they work here; otherwise every node runs on 127.0.0.1. The output goes to
``./runs/demo-<UTC timestamp>``; the last line says where the HTML report is.

Then it shows the cluster: a ``gossamer node`` daemon per host forming one cluster
(agreed views, ISIS, the gateway across nodes), 신경 clients on every host routing
across it, under a partition, a SIGKILL and a restart that rejoins (``docs/lab.md``,
"The cluster"), analysed the same way; its output goes to
``./runs/cluster-<UTC timestamp>``. ``--scenario demo`` or ``--scenario cluster`` runs
only one of the two. The exit code is the worse of the two runs'.

Other extra arguments are passed to ``gossamer lab run`` (e.g. ``./run demo --loopback``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from gossamer.cli import lab_cmd

RUNS = Path("runs")
#: What each scenario the demo can show runs, for its first lines.
SHOWS = {
    "demo": "real node processes exchanging real traffic under faults",
    "cluster": "gossamer node daemons forming one cluster, 신경 clients routing across it, "
    "under a partition, a kill and a restart",
}


def _show(scenario: str, extra: Sequence[str]) -> int:
    out = RUNS / f"{scenario}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    print(f"gossamer demo: {SHOWS[scenario]},")
    print("then a Spark analysis of their traces (one to two minutes)\n", flush=True)
    code = lab_cmd.main(["run", "--scenario", scenario, "--out", str(out), *extra])
    report = out / "analysis" / "report.html"
    if report.exists():
        print(f"\nHTML report: {report.resolve()}\n", flush=True)
    else:
        print(f"\nno report was written; the run's files are in {out.resolve()}\n", flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./run demo", add_help=False)
    parser.add_argument("--scenario", choices=sorted(SHOWS))
    args, extra = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    scenarios = list(SHOWS) if args.scenario is None else [args.scenario]
    return max(_show(scenario, extra) for scenario in scenarios)


if __name__ == "__main__":
    sys.exit(main())
