"""Metrics: latencies, traffic, faults and timelines on a small hand-made run."""

from __future__ import annotations

import math
import random

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import DataFrame, SparkSession

from gossamer.analysis import metrics
from gossamer.analysis.frames import event, events_frame
from gossamer.trace.schema import TraceEvent

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def run(spark: SparkSession) -> DataFrame:
    ev = [
        # ISIS: m1 multicast at 0, delivered at 0.010 (n0) and 0.030 (n1).
        event("n0", 0.0, "isis", "multicast", msg="m1"),
        event("n0", 0.0, "isis", "send", msg="m1", peer="n1", size=20),
        event("n1", 0.005, "isis", "recv", msg="m1", peer="n0", size=20),
        event("n0", 0.010, "isis", "deliver", msg="m1", seq=1),
        event("n1", 0.030, "isis", "deliver", msg="m1", seq=1),
        event("n0", 0.050, "isis", "retransmit", msg="m1", peer="n1"),
        # Discovery: n0 sees n1 at 1.0, loses it at 6.0; n1 sees n0 at 2.0.
        event("n0", 1.0, "discovery", "peer_up", peer="n1"),
        event("n1", 2.0, "discovery", "peer_up", peer="n0"),
        event("n0", 6.0, "discovery", "peer_down", peer="n1"),
        # Faults: two drops and a crash.
        event("n1", 3.0, "net", "fault", peer="n0", size=20, fault="drop"),
        event("n1", 3.5, "net", "fault", peer="n0", size=20, fault="drop"),
        event("n1", 5.0, "net", "fault", fault="crash"),
        event("n1", 10.0, "gossip", "recv", msg="g", peer="n0", hop="2"),
    ]
    return events_frame(spark, ev).cache()


def test_latency_runs_from_the_origin_event_to_each_delivery(run: DataFrame) -> None:
    for broadcast in (False, True):
        got = metrics.latencies(run, broadcast_origins=broadcast).collect()
        lat = {(r["node"], r["msg"]): r["latency"] for r in got}
        assert lat == pytest.approx({("n0", "m1"): 0.010, ("n1", "m1"): 0.030})
    (row,) = metrics.latency_summary(metrics.latencies(run)).collect()
    assert (row["layer"], row["count"]) == ("isis", 2)
    assert row["p50"] == pytest.approx(0.010) and row["max"] == pytest.approx(0.030)
    hist = [r.asDict() for r in metrics.latency_histogram(metrics.latencies(run)).collect()]
    assert sorted((r["node"], r["count"]) for r in hist) == [("n0", 1), ("n1", 1)]
    both = metrics.histogram_summary(hist, points=2)
    assert both["count"] == 2 and both["mean"] == pytest.approx(0.020)
    assert both["quantiles"] == pytest.approx([0.010, 0.010, 0.030], rel=0.01)


def test_histogram_percentiles_are_within_one_percent() -> None:
    rng = random.Random(5)
    values = [rng.lognormvariate(-6, 1.5) for _ in range(20_000)] + [0.0, -1e-3]
    buckets: dict[int, list[float]] = {}
    for v in values:
        b = (
            math.floor(math.log(v / metrics.HISTOGRAM_FLOOR, metrics.HISTOGRAM_BASE))
            if v > 1e-6
            else -1
        )
        buckets.setdefault(b, []).append(v)
    rows = [
        {"bucket": b, "count": len(vs), "total": sum(vs), "low": min(vs), "high": max(vs)}
        for b, vs in buckets.items()
    ]
    stats = metrics.histogram_summary(rows, points=100)
    ordered = sorted(values)
    assert stats["count"] == len(values) and stats["min"] == -1e-3
    assert stats["max"] == ordered[-1] and stats["mean"] == pytest.approx(sum(values) / len(values))
    for k in (1, 10, 50, 90, 99):
        exact = ordered[math.ceil(k / 100 * len(values)) - 1]
        assert stats["quantiles"][k] == pytest.approx(exact, rel=0.0101), k
    assert metrics.histogram_summary([])["count"] == 0


