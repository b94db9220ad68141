"""The analysis job: load a run, run every check and metric, write the summary and report.

This is the one module of the pipeline that triggers Spark actions and writes
files; checkers and metrics stay pure transforms. ``analyze`` is what
``gossamer analyze`` calls, with a session it built (``gossamer.analysis.session``)
or, in tests, the shared one.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from gossamer.analysis import catalog, client_latency, fsio, metrics, report, session
from gossamer.analysis.checks import discovery, gossip, isis
from gossamer.analysis.checks.common import UNFINISHED, clean_stops, correct_nodes
from gossamer.analysis.load import (
    InputReport,
    load_in_memory,
    load_run,
    nodes_frame,
    valid_events,
)

__all__ = [
    "Analysis",
    "CheckResult",
    "analyze",
    "client_latency_tables",
    "fault_window_latency",
    "latency_tables",
    "latency_tables_from",
    "run_check",
]

#: Cache the events in memory for runs up to this many events (above, re-read Parquet).
CACHE_LIMIT = 5_000_000
#: Runs with at most this many bytes of traces are parsed into memory and never
#: written to Parquet (``load.load_in_memory``): the small runs of ``session``.
IN_MEMORY_BYTES = session.SMALL_RUN_BYTES
#: Spark jobs submitted at once for a cached run. There a check costs mostly its
#: fixed costs (planning on the driver, scheduling), which run on one thread each: two
#: checks at a time keep two cores busy. Larger runs keep one at a time, so that two
#: large shuffles do not compete for the driver's memory.
CONCURRENT_JOBS = 2
#: A check's violations are collected at once when there are at most this many (counted
#: and listed from the collected rows); more are counted and listed by Spark.
COLLECTED_VIOLATIONS = 10_000
#: Time bins of the timelines.
BINS = 100
#: Largest number of nodes drawn one by one (more are summarised).
MAX_DRAWN_NODES = 12
#: Largest number of nodes in the delivery-order matrix.
MAX_MATRIX_NODES = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """The verdict of one check: ``pass``, ``fail`` or ``skipped``, and its first violations.

    ``unfinished`` counts what the checker marked unfinished at a clean stop
    (``checks.common.UNFINISHED``): not violations, but not nothing either; the first
    of them are in ``first_unfinished``.
    """

    name: str
    layer: str
    property: str
    status: str
    violations: int
    columns: tuple[str, ...] = ()
    first: tuple[Mapping[str, Any], ...] = ()
    note: str = ""
    seconds: float = 0.0
    unfinished: int = 0
    first_unfinished: tuple[Mapping[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "layer": self.layer,
            "property": self.property,
            "status": self.status,
            "violations": self.violations,
            "unfinished": self.unfinished,
            "note": self.note,
            "seconds": round(self.seconds, 3),
            "columns": list(self.columns),
            "first_violations": [dict(r) for r in self.first],
            "first_unfinished": [dict(r) for r in self.first_unfinished],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis:
    """Everything ``analyze`` found, and where it wrote it."""

    summary: dict[str, Any]
    checks: tuple[CheckResult, ...]
    input: InputReport
    out: str
    summary_path: str
    report_path: str
    violated: bool = field(default=False)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, Row):
        return {k: _jsonable(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [_jsonable(r.asDict()) for r in df.collect()]


def run_check(
    check: catalog.Check,
    events: DataFrame,
    inputs: catalog.CheckInputs,
    *,
    present: set[str],
    listed: int = 10,
) -> CheckResult:
    """Run one check: skip it without events of its layer (or of the kinds it needs, or
    of the other layers' kinds it requires: ``layer/kind`` in ``present``), with events
    in whose presence it does not apply (``unless``), or without its bounds."""
    base: dict[str, Any] = {"name": check.name, "layer": check.layer, "property": check.property}
    if check.layer not in present:
        return CheckResult(**base, status="skipped", violations=0, note=f"no {check.layer} events")
    if check.kinds and not any(f"{check.layer}/{kind}" in present for kind in check.kinds):
        note = f"no {check.layer} {' or '.join(check.kinds)} events"
        return CheckResult(**base, status="skipped", violations=0, note=note)
    absent = [r for r in check.requires if r not in present]
    if absent:
        note = "no " + " or ".join(r.replace("/", " ") for r in absent) + " events"
        return CheckResult(**base, status="skipped", violations=0, note=note)
    if any(u in present for u in check.unless):
        return CheckResult(**base, status="skipped", violations=0, note=check.unless_note)
    missing = [p for p in check.needs if p not in inputs.params]
    if missing:
        note = "needs " + ", ".join(f"--param {p}=..." for p in missing)
        return CheckResult(**base, status="skipped", violations=0, note=note)
    started = time.perf_counter()
    if check.shortcut is not None and not check.shortcut(events, inputs).limit(1).collect():
        return CheckResult(
            **base,
            status="pass",
            violations=0,
            note="holds: shown by the linear pre-check",
            seconds=time.perf_counter() - started,
        )
    violations = check.run(events, inputs)
    columns = tuple(violations.columns)
    # Normally a check finds nothing, or a few rows: one job collects them all, and the
    # counts and first rows are read from them, where counting, listing the first
    # violations and the first unfinished rows would be a job each (for a small run,
    # each costs mostly its fixed costs: planning and scheduling).
    rows = violations.limit(COLLECTED_VIOLATIONS + 1).collect()
    if len(rows) <= COLLECTED_VIOLATIONS:
        # As ``where(~flag)`` and ``where(flag)`` would split them (a null is neither).
        flagged = UNFINISHED in columns
        left = [r for r in rows if not flagged or r[UNFINISHED] is False]
        held = [r for r in rows if flagged and r[UNFINISHED] is True]
        count, left_unfinished = len(left), len(held)
        first = _first_rows(left, check.order, listed)
        unfinished = _first_rows(held, check.order, listed)
    else:
        count, left_unfinished, first, unfinished = _many_violations(
            violations, check.order, listed
        )
    return CheckResult(
        **base,
        status="fail" if count else "pass",
        violations=count,
        columns=columns,
        first=tuple(_jsonable(r.asDict()) for r in first),
        seconds=time.perf_counter() - started,
        unfinished=left_unfinished,
        first_unfinished=tuple(_jsonable(r.asDict()) for r in unfinished),
    )


def _sort_key(row: Row, order: Sequence[str]) -> tuple[tuple[int, Any], ...]:
    """``orderBy(*order)``'s order in Python: ascending, nulls first, NaN last (Spark's)."""
    key: list[tuple[int, Any]] = []
    for name in order:
        value = row[name]
        if value is None:
            key.append((0, 0))
        elif isinstance(value, float) and math.isnan(value):
            key.append((2, 0))
        else:
            key.append((1, value))
    return tuple(key)


def _first_rows(rows: Sequence[Row], order: Sequence[str], listed: int) -> list[Row]:
    """The first ``listed`` of collected rows, as ``orderBy(*order).limit(listed)``."""
    return sorted(rows, key=lambda r: _sort_key(r, order))[:listed]


def _many_violations(
    violations: DataFrame, order: Sequence[str], listed: int
) -> tuple[int, int, list[Row], list[Row]]:
    """Violations and unfinished rows counted and listed by Spark, for a check that found
    more than ``COLLECTED_VIOLATIONS`` rows (a badly broken run)."""
    kept = violations.persist()  # read two to four times below; its rows are few
    try:
        unfinished: list[Row] = []
        left_unfinished = 0
        if UNFINISHED in kept.columns:
            flag = F.col(UNFINISHED)
            left_unfinished = kept.where(flag).count()
            if left_unfinished:
                unfinished = kept.where(flag).orderBy(*order).limit(listed).collect()
            kept = kept.where(~flag)
        first = kept.orderBy(*order).limit(listed).collect()
        count = len(first) if len(first) < listed else kept.count()
    finally:
        violations.unpersist()
    return count, left_unfinished, first, unfinished


def _read_metadata(spark: SparkSession, run_dir: str) -> dict[str, Any]:
    text = fsio.read_text(spark, fsio.join(run_dir, "run.json"))
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except ValueError:
        return {"error": "run.json is not valid JSON"}
    return obj if isinstance(obj, dict) else {}


def _origin_count(found: InputReport) -> int:
    """An upper bound on the number of messages with an origin event."""
    total = 0
    for name, n in found.kinds.items():
        layer, kind = name.split("/", 1)
        if kind in metrics.ORIGIN_KINDS.get(layer, metrics.DEFAULT_ORIGIN_KINDS):
            total += n
    return total


def _latency_metrics(
    events: DataFrame, found: InputReport, renamed: DataFrame | None
) -> dict[str, Any]:
    small = _origin_count(found) <= metrics.BROADCAST_ORIGINS_LIMIT
    return latency_tables(events, broadcast_origins=small, renamed=renamed)


def latency_tables(
    events: DataFrame, *, broadcast_origins: bool, renamed: DataFrame | None = None
) -> dict[str, Any]:
    """Latency per layer and per node, and a CDF per layer, from one small histogram.

    One Spark job: ``metrics.latencies`` (``renamed``: ``metrics.renamed``, when the run
    sent messages again under new ids) then ``metrics.latency_histogram``, collected
    and read by ``metrics.histogram_summary`` (percentiles within 1% of their value).
    With ``broadcast_origins`` the job runs without adaptive execution: its plan (a
    small aggregated table broadcast to one scan, then a histogram) is already the
    best one, and re-planning it at each stage boundary cost about a sixth of its time
    at 10 M events (``bench/analysis.py``). The shuffled join of large runs keeps it.
    """
    histogram = metrics.latency_histogram(
        metrics.latencies(events, broadcast_origins=broadcast_origins, renamed=renamed)
    )
    if not broadcast_origins:
        return latency_tables_from(_rows(histogram))
    with _without_adaptive_execution(events.sparkSession):
        return latency_tables_from(_rows(histogram))


@contextlib.contextmanager
def _without_adaptive_execution(spark: SparkSession) -> Iterator[None]:
    key = "spark.sql.adaptive.enabled"
    before = spark.conf.get(key, "true") or "true"
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def latency_tables_from(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``latency_tables`` from histogram rows (``layer, node, bucket, count, ...``)."""
    groups: dict[tuple[str, str | None], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["layer"], r["node"]), []).append(r)
        groups.setdefault((r["layer"], None), []).append(r)
    per_layer: list[dict[str, Any]] = []
    per_node: list[dict[str, Any]] = []
    cdf: dict[str, list[float]] = {}
    for (layer, node), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        row, qs = _latency_row(members)
        row = {"layer": layer, **({"node": node} if node is not None else {}), **row}
        if node is None:
            per_layer.append(row)
            cdf[layer] = qs
        else:
            per_node.append(row)
    return {"by_layer": per_layer, "by_node": per_node, "cdf": _jsonable(cdf)}


