"""``gossamer analyze`` end to end on a freshly simulated run: exit codes 0, 1 and 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.session import CLASS_ARCHIVE_ENV
from gossamer.cli import analyze_cmd
from gossamer.faults import FaultPlan
from gossamer.sim.run import SimRequest, run_simulation

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("sim") / "ping"
    result = run_simulation(
        SimRequest(
            scenario="ping",
            nodes=5,
            seed=3,
            out=out,
            faults=FaultPlan(drop=0.1, duplicate=0.05),
            params={"count": "5"},
        )
    )
    assert result.fault_counts  # a fault scenario that injected nothing would prove nothing
    return out, result.summary


def test_a_simulated_run_passes_and_writes_its_report(
    spark: SparkSession,
    simulated: tuple[Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run, sim_summary = simulated
    code = analyze_cmd.main([str(run), "--out", str(tmp_path / "report")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert any(line.split()[:3] == ["demo.pings", "pass", "0"] for line in out.splitlines())
    assert "verdict: PASS (1 hold, 0 violated, 27 skipped)" in out
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["metrics"]["latency"]["by_layer"][0]["count"] == sim_summary["pings_answered"]
    assert (tmp_path / "report" / "report.html").stat().st_size > 5000
    # A small run is analysed in memory: nothing but the summary, the report and the log.
    assert summary["input"]["parquet"] is None
    assert not (tmp_path / "report" / "events.parquet").exists()


def test_a_violated_property_exits_1_and_bad_input_exits_2(
    spark: SparkSession,
    simulated: tuple[Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source, _ = simulated
    run = tmp_path / "run"
    run.mkdir()
    for f in source.glob("*.jsonl"):
        (run / f.name).write_bytes(f.read_bytes())
    # n2 loses its record of one answered ping: that ping is now unresolved.
    lines = (run / "n2.jsonl").read_text().splitlines(keepends=True)
    i = next(k for k, text in enumerate(lines) if '"kind":"deliver"' in text)
    lines[i] = "{torn\n"  # also a malformed line, skipped and reported
    (run / "n2.jsonl").write_text("".join(lines))

    assert analyze_cmd.main([str(run)]) == 1
    captured = capsys.readouterr()
    assert "neither answered nor given up" in captured.out
    assert f"skipped {run}/n2.jsonl:{i + 1}: not JSON" in captured.err
    assert "verdict: FAIL" in captured.out
    summary = json.loads((run / "analysis" / "summary.json").read_text())
    assert summary["verdict"] == "fail" and summary["input"]["bad_lines"] == 1

    assert analyze_cmd.main([str(run), "--strict"]) == 2
    assert f"n2.jsonl', line={i + 1}" in capsys.readouterr().err
    assert analyze_cmd.main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert analyze_cmd.main([str(run), "--param", "gossip.depth=3"]) == 2
    assert "unknown check parameter" in capsys.readouterr().err
    assert analyze_cmd.main([str(run), "--param", "nonsense"]) == 2


def test_a_missing_run_is_one_line_of_error_before_spark_starts(tmp_path: Path) -> None:
    # A new process, so that no session is already running: Spark would print its
    # start-up warnings on stderr if it started.
    done = subprocess.run(
        [sys.executable, "-m", "gossamer.cli.analyze_cmd", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.endswith(f"error: run directory {tmp_path}/missing does not exist"), line
    assert done.stdout == ""
    assert not (tmp_path / "missing").exists()


def test_the_first_analysis_of_a_machine_keeps_the_jvm_s_warnings_off_the_console(
    simulated: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    # A new process with no class archive yet: its JVM writes one as it exits and warns
    # of every class it cannot archive (some 800 lines, on standard output by default).
    # Both paths have a space: they become JVM options, which Spark splits at spaces.
    run, _ = simulated
    archives = tmp_path / "class archives"
    out = tmp_path / "analysis out"
    done = subprocess.run(
        [sys.executable, "-m", "gossamer.cli.analyze_cmd", str(run), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, CLASS_ARCHIVE_ENV: str(archives)},
    )
    assert done.returncode == 0, done.stderr
    assert len(list(archives.glob("*.jsa"))) == 1  # the archive was written
    assert "[warning]" not in done.stdout and done.stderr == ""
    assert done.stdout.splitlines()[-1].startswith("report: ")
    # They are in the analysis' log file instead.
    assert "[warning][cds]" in (out / "spark.log").read_text()