def test_traffic_and_faults_are_counted_per_node(run: DataFrame) -> None:
    t = {(r["layer"], r["node"]): r.asDict() for r in metrics.traffic(run).collect()}
    assert t[("isis", "n0")]["sent"] == 1 and t[("isis", "n0")]["bytes_sent"] == 20
    assert t[("isis", "n0")]["retransmitted"] == 1 and t[("isis", "n1")]["bytes_received"] == 20
    assert t[("isis", "n1")]["delivered"] == 1
    # The gossip receipt carries no size: its bytes are unknown (null), not 0.
    assert t[("gossip", "n1")]["received"] == 1 and t[("gossip", "n1")]["bytes_received"] is None
    faults = {(r["fault"], r["node"]): r["count"] for r in metrics.fault_counts(run).collect()}
    assert faults == {("drop", "n1"): 2, ("crash", "n1"): 1}
    assert [r["fault"] for r in metrics.outage_events(run).collect()] == ["crash"]


def test_timelines_bin_events_over_the_run(run: DataFrame) -> None:
    (span,) = metrics.time_range(run).collect()
    assert (span["t_min"], span["t_max"]) == (0.0, 10.0)
    bins = {
        (r["bin"], r["layer"]): r["events"] for r in metrics.timeline(run, 0.0, 10.0, 10).collect()
    }
    assert bins[(0, "isis")] == 6 and bins[(9, "gossip")] == 1  # t = 10 falls in the last bin
    drops = {r["bin"]: r["count"] for r in metrics.fault_timeline(run, 0.0, 10.0, 10).collect()}
    assert drops == {3: 2}  # per-datagram faults only; the crash is an outage mark
    sizes = {
        (r["node"], r["bin"]): r["size"]
        for r in metrics.membership_timeline(run, 0.0, 10.0, 10).collect()
    }
    assert [sizes[("n0", b)] for b in range(10)] == [0, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    assert [sizes[("n1", b)] for b in range(10)] == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]
    assert [(r["hop"], r["nodes"]) for r in metrics.depth_histogram(run).collect()] == [(2, 1)]


def test_latency_tables_restore_the_adaptive_setting(run: DataFrame) -> None:
    from gossamer.analysis import job

    spark = run.sparkSession
    before = spark.conf.get("spark.sql.adaptive.enabled")
    for broadcast in (True, False):
        tables = job.latency_tables(run, broadcast_origins=broadcast)
        assert [r["count"] for r in tables["by_layer"]] == [2]
        assert spark.conf.get("spark.sql.adaptive.enabled") == before


def _message(sender: str, n: int, t0: float, *delivered: tuple[str, float]) -> list[TraceEvent]:
    """An ISIS message ``<sender>/<n>`` multicast at ``t0`` and delivered as given."""
    msg = f"{sender}/{n}"
    return [
        event(sender, t0, "isis", "multicast", msg=msg),
        *(event(node, t, "isis", "deliver", msg=msg, seq=n) for node, t in delivered),
    ]


#: Each message of ``windowed`` and where it is: outside every window, in the crash
#: window (13 is the LAST survivor's removal; 12 the first's), in the partition window.
PLACES = {
    "n2/1": "outside",  # 5.0-5.2, before anything
    "n2/2": "crash",  # 9.5-10.5: born before the crash, done after it
    "n3/3": "crash",  # 12.5-12.7: after n2 removed n1 (12), before n3 did (13)
    "n2/4": "outside",  # 13.5-13.8: after the last removal, though n4 crashes later
    "n2/5": "partition",  # 19.0-22.1: overlaps the partition's start, done after its heal
    "n3/6": "outside",  # 22.5-22.6: after the heal
}


@pytest.fixture(scope="module")
def windowed(spark: SparkSession) -> DataFrame:
    """n1 (an ISIS member) crashes at 10; n2 drops it from its view at 12, n3 at 13. n2 is
    cut off from 20 to 22. n4 runs no ISIS and crashes at 15: no window of ISIS's."""
    ev = [
        *_message("n2", 1, 5.0, ("n1", 5.05), ("n2", 5.1), ("n3", 5.2)),
        *_message("n2", 2, 9.5, ("n1", 9.6), ("n2", 10.2), ("n3", 10.5)),
        event("n1", 10.0, "net", "fault", fault="crash"),
        event("n2", 12.0, "isis", "view_change", peer="n1", view="n2,n3"),
        *_message("n3", 3, 12.5, ("n2", 12.6), ("n3", 12.7)),
        event("n3", 13.0, "isis", "view_change", peer="n1", view="n2,n3"),
        *_message("n2", 4, 13.5, ("n2", 13.6), ("n3", 13.8)),
        event("n4", 14.0, "discovery", "peer_up", peer="n2"),
        event("n4", 15.0, "net", "fault", fault="crash"),
        *_message("n2", 5, 19.0, ("n2", 19.1), ("n3", 22.1)),
        event("n2", 20.0, "net", "fault", fault="partition"),
        event("n2", 22.0, "net", "fault", fault="heal"),
        *_message("n3", 6, 22.5, ("n2", 22.55), ("n3", 22.6)),
    ]
    return events_frame(spark, ev).cache()