def client_latency_tables(events: DataFrame) -> dict[str, Any]:
    """End-to-end gateway latency, client send to each client's receipt, per dispatch
    type (``by_type``: SEND, BROADCAST, QUEUE), per receiving node and as a CDF per
    type, from the clients' own trace events (``client_latency.client_latencies``)."""
    histogram = metrics.latency_histogram(client_latency.client_latencies(events))
    tables = latency_tables_from(_rows(histogram))
    rename = [{"type": r.pop("layer"), **r} for r in (dict(r) for r in tables["by_layer"])]
    by_node = [{"type": r.pop("layer"), **r} for r in (dict(r) for r in tables["by_node"])]
    return {"by_type": rename, "by_node": by_node, "cdf": tables["cdf"]}


def _gateway_end_to_end(client: Mapping[str, Any], latency: Mapping[str, Any]) -> dict[str, Any]:
    """``client`` (``client_latency_tables``), labelled, with the server's own figure beside it."""
    server = [r for r in latency["by_layer"] if r["layer"] == "gateway"]
    return {
        "label": report.END_TO_END,
        **client,
        "inside_the_server": {"label": report.INSIDE_THE_SERVER, **server[0]} if server else None,
    }


def _latency_row(members: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[float]]:
    """``count, mean, p50, p90, p99, max`` of histogram rows, and their 101 quantiles."""
    stats = metrics.histogram_summary(members, points=100)
    qs = stats["quantiles"]
    row = {
        "count": stats["count"],
        "mean": stats["mean"],
        **{f"p{round(p * 100)}": qs[round(p * 100)] if qs else None for p in metrics.QUANTILES},
        "max": stats["max"],
    }
    return row, qs


