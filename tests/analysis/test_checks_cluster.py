"""Cluster checkers on small synthetic traces: views, rejoins, routing across nodes."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import Row, SparkSession

from gossamer.analysis.checks import cluster
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark


def view(node: str, t: float, view_id: int, members: str) -> TraceEvent:
    return event(node, t, "views", "view_change", seq=view_id, members=members)


def formed() -> list[TraceEvent]:
    """h1 founds, h2 joins: both install view 2 of h1#1,h2#1."""
    return [
        view("h1", 0.0, 1, "h1#1"),
        view("h1", 0.5, 2, "h1#1,h2#1"),
        view("h2", 0.5, 2, "h1#1,h2#1"),
    ]


def problems(rows: list[Row]) -> list[tuple[str, str]]:
    return sorted((r["problem"], r["node"]) for r in rows)


def test_agreed_views_hold(spark: SparkSession) -> None:
    assert cluster.view_agreement(events_frame(spark, formed())).count() == 0


def test_different_members_a_skipped_view_and_a_view_without_itself_are_caught(
    spark: SparkSession,
) -> None:
    events = [
        *formed()[:2],
        view("h2", 0.5, 2, "h1#1,h2#1,h3#1"),  # h2 installs view 2 with other members
        view("h1", 1.0, 4, "h1#1,h2#1"),  # h1 skips view 3
        view("h3", 1.0, 5, "h1#1"),  # h3 installs a view without itself
    ]
    rows = cluster.view_agreement(events_frame(spark, events)).collect()
    assert problems(rows) == [
        ("different members", "h1"),
        ("different members", "h2"),
        ("not one after the other", "h1"),
        ("without itself", "h3"),
    ]


def restarted(*rejoined: TraceEvent) -> list[TraceEvent]:
    return [
        *formed(),
        event("h2", 5.0, "net", "fault", fault="crash"),
        view("h1", 7.0, 3, "h1#1"),
        event("h2", 9.0, "net", "fault", fault="restart"),
        *rejoined,
    ]


def test_a_restarted_node_that_rejoins_as_a_new_incarnation_holds(spark: SparkSession) -> None:
    events = restarted(view("h1", 10.0, 4, "h1#1,h2#2"), view("h2", 10.0, 4, "h1#1,h2#2"))
    assert cluster.rejoin(events_frame(spark, events)).count() == 0


def test_a_restart_that_never_rejoins_or_rejoins_alone_is_caught(spark: SparkSession) -> None:
    # Back in only its old incarnation's view (a stale line): no new incarnation.
    never = cluster.rejoin(events_frame(spark, restarted(view("h2", 10.0, 2, "h1#1,h2#1"))))
    assert problems(never.collect()) == [("never rejoined", "h2")]
    alone = cluster.rejoin(events_frame(spark, restarted(view("h2", 10.0, 1, "h2#2"))))
    assert problems(alone.collect()) == [("rejoined alone", "h2")]


def ready(client: str, t: float = 1.0) -> TraceEvent:
    host = client.split("-", 1)[0]
    return event(f"{host}-clients", t, "gateway", "client_ready", client=f"lab/{client}")


def send(client: str, t: float, nonce: str, kind: str) -> TraceEvent:
    host = client.split("-", 1)[0]
    return event(f"{host}-clients", t, "gateway", "client_send", msg=nonce, type=kind,
                 client=f"lab/{client}")


def recv(client: str, t: float, nonce: str, kind: str) -> TraceEvent:
    host = client.split("-", 1)[0]
    return event(f"{host}-clients", t, "gateway", "client_recv", msg=nonce, type=kind,
                 client=f"lab/{client}")


def query(client: str, t: float, nonce: str, result: str) -> TraceEvent:
    host = client.split("-", 1)[0]
    return event(f"{host}-clients", t, "gateway", "client_query", msg=nonce,
                 client=f"lab/{client}", result=result)


B = "h1-g1-1/BROADCAST/group=g0/1"
S = "h1-g0-0/SEND/host=h2/2"
Q = "h2-g0-0/QUERY/group=g1/3"


def routed(*changes: TraceEvent, without: tuple[str, str] | None = None) -> list[TraceEvent]:
    """Two nodes, two clients each; a BROADCAST to g0, a SEND to h2, a QUERY of g1."""
    events = [
        *formed(),
        *(ready(c) for c in ("h1-g0-0", "h1-g1-1", "h2-g0-0", "h2-g1-1")),
        send("h1-g1-1", 5.0, B, "BROADCAST"),
        recv("h1-g0-0", 5.01, B, "BROADCAST"),
        recv("h2-g0-0", 5.02, B, "BROADCAST"),
        send("h1-g0-0", 6.0, S, "SEND"),
        recv("h2-g1-1", 6.02, S, "SEND"),
        query("h2-g0-0", 7.0, Q, "lab/h1-g1-1,lab/h2-g1-1"),
        *changes,
    ]
    if without is not None:
        events = [e for e in events if not (e.kind == "client_recv" and
                                            (e.msg, e.attrs["client"]) == without)]
    return events


def found(spark: SparkSession, events: list[TraceEvent]) -> list[tuple[str, str, str | None]]:
    rows = cluster.routing(events_frame(spark, events)).collect()
    return sorted((r["problem"], r["msg"], r["client"]) for r in rows)


def test_routing_across_nodes_holds(spark: SparkSession) -> None:
    assert found(spark, routed()) == []


def test_a_lost_broadcast_and_a_lost_send_are_caught(spark: SparkSession) -> None:
    assert found(spark, routed(without=(B, "lab/h2-g0-0"))) == [
        ("not received", B, "h2-g0-0")
    ]
    assert found(spark, routed(without=(S, "lab/h2-g1-1"))) == [("not received", S, None)]


def test_a_loss_while_a_node_crashes_or_is_cut_off_is_excused(spark: SparkSession) -> None:
    crash = event("h2", 5.5, "net", "fault", fault="crash")
    assert found(spark, routed(crash, without=(B, "lab/h2-g0-0"))) == []
    cut = event("h2", 4.0, "net", "fault", fault="partition", hosts="h2")
    assert found(spark, routed(cut, without=(S, "lab/h2-g1-1"))) == []
    # A client that had only just connected (within the warm-up) is not owed it either.
    late = [e for e in routed(without=(B, "lab/h2-g0-0"))
            if not (e.kind == "client_ready" and e.attrs["client"] == "lab/h2-g0-0")]
    assert found(spark, [*late, ready("h2-g0-0", 4.5)]) == []


def test_duplicates_misrouting_and_wrong_answers_are_caught(spark: SparkSession) -> None:
    events = routed(
        recv("h2-g0-0", 5.03, B, "BROADCAST"),  # twice
        recv("h1-g1-1", 5.03, B, "BROADCAST"),  # in g1: does not match group=g0
        recv("h2-g0-0", 6.03, S, "SEND"),  # a SEND reaching a second client
    )
    assert found(spark, events) == [
        ("received by several", S, None),
        ("received twice", B, "h2-g0-0"),
        ("unmatched client", B, "h1-g1-1"),
    ]
    wrong = [e for e in routed() if e.kind != "client_query"]
    wrong.append(query("h2-g0-0", 7.0, Q, "lab/h1-g1-1,lab/h1-g0-0"))
    assert found(spark, wrong) == [
        ("missing from answer", Q, "h2-g1-1"),
        ("unmatched in answer", Q, "h1-g0-0"),
    ]