def test_fault_windows_run_from_the_fault_until_the_group_has_dealt_with_it(
    windowed: DataFrame,
) -> None:
    rows = [r.asDict() for r in metrics.fault_windows(windowed).orderBy("start").collect()]
    assert rows == [
        # Until the last correct member (n3, not n2) installed a view without n1.
        {"fault": "crash", "node": "n1", "start": 10.0, "end": 13.0, "last": "n3"},
        {"fault": "partition", "node": "n2", "start": 20.0, "end": 22.0, "last": None},
    ]


def test_a_crash_some_member_never_handles_lasts_to_the_end(spark: SparkSession) -> None:
    ev = [
        event("n1", 1.0, "isis", "multicast", msg="n1/1"),
        event("n2", 1.0, "isis", "multicast", msg="n2/1"),
        event("n3", 1.0, "isis", "multicast", msg="n3/1"),
        event("n1", 2.0, "net", "fault", fault="crash"),
        event("n2", 2.5, "isis", "view_change", peer="n1", view="n2,n3"),
    ]
    (row,) = metrics.fault_windows(events_frame(spark, ev)).collect()
    assert (row["fault"], row["start"], row["end"], row["last"]) == ("crash", 2.0, None, None)


def test_with_agreed_views_only_the_removal_of_the_crashed_incarnation_ends_its_window(
    spark: SparkSession,
) -> None:
    """Daemons: ISIS names members ``<node>#<incarnation>``. n3 was cut off and excluded
    (n1 removed n3#1 at 4), rejoined as n3#2 and crashed at 10; n1 removed n3#2 at 13.
    n2 crashed at 20 and n1 removed n2#1 at 24; n3, crashed, is no survivor."""
    members = "n1#1,n2#1,n3#1"
    ev = [
        event("n1", 1.0, "views", "view_change", seq=1, members=members),
        event("n2", 1.0, "views", "view_change", seq=1, members=members),
        event("n3", 1.0, "views", "view_change", seq=1, members=members),
        *(event(n, 2.0, "isis", "multicast", msg=f"{n}/1") for n in ("n1", "n2", "n3")),
        event("n1", 4.0, "isis", "view_change", peer="n3#1", view="n1#1,n2#1"),
        event("n3", 6.0, "views", "view_change", seq=3, members="n1#1,n2#1,n3#2"),
        event("n3", 10.0, "net", "fault", fault="crash"),
        event("n1", 13.0, "isis", "view_change", peer="n3#2", view="n1#1,n2#1"),
        event("n2", 20.0, "net", "fault", fault="crash"),
        event("n1", 24.0, "isis", "view_change", peer="n2#1", view="n1#1"),
    ]
    windows = metrics.fault_windows(events_frame(spark, ev)).orderBy("start").collect()
    assert [r.asDict() for r in windows] == [
        {"fault": "crash", "node": "n3", "start": 10.0, "end": 13.0, "last": "n1"},
        {"fault": "crash", "node": "n2", "start": 20.0, "end": 24.0, "last": "n1"},
    ]