def fault_window_latency(events: DataFrame, renamed: DataFrame | None = None) -> dict[str, Any]:
    """The ISIS fault windows (``metrics.fault_windows``) and ISIS latency outside them.

    ``windows``: one row per crash or partition (trace times); ``latency``: for scopes
    ``metrics.OUTSIDE_CRASH`` and ``metrics.OUTSIDE_FAULTS``, the same figures as
    ``latency_tables``' rows, from one histogram job. Without any window there is no
    second job (``latency`` is empty): every message is outside, and the overall
    figures say it all. With ``renamed`` (``metrics.renamed``: the run sent messages
    again under new ids), latencies run from the first id's start, and ``withdrawn``
    says how many messages their senders withdrew at a view change.
    """
    found = metrics.fault_windows(events).orderBy("start", "fault", "node").collect()
    extra = {"withdrawn": renamed.count()} if renamed is not None else {}
    if not found:
        return {"windows": [], "latency": {}, **extra}
    # The few windows found, not their plan: the histogram job then does not recompute them.
    windows = events.sparkSession.createDataFrame(found, metrics.fault_windows(events).schema)
    rows = _rows(metrics.windowed_latency_histogram(events, windows, renamed))
    by_scope: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_scope.setdefault(r["scope"], []).append(r)
    latency = {
        scope: _latency_row(by_scope.get(scope, []))[0]
        for scope in (metrics.OUTSIDE_CRASH, metrics.OUTSIDE_FAULTS)
    }
    return {
        "windows": [_jsonable(r.asDict()) for r in found],
        "latency": _jsonable(latency),
        **extra,
    }


