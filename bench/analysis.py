"""Benchmark: the trace analysis on Spark ``local[*]`` against DuckDB on the same Parquet data.

Synthetic ISIS runs of 1 million and 10 million events (8 nodes) are generated with
Spark and stored as ``gossamer analyze`` stores a converted run (``load.write_events``:
Parquet partitioned by layer and kind). Two computations are timed, each in both engines on the same
files in the same run, rounds alternating between the engines so that a noisy
neighbour hurts both alike:

* **total order**: what ``gossamer analyze`` runs for ``isis.total_order`` on a run
  that keeps its promises, the linear pre-check ``isis.order_suspects`` (per-node
  delivery order against the final sequence, and final-sequence agreement per message);
* **latency**: what the job runs for its latency tables (``job.latency_tables``):
  ``metrics.latencies`` (origin to delivery, a join on the message id) and a log-bucket
  histogram per node (``metrics.latency_histogram``), from which the same Python code
  reads the percentiles for both engines.

DuckDB runs the same algorithm, written in its SQL. Figures are wall-clock seconds,
the best of several rounds after one warm-up; the ratio is Spark / DuckDB.

A third comparison, ``--demo``, times what a user waits for on a demo-sized run (the
lab's demo: six nodes, about 19,000 events): the whole ``gossamer analyze`` command,
from its start to its exit, against the floor of any Spark analysis, a bare local
Spark session (default settings) that starts, reads the same files once, counts the
events by layer and stops. Each round runs both as new processes, in alternating
order; the figures are medians.

With ``--baseline TREE`` (another gossamer: a source tree, or a git revision of this
repository, exported for the run), the JSON-to-Parquet conversion of each run
(``load.load_run``) is also timed for both trees, each in a new process with the
session ``gossamer analyze`` would start, alternating between the trees.

Run from the repository root: ``.venv/bin/python -m bench.analysis [--quick]``
(``--quick``: 1M events only, two rounds, a few minutes with Spark's start-up);
``--demo [RUN_DIR]`` for the demo comparison only (without RUN_DIR, a demo run is
made with ``gossamer lab run --scenario demo --loopback --no-analyze``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench._baseline import baseline_env, baseline_tree
from bench._report import machine, table, update_section
from gossamer.analysis import fsio, job, metrics, session
from gossamer.analysis.checks import isis
from gossamer.analysis.load import load_run, manifest_path, read_events, write_events
from gossamer.analysis.schema import EVENT_COLUMNS

NODES = 8
#: Events per message: 1 multicast, 7 DATA sends, 7 receptions, 8 deliveries, and one
#: injected drop per 20 messages (layer ``net``).
PER_MESSAGE = 1 + (NODES - 1) * 2 + NODES + 0.05
GOAL_RATIO = 4.0
#: The conversion must be at least this many times faster than the baseline's (``--baseline``).
CONVERT_GOAL = 3.0
DT = 0.001  # seconds between multicasts


def generate(spark: SparkSession, events: int, path: str) -> int:
    """Write a correct synthetic ISIS run of about ``events`` events; return the exact count.

    Message i is multicast by node i % 8 at i * DT with final sequence i + 1; node k
    delivers it after a slowly drifting per-node delay plus jitter below DT / 2, so
    every node delivers in sequence order (the run holds total order) and latencies
    vary by node and over time.
    """
    messages = int(events / PER_MESSAGE)
    m = spark.range(messages).select(
        F.col("id"),
        (F.col("id") % NODES).alias("sender"),
        (F.col("id") * DT).alias("t0"),
    )
    node_ids = spark.range(NODES).select(F.col("id").alias("k"))

    def name(col: str) -> Any:
        return F.concat(F.lit("n"), F.col(col).cast("string"))

    msg = F.concat(name("sender"), F.lit("/"), (F.col("id") / NODES).cast("long").cast("string"))
    jitter = (F.abs(F.hash("id", "k")) % 1000) / 1000.0 * (DT / 2)
    # A network delay that drifts slowly (its slope stays far above -1, so delivery
    # order still follows sending order) makes latencies a continuous distribution.
    delay = 0.002 + 0.001 * F.col("k") + 0.004 * (1 + F.sin(F.col("t0") * 0.5))
    common = {"v": F.lit(1).cast("long"), "run": F.lit("bench"), "layer": F.lit("isis")}

    def rows(df: DataFrame, **cols: Any) -> DataFrame:
        merged = {**common, **cols}
        merged["file"] = F.concat(merged["node"], F.lit(".jsonl"))
        merged["line"] = (merged["t"] * 1e6).cast("long")  # file order follows time here
        return df.select(*[merged[c].alias(c) for c in EVENT_COLUMNS])

    no_attrs = F.create_map().cast("map<string,string>")
    null_s, null_l = F.lit(None).cast("string"), F.lit(None).cast("long")
    multicast = rows(
        m,
        node=name("sender"),
        t=F.col("t0"),
        kind=F.lit("multicast"),
        msg=msg,
        peer=null_s,
        seq=null_l,
        size=null_l,
        attrs=no_attrs,
    )
    pairs = m.crossJoin(node_ids)
    others = pairs.where(F.col("k") != F.col("sender"))
    data = F.create_map(F.lit("type"), F.lit("data"))
    sends = rows(
        others,
        node=name("sender"),
        t=F.col("t0"),
        kind=F.lit("send"),
        msg=msg,
        peer=name("k"),
        seq=null_l,
        size=F.lit(16).cast("long"),
        attrs=data,
    )
    recvs = rows(
        others,
        node=name("k"),
        t=F.col("t0") + DT / 4,
        kind=F.lit("recv"),
        msg=msg,
        peer=name("sender"),
        seq=null_l,
        size=F.lit(16).cast("long"),
        attrs=data,
    )
    delivers = rows(
        pairs,
        node=name("k"),
        t=F.col("t0") + delay + jitter,
        kind=F.lit("deliver"),
        msg=msg,
        peer=name("sender"),
        seq=F.col("id") + 1,
        size=null_l,
        attrs=F.create_map(F.lit("proposer"), name("sender")),
    )
    drops = rows(
        m.where(F.col("id") % 20 == 0),
        node=name("sender"),
        t=F.col("t0") + DT / 3,
        kind=F.lit("fault"),
        msg=null_s,
        peer=F.lit("n0"),
        seq=null_l,
        size=F.lit(16).cast("long"),
        attrs=F.create_map(F.lit("fault"), F.lit("drop")),
    ).withColumn("layer", F.lit("net"))
    run = multicast.unionByName(sends).unionByName(recvs).unionByName(delivers).unionByName(drops)
    valid = {c: F.lit(None).cast("string") for c in ("reason", "bad_layer", "text")}
    # Laid out as a conversion from JSON lays it out: one writer per 128 MB split of a
    # node's file (about 625,000 lines of 200 bytes), each writing that node's events
    # of one stretch of time in order, one file per (layer, kind).
    splits = max(2, events // 625_000)
    parsed = (
        run.withColumns({**valid, "version": F.lit(None).cast("long")})
        .repartitionByRange(splits, "node", "t")
        .sortWithinPartitions("node", "t", "line")
    )
    write_events(parsed, path)
    return int(read_events(spark, path).count())


# -- Spark ----------------------------------------------------------------------------------


def spark_total_order(spark: SparkSession, path: str) -> int:
    return int(isis.order_suspects(read_events(spark, path)).count())


def spark_latency(spark: SparkSession, path: str, messages: int) -> list[tuple[str, str, float]]:
    # What ``gossamer analyze`` runs, with the job's rule for broadcasting the origins.
    small = messages <= metrics.BROADCAST_ORIGINS_LIMIT
    return _medians(job.latency_tables(read_events(spark, path), broadcast_origins=small))


def _medians(tables: dict[str, Any]) -> list[tuple[str, str, float]]:
    return [(r["layer"], "*", float(r["p50"])) for r in tables["by_layer"]] + [
        (r["layer"], r["node"], float(r["p50"])) for r in tables["by_node"]
    ]


# -- DuckDB ---------------------------------------------------------------------------------


def _source(path: str) -> str:
    return f"read_parquet('{path}/*/*/*.parquet', hive_partitioning = true)"


def duck_total_order(con: duckdb.DuckDBPyConnection, path: str) -> int:
    sql = f"""
    WITH ev AS (SELECT * FROM {_source(path)}),
    crashed AS (SELECT DISTINCT node FROM ev
                WHERE layer = 'net' AND kind = 'fault' AND attrs['fault'] = 'crash'),
    d AS (SELECT node, msg, seq, attrs['proposer'] AS proposer, t, file, line FROM ev
          WHERE layer = 'isis' AND kind = 'deliver' AND msg IS NOT NULL
            AND node NOT IN (SELECT node FROM crashed)),
    keyed AS (
        SELECT node, floor(t / {isis.CHUNK_SECONDS}) AS chunk, t, file, line,
               {{'s': seq, 'n': length(proposer), 'p': proposer}} AS key, hash(msg) AS m
        FROM d),
    first_pass AS (
        SELECT *,
               lag(key) OVER c AS prev, lag(m) OVER c AS prev_m,
               lag(key) OVER c IS NULL OR lead(key) OVER c IS NULL AS edge
        FROM keyed
        WINDOW c AS (PARTITION BY node, chunk ORDER BY t, file, line)),
    candidates AS (
        SELECT node, t, file, line, key, m,
               coalesce(prev > key OR (prev = key AND prev_m <> m), false) AS was_bad
        FROM first_pass
        WHERE coalesce(prev > key OR (prev = key AND prev_m <> m), false) OR edge),
    inverted AS (
        SELECT node FROM (
            SELECT node, was_bad, key, m,
                   lag(key) OVER n AS prev, lag(m) OVER n AS prev_m
            FROM candidates WINDOW n AS (PARTITION BY node ORDER BY t, file, line))
        WHERE was_bad OR prev > key OR (prev = key AND prev_m <> m)),
    disputed AS (
        SELECT hash(msg) AS m FROM d GROUP BY hash(msg)
        HAVING min(hash(seq, proposer)) <> max(hash(seq, proposer))
            OR min(hash(proposer, seq)) <> max(hash(proposer, seq))
        LIMIT 1)
    SELECT count(*) FROM (
        SELECT node FROM inverted
        UNION SELECT DISTINCT node FROM d, disputed)
    """
    (row,) = con.execute(sql).fetchall()
    return int(row[0])


def _origin_sql() -> str:
    """``metrics.is_origin`` in SQL."""
    special = " OR ".join(
        f"(layer = '{layer}' AND kind IN {_sql_list(kinds)})"
        for layer, kinds in metrics.ORIGIN_KINDS.items()
    )
    default = (
        f"(layer NOT IN {_sql_list(tuple(metrics.ORIGIN_KINDS))} "
        f"AND kind IN {_sql_list(metrics.DEFAULT_ORIGIN_KINDS)})"
    )
    return f"({special} OR {default})"


def _sql_list(items: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{x}'" for x in items) + ")"


def duck_latency(con: duckdb.DuckDBPyConnection, path: str) -> list[tuple[str, str, float]]:
    # The same join on two hashes of the message id and the same histogram
    # (``metrics.latencies``, ``metrics.latency_histogram``), read by the same Python code.
    base, floor = metrics.HISTOGRAM_BASE, metrics.HISTOGRAM_FLOOR
    cursor = con.execute(f"""
    WITH ev AS (SELECT layer, node, kind, msg, t FROM {_source(path)}
                WHERE msg IS NOT NULL AND layer <> 'net'),
    origins AS (SELECT hash(layer, msg) AS h1, hash(msg, layer) AS h2, min(t) AS t0
                FROM ev WHERE {_origin_sql()} GROUP BY 1, 2),
    lat AS (SELECT d.layer, d.node, d.t - o.t0 AS latency
            FROM ev d JOIN origins o
              ON hash(d.layer, d.msg) = o.h1 AND hash(d.msg, d.layer) = o.h2
            WHERE d.kind = 'deliver')
    SELECT layer, node,
           CASE WHEN latency > {floor} THEN floor(ln(latency / {floor}) / ln({base}))
                ELSE -1 END::INTEGER AS bucket,
           count(*) AS count, sum(latency) AS total, min(latency) AS low, max(latency) AS high
    FROM lat GROUP BY ALL
    """)
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    return _medians(job.latency_tables_from(rows))


# -- the whole pipeline -----------------------------------------------------------------------


def write_run(spark: SparkSession, parquet: str, run_dir: Path) -> None:
    """Write the events at ``parquet`` as a run directory: ``<node>.jsonl`` per node."""
    events = read_events(spark, parquet)
    fields = [c for c in EVENT_COLUMNS if c not in ("file", "line")]
    staging = run_dir.parent / f"{run_dir.name}.staging"
    (
        events.repartition("node")
        .sortWithinPartitions("node", "t", "line")
        .select("node", F.to_json(F.struct(*fields)).alias("value"))
        .write.mode("overwrite")
        .partitionBy("node")
        .text(str(staging))
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    for part_dir in sorted(staging.glob("node=*")):
        node = part_dir.name.split("=", 1)[1]
        with open(run_dir / f"{node}.jsonl", "wb") as out:
            for part in sorted(part_dir.glob("part-*")):
                with open(part, "rb") as handle:
                    shutil.copyfileobj(handle, out)
    shutil.rmtree(staging)


def end_to_end(spark: SparkSession, run_dir: Path) -> tuple[dict[str, Any], Sample]:
    """Run the whole ``gossamer analyze`` job on a run; its summary and cost."""
    out = run_dir / "analysis"
    shutil.rmtree(out, ignore_errors=True)
    result: dict[str, Any] = {}

    def run() -> None:
        result.update(job.analyze(spark, str(run_dir), str(out)).summary)

    sample = _sample(run, lambda: _jvm_cpu(spark) + time.process_time())
    assert result["verdict"] == "pass", [c for c in result["checks"] if c["status"] == "fail"]
    return result, sample


def convert_worker(run_dir: str, parquet: str) -> None:
    """Time ``load_run`` (conversion and input report) of one run; print the figures as JSON.

    Run in a new process by ``convert_in_process``, with whichever gossamer tree is first
    on its path: the one under test or a baseline (``--baseline``). The session is the
    one ``gossamer analyze`` starts for a run of this size.
    """
    sources = fsio.list_local_sources(run_dir)
    small = sum(s.size for s in sources) <= session.SMALL_RUN_BYTES
    spark = session.build_session(small=small, log_file=f"{parquet}.spark.log")
    try:
        cpu = lambda: _jvm_cpu(spark) + time.process_time()  # noqa: E731
        found: list[int] = []
        sample = _sample(lambda: found.append(load_run(spark, run_dir, parquet)[1].events), cpu)
    finally:
        spark.stop()
    print(json.dumps({"wall": sample.wall, "cpu": sample.cpu, "events": found[0]}))


def _describe(spec: str) -> str:
    """A baseline (a source tree or a git revision) as the docs name it: its commit."""
    tree = spec if Path(spec).is_dir() else str(Path(__file__).resolve().parent.parent)
    rev = [] if Path(spec).is_dir() else [spec]
    done = subprocess.run(
        ["git", "-C", tree, "log", "-1", "--format=commit %h (%cs)", *rev],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else f"`{tree}`"


def convert_in_process(tree: str | None, run_dir: Path) -> Sample:
    """``convert_worker`` in a new process, on the gossamer source ``tree`` (None: this one)."""
    root = Path(__file__).resolve().parent.parent
    env = baseline_env(tree or str(root))
    parquet = run_dir.parent / f"{run_dir.name}-convert.parquet"
    argv = [sys.executable, "-m", "bench.analysis", "--convert-worker", str(run_dir), str(parquet)]
    try:
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(parquet, ignore_errors=True)
        for side in (Path(manifest_path(str(parquet))), Path(f"{parquet}.spark.log")):
            side.unlink(missing_ok=True)
        for config in parquet.parent.glob(f"{parquet.name}.spark.log4j2.properties"):
            config.unlink()
    return Sample(wall=float(result["wall"]), cpu=float(result["cpu"]))


# -- timing ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One timed run: wall-clock seconds, and CPU seconds of every process doing the work."""

    wall: float
    cpu: float


