"""Benchmark: ``gossamer analyze`` on a lab ``cluster`` run, this tree against an earlier one.

    .venv/bin/python -m bench.analysis_cluster --baseline REV [--rounds N | --quick]
        [--no-write] [RUN_DIR]

What a user waits for after ``gossamer lab run --scenario cluster``: the whole analysis
command, from its start to its exit, each time a new process (its own Spark session, the
small-run settings), and from its summary the seconds it spent loading, checking, and on
``gateway.cluster_routing``, the check that joins the most. Each round analyses the same
run with the baseline tree (a git revision of this repository or a source tree, see
``bench._baseline``) and with this one, in alternating order; the figures are medians.
Without RUN_DIR a run is made first (``gossamer lab run --scenario cluster --loopback
--no-analyze``: three daemons, a cut, a kill and a restart).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._baseline import baseline_env, baseline_tree
from bench._report import machine, table, update_section

CHECK = "gateway.cluster_routing"


def make_run(out: Path) -> None:
    """A lab cluster run on loopback, its traces only."""
    argv = [sys.executable, "-m", "gossamer.cli.main", "lab", "run", "--scenario", "cluster"]
    argv += ["--loopback", "--no-analyze", "--out", str(out)]
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"the cluster run failed (exit {done.returncode}); its files: {out}")


def analyse(run_dir: Path, out: Path, env: dict[str, str] | None) -> dict[str, Any]:
    """One ``gossamer analyze`` in a new process: its wall time and its own timings."""
    argv = [sys.executable, "-m", "gossamer.cli.main", "analyze", str(run_dir), "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(
            f"gossamer analyze failed (exit {done.returncode}): {done.stderr[-2000:]!r}"
        )
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    timing = summary["timing"]
    check = next(c for c in summary["checks"] if c["name"] == CHECK)
    return {
        "wall": wall,
        "load": timing["load_seconds"],
        "checks": timing["check_seconds"],
        "check": check["seconds"],
        "events": summary["input"]["events"],
        "verdict": summary["verdict"],
    }


def section(runs: dict[str, list[dict[str, Any]]], baseline: str, events: int) -> str:
    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    figures = (
        ("the command, start to exit", "wall"),
        ("loading the run", "load"),
        ("every check", "checks"),
        (f"`{CHECK}`", "check"),
    )
    rows = [
        [
            label,
            f"{median('baseline', key):.1f}",
            f"{median('this tree', key):.1f}",
            f"**{median('this tree', key) / median('baseline', key):.2f}x**",
        ]
        for label, key in figures
    ]
    rounds = len(runs["this tree"])
    verdicts = sorted({str(r["verdict"]) for rs in runs.values() for r in rs})
    return "\n\n".join(
        [
            "## Analysis of a lab cluster run (`bench/analysis_cluster.py`)",
            f"`gossamer analyze` on one lab `cluster` run ({events:,} events: three daemons, "
            f"a cut, a kill and a restart), {rounds} round(s), each analysing it with gossamer "
            f"{baseline} and with this tree in new processes, alternating; medians of the "
            f"seconds. {machine()}, 2 cores. Verdicts: {', '.join(verdicts)}.",
            table(["seconds", f"baseline ({baseline})", "this tree", "this tree / baseline"], rows),
            "Re-run: `.venv/bin/python -m bench.analysis_cluster --baseline REV [RUN_DIR]`.",
        ]
    )


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", type=Path, help="a lab cluster run (else new)")
    parser.add_argument(
        "--baseline",
        required=True,
        metavar="TREE",
        help="the earlier gossamer: a git revision or a source tree",
    )
    parser.add_argument("--rounds", type=int, default=3, help="analyses per tree (default 3)")
    parser.add_argument("--quick", action="store_true", help="one round (a smoke run)")
    parser.add_argument("--no-write", action="store_true", help="print, do not update the doc")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    if args.run_dir is not None and not (args.run_dir / "run.json").is_file():
        parser.error(f"{args.run_dir}: not a lab run directory (it has no run.json)")
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ac-")))
        run_dir = args.run_dir
        if run_dir is None:
            run_dir = root / "cluster"
            make_run(run_dir)
        envs = {
            "baseline": baseline_env(baseline_tree(args.baseline, stack)),
            "this tree": dict(os.environ),
        }
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in envs}
        for r in range(rounds):
            for name in list(envs) if r % 2 == 0 else list(envs)[::-1]:
                out = root / f"{name.replace(' ', '-')}-{r}"
                runs[name].append(analyse(run_dir, out, envs[name]))
                print(name, runs[name][-1], flush=True)
    text = section(runs, args.baseline, int(runs["this tree"][0]["events"]))
    print(text)
    if not args.no_write:
        update_section("analysis-cluster", text)
    return text


if __name__ == "__main__":
    main()