#: What the summary's ``scenario`` block copies from ``run.json`` (``lab``: placement,
#: injected faults, settling; the report's header states them).
_RUN_KEYS = ("scenario", "nodes", "seed", "duration", "faults", "fault_counts", "params", "lab")

_TRAFFIC = ("sent", "bytes_sent", "received", "bytes_received", "delivered", "retransmitted")


def _node_metrics(events: DataFrame) -> tuple[dict[str, Any], dict[str, Any]]:
    """Traffic per layer and node, and fault counts, from one pass; and the outages."""
    rows = _rows(metrics.per_node(events).orderBy("layer", "node", "fault"))
    # A byte count is None where no event carried a size (``metrics.traffic``): kept so.
    traffic_rows = [
        {
            "layer": r["layer"],
            "node": r["node"],
            **{k: None if r[k] is None else int(r[k]) for k in _TRAFFIC},
        }
        for r in rows
        if r["layer"] != "net"
    ]
    totals: dict[str, dict[str, int | None]] = {}
    for r in traffic_rows:
        t = totals.setdefault(r["layer"], dict.fromkeys(_TRAFFIC))
        for k in _TRAFFIC:
            if r[k] is not None:
                t[k] = (t[k] or 0) + r[k]
    fault_rows = [
        {"fault": r["fault"], "node": r["node"], "count": int(r["faults"])}
        for r in rows
        if r["layer"] == "net" and r["fault"] is not None
    ]
    fault_totals: dict[str, int] = {}
    for r in fault_rows:
        fault_totals[r["fault"]] = fault_totals.get(r["fault"], 0) + r["count"]
    traffic = {"by_layer": totals, "by_node": traffic_rows}
    faults = {
        "totals": dict(sorted(fault_totals.items())),
        "by_node": fault_rows,
        "outages": _rows(metrics.outage_events(events).limit(1000)) if fault_totals else [],
    }
    return traffic, faults


