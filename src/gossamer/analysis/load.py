"""Load a run: JSON-lines traces -> validated events, converted once to Parquet.

The conversion reads every ``<run>/<node>.jsonl`` as text, numbers the lines, parses
and validates them (``gossamer.analysis.parse``) and writes one Parquet dataset
partitioned by ``layer`` and ``kind``, so a checker reads only the files of the kinds
it needs. Rejected lines go to the partition ``layer=_bad`` with their file, line
number and reason. A manifest next to the data records the source files' names, sizes and
modification times and the input report; a later analysis of the same unchanged run
reuses the Parquet data instead of parsing again.

Line numbers are computed without sorting anything: Spark reads each split of a
file (a block) in order within one task, so a row's line is the number of lines in
the file's earlier blocks plus its offset from the first row of its own block, both
found with ``monotonically_increasing_id`` and one small aggregation. That first pass
also checks each line's shape (``parse.has_fast_shape``): the second pass reads the
lines of a block where all have it with the typed JSON reader alone
(``parse.parse_shaped``), and only other blocks go through ``parse.parse_lines``.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gossamer.analysis import arrow_convert, fsio
from gossamer.analysis.parse import PARSED_SCHEMA, has_fast_shape, parse_lines, parse_shaped
from gossamer.analysis.schema import EVENT_COLUMNS
from gossamer.errors import DecodeError, TraceFormatError
from gossamer.trace.jsonl import BadLine
from gossamer.trace.schema import LAYERS, SCHEMA_VERSION

__all__ = [
    "BAD_PARTITION",
    "MANIFEST_SUFFIX",
    "PARTITION_COLUMNS",
    "STORED_SCHEMA",
    "InputReport",
    "check_sources",
    "convert",
    "load_in_memory",
    "load_run",
    "manifest_path",
    "nodes_frame",
    "parse_sources",
    "read_events",
    "valid_events",
    "write_events",
]

#: The partition of the Parquet data that holds rejected lines.
BAD_PARTITION = "_bad"
#: How the Parquet data is partitioned, outermost first.
PARTITION_COLUMNS = ("layer", "kind")
#: The manifest sits next to the Parquet directory, as ``<name>.source.json``: inside
#: it, Spark would either take it for data or (named ``_...``) refuse to read it back.
MANIFEST_SUFFIX = ".source.json"
_MANIFEST_FORMAT = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class InputReport:
    """What loading a run found: files, events per layer, and every kind of bad input."""

    run_dir: str
    #: Where the Parquet data is; None for a run kept in memory (``load_in_memory``).
    parquet: str | None
    files: tuple[str, ...]
    run_ids: tuple[str, ...]
    events: int
    layers: Mapping[str, int]
    kinds: Mapping[str, int]
    bad_lines: int
    first_bad: tuple[BadLine, ...]
    unknown_layers: Mapping[str, int]
    versions: Mapping[int, int]
    empty_files: tuple[str, ...]
    t_min: float = 0.0
    t_max: float = 0.0
    reused: bool = False
    warnings: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the ``input`` section of ``summary.json``)."""
        return {
            "run_dir": self.run_dir,
            "parquet": self.parquet,
            "reused_parquet": self.reused,
            "files": len(self.files),
            "run_ids": list(self.run_ids),
            "events": self.events,
            "layers": dict(sorted(self.layers.items())),
            "kinds": dict(sorted(self.kinds.items())),
            "bad_lines": self.bad_lines,
            "first_bad_lines": [
                {"file": b.path, "line": b.line, "reason": b.reason} for b in self.first_bad
            ],
            "unknown_layers": dict(sorted(self.unknown_layers.items())),
            "schema_versions": {str(k): v for k, v in sorted(self.versions.items())},
            "empty_files": list(self.empty_files),
            "time_range": [self.t_min, self.t_max],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], *, files: Sequence[str]) -> InputReport:
        return cls(
            run_dir=obj["run_dir"],
            parquet=obj["parquet"],
            files=tuple(files),
            run_ids=tuple(obj["run_ids"]),
            events=int(obj["events"]),
            layers={str(k): int(v) for k, v in obj["layers"].items()},
            kinds={str(k): int(v) for k, v in obj["kinds"].items()},
            bad_lines=int(obj["bad_lines"]),
            first_bad=tuple(
                BadLine(path=b["file"], line=int(b["line"]), reason=b["reason"])
                for b in obj["first_bad_lines"]
            ),
            unknown_layers={str(k): int(v) for k, v in obj["unknown_layers"].items()},
            versions={int(k): int(v) for k, v in obj["schema_versions"].items()},
            empty_files=tuple(obj["empty_files"]),
            t_min=float(obj["time_range"][0]),
            t_max=float(obj["time_range"][1]),
            reused=True,
            warnings=tuple(obj.get("warnings", ())),
        )


