"""The demo's ISIS latency benchmark (``bench/demo_isis.py``): its figures and its goal
line, read from the summaries of given runs (a demo run itself takes a minute or two,
and ``./run demo`` shows it). Run as its own process, as the other benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def summary(outside_crash_p99: float, outside_faults_p99: float) -> dict[str, Any]:
    def row(count: int, p50: float, p99: float) -> dict[str, Any]:
        return {"count": count, "mean": p50, "p50": p50, "p90": p99, "p99": p99, "max": p99}

    return {
        "scenario": {"lab": {"start_at": 100.0}},
        "metrics": {
            "latency": {"by_layer": [{"layer": "isis", **row(3000, 0.05, 4.0)}]},
            "isis_fault_windows": {
                "windows": [
                    {"fault": "partition", "node": "h2", "start": 106.0, "end": 108.1},
                    {"fault": "crash", "node": "h1", "start": 113.0, "end": None},
                ],
                "latency": {
                    "outside_crash": row(2500, 0.04, outside_crash_p99),
                    "outside_faults": row(2200, 0.03, outside_faults_p99),
                },
            },
        },
    }


def section(
    tmp_path: Path,
    traces: dict[str, list[dict[str, Any]]] | None = None,
    **runs: tuple[float, float],
) -> str:
    """``bench.demo_isis --no-write`` on runs whose summaries have these p99s (and whose
    directories hold these ``traces``, by file name)."""
    dirs = []
    for name, p99s in runs.items():
        (tmp_path / name / "analysis").mkdir(parents=True)
        (tmp_path / name / "analysis" / "summary.json").write_text(json.dumps(summary(*p99s)))
        for file, events in (traces or {}).items():
            lines = "".join(json.dumps(e) + "\n" for e in events)
            (tmp_path / name / file).write_text(lines)
        dirs.append(str(tmp_path / name))
    docs = (ROOT / "docs" / "benchmarks.md").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "bench.demo_isis", "--no-write", *dirs],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (ROOT / "docs" / "benchmarks.md").read_bytes() == docs  # --no-write
    return done.stdout


def test_the_section_gives_each_scope_of_each_run_and_judges_the_goal(tmp_path: Path) -> None:
    text = section(tmp_path, a=(2.0, 0.25), b=(2.1, 0.3))
    assert "| a | overall | 3,000 | 50 | 4,000 | 1.00x |" in text
    assert "| a | outside the crash window | 2,500 | 40 | 2,000 | 0.50x |" in text
    assert (
        "| b | outside every fault window (crash, partition) | 2,200 | 30 | 300 | 0.07x |" in text
    )
    assert "a: partition h2 6.00-8.10 s, crash h1 13.00-end s" in text
    assert "outside the crash window: **not met** (worst p99 2,100 ms over 2 runs)" in text
    assert "Outside every fault window: met (worst p99 300 ms over 2 runs)" in text
    met = section(tmp_path / "again", c=(0.9, 0.2))
    assert "outside the crash window: met (worst p99 900 ms over 1 run)" in met


def isis(kind: str, node: str, t: float, msg: str) -> dict[str, Any]:
    return {
        "v": 1,
        "run": "r",
        "node": node,
        "t": t,
        "layer": "isis",
        "kind": kind,
        "msg": msg,
        "peer": None,
        "seq": None,
        "size": None,
        "attrs": {},
    }


def test_the_share_no_static_group_delivers_in_time_is_read_from_the_traces(
    tmp_path: Path,
) -> None:
    # The cut runs 106.0-108.1: a message multicast before 107.1 waits past the goal.
    traces = {
        "h1.jsonl": [
            isis("multicast", "h1", 105.0, "h1/1"),  # before the cut
            isis("multicast", "h1", 106.5, "h1/2"),  # in it, 1.6 s before the heal
            isis("multicast", "h1", 107.5, "h1/3"),  # in it, 0.6 s before the heal
            isis("multicast", "h1", 112.9, "h1/4"),  # delivered in the crash window
            *(
                isis("deliver", "h1", t, m)
                for t, m in ((105.1, "h1/1"), (108.2, "h1/2"), (108.3, "h1/3"), (113.1, "h1/4"))
            ),
            {**isis("deliver", "h1", 109.0, "h1/2"), "layer": "link"},  # not ISIS
        ],
        "h3.jsonl": [
            isis("deliver", "h3", t, m)
            for t, m in ((105.2, "h1/1"), (108.4, "h1/2"), (108.5, "h1/3"))
        ],
    }
    text = section(tmp_path, traces, a=(2.0, 0.25))
    assert "make 33.3 % of the deliveries outside the crash window (2 of 6 in a)" in text
    # Without traces the sentence is left out, not made up.
    assert "make " not in section(tmp_path / "bare", a=(2.0, 0.25))


def test_a_baseline_tree_s_runs_are_listed_and_each_p99_divided_by_theirs() -> None:
    script = (
        "import json, sys\n"
        "from bench import demo_isis as d\n"
        "new, b1, b2 = (d.figures(s) for s in json.load(sys.stdin))\n"
        "print(d.section([('new', new)], [('b1', b1), ('b2', b2)], '4b35554'))\n"
    )
    summaries = [summary(0.9, 0.2), summary(2.0, 0.4), summary(3.0, 0.5)]
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        input=json.dumps(summaries),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = done.stdout
    row = "| b1 (baseline 4b35554) | outside the crash window | 2,500 | 40 | 2,000 | 0.50x |  |"
    assert row in text
    # The median of the baseline's two p99s (the upper one of two) is the divisor.
    assert "| new | outside the crash window | 2,500 | 40 | 900 | 0.23x | 0.30x |" in text
    outside = "| new | outside every fault window (crash, partition) | 2,200 | 30 | 200 |"
    assert f"{outside} 0.05x | 0.40x |" in text
    # The goal is judged on this tree's runs only.
    assert "outside the crash window: met (worst p99 900 ms over 1 run)" in text


def test_a_directory_that_is_no_lab_run_is_one_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.demo_isis", "--no-write", str(tmp_path / "nowhere")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert last.endswith("nowhere: not a lab run (neither run.json nor analysis/summary.json)")
    assert "Traceback" not in done.stderr