def _timelines(events: DataFrame, t_min: float, t_max: float) -> tuple[list[Any], list[Any]]:
    """Events per (bin, layer) and per-datagram faults per (bin, fault), from one pass."""
    rows = _rows(metrics.activity(events, t_min, t_max, BINS))
    per_layer: dict[tuple[int, str], dict[str, int]] = {}
    for r in rows:
        cell = per_layer.setdefault((r["bin"], r["layer"]), {"events": 0, "deliveries": 0})
        cell["events"] += int(r["events"])
        cell["deliveries"] += int(r["deliveries"])
    timeline = [{"bin": b, "layer": layer, **v} for (b, layer), v in sorted(per_layer.items())]
    faults = sorted(
        (
            {"bin": r["bin"], "fault": r["fault"], "count": int(r["events"])}
            for r in rows
            if r["fault"] is not None and r["fault"] not in metrics.DISCRETE_FAULTS
        ),
        key=lambda r: (r["bin"], r["fault"]),
    )
    return timeline, faults


def _membership(events: DataFrame, t_min: float, t_max: float) -> dict[str, Any]:
    tl = metrics.membership_timeline(events, t_min, t_max, BINS)
    bands = _rows(
        tl.groupBy("bin")
        .agg(F.min("size").alias("min"), F.mean("size").alias("mean"), F.max("size").alias("max"))
        .orderBy("bin")
    )
    nodes = [r["node"] for r in _rows(tl.select("node").distinct().orderBy("node"))]
    drawn: dict[str, list[int]] = {}
    if len(nodes) <= MAX_DRAWN_NODES:
        for r in _rows(tl.orderBy("node", "bin")):
            drawn.setdefault(r["node"], []).append(int(r["size"]))
    # Clean stops, so that the report ends a node's line where it shut down rather than
    # drawing its view emptied by the leave as a failure.
    stops = {r["node"]: r["stopped_at"] for r in _rows(clean_stops(events))}
    return {"bands": bands, "nodes": drawn, "stops": stops}


def _matrix_nodes(events: DataFrame, inputs: catalog.CheckInputs) -> list[str]:
    """The nodes of the delivery-order matrix: the correct nodes that delivered."""
    return [
        r["node"]
        for r in _rows(
            correct_nodes(events, inputs.nodes)
            .join(isis.deliveries(events).select("node").distinct(), "node", "left_semi")
            .orderBy("node")
        )
    ]


def _order_matrix(
    events: DataFrame, inputs: catalog.CheckInputs, nodes: list[str], result: CheckResult
) -> dict[str, Any] | None:
    if not nodes or len(nodes) > MAX_MATRIX_NODES:
        return None
    index = {n: i for i, n in enumerate(nodes)}
    counts = [[0] * len(nodes) for _ in nodes]
    if result.status == "fail":
        pairs = isis.total_order(events, nodes=inputs.nodes).groupBy("node_a", "node_b").count()
        for r in _rows(pairs):
            a, b = index.get(r["node_a"]), index.get(r["node_b"])
            if a is not None and b is not None:
                counts[a][b] += int(r["count"])
                counts[b][a] += int(r["count"])
    return {"nodes": nodes, "disagreements": counts}


