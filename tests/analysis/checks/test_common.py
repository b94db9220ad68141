"""The checkers' shared building blocks."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import settled, shared
from gossamer.analysis.frames import event, events_frame

pytestmark = pytest.mark.spark


def test_a_shared_frame_is_built_once_per_events_frame_and_arguments(
    spark: SparkSession,
) -> None:
    built: list[str] = []

    @shared
    def of_layer(events: DataFrame, layer: str, *, kind: str | None = None) -> DataFrame:
        built.append(layer)
        return events.where(F.col("layer") == layer)

    @shared
    def also_of_layer(events: DataFrame, layer: str, *, kind: str | None = None) -> DataFrame:
        built.append(f"also {layer}")
        return events.where(F.col("layer") == layer)

    one = events_frame(spark, [event("n0", 0.0, "isis", "multicast", msg="n0/0")])
    other = events_frame(spark, [event("n0", 0.0, "gossip", "broadcast", msg="n0/1")])
    first = of_layer(one, "isis")
    assert of_layer(one, "isis") is first
    assert of_layer(one, "isis", kind="deliver") is not first
    assert of_layer(one, "gossip") is not first
    assert of_layer(other, "isis") is not first
    assert also_of_layer(one, "isis") is not first  # another transform, same arguments
    assert built == ["isis", "isis", "gossip", "isis", "also isis"]
    assert first.count() == 1 and of_layer(other, "isis").count() == 0


def test_a_settled_frame_keeps_its_rows_and_is_planned_as_a_scan(spark: SparkSession) -> None:
    events = events_frame(
        spark, [event(f"n{i}", float(i), "isis", "deliver", msg=f"n0/{i}") for i in range(3)]
    )
    joined = events.alias("a").join(events.alias("b"), "msg").select("msg", F.col("a.node"))
    done = settled(joined)
    assert sorted(r["msg"] for r in done.collect()) == ["n0/0", "n0/1", "n0/2"]
    # Joined again, it carries none of the join that made it: later plans stay small.
    plan = done.join(done.select("msg"), "msg")._jdf.queryExecution().analyzed().toString()
    assert "LogicalRDD" in plan
    assert plan.count("Join") == 1, plan
