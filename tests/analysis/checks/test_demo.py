"""The ping demo checker."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import demo
from gossamer.analysis.frames import event, events_frame

pytestmark = pytest.mark.spark


def test_pings_resolved_once_hold_and_every_mutation_is_caught(spark: SparkSession) -> None:
    good = [
        event("n0", 0.0, "demo", "send", msg="n0/0", peer="n1", type="ping"),
        event("n1", 0.1, "demo", "send", msg="n0/0", peer="n0", type="pong"),
        event("n0", 0.2, "demo", "deliver", msg="n0/0", peer="n1"),
        event("n0", 1.0, "demo", "send", msg="n0/1", peer="n1", type="ping"),
        event("n0", 2.0, "demo", "lost", msg="n0/1", peer="n1"),
    ]
    assert demo.pings(events_frame(spark, good)).count() == 0
    bad = [
        *good,
        event("n0", 2.5, "demo", "deliver", msg="n0/1", peer="n1"),  # resolved twice
        event("n0", 3.0, "demo", "send", msg="n0/2", peer="n1", type="ping"),  # unresolved
        event("n1", 3.0, "demo", "deliver", msg="n1/7", peer="n0"),  # never sent
        event("n2", 3.0, "demo", "send", msg="n2/0", peer="n1", type="ping"),  # n2 crashes:
        event("n2", 3.1, "net", "fault", fault="crash"),  # exempt
    ]
    found = sorted((r["problem"], r["msg"]) for r in demo.pings(events_frame(spark, bad)).collect())
    assert found == [("never sent", "n1/7"), ("resolved twice", "n0/1"), ("unresolved", "n0/2")]
