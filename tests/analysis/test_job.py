"""The whole job on a golden simulator run: verdicts, metrics, summary and report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis import catalog, job
from gossamer.analysis.session import session_settings

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


@pytest.mark.parametrize("name", ["ping-n4-s7", "isis-n5-s11"])
def test_a_run_analysed_in_memory_gets_the_summary_of_its_parquet_conversion(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN.parent / name, run)
    # In memory with the SQL settings of a small run's session (no broadcasts, small
    # cache batches), against Parquet with the shared session's own.
    small = {
        k: v
        for k, v in session_settings(master=None, remote=None, cores=2, small=True).items()
        if k.startswith("spark.sql.")
    }
    before = {k: spark.conf.get(k, None) for k in small}
    for key, value in small.items():
        spark.conf.set(key, value)
    try:
        in_memory = job.analyze(spark, str(run), str(tmp_path / "memory")).summary
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    monkeypatch.setattr(job, "IN_MEMORY_BYTES", -1)
    converted = job.analyze(spark, str(run), str(tmp_path / "parquet")).summary
    assert (tmp_path / "parquet" / "events.parquet").is_dir()
    assert not (tmp_path / "memory" / "events.parquet").exists()

    def comparable(summary: dict[str, Any]) -> dict[str, Any]:
        rest = {k: v for k, v in summary.items() if k not in ("timing", "input", "checks")}
        checks = [{k: v for k, v in c.items() if k != "seconds"} for c in summary["checks"]]
        found = {k: v for k, v in summary["input"].items() if k != "parquet"}
        return {**rest, "checks": checks, "input": found}

    assert in_memory["input"]["parquet"] is None
    assert comparable(in_memory) == comparable(converted)


def test_a_checks_violations_are_listed_alike_collected_or_counted_by_spark(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nulls sort first and NaN last in Spark's ascending order; the collected rows are
    # sorted in Python the same way. Every (problem, t) is distinct: the order is total.
    nan = float("nan")
    rows = [
        (problem, t, (i % 3 == 0), f"row {i}")
        for i, (problem, t) in enumerate(
            (p, t) for p in ("b", None, "a") for t in (1.0, nan, None, -2.0, 0.5)
        )
    ]
    frame = spark.createDataFrame(
        rows, "problem string, t double, unfinished boolean, detail string"
    )
    check = catalog.Check(
        name="demo.listing", property="a listing", order=("problem", "t"), run=lambda e, i: frame
    )
    inputs = catalog.CheckInputs(nodes=None, params={})
    collected = job.run_check(check, frame, inputs, present={"demo"}, listed=4)
    monkeypatch.setattr(job, "COLLECTED_VIOLATIONS", 3)  # more than that: Spark counts
    counted = job.run_check(check, frame, inputs, present={"demo"}, listed=4)

    assert (collected.violations, collected.unfinished) == (10, 5)
    assert (counted.violations, counted.unfinished) == (10, 5)
    assert (
        collected.first == counted.first and collected.first_unfinished == counted.first_unfinished
    )
    assert [(r["problem"], r["t"]) for r in collected.first] == [
        (None, None),
        (None, -2.0),
        (None, 1.0),
        ("a", -2.0),
    ]
    # NaN sorts after every number (the summary writes it as null).
    assert [(r["problem"], r["t"]) for r in counted.first_unfinished] == [
        (None, 0.5),
        (None, None),
        ("a", None),
        ("b", -2.0),
    ]
    assert collected.status == counted.status == "fail"
