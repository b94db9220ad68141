"""Link checkers: exactly-once delivery per link, and credit flow control."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import link
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark


def pushes(
    n: int = 3, *, credits: str = "2", extra: tuple[TraceEvent, ...] = ()
) -> list[TraceEvent]:
    """p pushes n messages to q over link L; q grants one credit back after each take."""
    ev = [
        event("p", 0.0, "link", "link_up", peer="q", link="L", credits=credits),
        event("q", 0.0, "link", "link_up", peer="p", link="L"),
    ]
    for i in range(n):
        ev.append(event("p", 1.0 + i, "link", "send", msg=f"p/L/{i}", peer="q", link="L"))
        ev.append(event("q", 1.1 + i, "link", "deliver", msg=f"p/L/{i}", peer="p", link="L"))
        ev.append(event("p", 1.2 + i, "link", "credit", peer="q", link="L", amount="1"))
    return [*ev, *extra]


def test_every_message_delivered_once_holds(spark: SparkSession) -> None:
    df = events_frame(spark, pushes())
    assert link.delivery(df).count() == 0
    assert link.delivery_suspects(df).count() == 0
    assert link.credit(df).count() == 0


def test_lost_duplicated_and_invented_messages_are_caught(spark: SparkSession) -> None:
    events = [e for e in pushes() if not (e.kind == "deliver" and e.msg == "p/L/1")]
    events += [
        event("q", 9.0, "link", "deliver", msg="p/L/2", peer="p", link="L"),
        event("q", 9.5, "link", "deliver", msg="x/L/7", peer="p", link="L"),
    ]
    found = sorted(
        (r["problem"], r["msg"], r["count"])
        for r in link.delivery(events_frame(spark, events)).collect()
    )
    assert found == [("duplicate", "p/L/2", 2), ("lost", "p/L/1", 0), ("never sent", "x/L/7", 1)]
    # The linear pre-check (empty only if delivery holds) points at each of them.
    suspects = link.delivery_suspects(events_frame(spark, events)).collect()
    assert sorted(r["msg"] for r in suspects) == ["p/L/1", "p/L/2", "x/L/7"]


def test_messages_to_a_crashed_receiver_may_be_lost(spark: SparkSession) -> None:
    events = [e for e in pushes() if e.kind != "deliver"] + [
        event("q", 0.5, "net", "fault", fault="crash")
    ]
    assert link.delivery(events_frame(spark, events)).count() == 0
    assert link.delivery_suspects(events_frame(spark, events)).count() == 0


def test_sending_beyond_the_credit_is_caught(spark: SparkSession) -> None:
    # One initial credit, and no grant arrives before the second send.
    events = [
        event("p", 0.0, "link", "link_up", peer="q", link="L", credits="1"),
        event("p", 1.0, "link", "send", msg="m0", peer="q", link="L"),
        event("p", 2.0, "link", "send", msg="m1", peer="q", link="L"),
        event("p", 3.0, "link", "credit", peer="q", link="L", amount="5"),
    ]
    (row,) = link.credit(events_frame(spark, events)).collect()
    assert (row["msg"], row["used"], row["granted"]) == ("m1", 2, 1)


def test_negative_grants_and_new_incarnations_follow_the_credit_rules(spark: SparkSession) -> None:
    # The notes' example, shortened: capacity lowered (-2) blocks the sender until
    # grants bring the balance back; a new link_up starts a fresh count.
    events = [
        event("p", 0.0, "link", "link_up", peer="q", link="L", credits="2"),
        event("p", 0.1, "link", "send", msg="m0", peer="q", link="L"),
        event("p", 0.2, "link", "credit", peer="q", link="L", amount="-2"),
        event("p", 0.3, "link", "send", msg="m1", peer="q", link="L"),
        event("p", 1.0, "link", "link_up", peer="q", link="L", credits="1"),
        event("p", 1.1, "link", "send", msg="m2", peer="q", link="L"),
    ]
    found = link.credit(events_frame(spark, events)).collect()
    assert [(r["msg"], r["used"], r["granted"]) for r in found] == [("m1", 2, 0)]
    # Links without any credit information are not judged.
    bare = [e for e in events if e.kind == "send"]
    assert link.credit(events_frame(spark, bare)).count() == 0


def test_a_message_in_flight_when_its_link_ended_at_a_clean_stop_is_unfinished(
    spark: SparkSession,
) -> None:
    # p sent p/L/2; q stopped cleanly and unlinked before delivering it; p saw the link end.
    events = [e for e in pushes() if not (e.kind == "deliver" and e.msg == "p/L/2")] + [
        event("q", 3.15, "net", "stop"),
        event("p", 3.3, "link", "link_down", peer="q", link="L", reason="unlinked"),
    ]
    rows = link.delivery(events_frame(spark, events)).collect()
    assert [(r["problem"], r["msg"], r["unfinished"]) for r in rows] == [("lost", "p/L/2", True)]
    # Without the clean stop the same message is lost.
    crashed = [e for e in events if e.layer != "net"]
    rows = link.delivery(events_frame(spark, crashed)).collect()
    assert [(r["problem"], r["msg"], r["unfinished"]) for r in rows] == [("lost", "p/L/2", False)]