def _numbered_lines(
    spark: SparkSession, sources: Sequence[fsio.SourceFile]
) -> tuple[DataFrame, bool]:
    """``value, file, line, shaped`` for every line of the sources (see the module docstring).

    ``shaped`` is true when every line of the line's block has the fast path's shape
    (``parse.has_fast_shape``): the first pass, which counts the lines of each block
    anyway, checks the shape too, so that the second one need not. The flag returned
    says whether all blocks are so.
    """
    raw = spark.read.text([s.path for s in sources]).select(
        "value",
        F.col("_metadata.file_name").alias("file"),
        F.col("_metadata.file_path").alias("_path"),
        F.col("_metadata.file_block_start").alias("_block"),
        F.monotonically_increasing_id().alias("_rid"),
    )
    blocks = (
        raw.groupBy("_path", "_block")
        .agg(
            F.min("_rid").alias("_first"),
            F.count("*").alias("_n"),
            F.count_if(~has_fast_shape(F.col("value"))).alias("_odd"),
        )
        .orderBy("_path", "_block")
        .collect()
    )
    before: list[tuple[str, int, int, int, bool]] = []
    seen: dict[str, int] = {}
    for b in blocks:
        path = str(b["_path"])
        before.append(
            (path, int(b["_block"]), int(b["_first"]), seen.get(path, 0), int(b["_odd"]) == 0)
        )
        seen[path] = seen.get(path, 0) + int(b["_n"])
    offsets = spark.createDataFrame(
        before, "_path string, _block long, _first long, _before long, shaped boolean"
    )
    line = F.col("_before") + F.col("_rid") - F.col("_first") + 1
    numbered = raw.join(F.broadcast(offsets), ["_path", "_block"]).select(
        "value", "file", line.alias("line"), "shaped"
    )
    return numbered, all(b[-1] for b in before)


#: The stored columns: the parsed ones, with ``layer`` and ``kind`` as partition columns.
STORED_SCHEMA = T.StructType(
    [
        *[f for f in PARSED_SCHEMA.fields if f.name not in PARTITION_COLUMNS],
        *[T.StructField(name, T.StringType()) for name in PARTITION_COLUMNS],
    ]
)


def write_events(parsed: DataFrame, parquet: str, *, append: bool = False) -> None:
    """Write parsed rows (``PARSED_COLUMNS``) as the analysis stores a run.

    Partitioned by ``layer`` then ``kind``: nearly every checker and metric reads a
    few kinds of one layer, and partition pruning skips every other file outright.
    (Parquet row-group statistics cannot do that, since kinds interleave in time.)
    Rejected lines go to ``layer=_bad/kind=_bad``. An existing dataset is replaced,
    unless ``append``.
    """
    bad = F.col("reason").isNotNull()
    (
        parsed.withColumn("layer", F.when(bad, F.lit(BAD_PARTITION)).otherwise(F.col("layer")))
        .withColumn("kind", F.when(bad, F.lit(BAD_PARTITION)).otherwise(F.col("kind")))
        .write.mode("append" if append else "overwrite")
        .partitionBy(*PARTITION_COLUMNS)
        .parquet(parquet)
    )


def convert(spark: SparkSession, sources: Sequence[fsio.SourceFile], parquet: str) -> None:
    """Parse and validate every line of ``sources`` and write them to ``parquet``.

    A local run converted by a local session is converted in Spark's Python workers
    (``convert_in_workers``). Otherwise, blocks whose lines all have the fast path's
    shape (normally all of them) are only read by the typed JSON reader; the others
    go through ``parse_lines``.
    """
    if _in_workers(spark, sources, parquet):
        convert_in_workers(spark, sources, parquet)
        return
    lines, all_shaped = _numbered_lines(spark, sources)
    shaped = F.col("shaped")
    parsed = parse_shaped(lines.where(shaped))
    if not all_shaped:
        parsed = parsed.unionByName(parse_lines(lines.where(~shaped)))
    write_events(parsed, parquet)


