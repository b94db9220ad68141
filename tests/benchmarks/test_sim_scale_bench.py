"""The simulator scale benchmark (``bench/sim_scale.py``) at tiny sizes.

Checks that it runs both scenarios at every size in fresh processes, that their checks
pass, and that it reports events growing with nodes and a memory figure per node,
without touching ``docs/benchmarks.md`` under ``--no-write``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_run_reports_both_scenarios_at_every_size() -> None:
    docs = (ROOT / "docs" / "benchmarks.md").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "bench.sim_scale", "--sizes", "8,16", "--no-write"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = []
    for part in done.stdout.split("## simulator at scale: ")[1:]:
        scenario = part.split(maxsplit=1)[0]
        rows += [
            (scenario, *row)
            for row in re.findall(
                r"^\| (\d+) \| \d+ \| ([\d,]+) \| [\d,]+ \| [\d.]+ \| [\d.]+ \| \d+ \| \d+ "
                r"\| (\d+)x \| ([\d.]+)x \| [\d.]+x \| [\d.]+x \| (\w+) \|$",
                part,
                re.M,
            )
        ]
    assert [(r[0], r[1]) for r in rows] == [
        ("gossip", "8"), ("gossip", "16"), ("discovery", "8"), ("discovery", "16"),
    ], done.stdout  # fmt: skip
    for scenario, nodes, events, nodes_ratio, events_ratio, passed in rows:
        assert passed == "yes", (scenario, nodes)
        assert int(events.replace(",", "")) > 0
        if nodes == "16":
            assert nodes_ratio == "2" and float(events_ratio) > 1.0
    assert (ROOT / "docs" / "benchmarks.md").read_bytes() == docs