def _jvm_cpu(spark: SparkSession) -> float:
    """CPU seconds used so far by the local-mode JVM (driver and executors in one process)
    and its Python workers (its child processes, live or exited)."""
    pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    ticks, todo = 0, [pid]
    while todo:
        current = todo.pop()
        # Its own time and its exited children's, then its live children's.
        ticks += sum(int(x) for x in stats.get(current, [])[11:15])
        todo += children.get(current, [])
    return ticks / os.sysconf("SC_CLK_TCK")


def _sample(run: Callable[[], Any], cpu: Callable[[], float]) -> Sample:
    wall0, cpu0 = time.perf_counter(), cpu()
    run()
    return Sample(wall=time.perf_counter() - wall0, cpu=cpu() - cpu0)


def measure(
    spark: SparkSession, con: duckdb.DuckDBPyConnection, path: str, rounds: int, messages: int
) -> dict[str, dict[str, list[Sample]]]:
    """Samples per round for each query and engine (after one warm-up of each).

    CPU time is robust against a busy neighbour where wall-clock time is not: Spark's
    is the JVM's (plus this process's, which drives it), DuckDB's this process's
    (its threads run in it).
    """
    queries: dict[str, dict[str, Callable[[], Any]]] = {
        "total order": {
            "spark": lambda: spark_total_order(spark, path),
            "duckdb": lambda: duck_total_order(con, path),
        },
        "latency": {
            "spark": lambda: spark_latency(spark, path, messages),
            "duckdb": lambda: duck_latency(con, path),
        },
    }
    clocks: dict[str, Callable[[], float]] = {
        "spark": lambda: _jvm_cpu(spark) + time.process_time(),
        "duckdb": time.process_time,
    }
    samples: dict[str, dict[str, list[Sample]]] = {q: {"spark": [], "duckdb": []} for q in queries}
    for query, engines in queries.items():
        results = {engine: run() for engine, run in engines.items()}  # warm-up
        _agree(query, results)
        for r in range(rounds):
            order = ("spark", "duckdb") if r % 2 == 0 else ("duckdb", "spark")
            for engine in order:
                samples[query][engine].append(_sample(engines[engine], clocks[engine]))
    return samples


