"""Loading runs: line numbers, bad input, schema versions, Parquet reuse, URIs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis import fsio
from gossamer.analysis.load import (
    BAD_PARTITION,
    load_in_memory,
    load_run,
    nodes_frame,
    valid_events,
)
from gossamer.errors import ConfigError, DecodeError, TraceFormatError
from gossamer.trace import TraceEvent, encode_event

pytestmark = pytest.mark.spark


def line(node: str, i: int, *, run: str = "r", layer: str = "demo") -> str:
    e = TraceEvent(run=run, node=node, t=i * 0.01, layer=layer, kind="send", msg=f"{node}/{i}")
    return encode_event(e).decode()


def write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(text if text.endswith("\n") else text + "\n" for text in lines))


@pytest.fixture
def tiny_splits(spark: SparkSession) -> Iterator[None]:
    """Split files into many ~400-byte blocks, as big files are split on a cluster."""
    keys = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")
    old = {k: spark.conf.get(k) for k in keys}
    spark.conf.set(keys[0], "400")
    spark.conf.set(keys[1], "0")
    yield
    for k, v in old.items():
        spark.conf.set(k, v)


def test_bad_lines_are_skipped_counted_and_located(
    spark: SparkSession, tmp_path: Path, tiny_splits: None
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    n0 = [line("n0", i) for i in range(1, 41)]
    n0[9] = "{not json"  # line 10
    n0[24] = line("n0", 25, layer="quantum")  # line 25
    write(run / "n0.jsonl", n0)
    write(run / "n1.jsonl", [line("n1", i) for i in range(1, 6)] + [""])  # line 6 empty
    (run / "n2.jsonl").write_text("")  # a node that recorded nothing
    out = str(tmp_path / "out" / "events.parquet")

    events, report = load_run(spark, str(run), out)
    assert report.events == 43 and report.bad_lines == 3
    assert [(Path(b.path).name, b.line) for b in report.first_bad] == [
        ("n0.jsonl", 10),
        ("n0.jsonl", 25),
        ("n1.jsonl", 6),
    ]
    assert report.first_bad[0].reason == "not JSON"
    assert report.first_bad[1].reason.startswith("unknown layer 'quantum'")
    assert report.unknown_layers == {"quantum": 1}
    assert report.warnings and "quantum" in report.warnings[0]
    assert report.empty_files == ("n2.jsonl",)
    assert [r["node"] for r in nodes_frame(spark, report).collect()] == ["n2"]
    # Every event knows its line, even though each file was read in many splits.
    rows = events.select("node", "msg", "file", "line").collect()
    assert len(rows) == 43
    assert all(r["msg"] == f"{r['node']}/{r['line']}" for r in rows)
    assert {r["file"] for r in rows} == {"n0.jsonl", "n1.jsonl"}
    # Partitioned by layer, with the bad lines apart.
    layers = {p.name for p in Path(out).iterdir() if p.is_dir()}
    assert layers == {"layer=demo", f"layer={BAD_PARTITION}"}

    # The second load reuses the conversion; --strict refuses the bad lines.
    again, report2 = load_run(spark, str(run), out)
    assert report2.reused and report2.bad_lines == 3 and again.count() == 43
    with pytest.raises(TraceFormatError) as caught:
        load_run(spark, str(run), out, strict=True)
    assert caught.value.line == 10 and caught.value.path.endswith("n0.jsonl")

    # A changed trace file is converted again.
    write(run / "n1.jsonl", [line("n1", i) for i in range(1, 6)])
    _, report3 = load_run(spark, str(run), out)
    assert not report3.reused and report3.bad_lines == 2 and report3.events == 43


def test_a_run_kept_in_memory_loads_as_its_parquet_conversion_does(
    spark: SparkSession, tmp_path: Path, tiny_splits: None
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    n0 = [line("n0", i) for i in range(1, 31)]
    n0[4] = "{not json"  # line 5
    n0[11] = line("n0", 12, layer="quantum")  # line 12
    write(run / "n0.jsonl", n0)
    write(run / "n1.jsonl", [line("n1", i, layer="isis") for i in range(1, 8)])
    (run / "n2.jsonl").write_text("")
    out = tmp_path / "out" / "events.parquet"
    events, report = load_run(spark, str(run), str(out))

    kept, in_memory = load_in_memory(spark, str(run), fsio.list_sources(spark, str(run)))
    try:
        assert kept.is_cached
        assert in_memory.parquet is None and not in_memory.reused
        as_converted = {**report.to_json(), "parquet": None}
        assert in_memory.to_json() == as_converted
        assert in_memory.bad_lines == 2 and in_memory.warnings
        assert sorted(valid_events(kept).collect()) == sorted(events.collect())
    finally:
        kept.unpersist()
    with pytest.raises(TraceFormatError) as caught:
        load_in_memory(spark, str(run), fsio.list_sources(spark, str(run)), strict=True)
    assert caught.value.line == 5


def test_mixed_and_unsupported_schema_versions_are_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    run = tmp_path / "mixed"
    run.mkdir()
    write(run / "n0.jsonl", [line("n0", 1)])
    write(run / "n1.jsonl", [line("n1", 1).replace('"v":1', '"v":2')])
    with pytest.raises(DecodeError, match=r"mixed trace schema versions.*v1 \(1 lines\), v2"):
        load_run(spark, str(run), str(tmp_path / "p1"))
    (run / "n0.jsonl").unlink()
    with pytest.raises(DecodeError, match="use schema version 2; this gossamer reads version 1"):
        load_run(spark, str(run), str(tmp_path / "p2"))


def test_unusable_runs_get_clear_errors(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_run(spark, str(tmp_path / "nowhere"), str(tmp_path / "p"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DecodeError, match=r"no trace files \(\*\.jsonl\)"):
        load_run(spark, str(empty), str(tmp_path / "p"))
    (empty / "n0.jsonl").write_text("")
    with pytest.raises(DecodeError, match="are all empty"):
        load_run(spark, str(empty), str(tmp_path / "p"))
    two = tmp_path / "two"
    two.mkdir()
    write(two / "n0.jsonl", [line("n0", 1, run="a")])
    write(two / "n1.jsonl", [line("n1", 1, run="b"), line("n1", 2, layer="quantum")])
    with pytest.raises(DecodeError, match=r"mixes events of 2 runs \(a, b\)"):
        load_run(spark, str(two), str(tmp_path / "p3"))
    write(two / "n0.jsonl", [line("n0", 1, layer="quantum")])
    (two / "n1.jsonl").unlink()
    with pytest.raises(DecodeError, match=r"no valid trace events.*unknown layers: quantum"):
        load_run(spark, str(two), str(tmp_path / "p4"))


def test_runs_and_outputs_may_be_uris(spark: SparkSession, tmp_path: Path) -> None:
    run = tmp_path / "uri run"  # Hadoop paths are not percent-encoded: the space stays
    run.mkdir()
    write(run / "n0.jsonl", [line("n0", i) for i in range(1, 4)])
    (run / "sub").mkdir()
    write(run / "sub" / "x.jsonl", [line("x", 1)])  # not part of the run
    run_uri = f"file://{run}"
    out_uri = f"file://{tmp_path}/out/events.parquet"
    assert fsio.is_uri(run_uri) and not fsio.is_uri(str(run))
    assert [s.name for s in fsio.list_sources(spark, run_uri)] == ["n0.jsonl"]
    events, report = load_run(spark, run_uri, out_uri)
    assert report.events == 3
    assert sorted(r["line"] for r in events.collect()) == [1, 2, 3]
    assert (tmp_path / "out" / "events.source.json").is_file()
    assert load_run(spark, run_uri, out_uri)[1].reused
    fsio.write_text(spark, f"file://{tmp_path}/x/y.txt", "hello")
    assert fsio.read_text(spark, f"file://{tmp_path}/x/y.txt") == "hello"
    assert fsio.read_text(spark, f"file://{tmp_path}/x/nope.txt") is None
    assert os.path.getsize(tmp_path / "x" / "y.txt") == 5
