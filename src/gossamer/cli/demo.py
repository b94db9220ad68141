"""``./run demo``: the lab's ``demo`` scenario on real processes, analyzed, with a report.

Six ``gossamer lab app`` processes run every service (discovery, gossip, ISIS with
snapshots, links, the gateway) for about 25 seconds under 2 % datagram loss, 20 ms
delays, one crash and one partition; then ``gossamer analyze`` checks the traces on
Spark. Network namespaces (two subnets and a router) are used when this runs as root
and they work here; otherwise every node runs on 127.0.0.1. The output goes to
``./runs/demo-<UTC timestamp>``; the last line says where the HTML report is.

``./run demo --scenario cluster`` shows the cluster instead: a ``gossamer node`` daemon
per host forming one cluster, 신경 clients on every host routing across it, a
partition, a SIGKILL and a restart that rejoins (``docs/lab.md``, "The cluster"); its
output goes to ``./runs/cluster-<UTC timestamp>``. It is a separate run, not part of the
default demo, which already takes about two minutes.

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./run demo", add_help=False)
    parser.add_argument("--scenario", choices=sorted(SHOWS), default="demo")
    args, extra = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    out = RUNS / f"{args.scenario}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    print(f"gossamer demo: {SHOWS[args.scenario]},")
    print("then a Spark analysis of their traces (about two minutes in all)\n", flush=True)
    code = lab_cmd.main(["run", "--scenario", args.scenario, "--out", str(out), *extra])
    report = out / "analysis" / "report.html"
    if report.exists():
        print(f"\nHTML report: {report.resolve()}")
    else:
        print(f"\nno report was written; the run's files are in {out.resolve()}")
    return code


if __name__ == "__main__":
    sys.exit(main())
