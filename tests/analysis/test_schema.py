"""The Spark schema agrees with the trace schema definition and with real trace lines."""

from __future__ import annotations

from pathlib import Path

import pytest

pyspark = pytest.importorskip(
    "pyspark", reason="pyspark is an optional extra (install gossamer[spark])"
)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from gossamer.analysis.schema import TRACE_SCHEMA  # noqa: E402
from gossamer.trace import FIELDS, JsonlSink, TraceEvent  # noqa: E402


def test_every_field_in_order_with_its_nullability() -> None:
    assert [f.name for f in TRACE_SCHEMA.fields] == [f.name for f in FIELDS]
    for struct_field, spec in zip(TRACE_SCHEMA.fields, FIELDS, strict=True):
        assert struct_field.nullable == spec.nullable, spec.name
    by_name = {f.name: f.dataType for f in TRACE_SCHEMA.fields}
    assert by_name["t"] == T.DoubleType()
    assert by_name["seq"] == T.LongType()
    assert by_name["attrs"] == T.MapType(T.StringType(), T.StringType(), False)


@pytest.mark.spark
def test_spark_reads_encoded_traces_with_the_derived_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    with JsonlSink(tmp_path / "n0.jsonl") as sink:
        sink.emit(
            TraceEvent(
                run="r",
                node="n0",
                t=1.5,
                layer="isis",
                kind="deliver",
                msg="n1/3",
                peer="n1",
                seq=7,
                size=20,
                attrs={"proposer": "n2"},
            )
        )
        sink.emit(TraceEvent(run="r", node="n0", t=2.0, layer="net", kind="fault"))
    df = spark.read.schema(TRACE_SCHEMA).option("mode", "FAILFAST").json(str(tmp_path))
    rows = sorted(df.collect(), key=lambda r: r.t)
    assert rows[0].asDict() == {
        "v": 1,
        "run": "r",
        "node": "n0",
        "t": 1.5,
        "layer": "isis",
        "kind": "deliver",
        "msg": "n1/3",
        "peer": "n1",
        "seq": 7,
        "size": 20,
        "attrs": {"proposer": "n2"},
    }
    assert rows[1].msg is None and rows[1].attrs == {}
    # What Spark infers by itself from our lines has the same names, and compatible types.
    inferred = {f.name: f.dataType for f in spark.read.json(str(tmp_path)).schema.fields}
    assert set(inferred) == {f.name for f in FIELDS}
    assert inferred["t"] == T.DoubleType() and inferred["seq"] == T.LongType()