@dataclass(frozen=True, slots=True)
class _Measuring:
    """The metrics jobs that need no check's verdict, submitted to the analysis' pool."""

    found: InputReport
    matrix_nodes: Future[list[str]] | None
    per_node: Future[tuple[dict[str, Any], dict[str, Any]]]
    timelines: Future[tuple[list[Any], list[Any]]]
    windowed: Future[dict[str, Any]] | None
    client: Future[dict[str, Any]] | None
    layers: Future[dict[str, Any]]

    @staticmethod
    def submit(
        pool: ThreadPoolExecutor,
        events: DataFrame,
        found: InputReport,
        inputs: catalog.CheckInputs,
        present: set[str],
        *,
        renamed: DataFrame | None,
    ) -> _Measuring:
        t_min, t_max = found.t_min, found.t_max
        return _Measuring(
            found=found,
            matrix_nodes=(
                pool.submit(_matrix_nodes, events, inputs) if "isis" in present else None
            ),
            per_node=pool.submit(_node_metrics, events),
            timelines=pool.submit(_timelines, events, t_min, t_max),
            windowed=(
                pool.submit(fault_window_latency, events, renamed) if "isis" in present else None
            ),
            client=(
                pool.submit(client_latency_tables, events)
                if found.kinds.get("gateway/client_recv")
                else None
            ),
            layers=pool.submit(_layer_metrics, events, inputs, present, t_min, t_max),
        )

    def collect(
        self,
        events: DataFrame,
        inputs: catalog.CheckInputs,
        results: Sequence[CheckResult],
        latency: dict[str, Any],
    ) -> dict[str, Any]:
        """The summary's ``metrics``: these jobs' results, with ``latency`` (the latency
        job's) and what needs the checks' ``results`` (the delivery-order matrix)."""
        t_min, t_max = self.found.t_min, self.found.t_max
        if self.client is not None:
            latency["gateway_end_to_end"] = _gateway_end_to_end(self.client.result(), latency)
        traffic, faults = self.per_node.result()
        timeline, fault_timeline = self.timelines.result()
        faults["timeline"] = fault_timeline
        layers = self.layers.result()
        if self.matrix_nodes is not None:
            total_order = next(r for r in results if r.name == "isis.total_order")
            matrix = _order_matrix(events, inputs, self.matrix_nodes.result(), total_order)
            if matrix is not None:
                layers["isis"] = {"order_matrix": matrix}
        measured: dict[str, Any] = {
            "time_range": {"start": t_min, "end": t_max},
            "latency": latency,
            "traffic": traffic,
            "faults": faults,
            "timeline": {
                "bins": BINS,
                "width": (t_max - t_min) / BINS if t_max > t_min else 1.0,
                "rows": timeline,
            },
            **layers,
        }
        if self.windowed is not None:
            measured["isis_fault_windows"] = self.windowed.result()
        return measured


def _layer_metrics(
    events: DataFrame,
    inputs: catalog.CheckInputs,
    present: set[str],
    t_min: float,
    t_max: float,
) -> dict[str, Any]:
    """Gossip's depth and redundancy, discovery's full views, detections and membership."""
    out: dict[str, Any] = {}
    if "gossip" in present:
        per = gossip.redundancy(events)
        out["gossip"] = {
            "depth_histogram": _rows(metrics.depth_histogram(events).orderBy("hop")),
            "per_broadcast": _rows(
                per.agg(
                    F.count("*").alias("broadcasts"),
                    F.mean("depth").alias("mean_depth"),
                    F.max("depth").alias("max_depth"),
                    F.mean("redundant").alias("mean_redundant"),
                    F.mean("tcp_sends").alias("mean_tcp_sends"),
                    F.mean("bytes").alias("mean_bytes"),
                )
            )[0],
        }
    if "discovery" in present:
        max_peers = int(inputs.params["discovery.max_peers"])
        full = discovery.full_view_times(events, nodes=inputs.nodes, max_peers=max_peers)
        out["discovery"] = {
            "full_view": _rows(full.orderBy("node")),
            "detections": _rows(
                discovery.detections(events, nodes=inputs.nodes).orderBy(
                    "crashed_at", "crashed", "observer"
                )
            ),
            "membership": _membership(events, t_min, t_max),
        }
    return out


def _spark_info(spark: SparkSession) -> dict[str, Any]:
    info: dict[str, Any] = {"version": spark.version}
    for key, name in (("spark.master", "master"), ("spark.app.id", "app_id")):
        try:
            info[name] = spark.conf.get(key)
        except Exception:  # not every key is readable over Spark Connect
            info[name] = None
    return info