def _agree(query: str, results: dict[str, Any]) -> None:
    """Both engines must compute the same thing, or the timing means nothing."""
    if query == "total order":
        assert results["spark"] == results["duckdb"] == 0, results
        return
    spark_p50 = {(layer, node): v for layer, node, v in results["spark"]}
    duck_p50 = {(layer, node): v for layer, node, v in results["duckdb"]}
    assert spark_p50.keys() == duck_p50.keys(), (spark_p50.keys(), duck_p50.keys())
    for key, v in spark_p50.items():
        # Both are approximations (GK sketch, t-digest) of the same median.
        assert math.isclose(v, duck_p50[key], rel_tol=0.05, abs_tol=1e-4), (key, v, duck_p50[key])


# -- a demo-sized run against bare Spark ------------------------------------------------


#: The floor, run by ``python -c`` in a new process that imports nothing else: a
#: default local session that reads the run once, counts its events by layer, stops.
BARE_SPARK = """
import sys, glob
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master("local[*]").appName("bare-spark").getOrCreate()
files = sorted(glob.glob(sys.argv[1] + "/*.jsonl"))
layer = F.get_json_object("value", "$.layer").alias("layer")
print(spark.read.text(files).groupBy(layer).count().collect())
spark.stop()
"""


def make_demo_run(out: Path) -> None:
    """A demo run of the lab (loopback, real node processes), its traces only."""
    argv = [sys.executable, "-m", "gossamer.cli.main", "lab", "run", "--scenario", "demo"]
    argv += ["--loopback", "--no-analyze", "--out", str(out)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def _timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    assert done.returncode in (0, 1), done.stderr
    return wall, done.stderr


def demo_vs_floor(run_dir: Path, rounds: int) -> str:
    """Time ``gossamer analyze`` and the bare-Spark floor on one run; the Markdown section."""
    floor: list[float] = []
    whole: list[float] = []
    phases: list[dict[str, float]] = []
    stderr_lines: list[int] = []
    out = run_dir.parent / f"{run_dir.name}-analysis"
    java = session.session_settings(master=None, remote=None, cores=2, small=True)
    archive = session.ClassArchive.find(java["spark.driver.extraJavaOptions"])
    archived = archive is not None and archive.exists()
    load_before = os.getloadavg()[0]
    for r in range(rounds):
        for what in ("floor", "analyze") if r % 2 == 0 else ("analyze", "floor"):
            if what == "floor":
                wall, _ = _timed([sys.executable, "-c", BARE_SPARK, str(run_dir)])
                floor.append(wall)
                continue
            shutil.rmtree(out, ignore_errors=True)  # convert every time, as a first analysis
            argv = [sys.executable, "-m", "gossamer.cli.main", "analyze", str(run_dir)]
            wall, err = _timed([*argv, "--out", str(out)])
            whole.append(wall)
            stderr_lines.append(len(err.splitlines()))
            timing = json.loads((out / "summary.json").read_text())["timing"]
            phases.append(timing)
        print(f"round {r}: floor {floor[-1]:.1f} s, analyze {whole[-1]:.1f} s", flush=True)
    summary = json.loads((out / "summary.json").read_text())
    f, a = statistics.median(floor), statistics.median(whole)
    if archive is None:
        classes = "without a JVM class archive (turned off)"
    elif archived:
        classes = "from the JVM class archive an earlier analysis wrote"
    else:
        classes = "from the JVM class archive, which its first round wrote (that round took longer)"
    loads = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"

    def phase(key: str) -> float:
        return statistics.median(p[key] for p in phases)

    load, checks, total = phase("load_seconds"), phase("check_seconds"), phase("total_seconds")
    rows = [
        ["bare Spark: start, read once, count by layer, stop", f"{f:.1f}", "1.0x"],
        ["`gossamer analyze` (whole command)", f"{a:.1f}", f"**{a / f:.1f}x**"],
        ["of which: load (parsing, validation)", f"{load:.1f}", f"{load / f:.1f}x"],
        ["of which: checks", f"{checks:.1f}", f"{checks / f:.1f}x"],
        ["of which: metrics, summary, report", f"{total - load - checks:.1f}", ""],
        ["of which: Python and Spark start, stop", f"{a - total:.1f}", ""],
    ]
    verdict = "met" if a / f <= 2.0 else "not met"
    return "\n".join(
        [
            "## Analysis of a demo-sized run against bare Spark (`bench/analysis.py --demo`)",
            "",
            f"The lab's demo run ({summary['input']['events']:,} events, "
            f"{summary['input']['files']} nodes), analysed from scratch (conversion included) "
            "by the whole `gossamer analyze` command in a new process, against the floor of "
            "any Spark analysis: a new process with a default local Spark session that reads "
            "the same files once, counts them by layer and stops. Wall-clock seconds, median "
            f"of {rounds} rounds, the two alternating. `gossamer analyze` started {classes} "
            "(docs/analysis.md, section Classes from an archive); bare Spark's JVM starts as "
            f"any does. {machine()}, 2 cores shared with other work (load average {loads}). "
            f"Lines `gossamer analyze` wrote on stderr: {max(stderr_lines)}.",
            "",
            table(["what", "median s", "ratio to bare Spark"], rows),
            "",
            f"Goal: at most 2x the bare-Spark floor; {verdict}.",
            "",
            "Re-run: `.venv/bin/python -m bench.analysis --demo [RUN_DIR]`.",
        ]
    )


def main(argv: list[str] | None = None) -> str:
    """Run the benchmark; return the markdown section (also written unless ``--no-write``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1M events only, two rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument(
        "--sizes", help="events per run, comma-separated (default 1000000,10000000)"
    )
    parser.add_argument("--keep", metavar="DIR", help="generate into DIR and keep the data")
    parser.add_argument(
        "--no-write", action="store_true", help="print the figures, leave docs/benchmarks.md be"
    )
    parser.add_argument(
        "--demo",
        nargs="?",
        const="",
        metavar="RUN_DIR",
        help="only the demo-sized run against bare Spark (RUN_DIR: an existing demo run)",
    )
    parser.add_argument(
        "--baseline",
        metavar="TREE",
        help="also time the JSON-to-Parquet conversion of the gossamer TREE (a source tree, "
        "or a git revision of this repository) against this one's, each in new processes, "
        "alternating",
    )
    parser.add_argument(
        "--convert-rounds",
        type=int,
        default=1,
        metavar="N",
        help="conversions of each tree per size with --baseline (default 1)",
    )
    parser.add_argument("--convert-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.convert_worker:
        convert_worker(*args.convert_worker)
        return ""
    if args.demo is not None:
        return _demo_main(args)
    sizes = (1_000_000,) if args.quick else (1_000_000, 10_000_000)
    if args.sizes:
        sizes = tuple(int(x) for x in args.sizes.split(","))
    rounds = args.rounds or (2 if args.quick else 3)

    started = time.perf_counter()
    spark = session.build_session(
        conf={"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "4"},
        app_name="gossamer-bench-analysis",
    )
    spark_start = time.perf_counter() - started
    spark_version = spark.version
    con = duckdb.connect()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gossamer-bench-"))
    rows: list[list[object]] = []
    whole: list[list[object]] = []
    conversions: list[list[object]] = []
    speedups: list[float] = []
    best: dict[tuple[int, str, str], Sample] = {}
    counts: dict[int, int] = {}
    stack = contextlib.ExitStack()  # the baseline's exported tree, removed at the end
    try:
        for size in sizes:
            path = str(root / f"events-{size}.parquet")
            start = time.perf_counter()
            count = generate(spark, size, path)
            counts[size] = count
            print(f"generated {count:,} events in {time.perf_counter() - start:.1f} s", flush=True)
            messages = int(size / PER_MESSAGE)
            for query, engines in measure(spark, con, path, rounds, messages).items():
                for engine, got in engines.items():
                    best[(size, query, engine)] = Sample(
                        wall=min(x.wall for x in got), cpu=min(x.cpu for x in got)
                    )
                sw, dw = best[(size, query, "spark")], best[(size, query, "duckdb")]
                rows.append(
                    [
                        f"{count / 1e6:.0f} M",
                        query,
                        f"{sw.wall:.2f}",
                        f"{statistics.median(x.wall for x in engines['spark']):.2f}",
                        f"{dw.wall:.2f}",
                        f"{statistics.median(x.wall for x in engines['duckdb']):.2f}",
                        f"**{sw.wall / dw.wall:.1f}x**",
                        f"{sw.cpu:.1f} / {dw.cpu:.1f}",
                        f"{sw.cpu / dw.cpu:.1f}x",
                    ]
                )
                print(rows[-1], flush=True)
            run_dir = root / f"run-{size}"
            write_run(spark, path, run_dir)
            if args.baseline:
                trees = {"baseline": baseline_tree(args.baseline, stack), "this tree": None}
                times: dict[str, list[Sample]] = {name: [] for name in trees}
                for r in range(args.convert_rounds):
                    for name in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                        times[name].append(convert_in_process(trees[name], run_dir))
                        print(f"convert, {name}: {times[name][-1]}", flush=True)
                old = Sample(
                    wall=min(x.wall for x in times["baseline"]),
                    cpu=min(x.cpu for x in times["baseline"]),
                )
                new = Sample(
                    wall=min(x.wall for x in times["this tree"]),
                    cpu=min(x.cpu for x in times["this tree"]),
                )
                speedups.append(old.wall / new.wall)
                conversions.append(
                    [
                        f"{count / 1e6:.0f} M",
                        f"{old.wall:.1f}",
                        f"{new.wall:.1f}",
                        f"**{old.wall / new.wall:.1f}x**",
                        f"{old.cpu:.0f} / {new.cpu:.0f}",
                        f"{old.cpu / new.cpu:.1f}x",
                    ]
                )
                print(conversions[-1], flush=True)
            summary, cost = end_to_end(spark, run_dir)
            timing = summary["timing"]
            whole.append(
                [
                    f"{count / 1e6:.0f} M",
                    f"{sum(f.stat().st_size for f in run_dir.glob('*.jsonl')) / 1e9:.2f} GB",
                    f"{timing['load_seconds']:.1f}",
                    f"{timing['total_seconds'] - timing['load_seconds']:.1f}",
                    f"{cost.wall:.1f}",
                    f"{cost.cpu:.0f}",
                    f"{cost.cpu / count * 1e6:.1f}",
                    f"{summary['counts']['pass']} pass",
                ]
            )
            print(whole[-1], flush=True)
    finally:
        spark.stop()
        stack.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    lines = [
        "## Trace analysis on Spark (`bench/analysis.py`)",
        "",
        f"Synthetic ISIS runs, {NODES} nodes, {PER_MESSAGE:.2f} events per message, stored as "
        "`gossamer analyze` stores a converted run (Parquet, partitioned by layer and kind). "
        "Spark `local[*]` (2 cores, 4 shuffle partitions, adaptive execution on except in "
        "the latency job's broadcast plan, 4 GB driver) "
        "against DuckDB (2 threads) reading the same files, the same algorithm in each. "
        f"Wall-clock seconds, best and median of {rounds} rounds after a warm-up, rounds "
        "alternating between the engines; CPU seconds (best round) of the processes doing "
        "the work, which a busy neighbour disturbs less. "
        f"{machine()}, Spark {spark_version}, DuckDB {duckdb.__version__}. Spark's session "
        f"start ({spark_start:.1f} s here) is not counted.",
        "",
        table(
            [
                "events",
                "query",
                "Spark best s",
                "Spark median s",
                "DuckDB best s",
                "DuckDB median s",
                "Spark / DuckDB",
                "CPU s Spark / DuckDB",
                "CPU ratio",
            ],
            rows,
        ),
        "",
    ]
    lines += [
        "The whole `gossamer analyze` on the same runs written as JSON lines (one file per "
        "node): conversion to Parquet (validation, line numbers), then every check and "
        "metric, summary and report. CPU seconds are the JVM's, its Python workers' and the "
        "driver's.",
        "",
        table(
            [
                "events",
                "JSON",
                "convert s",
                "checks + metrics s",
                "total s",
                "CPU s",
                "CPU s per M events",
                "verdict",
            ],
            whole,
        ),
        "",
    ]
    if conversions:
        verdict = "met" if speedups[-1] >= CONVERT_GOAL else "not met"
        lines += [
            "The conversion alone (`load_run`: JSON lines to Parquet, validation, line "
            "numbers, input report) of the same runs, by this tree and by the baseline tree "
            f"({_describe(args.baseline)}, `--baseline`), each in a new process with "
            "the session `gossamer analyze` would start, alternating; best of "
            f"{args.convert_rounds} round(s). CPU seconds are the JVM's, its Python workers' "
            "and the driver's.",
            "",
            table(
                [
                    "events",
                    "baseline s",
                    "this tree s",
                    "speed-up",
                    "CPU s baseline / this tree",
                    "CPU speed-up",
                ],
                conversions,
            ),
            "",
            f"Conversion speed-up at the largest size: **{speedups[-1]:.1f}x** wall-clock; "
            f"goal: at least {CONVERT_GOAL:g}x, {verdict}.",
            "",
        ]
    queries = ("total order", "latency")
    large = sizes[-1]
    if len(sizes) == 2:
        small = sizes[0]
        growth = [
            f"{q}: Spark x{best[(large, q, 'spark')].wall / best[(small, q, 'spark')].wall:.1f}"
            f" wall (x{best[(large, q, 'spark')].cpu / best[(small, q, 'spark')].cpu:.1f} CPU),"
            f" DuckDB x{best[(large, q, 'duckdb')].wall / best[(small, q, 'duckdb')].wall:.1f}"
            for q in queries
        ]
        lines += [
            f"From {counts[small]:,} to {counts[large]:,} events "
            f"(x{counts[large] / counts[small]:.1f}): " + "; ".join(growth) + ".",
            "",
        ]
    if large >= 10_000_000:
        worst = max(
            best[(large, q, "spark")].wall / best[(large, q, "duckdb")].wall for q in queries
        )
        worst_cpu = max(
            best[(large, q, "spark")].cpu / best[(large, q, "duckdb")].cpu for q in queries
        )
        verdict = "met" if worst <= GOAL_RATIO else "not met"
        lines += [
            f"Worst Spark / DuckDB ratio at {counts[large] / 1e6:.0f} M events: "
            f"**{worst:.1f}x** wall-clock ({worst_cpu:.1f}x in CPU time); goal: at most "
            f"{GOAL_RATIO:g}x, {verdict}.",
            "",
        ]
    lines += [
        "Re-run: `.venv/bin/python -m bench.analysis` (`--quick` for 1 M events only; "
        "`--baseline TREE` to time the conversion of another gossamer tree alongside). "
        "What the figures mean for a cluster, and a billion events, is in `docs/analysis.md`.",
    ]
    section = "\n".join(lines)
    if not args.no_write:
        update_section("analysis", section)
    print(section)
    return section


def _demo_main(args: argparse.Namespace) -> str:
    root = Path(tempfile.mkdtemp(prefix="gossamer-bench-demo-"))
    try:
        run_dir = Path(args.demo) if args.demo else root / "demo"
        if not args.demo:
            make_demo_run(run_dir)
        else:  # analyse a copy: the benchmark writes and deletes an analysis directory
            shutil.copytree(run_dir, root / "demo", ignore=shutil.ignore_patterns("analysis"))
            run_dir = root / "demo"
        section = demo_vs_floor(run_dir, args.rounds or 3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not args.no_write:
        update_section("analysis-demo", section)
    print(section)
    return section


if __name__ == "__main__":
    main()
