"""Gateway checkers: routing to matching clients, and queues that lose nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import gateway
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark


def routed() -> list[TraceEvent]:
    return [
        # SEND: the query matched c1 and c2; c2 was chosen.
        event("gw", 1.0, "gateway", "route", msg="m1", matched="c1,c2", targets="c2"),
        event("gw", 1.1, "gateway", "deliver", msg="m1", peer="c2"),
        # BROADCAST to everything that matched, no explicit targets.
        event("gw", 2.0, "gateway", "route", msg="m2", matched="c1,c3"),
        event("gw", 2.1, "gateway", "deliver", msg="m2", peer="c1"),
        event("gw", 2.1, "gateway", "deliver", msg="m2", peer="c3"),
        # A query that matched nobody routes nowhere, and that is fine.
        event("gw", 3.0, "gateway", "route", msg="m3", matched=""),
    ]


def test_routing_to_chosen_clients_holds(spark: SparkSession) -> None:
    assert gateway.routing(events_frame(spark, routed())).count() == 0


def test_delivery_to_an_unmatched_client_and_a_missed_target_are_caught(
    spark: SparkSession,
) -> None:
    events = [e for e in routed() if not (e.msg == "m1" and e.kind == "deliver")]
    events.append(event("gw", 1.2, "gateway", "deliver", msg="m1", peer="c9"))
    found = sorted(
        (r["problem"], r["msg"], r["client"])
        for r in gateway.routing(events_frame(spark, events)).collect()
    )
    assert found == [("not delivered", "m1", "c2"), ("unmatched client", "m1", "c9")]


def test_in_a_cluster_only_targets_on_the_routing_node_are_owed(spark: SparkSession) -> None:
    # Node a routes m1 to c1 (connected to a) and c2 (connected to b); b was killed
    # before delivering: c2 is gateway.cluster_routing's to judge, c1 is still owed here.
    events = [
        event("a", 0.5, "gateway", "peer_up", peer="c1"),
        event("b", 0.5, "gateway", "peer_up", peer="c2"),
        event("a", 1.0, "gateway", "route", msg="m1", matched="c1,c2", targets="c1,c2"),
    ]
    rows = gateway.routing(events_frame(spark, events)).collect()
    found = [(r["msg"], r["client"]) for r in rows]
    assert found == [("m1", "c1")]
    events.append(event("a", 1.1, "gateway", "deliver", msg="m1", peer="c1"))
    assert gateway.routing(events_frame(spark, events)).count() == 0


def queue(*ev: TraceEvent) -> list[TraceEvent]:
    return [
        event("gw", 1.0, "gateway", "enqueue", msg="q1", queue="jobs"),
        event("gw", 1.1, "gateway", "deliver", msg="q1", peer="c1"),
        event("gw", 2.0, "gateway", "redeliver", msg="q1", peer="c2"),
        event("gw", 2.5, "gateway", "ack", msg="q1", queue="jobs"),
        event("gw", 3.0, "gateway", "enqueue", msg="q2", queue="jobs"),
        event("gw", 4.0, "gateway", "dead_letter", msg="q2", queue="jobs"),
        *ev,
    ]


def test_acked_and_dead_lettered_messages_hold(spark: SparkSession) -> None:
    assert gateway.queues(events_frame(spark, queue())).count() == 0


def test_a_lost_message_and_a_redelivery_after_ack_are_caught(spark: SparkSession) -> None:
    events = queue(
        event("gw", 5.0, "gateway", "enqueue", msg="q3", queue="mail"),
        event("gw", 6.0, "gateway", "redeliver", msg="q1", peer="c3"),
    )
    found = sorted(
        (r["problem"], r["msg"], r["queue"])
        for r in gateway.queues(events_frame(spark, events)).collect()
    )
    assert found == [("delivered after ack", "q1", "jobs"), ("lost", "q3", "mail")]
