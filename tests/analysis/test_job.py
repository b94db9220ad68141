"""The whole job on a golden simulator run: verdicts, metrics, summary and report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis import job

pytestmark = pytest.mark.spark

GOLDEN = Path(__file__).parent / "golden" / "ping-n4-s7"


def test_golden_ping_run_holds_and_its_metrics_match_the_simulator(
    spark: SparkSession, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    sim = json.loads((run / "run.json").read_text())
    result = job.analyze(spark, str(run), str(tmp_path / "report"))

    assert not result.violated
    status = {c.name: c.status for c in result.checks}
    assert status["demo.pings"] == "pass"
    assert {s for name, s in status.items() if not name.startswith("demo.")} == {"skipped"}

    summary = json.loads(Path(result.summary_path).read_text())
    assert summary == json.loads(json.dumps(result.summary))  # what was written is what we got
    assert summary["verdict"] == "pass" and summary["run"] == "ping-n4-s7"
    assert summary["input"]["events"] == sim["events"] and summary["input"]["bad_lines"] == 0
    m = summary["metrics"]
    (demo,) = m["latency"]["by_layer"]
    # The simulator's own counts, from the cores' events rather than the traces.
    assert demo["count"] == sim["summary"]["pings_answered"]
    assert demo["p50"] * 1000 == pytest.approx(sim["summary"]["rtt_ms_p50"], abs=0.01)
    assert m["faults"]["totals"] == sim["fault_counts"]
    assert [(o["node"], o["fault"]) for o in m["faults"]["outages"]] == [("n3", "crash")]
    lost = sum(1 for line in (run / "n0.jsonl").read_text().splitlines() if '"kind":"lost"' in line)
    assert m["traffic"]["by_layer"]["demo"]["delivered"] == sim["summary"]["pings_answered"]
    assert lost <= sim["summary"]["pings_lost"]
    assert (
        summary["scenario"]["scenario"] == "ping" and summary["params"]["gossip.min_coverage"] == 1
    )

    html = Path(result.report_path).read_text()
    assert html.startswith("<!DOCTYPE html>") and "</html>" in html
    assert "ping-n4-s7" in html and "Delivery latency CDF" in html and "<svg" in html
    assert "src=" not in html and "<script" not in html  # self-contained
