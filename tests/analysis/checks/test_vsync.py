"""Virtual-synchrony checkers on a tiny run on agreed views: each holds, each mutation is caught."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import vsync
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark

V1 = "a#1,b#1"
V2 = "a#1,b#1,c#1"


def view(node: str, t: float, view_id: int, members: str) -> TraceEvent:
    return event(node, t, "views", "view_change", seq=view_id, members=members)


def sent(node: str, t: float, msg: str, digest: str) -> TraceEvent:
    return event(node, t, "isis", "multicast", msg=msg, digest=digest)


def got(node: str, t: float, msg: str) -> TraceEvent:
    return event(node, t, "isis", "deliver", msg=msg)


def run(*, late_at_b: bool = False, extra: tuple[TraceEvent, ...] = ()) -> list[TraceEvent]:
    """a and b found view 1 and deliver a#1/1 in it; b withdraws b#1/1 at the change (a
    discard everywhere) and multicasts its data again as b#1/2 (``withdraw`` names it
    ``as``); c joins in view 2, where
    all three deliver b#1/2; a and b then move on to view 3. With ``late_at_b`` b delivers
    a#1/1 only after installing view 2."""
    b_first = [got("b", 1.5, "a#1/1")] if not late_at_b else []
    b_late = [got("b", 2.1, "a#1/1")] if late_at_b else []
    return [
        view("a", 1.0, 1, V1),
        sent("a", 1.1, "a#1/1", "d1"),
        got("a", 1.2, "a#1/1"),
        event("a", 1.8, "isis", "discard", msg="b#1/1"),
        view("a", 2.0, 2, V2),
        got("a", 2.5, "b#1/2"),
        view("a", 3.0, 3, V2),
        view("b", 1.0, 1, V1),
        *b_first,
        sent("b", 1.6, "b#1/1", "d2"),
        event("b", 1.8, "isis", "withdraw", msg="b#1/1", **{"as": "b#1/2"}),
        event("b", 1.8, "isis", "discard", msg="b#1/1"),
        view("b", 2.0, 2, V2),
        *b_late,
        sent("b", 2.2, "b#1/2", "d2"),
        got("b", 2.5, "b#1/2"),
        view("b", 3.0, 3, V2),
        view("c", 2.0, 2, V2),
        got("c", 2.5, "b#1/2"),
        *extra,
    ]


def test_a_run_that_keeps_virtual_synchrony_passes_both(spark: SparkSession) -> None:
    df = events_frame(spark, run())
    assert vsync.view_agreement(df).count() == 0
    assert vsync.view_validity(df).count() == 0


def test_a_message_of_view_1_delivered_in_view_2_breaks_view_agreement(
    spark: SparkSession,
) -> None:
    rows = vsync.view_agreement(events_frame(spark, run(late_at_b=True))).collect()
    found = sorted(
        (r["view"], r["msg"], r["delivered_by"], r["missing"], r["detail"]) for r in rows
    )
    # a and b both moved from view 1 to 2, and from 2 to 3: each view's sets differ. c
    # joined in view 2 and never installed view 3: it is owed nothing.
    assert [f[:4] for f in found] == [
        (1, "a#1/1", ["a#1"], ["b#1 (in view 2)"]),
        (2, "a#1/1", ["b#1"], ["a#1 (in view 1)"]),
    ]
    assert "though each installed view 1 and then 2" in found[0][4]


def test_view_validity_owes_a_staying_sender_its_messages_unless_unfinished(
    spark: SparkSession,
) -> None:
    lost = sent("a", 2.6, "a#1/2", "d3")  # a stays to the end and never delivers it
    dropped = sent("c", 2.6, "c#1/1", "d4")  # c withdraws it and never sends it again:
    withdrawn = event("c", 2.7, "isis", "withdraw", msg="c#1/1", **{"as": "c#1/2"})
    # c#1/5 carries the same data (digest d4) but is another message, not c#1/2.
    same_data = (sent("c", 2.9, "c#1/5", "d4"), got("c", 3.0, "c#1/5"))
    crashed = (sent("b", 2.6, "b#1/3", "d5"), event("b", 3.5, "net", "fault", fault="crash"))
    stopping = (
        sent("a", 3.1, "a#1/3", "d6"),
        event("a", 4.0, "net", "stop"),
        event("a", 4.5, "isis", "sequence", msg="a#1/3", seq=9, proposer="1"),
    )
    events = run(extra=(lost, dropped, withdrawn, *same_data, *crashed, *stopping))
    found = sorted(
        (r["node"], r["msg"], r["unfinished"], r["detail"])
        for r in vsync.view_validity(events_frame(spark, events)).collect()
    )
    assert [f[:3] for f in found] == [
        ("a", "a#1/2", False),
        ("a", "a#1/3", True),
        ("c", "c#1/1", False),
    ]
    assert found[1][3].endswith("unfinished at its clean stop (ordered only after it stopped)")
    assert found[2][3].endswith("withdrew it and never multicast its data again")
    # Cut off to the end of the run, a may never hear of its exclusion: owed nothing.
    cut = event("a", 2.55, "net", "fault", fault="partition", hosts="a")
    events = [*events, cut]
    kept = vsync.view_validity(events_frame(spark, events)).collect()
    assert [(r["node"], r["msg"]) for r in kept] == [("c", "c#1/1")]
