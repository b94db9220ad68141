"""Gossip checkers: coverage, depth, integrity and the redundancy figures."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import gossip
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark


def tree(*, skip: str | None = None, extra: tuple[TraceEvent, ...] = ()) -> list[TraceEvent]:
    """n0 broadcasts b; n1 and n2 get it from n0 (hop 1), n3 from n1 (hop 2), n3 twice."""
    hops = {"n1": ("n0", 1), "n2": ("n0", 1), "n3": ("n1", 2)}
    out = [event("n0", 0.0, "gossip", "broadcast", msg="n0/1")]
    for node, (sender, hop) in hops.items():
        out.append(
            event(sender, 0.1 * hop, "gossip", "send", msg="n0/1", peer=node, size=100, via="tcp")
        )
        if node == skip:
            continue
        out.append(
            event(node, 0.1 * hop + 0.01, "gossip", "recv", msg="n0/1", peer=sender, hop=str(hop))
        )
        out.append(event(node, 0.1 * hop + 0.01, "gossip", "deliver", msg="n0/1"))
    out.append(event("n0", 0.05, "gossip", "send", msg="n0/1", peer="*", size=100, via="multicast"))
    out.append(event("n3", 0.3, "gossip", "recv", msg="n0/1", peer="n2", hop="3"))
    return [*out, *extra]


def test_full_coverage_holds(spark: SparkSession) -> None:
    assert gossip.coverage(events_frame(spark, tree())).count() == 0
    assert gossip.coverage_suspects(events_frame(spark, tree())).count() == 0


def test_a_node_that_never_delivers_breaks_coverage(spark: SparkSession) -> None:
    events = tree(skip="n2", extra=(event("n2", 0.0, "net", "fault", fault="drop"),))
    (row,) = gossip.coverage(events_frame(spark, events)).collect()
    assert (row["msg"], row["delivered"], row["expected"], row["missing"]) == ("n0/1", 3, 4, ["n2"])
    assert row["coverage"] == pytest.approx(0.75)
    # The linear pre-check (empty only if coverage holds) finds it too.
    assert [r["msg"] for r in gossip.coverage_suspects(events_frame(spark, events)).collect()] == [
        "n0/1"
    ]
    # A lower threshold accepts it; a crashed node is not expected to deliver.
    assert gossip.coverage(events_frame(spark, events), min_coverage=0.75).count() == 0
    crashed = (*events, event("n2", 0.0, "net", "fault", fault="crash"))
    assert gossip.coverage(events_frame(spark, list(crashed))).count() == 0


def test_a_partition_excuses_a_miss_only_around_the_broadcast(spark: SparkSession) -> None:
    # The broadcast is at t=0. Cut off from 0.5 to 3 (within the grace): excused.
    cut = (
        event("n2", 0.5, "net", "fault", fault="partition"),
        event("n2", 3.0, "net", "fault", fault="heal"),
    )
    assert gossip.coverage(events_frame(spark, tree(skip="n2", extra=cut))).count() == 0
    # Cut off from 5 to 6: the broadcast had all the time it needed, so n2 missed it.
    late = (
        event("n2", 5.0, "net", "fault", fault="partition"),
        event("n2", 6.0, "net", "fault", fault="heal"),
    )
    (row,) = gossip.coverage(events_frame(spark, tree(skip="n2", extra=late))).collect()
    assert row["missing"] == ["n2"]
    # The origin itself cut off: nobody is held to that broadcast.
    origin = (event("n0", 0.2, "net", "fault", fault="partition"),)
    assert gossip.coverage(events_frame(spark, tree(skip="n2", extra=origin))).count() == 0


def test_an_origin_that_crashed_while_sending_is_held_to_nothing(spark: SparkSession) -> None:
    n2 = event("n2", 0.0, "net", "fault", fault="drop")  # n2 runs, but misses the broadcast
    # Killed 0.02 s after its broadcast (within the grace): a part of the tree missed it.
    killed = (n2, event("n0", 0.02, "net", "fault", fault="crash"))
    assert gossip.coverage(events_frame(spark, tree(skip="n2", extra=killed))).count() == 0
    # Killed 5 s later, or restarted before it broadcast: n2 had no excuse.
    for extra in (
        (n2, event("n0", 5.0, "net", "fault", fault="crash")),
        (
            n2,
            event("n0", -2.0, "net", "fault", fault="crash"),
            event("n0", -1.0, "net", "fault", fault="restart"),
        ),
    ):
        (row,) = gossip.coverage(events_frame(spark, tree(skip="n2", extra=extra))).collect()
        assert row["missing"] == ["n2"]


def test_coverage_counts_only_the_destinations_of_a_broadcast(spark: SparkSession) -> None:
    events = tree(skip="n2")
    events[0] = event("n0", 0.0, "gossip", "broadcast", msg="n0/1", dests="n1,n3")
    assert gossip.coverage(events_frame(spark, events)).count() == 0


def test_depth_is_the_first_copy_hop_and_has_a_bound(spark: SparkSession) -> None:
    df = events_frame(spark, tree())
    hops = {r["node"]: (r["hop"], r["receptions"]) for r in gossip.first_hops(df).collect()}
    assert hops == {"n1": (1, 1), "n2": (1, 1), "n3": (2, 2)}
    assert gossip.depth(df, max_depth=2).count() == 0
    (row,) = gossip.depth(df, max_depth=1).collect()
    assert (row["msg"], row["depth"], row["deepest"]) == ("n0/1", 2, "n3")


def test_duplicate_and_invented_deliveries_break_integrity(spark: SparkSession) -> None:
    extra = (
        event("n3", 0.4, "gossip", "deliver", msg="n0/1"),
        event("n1", 0.5, "gossip", "deliver", msg="n9/9"),
    )
    found = sorted(
        (r["problem"], r["node"], r["msg"])
        for r in gossip.integrity(events_frame(spark, tree(extra=extra))).collect()
    )
    assert found == [("duplicate", "n3", "n0/1"), ("never broadcast", "n1", "n9/9")]


def test_redundancy_counts_extra_copies_tcp_sends_and_bytes(spark: SparkSession) -> None:
    (row,) = gossip.redundancy(events_frame(spark, tree())).collect()
    assert row.asDict() == {
        "msg": "n0/1",
        "depth": 2,
        "receivers": 3,
        "receptions": 4,
        "redundant": 1,
        "tcp_sends": 3,
        "bytes": 400,
    }
