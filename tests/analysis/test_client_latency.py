"""End-to-end gateway latency from the clients' traces, and the client_delivery check.

Small synthetic runs whose latencies the test knows: a client ``app/a`` on node ``na``
sends, the gateway on ``gw`` routes, clients ``app/a`` and ``app/b`` (on ``nb``) receive.
The receipts' times minus the send's are the expected latencies, exactly (a histogram's
minimum and maximum are exact).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis import job, report
from gossamer.analysis.checks import gateway
from gossamer.analysis.client_latency import client_latencies
from gossamer.analysis.frames import event, events_frame
from gossamer.sim.run import SimRequest, run_simulation
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark


def ready(node: str, client: str, t: float = 0.1) -> TraceEvent:
    return event(node, t, "gateway", "client_ready", client=client, reconnect="false")


def send(t: float, msg: str, kind: str, client: str = "app/a", node: str = "na") -> TraceEvent:
    return event(node, t, "gateway", "client_send", msg=msg, type=kind, client=client)


def recv(node: str, t: float, msg: str | None, kind: str, client: str, **attrs: str) -> TraceEvent:
    plain = event(node, t, "gateway", "client_recv", msg=msg)
    return dataclasses.replace(plain, attrs={"type": kind, "client": client, **attrs})


def route(t: float, nonce: str, targets: str, sender: str = "app/a") -> TraceEvent:
    return event("gw", t, "gateway", "route", msg=f"gw/{nonce}", peer=sender, nonce=nonce,
                 matched=targets, targets=targets, type="SEND")


def run_events() -> list[TraceEvent]:
    return [
        ready("na", "app/a"),
        ready("nb", "app/b"),
        # SEND s1 to b: 5 ms end to end (the server's own part is 2 ms).
        send(1.000, "s1", "SEND"),
        route(1.002, "s1", "app/b"),
        event("gw", 1.002, "gateway", "deliver", msg="gw/s1", peer="app/b"),
        recv("nb", 1.005, "s1", "SEND", "app/b"),
        # BROADCAST b1 to a and b: 10 and 20 ms.
        send(2.000, "b1", "BROADCAST"),
        route(2.001, "b1", "app/a,app/b"),
        recv("na", 2.010, "b1", "BROADCAST", "app/a"),
        recv("nb", 2.020, "b1", "BROADCAST", "app/b"),
        # QUEUE q1: first delivered after 500 ms; its redelivery does not count.
        send(3.000, "q1", "QUEUE"),
        recv("nb", 3.500, "q1", "QUEUE", "app/b", id="m1", attempt="1"),
        recv("nb", 4.000, "q1", "QUEUE", "app/b", id="m1", attempt="2"),
        # A nonce two clients chose: ambiguous, left out.
        send(5.000, "dup", "SEND"),
        send(5.000, "dup", "SEND", client="app/b", node="nb"),
        recv("nb", 5.100, "dup", "SEND", "app/b"),
        # A third-party sender's message, and one without a nonce: they join nothing.
        recv("nb", 6.000, "x1", "SEND", "app/b"),
        recv("nb", 6.100, None, "SEND", "app/b"),
    ]


def test_latency_runs_from_the_client_send_to_each_receipt(spark: SparkSession) -> None:
    rows = client_latencies(events_frame(spark, run_events())).collect()
    got = sorted((r["layer"], r["node"], r["client"], r["msg"], round(r["latency"], 9))
                 for r in rows)
    assert got == [
        ("BROADCAST", "na", "app/a", "b1", 0.01),
        ("BROADCAST", "nb", "app/b", "b1", 0.02),
        ("QUEUE", "nb", "app/b", "q1", 0.5),
        ("SEND", "nb", "app/b", "s1", 0.005),
    ]


def test_tables_label_both_figures_and_the_report_shows_them(spark: SparkSession) -> None:
    events = events_frame(spark, run_events())
    latency = job.latency_tables(events, broadcast_origins=True)
    tables = job._gateway_end_to_end(job.client_latency_tables(events), latency)
    by_type = {r["type"]: r for r in tables["by_type"]}
    assert {k: r["count"] for k, r in by_type.items()} == {"BROADCAST": 2, "QUEUE": 1, "SEND": 1}
    assert by_type["BROADCAST"]["p50"] == pytest.approx(0.01, rel=0.01)  # a bucket's value
    assert by_type["BROADCAST"]["max"] == pytest.approx(0.02)
    assert by_type["SEND"]["p50"] == pytest.approx(0.005)
    assert tables["label"] == "end to end, client to client"
    inside = tables["inside_the_server"]
    assert inside["label"] == "inside the server: route to hand-over"
    assert inside["count"] == 1 and inside["max"] == pytest.approx(0.0)  # route to deliver
    summary = {"metrics": {"latency": {**latency, "gateway_end_to_end": tables}}}
    lines = report.gateway_latency_lines(summary)
    assert lines[-1] == (
        "latency gateway SEND (end to end, client to client): p50 5.0 ms, p99 5.0 ms, "
        "max 5.0 ms over 1 receipts"
    )
    html = "".join(report._gateway_latency_html(summary["metrics"]))
    assert "SEND end to end, client to client" in html
    assert "inside the server: route to hand-over" in html
    assert report._gateway_latency_plot(summary["metrics"])  # the CDF chart is drawn


def missing(spark: SparkSession, events: list[TraceEvent]) -> list[tuple[str, str]]:
    frame = events_frame(spark, events)
    found = sorted((r["msg"], r["client"]) for r in gateway.client_delivery(frame).collect())
    # The linear pre-check (empty only if the check holds) sees at least what it reports.
    suspects = {(r["msg"], r["client"]) for r in gateway.unreceived(frame).collect()}
    assert suspects >= set(found)
    return found


def test_client_delivery_holds_and_catches_a_lost_receipt(spark: SparkSession) -> None:
    events = run_events()
    assert missing(spark, events) == []
    assert gateway.unreceived(events_frame(spark, events)).count() == 0
    lost = [e for e in events if not (e.kind == "client_recv" and e.msg == "s1")]
    assert missing(spark, lost) == [("s1", "app/b")]
    # A target that does not trace is not expected to show a receipt.
    untraced = [e for e in lost if not (e.kind == "client_ready" and e.node == "nb")]
    assert missing(spark, untraced) == []
    # Nor one tracing into a node that crashed, or routed by a gateway that crashed.
    for node in ("nb", "gw"):
        crash = event(node, 9.0, "net", "fault", fault="crash")
        assert missing(spark, [*lost, crash]) == []


def test_a_receipt_lost_with_its_connection_is_excused_unless_later_ones_came(
    spark: SparkSession,
) -> None:
    lost = [e for e in run_events() if not (e.kind == "client_recv" and e.msg == "s1")]
    down = event("gw", 2.5, "gateway", "peer_down", peer="app/b", reason="closed")
    # b's connection ended at 2.5, but b1, routed after s1 (2.001), reached it before:
    # one connection delivers in order, so s1 was lost while the connection was up.
    assert missing(spark, [*lost, down]) == [("s1", "app/b")]
    # Its connection ended at 1.5, before anything routed later: lost with it.
    early = event("gw", 1.5, "gateway", "peer_down", peer="app/b", reason="closed")
    assert missing(spark, [*lost, early]) == []


def test_a_simulated_gateway_run_has_end_to_end_latency_and_no_lost_receipt(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The simulator's clients trace through their cores; a reset and a partition past
    # the heartbeat deadline close connections with messages on their way.
    out = tmp_path / "run"
    run_simulation(SimRequest(scenario="gateway", nodes=5, seed=2, out=out, duration=20.0,
                              params={"reset": "n2@4", "partition": "n3@5-9"}))
    analysis = job.analyze(spark, str(out), str(tmp_path / "report"))
    checks = {c.name: c for c in analysis.checks}
    assert checks["gateway.client_delivery"].status == "pass"
    assert checks["gateway.routing"].status == "pass"
    e2e = analysis.summary["metrics"]["latency"]["gateway_end_to_end"]
    counts = {r["type"]: r["count"] for r in e2e["by_type"]}
    assert counts["SEND"] > 0 and counts["BROADCAST"] > counts["SEND"]
    inside = e2e["inside_the_server"]["p50"]
    assert all(r["p50"] > inside for r in e2e["by_type"])  # the websockets add to it
    assert "end to end, client to client" in Path(analysis.report_path).read_text()