def test_latency_outside_the_windows_leaves_out_every_message_that_overlaps_one(
    windowed: DataFrame,
) -> None:
    from gossamer.analysis import job

    lat = metrics.windowed_latencies(windowed, metrics.fault_windows(windowed)).collect()
    places = {
        r["msg"]: "crash" if r["in_crash"] else "partition" if r["in_fault"] else "outside"
        for r in lat
    }
    assert places == PLACES
    assert all(r["in_fault"] for r in lat if r["in_crash"])
    assert len(lat) == 14
    found = job.fault_window_latency(windowed)
    assert [(w["fault"], w["start"], w["end"]) for w in found["windows"]] == [
        ("crash", 10.0, 13.0),
        ("partition", 20.0, 22.0),
    ]
    crash, faults = found["latency"]["outside_crash"], found["latency"]["outside_faults"]
    # Outside the crash window: n2/1, n2/4, n2/5, n3/6 (3 + 2 + 2 + 2 deliveries).
    assert crash["count"] == 9 and crash["max"] == pytest.approx(3.1)
    # Outside both: n2/1, n2/4, n3/6; the slowest is n2/4 at n3 (0.3 s).
    assert faults["count"] == 7 and faults["max"] == pytest.approx(0.3)
    assert faults["p50"] == pytest.approx(0.1, rel=0.011)


def test_a_message_sent_again_under_a_new_id_counts_its_latency_from_its_first_multicast(
    spark: SparkSession,
) -> None:
    """n1/1, multicast at 1.0, is withdrawn at a view change as n1/4, which the next one
    withdraws as n1/5, delivered at 3.1 and 3.2: 2.1 and 2.2 s since the application
    asked. n1/6 was asked for during a change (``hold`` at 2.6) and went out at 3.0. The
    crash window (n3, 0.5 to 2.8) holds n1/5 (born 1.0, multicast last at 3.0) and n1/6
    (held by the change), not n2/7."""
    from gossamer.analysis import job

    ev = [
        event("n1", 1.0, "isis", "multicast", msg="n1/1"),
        event("n1", 1.5, "isis", "withdraw", msg="n1/1", **{"as": "n1/4"}),
        event("n1", 2.5, "isis", "withdraw", msg="n1/4", **{"as": "n1/5"}),
        event("n1", 2.6, "isis", "hold", msg="n1/6"),
        *_message("n1", 5, 3.0, ("n1", 3.1), ("n2", 3.2)),
        *_message("n1", 6, 3.0, ("n1", 3.1), ("n2", 3.2)),
        *_message("n2", 7, 3.0, ("n1", 3.1), ("n2", 3.1)),
        event("n3", 0.2, "isis", "multicast", msg="n3/1"),  # n3 is a member
        event("n3", 0.5, "net", "fault", fault="crash"),
        event("n1", 2.8, "isis", "view_change", peer="n3", view="n1,n2"),
        event("n2", 2.8, "isis", "view_change", peer="n3", view="n1,n2"),
    ]
    frame = events_frame(spark, ev)
    renamed = metrics.renamed(frame)
    assert sorted(tuple(r) for r in renamed.collect()) == [
        ("isis", "n1/4", "n1/1"),
        ("isis", "n1/5", "n1/1"),
    ]
    lat = {
        (r["msg"], r["node"]): round(r["latency"], 6)
        for r in metrics.latencies(frame, renamed=renamed).collect()
    }
    assert lat == {
        ("n1/5", "n1"): 2.1, ("n1/5", "n2"): 2.2,
        ("n1/6", "n1"): 0.5, ("n1/6", "n2"): 0.6,
        ("n2/7", "n1"): 0.1, ("n2/7", "n2"): 0.1,
    }  # fmt: skip
    # Without the renames, n1/5 would look 0.1 and 0.2 s fast.
    plain = metrics.latencies(frame).where("msg = 'n1/5'").collect()
    assert sorted(round(r["latency"], 6) for r in plain) == [0.1, 0.2]
    found = job.fault_window_latency(frame, renamed)
    assert found["withdrawn"] == 2
    assert [(w["fault"], w["start"], w["end"]) for w in found["windows"]] == [("crash", 0.5, 2.8)]
    outside = found["latency"]["outside_crash"]
    assert outside["count"] == 2 and outside["max"] == pytest.approx(0.1)


def test_without_a_fault_there_is_no_window_and_no_second_job(spark: SparkSession) -> None:
    from gossamer.analysis import job

    ev = _message("n1", 1, 1.0, ("n1", 1.1), ("n2", 1.2))
    ev.append(event("n2", 3.0, "net", "fault", fault="drop"))
    assert job.fault_window_latency(events_frame(spark, ev)) == {"windows": [], "latency": {}}
