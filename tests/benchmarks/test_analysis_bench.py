"""The trace-analysis benchmark (``bench/analysis.py``) in quick mode: 1 M events.

Run as its own process (it builds and stops its own Spark session, which must not be
the tests' shared one). The benchmark asserts on its own that Spark and DuckDB agree
(no total-order suspect on the correct synthetic run, the same median latency per
layer and node) and that the whole ``gossamer analyze`` passes on the run written as
JSON lines; here we check it got that far and reported every figure.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")
pytest.importorskip("duckdb", reason="the baseline engine (dev dependency group)")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_benchmark_times_both_engines_on_a_million_events() -> None:
    docs = (ROOT / "docs" / "benchmarks.md").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "bench.analysis", "--quick", "--rounds", "1", "--no-write"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=880,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    generated = re.search(r"generated ([\d,]+) events", out)
    assert generated is not None, out[-2000:]
    assert 990_000 <= int(generated[1].replace(",", "")) <= 1_010_000
    rows = re.findall(r"^\| 1 M \| (total order|latency) \| ([\d.]+) \|", out, re.M)
    assert sorted(q for q, _ in rows) == ["latency", "total order"], out[-2000:]
    assert all(float(seconds) > 0 for _, seconds in rows)
    assert re.search(r"^\| 1 M \| [\d.]+ GB \|.*\| \d+ pass \|$", out, re.M), out[-2000:]
    assert (ROOT / "docs" / "benchmarks.md").read_bytes() == docs  # --no-write kept it
