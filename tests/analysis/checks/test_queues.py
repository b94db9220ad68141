"""Queue checkers on small hand-made traces: each holds on a good run and catches a bad one."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import queues
from gossamer.analysis.checks.common import UNFINISHED
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark

P, C = "h1-clients", "h2-clients"  # the producer's and the consumer's client apps


def push(t: float, nonce: str, node: str = "h1") -> TraceEvent:
    return event(P, t, "queue", "push", msg=nonce, client="h1-q0", host=node)


def confirm(t: float, msg: str, nonce: str, node: str = "h1") -> TraceEvent:
    return event(P, t, "queue", "confirm", msg=msg, nonce=nonce, client="h1-q0", host=node)


def receive(t: float, msg: str, consumer: str = "h2-q0", attempt: int = 1,
            node: str = "h2") -> TraceEvent:
    app = C if node == "h2" else f"{node}-clients"
    return event(app, t, "queue", "receive", msg=msg, consumer=consumer, host=node,
                 attempt=str(attempt))


def ack(t: float, msg: str, consumer: str = "h2-q0", attempt: int = 1,
        node: str = "h2") -> TraceEvent:
    app = C if node == "h2" else f"{node}-clients"
    return event(app, t, "queue", "ack", msg=msg, consumer=consumer, host=node,
                 attempt=str(attempt))


def applied(t: float, msg: str, node: str = "h2") -> TraceEvent:
    """A daemon applied an ack (``queue``/``ack``, no ``attrs.host``)."""
    return event(node, t, "queue", "ack", msg=msg, queue="jobs")


def view(node: str, t: float, view_id: int, members: str = "h1#1,h2#1,h3#1") -> TraceEvent:
    return event(node, t, "views", "view_change", seq=view_id, members=members)


def stop(node: str, t: float) -> TraceEvent:
    return event(node, t, "net", "stop")


def test_confirmed_messages_must_be_received_and_acked(spark: SparkSession) -> None:
    good = [
        push(1.0, "n1"), confirm(1.1, "m1", "n1"), receive(1.2, "m1"), ack(1.3, "m1"),
        applied(1.35, "m1"),
        push(2.0, "n2"),  # indeterminate: never answered, nothing owed
        stop(P, 30.0), stop(C, 30.0),
    ]
    assert queues.confirmed_delivered(events_frame(spark, good)).count() == 0
    bad = [
        *good,
        push(3.0, "n3"), confirm(3.1, "m3", "n3"),  # lost
        # Received, and acked by a client whose node refused the ack: never acked.
        push(4.0, "n4"), confirm(4.1, "m4", "n4"), receive(4.2, "m4"), ack(4.3, "m4"),
        push(25.0, "n5"), confirm(25.1, "m5", "n5"),  # confirmed 4.9 s before the stop
    ]
    rows = queues.confirmed_delivered(events_frame(spark, bad)).collect()
    found = sorted((r["problem"], r["msg"], r[UNFINISHED]) for r in rows)
    assert found == [("lost", "m3", False), ("lost", "m5", True), ("never acked", "m4", False)]
    # Consumers still busy when they stopped: what is missing is unfinished, not lost.
    busy = [*bad, receive(29.0, "m9")]
    rows = queues.confirmed_delivered(events_frame(spark, busy)).collect()
    assert sorted(r[UNFINISHED] for r in rows) == [True, True, True]


def test_a_delivery_after_the_ack_was_applied_is_caught(spark: SparkSession) -> None:
    base = [
        receive(1.0, "m1"),
        ack(1.1, "m1"),
        applied(1.15, "m1"),
        # Attempt 1 again, late (a dispatch written after a freeze): not a new delivery.
        receive(5.0, "m1", consumer="h3-q0", node="h3"),
    ]
    assert queues.no_redelivery_after_ack(events_frame(spark, base)).count() == 0
    bad = [*base, receive(20.0, "m1", consumer="h3-q0", attempt=2, node="h3")]
    rows = queues.no_redelivery_after_ack(events_frame(spark, bad)).collect()
    assert [(r["problem"], r["msg"], r["consumer"]) for r in rows] == [
        ("delivered after ack", "m1", "h3-q0")
    ]
    # Without an applied ack (the acker's node died first) a redelivery is owed, not wrong.
    unstored = [e for e in bad if e.node != "h2"]
    assert queues.no_redelivery_after_ack(events_frame(spark, unstored)).count() == 0


def test_two_consumers_holding_one_message_are_caught_unless_one_is_cut_off(
    spark: SparkSession,
) -> None:
    views = [view(h, 0.0, 1) for h in ("h1", "h2", "h3")]
    handed_on = [
        *views,
        receive(1.0, "m1"), ack(1.5, "m1"),  # h2-q0 acked before anyone else got it
        receive(2.0, "m2"),
        receive(20.0, "m2", consumer="h3-q0", attempt=2, node="h3"),  # after the ack timeout
    ]
    assert queues.no_double_holding(events_frame(spark, handed_on)).count() == 0
    twice = [
        *views,
        receive(1.0, "m1"),
        receive(2.0, "m1", consumer="h3-q0", attempt=2, node="h3"),  # h2-q0 still holds it
        receive(3.0, "m3"),
        receive(3.1, "m3", consumer="h3-q0", node="h3"),  # the same attempt, twice
    ]
    rows = queues.no_double_holding(events_frame(spark, twice)).collect()
    found = sorted((r["problem"], r["msg"], r["consumer"]) for r in rows)
    assert found == [
        ("held twice", "m1", "h3-q0"),
        ("held twice", "m3", "h3-q0"),
        ("one attempt twice", "m3", "h3-q0"),
    ]
    # h2 was cut off (a minority) meanwhile: the majority rightly handed m1 on.
    cut = [
        *twice[:5],
        event("h2", 1.2, "net", "fault", fault="partition", hosts="h2"),
        event("h2", 9.0, "net", "fault", fault="heal", hosts="h2"),
    ]
    assert queues.no_double_holding(events_frame(spark, cut)).count() == 0


def test_a_confirm_from_a_node_outside_the_majority_is_caught(spark: SparkSession) -> None:
    views = [view(h, 0.0, 1) for h in ("h1", "h2", "h3")]
    minority = [
        *views,
        event("h1", 5.0, "views", "blocked", seq=1, reachable="h1"),
        event("h1", 12.0, "views", "view_change", seq=2, members="h1#1,h2#1,h3#1"),
        push(4.0, "n1"), confirm(5.2, "m1", "n1"),  # pushed before: it may have been stored
        push(6.0, "n2"), event(P, 6.01, "queue", "refused", msg="n2", reason="no_majority",
                               client="h1-q0", host="h1"),
        push(7.0, "n3"), confirm(13.0, "m3", "n3"),  # confirmed once back in a view
    ]
    assert queues.minority_refused(events_frame(spark, minority)).count() == 0
    bad = [*minority, push(8.0, "n4"), confirm(8.1, "m4", "n4")]
    rows = queues.minority_refused(events_frame(spark, bad)).collect()
    assert [(r["problem"], r["msg"]) for r in rows] == [("confirmed in minority", "m4")]
    # A cut of one host of three makes it a minority even before it notices.
    cut = [
        *views,
        event("h1", 5.0, "net", "fault", fault="partition", hosts="h1"),
        event("h1", 9.0, "net", "fault", fault="heal", hosts="h1"),
        push(6.0, "n5"), confirm(6.1, "m5", "n5"),
    ]
    rows = queues.minority_refused(events_frame(spark, cut)).collect()
    assert [r["msg"] for r in rows] == ["m5"]
