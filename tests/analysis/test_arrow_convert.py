"""The conversion in Spark's Python workers stores exactly what Spark's own parsing gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")
pytest.importorskip("pyarrow", reason="pyarrow comes with gossamer[spark]")

from pyspark.sql import SparkSession

from gossamer.analysis import arrow_convert, fsio, load
from gossamer.trace import encode_event

from .test_parse import (
    CORPUS,
    EDGES,
    KNOWN_DIFFERENCES,
    _line,
    events,
    mutations,
    near_misses,
)

pytestmark = pytest.mark.spark

#: Lines at the edges of the workers' fast path: what pyarrow's reader accepts and
#: the full validation does not, nulls a struct hides, lines that would shift rows.
WORKER_EDGES = [
    _line(t="NaN"),
    _line(t="-Infinity"),
    _line(t="-0.0"),
    _line(t="-0"),
    _line(t="1e-400"),
    _line(attrs="null"),
    _line(attrs='{"a":null}'),
    _line(attrs='{"a":"x","b":null}'),
    _line(attrs='{"a" : null}'),
    _line(attrs='{"b":"null"}'),
    _line().replace('"attrs":{}', '"\\u0061ttrs":{"a":null}'),
    _line().replace('"attrs":{}', '"attrs":{"a":"1","a":"2"}'),
    _line().replace('"kind":"k"', '"kind":"k","zz":null'),
    _line() + " " + _line(),
    _line() + _line(),
    "",
    "  ",
    "{}",
    '{"v":1}',
    _line().replace('"run":"r"', '"run":"r\\u0000"'),
]


def _write(path: Path, lines: list[str], *, sep: bytes = b"\n", last: bool = True) -> None:
    # No NUL in a kind: Spark's writer, which stores the lines left to its validation,
    # cannot put one in a directory name (the workers escape it).
    body = sep.join(
        text.replace("\\u0000", "\\u0001").encode("utf-8", "surrogatepass") for text in lines
    )
    path.write_bytes(body + (sep if last else b""))


@pytest.fixture
def tiny_chunks(spark: SparkSession) -> Iterator[None]:
    """Files cut into ~2 KB chunks (and Spark's splits alike), many per file."""
    keys = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")
    old = {k: spark.conf.get(k) for k in keys}
    spark.conf.set(keys[0], "2000")
    spark.conf.set(keys[1], "0")
    yield
    for k, v in old.items():
        spark.conf.set(k, v)


def _rows(spark: SparkSession, parquet: str) -> list[dict[str, object]]:
    rows = [r.asDict() for r in load._stored(spark, parquet).collect()]
    return sorted(rows, key=lambda r: (r["file"], r["line"]))


def test_workers_store_what_spark_parses(
    spark: SparkSession, tmp_path: Path, tiny_chunks: None
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    encoded = [
        encode_event(e).decode().rstrip("\n").replace("\\u0000", "\\u0001") for e in events(13, 400)
    ]
    _write(run / "a.jsonl", [*CORPUS, *EDGES, *KNOWN_DIFFERENCES, *WORKER_EDGES])
    _write(run / "b.jsonl", [*mutations(17, 200), *near_misses(19, 400)])
    _write(run / "c.jsonl", encoded[:200])
    _write(run / "d.jsonl", encoded[200:300], sep=b"\r\n")
    _write(run / "e.jsonl", [*encoded[300:350], "{}", *encoded[350:]], sep=b"\r", last=False)
    (run / "f.jsonl").write_bytes(b"\xef\xbb\xbf" + (encoded[0] + "\n").encode() * 3)
    (run / "g.jsonl").write_bytes(
        (encoded[1] + "\n").encode() + b'{"v":1,"run":"\xff"}\n' + encoded[2].encode()[:40]
    )
    (run / "h.jsonl").write_bytes(b"")
    sources = fsio.list_local_sources(str(run))
    chunks = arrow_convert.plan_chunks([(s.path, s.name, s.size) for s in sources], 2000)
    assert len(chunks) > 20  # the files really are cut

    by_workers = str(tmp_path / "workers.parquet")
    load.convert_in_workers(spark, sources, by_workers)
    assert not (Path(by_workers) / arrow_convert.PENDING_DIR).exists()
    by_spark = load._marked(load.parse_sources(spark, sources))
    expected = sorted(
        (r.asDict() for r in by_spark.collect()), key=lambda r: (r["file"], r["line"])
    )
    got = _rows(spark, by_workers)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g == e, (g["file"], g["line"], g, e)
    bad = sum(1 for r in got if r["layer"] == load.BAD_PARTITION)
    assert bad > 300 and len(got) - bad > 500  # both paths did real work


def test_kinds_are_spelt_in_directories_as_spark_spells_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    kinds = ["a/b", "x=y", "sp ace", "é€", "%41", "{[]}^", "a:b#?*'\"\\", "\x01\x1f\x7f", "_x", "."]
    frame = spark.createDataFrame([(k, 1) for k in kinds], "kind string, n int")
    out = tmp_path / "spark"
    frame.write.partitionBy("kind").parquet(str(out))
    spelt = {p.name for p in out.iterdir() if p.is_dir()}
    assert spelt == {f"kind={arrow_convert.escape_partition_value(k)}" for k in kinds}