def _in_workers(spark: SparkSession, sources: Sequence[fsio.SourceFile], parquet: str) -> bool:
    """Whether Python workers on this machine can read the sources and write ``parquet``."""
    try:
        master = str(spark.sparkContext.master)
    except Exception:  # Spark Connect: no SparkContext, the server's workers
        return False
    local = not fsio.is_uri(parquet) and not any(fsio.is_uri(s.path) for s in sources)
    return master.startswith("local") and local


def convert_in_workers(
    spark: SparkSession, sources: Sequence[fsio.SourceFile], parquet: str
) -> None:
    """``convert`` of local files by Spark's Python workers (``arrow_convert``).

    Two Spark jobs over chunks of the files: one counts each chunk's lines (so each
    knows its first line's number), one parses, validates and writes them. The lines
    the workers leave pending then go through the full validation
    (``parse_lines(..., fast_path=False)``) and are appended to the dataset. Chunks are
    at most ``spark.sql.files.maxPartitionBytes`` and small enough for every core to
    get two.
    """
    sc = spark.sparkContext
    total = sum(s.size for s in sources)
    largest = int(spark._jsparkSession.sessionState().conf().filesMaxPartitionBytes())
    chunk_bytes = max(1, min(largest, -(-total // (2 * sc.defaultParallelism))))
    chunks = arrow_convert.plan_chunks([(s.path, s.name, s.size) for s in sources], chunk_bytes)
    counts = sc.parallelize(chunks, len(chunks)).map(arrow_convert.count_lines).collect()
    chunks = arrow_convert.numbered(chunks, counts)
    shutil.rmtree(parquet, ignore_errors=True)
    Path(parquet).mkdir(parents=True)
    work = functools.partial(arrow_convert.convert_chunk, out=parquet)
    results = sc.parallelize(chunks, len(chunks)).map(work).collect()
    pending_dir = str(Path(parquet) / arrow_convert.PENDING_DIR)
    if any(pending for _, pending in results):
        pending = spark.read.parquet(pending_dir).select(
            F.col("value").cast("string").alias("value"), "file", "line"
        )
        write_events(parse_lines(pending, fast_path=False), parquet, append=True)
    shutil.rmtree(pending_dir, ignore_errors=True)


def parse_sources(spark: SparkSession, sources: Sequence[fsio.SourceFile]) -> DataFrame:
    """Every line of ``sources`` parsed and validated (``PARSED_COLUMNS``), as ``convert``
    parses them, for a run kept in memory (``load_in_memory``)."""
    lines, all_shaped = _numbered_lines(spark, sources)
    parsed = parse_shaped(lines.where(F.col("shaped")))
    if all_shaped:
        return parsed
    return parsed.unionByName(parse_lines(lines.where(~F.col("shaped"))))


def _marked(parsed: DataFrame) -> DataFrame:
    """Parsed rows as stored: rejected lines get ``layer`` and ``kind`` ``BAD_PARTITION``
    (the columns of ``STORED_SCHEMA``, as ``write_events`` writes them)."""
    bad = F.col("reason").isNotNull()
    marked = parsed.withColumn(
        "layer", F.when(bad, F.lit(BAD_PARTITION)).otherwise(F.col("layer"))
    ).withColumn("kind", F.when(bad, F.lit(BAD_PARTITION)).otherwise(F.col("kind")))
    return marked.select(*STORED_SCHEMA.fieldNames())


def _stored(spark: SparkSession, parquet: str) -> DataFrame:
    # The schema is given, not inferred: a kind named "1" must stay a string.
    return spark.read.schema(STORED_SCHEMA).option("basePath", parquet).parquet(parquet)


def read_events(spark: SparkSession, parquet: str) -> DataFrame:
    """The valid events of a converted run, in ``EVENTS_SCHEMA`` column order."""
    return valid_events(_stored(spark, parquet))


def valid_events(stored: DataFrame) -> DataFrame:
    """The valid events of stored rows (``STORED_SCHEMA``), in ``EVENTS_SCHEMA`` column order."""
    return stored.where(F.col("layer") != BAD_PARTITION).select(*EVENT_COLUMNS)


def _inspect(
    data: DataFrame,
    parquet: str | None,
    run_dir: str,
    sources: Sequence[fsio.SourceFile],
    examples: int,
) -> InputReport:
    groups = (
        data.groupBy("layer", "kind", "run", "bad_layer", "version", "file")
        .agg(
            F.count("*").alias("n"),
            F.first("reason").alias("reason"),
            F.min("t").alias("t_min"),
            F.max("t").alias("t_max"),
        )
        .collect()
    )
    layers: dict[str, int] = {}
    kinds: dict[str, int] = {}
    runs: dict[str, int] = {}
    unknown: dict[str, int] = {}
    versions: dict[int, int] = {}
    with_events: set[str] = set()
    span: list[float] = []
    bad = 0
    for g in groups:
        n = int(g["n"])
        if g["layer"] != BAD_PARTITION:
            layers[g["layer"]] = layers.get(g["layer"], 0) + n
            kind = f"{g['layer']}/{g['kind']}"
            kinds[kind] = kinds.get(kind, 0) + n
            runs[g["run"]] = runs.get(g["run"], 0) + n
            versions[SCHEMA_VERSION] = versions.get(SCHEMA_VERSION, 0) + n
            with_events.add(g["file"])
            span += [float(g["t_min"]), float(g["t_max"])]
            continue
        bad += n
        if g["bad_layer"] is not None:
            unknown[g["bad_layer"]] = unknown.get(g["bad_layer"], 0) + n
        if g["version"] is not None and str(g["reason"] or "").startswith("schema version"):
            versions[int(g["version"])] = versions.get(int(g["version"]), 0) + n
    first_bad: tuple[BadLine, ...] = ()
    if bad:
        rows = (
            data.where(F.col("layer") == BAD_PARTITION)
            .select("file", "line", "reason")
            .orderBy("file", "line")
            .limit(examples)
            .collect()
        )
        first_bad = tuple(
            BadLine(path=fsio.join(run_dir, r["file"]), line=int(r["line"]), reason=r["reason"])
            for r in rows
        )
    return InputReport(
        run_dir=run_dir,
        parquet=parquet,
        files=tuple(s.name for s in sources),
        run_ids=tuple(sorted(runs)),
        events=sum(layers.values()),
        layers=layers,
        kinds=kinds,
        bad_lines=bad,
        first_bad=first_bad,
        unknown_layers=unknown,
        versions=versions,
        empty_files=tuple(s.name for s in sources if s.name not in with_events),
        t_min=min(span, default=0.0),
        t_max=max(span, default=0.0),
    )


def manifest_path(parquet: str) -> str:
    """Where the manifest of the Parquet data at ``parquet`` is kept."""
    base = parquet.rstrip("/")
    return (base[: -len(".parquet")] if base.endswith(".parquet") else base) + MANIFEST_SUFFIX


def _manifest_sources(sources: Sequence[fsio.SourceFile]) -> list[list[Any]]:
    return [[s.name, s.size, s.mtime] for s in sources]


def _reusable(
    spark: SparkSession, parquet: str, sources: Sequence[fsio.SourceFile]
) -> InputReport | None:
    text = fsio.read_text(spark, manifest_path(parquet))
    if not text:
        return None
    try:
        manifest = json.loads(text)
        if manifest.get("format") != _MANIFEST_FORMAT:
            return None
        if manifest.get("sources") != _manifest_sources(sources):
            return None
        return InputReport.from_json(manifest["report"], files=[s.name for s in sources])
    except (ValueError, KeyError, TypeError):
        return None  # a damaged manifest only costs a new conversion


def _count_text(counts: Mapping[Any, int]) -> str:
    return ", ".join(f"{k!s} ({v} lines)" for k, v in sorted(counts.items()))


def _check_usable(report: InputReport, *, strict: bool) -> None:
    """Raise for input no analysis can use; ``strict`` also refuses any bad line."""
    if len(report.versions) > 1:
        versions = ", ".join(f"v{k} ({v} lines)" for k, v in sorted(report.versions.items()))
        raise DecodeError(
            f"mixed trace schema versions in {report.run_dir}: {versions}; "
            f"this gossamer reads v{SCHEMA_VERSION}: convert or re-record the older traces"
        )
    if report.versions and SCHEMA_VERSION not in report.versions:
        (only,) = report.versions
        raise DecodeError(
            f"the traces in {report.run_dir} use schema version {only}; "
            f"this gossamer reads version {SCHEMA_VERSION}"
        )
    if len(report.run_ids) > 1:
        raise DecodeError(
            f"{report.run_dir} mixes events of {len(report.run_ids)} runs "
            f"({', '.join(report.run_ids[:5])}): message ids are only unique within one run"
        )
    if report.events == 0:
        hint = ""
        if report.unknown_layers:
            hint = (
                f"; lines of unknown layers: {_count_text(report.unknown_layers)} "
                f"(known: {', '.join(LAYERS)})"
            )
        elif report.first_bad:
            hint = f"; first malformed line: {report.first_bad[0]}"
        raise DecodeError(
            f"no valid trace events in {report.run_dir} "
            f"({len(report.files)} files, {report.bad_lines} malformed lines){hint}"
        )
    if strict and report.first_bad:
        first = report.first_bad[0]
        raise TraceFormatError(
            f"{report.bad_lines} malformed trace lines (--strict); first: {first.reason}",
            path=first.path,
            line=first.line,
        )


def check_sources(run_dir: str, sources: Sequence[fsio.SourceFile]) -> None:
    """Raise ``DecodeError`` when a run's listing shows there is nothing to analyze."""
    if not sources:
        raise DecodeError(f"no trace files (*.jsonl) in {run_dir}: is it a run directory?")
    if all(s.size == 0 for s in sources):
        raise DecodeError(f"the {len(sources)} trace files in {run_dir} are all empty")


def load_run(
    spark: SparkSession,
    run_dir: str,
    parquet: str,
    *,
    strict: bool = False,
    examples: int = 20,
) -> tuple[DataFrame, InputReport]:
    """Convert the run (unless an up-to-date conversion exists) and return its events.

    Raises ``ConfigError`` for a missing run directory, ``DecodeError`` for a run
    without trace files or valid events, with mixed or unsupported schema versions, or
    with events of several runs, and ``TraceFormatError`` (file and line) with
    ``strict`` when any line is malformed. Otherwise bad lines are skipped and counted
    in the report.
    """
    sources = fsio.list_sources(spark, run_dir)
    check_sources(run_dir, sources)
    report = _reusable(spark, parquet, sources)
    if report is None:
        convert(spark, sources, parquet)
        stored = _stored(spark, parquet)
        report = _with_warnings(_inspect(stored, parquet, run_dir, sources, examples))
        manifest = {
            "format": _MANIFEST_FORMAT,
            "sources": _manifest_sources(sources),
            "report": report.to_json(),
        }
        fsio.write_text(spark, manifest_path(parquet), json.dumps(manifest, indent=1))
    _check_usable(report, strict=strict)
    return read_events(spark, parquet), report


def load_in_memory(
    spark: SparkSession,
    run_dir: str,
    sources: Sequence[fsio.SourceFile],
    *,
    strict: bool = False,
    examples: int = 20,
) -> tuple[DataFrame, InputReport]:
    """``load_run`` for a small run: parsed and kept in memory, no Parquet written.

    Returns the run's stored rows (``STORED_SCHEMA``: valid events and rejected lines,
    ``valid_events`` selects the former), cached: the caller unpersists them. They sit
    in one partition sorted by ``layer`` and ``kind``, so that the statistics of the
    cache's batches let a scan of a few kinds skip the rest, as partition pruning does
    for the Parquet data. For a run of a few megabytes, parsing again costs less than
    writing and listing some 60 Parquet directories, so nothing is kept for a later
    analysis. Raises as ``load_run`` does.
    """
    check_sources(run_dir, sources)
    stored = (
        _marked(parse_sources(spark, sources))
        .repartition(1)
        .sortWithinPartitions(*PARTITION_COLUMNS)
        .persist()
    )
    try:
        report = _with_warnings(_inspect(stored, None, run_dir, sources, examples))
        _check_usable(report, strict=strict)
    except BaseException:
        stored.unpersist()
        raise
    return stored, report


def _with_warnings(report: InputReport) -> InputReport:
    warnings = tuple(
        f"skipped {n} lines of unknown layer {name!r} (known: {', '.join(LAYERS)})"
        for name, n in sorted(report.unknown_layers.items())
    )
    return replace(report, warnings=warnings)


def nodes_frame(spark: SparkSession, report: InputReport) -> DataFrame:
    """``node``: the nodes of trace files that hold no valid event (``<node>.jsonl``).

    Checkers add these to the nodes seen in events, so a node that recorded
    nothing still counts as one that should have delivered.
    """
    stems = [(name.rsplit(".", 1)[0],) for name in report.empty_files]
    return spark.createDataFrame(stems, T.StructType([T.StructField("node", T.StringType())]))
