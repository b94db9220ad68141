"""Snapshot checkers: consistent cuts, channel states, and the workload's invariant."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import snapshot
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark


def bank(*, late_send: bool = False, channel: tuple[str, str] = ("1", "30")) -> list[TraceEvent]:
    """Two accounts of 100. a sends 30 (m1) before its cut; b receives it after its cut.

    With ``late_send``, a sends m1 after recording, yet b records it as received
    before its own cut: an inconsistent cut (money counted twice).
    """
    ev: list[TraceEvent] = []
    a_cut = event("a", 1.0, "snapshot", "local_state", snapshot="s1", value="70", total="200")
    send = event("a", 0.5, "snapshot", "send", msg="m1", peer="b", amount="30")
    if late_send:
        a_cut = event("a", 0.4, "snapshot", "local_state", snapshot="s1", value="100", total="200")
        ev += [a_cut, send]
        ev += [
            event("b", 0.6, "snapshot", "recv", msg="m1", peer="a", amount="30"),
            event("b", 0.7, "snapshot", "local_state", snapshot="s1", value="130", total="200"),
            event(
                "b", 0.8, "snapshot", "channel_state", peer="a", snapshot="s1", count="0", value="0"
            ),
        ]
        return ev
    ev += [send, a_cut]
    ev += [
        event("b", 0.7, "snapshot", "local_state", snapshot="s1", value="100", total="200"),
        event("b", 1.1, "snapshot", "recv", msg="m1", peer="a", amount="30"),
        event(
            "b",
            1.2,
            "snapshot",
            "channel_state",
            peer="a",
            snapshot="s1",
            count=channel[0],
            value=channel[1],
        ),
    ]
    return ev


def test_a_consistent_cut_holds(spark: SparkSession) -> None:
    df = events_frame(spark, bank())
    assert snapshot.consistency(df).count() == 0
    assert snapshot.invariant(df).count() == 0
    (row,) = snapshot.snapshot_totals(df).collect()
    assert (row["local_sum"], row["channel_sum"], row["total"]) == (170.0, 30.0, 200.0)


def test_an_inconsistent_cut_is_caught(spark: SparkSession) -> None:
    df = events_frame(spark, bank(late_send=True))
    (row,) = snapshot.consistency(df).collect()
    assert (row["problem"], row["snapshot"], row["node"], row["peer"], row["msg"]) == (
        "orphan",
        "s1",
        "b",
        "a",
        "m1",
    )
    (bad,) = snapshot.invariant(df).collect()
    assert (bad["total"], bad["expected"]) == (230.0, 200.0)


def test_a_wrong_channel_state_is_caught(spark: SparkSession) -> None:
    (row,) = snapshot.consistency(events_frame(spark, bank(channel=("0", "0")))).collect()
    assert (row["problem"], row["node"], row["peer"]) == ("channel state", "b", "a")
    assert "1 worth 30.0 were in flight" in row["detail"]


def test_a_node_that_never_records_is_caught(spark: SparkSession) -> None:
    events = [*bank(), event("c", 0.1, "snapshot", "marker", peer="a", snapshot="s1")]
    found = snapshot.consistency(events_frame(spark, events)).collect()
    assert [(r["problem"], r["node"]) for r in found] == [("missing local state", "c")]


def test_without_a_declared_total_snapshots_must_agree(spark: SparkSession) -> None:
    events = [e for e in bank() if e.kind != "channel_state"]
    events = [
        event(
            e.node,
            e.t,
            e.layer,
            e.kind,
            msg=e.msg,
            peer=e.peer,
            **{k: v for k, v in e.attrs.items() if k != "total"},
        )
        for e in events
    ]
    events += [
        event("a", 2.0, "snapshot", "local_state", snapshot="s2", value="50"),
        event("b", 2.0, "snapshot", "local_state", snapshot="s2", value="150"),
        event("a", 3.0, "snapshot", "local_state", snapshot="s3", value="60"),
        event("b", 3.0, "snapshot", "local_state", snapshot="s3", value="140"),
    ]
    # s1 lost the 30 in flight (no channel state): 170 against the usual 200.
    (row,) = snapshot.invariant(events_frame(spark, events)).collect()
    assert (row["snapshot"], row["total"], row["expected"]) == ("s1", 170.0, 200.0)


def test_a_crashed_member_takes_its_share_with_it(spark: SparkSession) -> None:
    # Three accounts of 100 (declared total 300); c crashes at 1.5 with its 100.
    events = [
        event(n, 1.0, "snapshot", "local_state", snapshot="s1", value="100", total="300")
        for n in ("a", "b", "c")
    ]
    events.append(event("c", 1.5, "net", "fault", fault="crash"))
    for s, t, (va, vb) in (("s2", 2.0, (120, 80)), ("s3", 3.0, (90, 110)), ("s4", 4.0, (90, 90))):
        events += [
            event("a", t, "snapshot", "local_state", snapshot=s, value=str(va), total="300"),
            event("b", t, "snapshot", "local_state", snapshot=s, value=str(vb), total="300"),
        ]
    # s2 and s3 hold the survivors' 200; s4 lost 20 of it, which no crash explains.
    rows = snapshot.invariant(events_frame(spark, events)).collect()
    assert [(r["snapshot"], r["total"], r["expected"]) for r in rows] == [("s4", 180.0, 200.0)]
    shrunk = {
        r["snapshot"]: r["shrunk"]
        for r in snapshot.snapshot_totals(events_frame(spark, events)).collect()
    }
    assert shrunk == {"s1": False, "s2": True, "s3": True, "s4": True}
