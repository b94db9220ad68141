"""The whole job on golden simulator runs of every protocol (tests/analysis/golden).

Each run was recorded once from the seeded simulator, with faults, and kept verbatim.
The analysis must find every property of its layer holding, and count what the
simulator itself counted: events, injected faults and crashes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis import job

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GOLDEN = Path(__file__).parent / "golden"

#: Golden run -> the checks that must run (not be skipped) and pass on it.
EXPECTED = {
    "isis-n5-s11": {
        "isis.total_order",
        "isis.agreement",
        "isis.validity",
        "isis.integrity",
        "isis.final_sequence",
    },
    "snapshot-n4-s5": {
        "isis.total_order",
        "isis.agreement",
        "snapshot.consistency",
        "snapshot.invariant",
    },
    "gossip-n16-s3": {"gossip.coverage", "gossip.depth", "gossip.integrity"},
    "discovery-n6-s9": {
        "discovery.full_view",
        "discovery.crash_detection",
        "discovery.false_removals",
    },
    "link-n4-s4": {"link.delivery", "link.credit"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_run_holds_and_its_counts_match_the_simulator(
    spark: SparkSession, tmp_path: Path, name: str
) -> None:
    run = tmp_path / name
    shutil.copytree(GOLDEN / name, run)
    sim = json.loads((run / "run.json").read_text())
    result = job.analyze(spark, str(run), str(tmp_path / "report"))

    status = {c.name: c.status for c in result.checks}
    assert {n: status[n] for n in EXPECTED[name]} == dict.fromkeys(EXPECTED[name], "pass")
    assert not result.violated, {n: s for n, s in status.items() if s == "fail"}
    summary = result.summary
    assert summary["input"]["events"] == sim["events"] and summary["input"]["bad_lines"] == 0
    faults = summary["metrics"]["faults"]
    assert faults["totals"] == sim["fault_counts"]
    crashed = sorted(o["node"] for o in faults["outages"] if o["fault"] == "crash")
    assert len(crashed) == sim["fault_counts"].get("crash", 0)