def analyze(
    spark: SparkSession,
    run_dir: str,
    out: str | None = None,
    *,
    strict: bool = False,
    params: Mapping[str, str] | None = None,
    listed: int = 10,
) -> Analysis:
    """Analyze the run in ``run_dir`` and write ``summary.json`` and ``report.html`` to ``out``.

    ``out`` defaults to ``<run_dir>/analysis``. A run with more than
    ``IN_MEMORY_BYTES`` of traces is converted to Parquet in ``<out>/events.parquet``,
    reused while the traces are unchanged; a smaller one is parsed into memory
    (``load.load_in_memory``) and nothing but the summary and report is written. ``params``
    override check parameters (``catalog.PARAMS``). Raises ``GossamerError``
    subclasses for unusable input (see ``load_run``) and unknown parameters.
    """
    started = time.perf_counter()
    out = out or fsio.join(run_dir, "analysis")
    metadata = _read_metadata(spark, run_dir)
    resolved = catalog.resolve_params(catalog.derive_params(metadata), params or {})
    sources = fsio.list_sources(spark, run_dir)
    kept: DataFrame | None = None
    if sum(s.size for s in sources) <= IN_MEMORY_BYTES:
        kept, found = load_in_memory(spark, run_dir, sources, strict=strict)
        events = valid_events(kept)
    else:
        events, found = load_run(spark, run_dir, fsio.join(out, "events.parquet"), strict=strict)
        if found.events <= CACHE_LIMIT:
            events = kept = events.cache()
    loaded = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=CONCURRENT_JOBS if kept is not None else 1)
    try:
        inputs = catalog.CheckInputs(
            nodes=nodes_frame(spark, found) if found.empty_files else None, params=resolved
        )
        # Layers with events, and ``layer/kind`` pairs (for checks that need some kinds).
        present = {layer for layer, n in found.layers.items() if n}
        present |= {name for name, n in found.kinds.items() if n}
        checks = [
            pool.submit(run_check, c, events, inputs, present=present, listed=listed)
            for c in catalog.CHECKS
        ]
        # The metrics that need no verdict queue behind the checks, so that the pool
        # stays busy to the end instead of waiting for the last check. The latency job
        # turns adaptive execution off while it runs: where it is on (not a small run),
        # that job runs alone once the checks are done, and the others after it.
        early = spark.conf.get("spark.sql.adaptive.enabled", "true") == "false"
        # Messages sent again under new ids (a view change withdrew them): latencies
        # count from their first id. A few rows, collected once for both latency jobs.
        renamed = metrics.renamed(events) if found.kinds.get("isis/withdraw") else None
        latency_job = pool.submit(_latency_metrics, events, found, renamed) if early else None
        measuring = (
            _Measuring.submit(pool, events, found, inputs, present, renamed=renamed)
            if early
            else None
        )
        results = tuple(f.result() for f in checks)
        checked = time.perf_counter()
        latency = (
            _latency_metrics(events, found, renamed)
            if latency_job is None
            else latency_job.result()
        )
        measuring = measuring or _Measuring.submit(
            pool, events, found, inputs, present, renamed=renamed
        )
        measured = measuring.collect(events, inputs, results, latency)
    finally:
        pool.shutdown(cancel_futures=True)
        if kept is not None:
            kept.unpersist()
    violated = any(r.status == "fail" for r in results)
    summary: dict[str, Any] = {
        "run": found.run_ids[0] if found.run_ids else None,
        "verdict": "fail" if violated else "pass",
        "counts": {
            **{
                status: sum(r.status == status for r in results)
                for status in ("pass", "fail", "skipped")
            },
            "unfinished": sum(r.unfinished for r in results),
        },
        "checks": [r.to_json() for r in results],
        "input": found.to_json(),
        "scenario": {k: metadata[k] for k in _RUN_KEYS if k in metadata},
        "params": dict(sorted(resolved.items())),
        "metrics": _jsonable(measured),
        "timing": {
            "load_seconds": round(loaded - started, 3),
            "check_seconds": round(checked - loaded, 3),
            "total_seconds": round(time.perf_counter() - started, 3),
        },
        "spark": _spark_info(spark),
    }
    summary_path = fsio.join(out, "summary.json")
    report_path = fsio.join(out, "report.html")
    fsio.write_text(spark, summary_path, json.dumps(summary, indent=1, sort_keys=False) + "\n")
    fsio.write_text(spark, report_path, report.render_html(summary))
    return Analysis(
        summary=summary,
        checks=results,
        input=found,
        out=out,
        summary_path=summary_path,
        report_path=report_path,
        violated=violated,
    )
