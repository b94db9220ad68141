"""Discovery checkers: full view, crash detection and false removals."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import discovery
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark

NODES = ("n0", "n1", "n2")


def meshed(
    *, extra: tuple[TraceEvent, ...] = (), without: tuple[str, str] | None = None
) -> list[TraceEvent]:
    """Each node starts at 0 and sees every other come up by t = 1.0 (+0.1 per node)."""
    out = [event(n, 0.0, "discovery", "send", msg=None, peer=None) for n in NODES]
    for i, n in enumerate(NODES):
        for j, p in enumerate(NODES):
            if n != p and (n, p) != without:
                out.append(
                    event(
                        n,
                        0.5 + 0.1 * i + 0.01 * j,
                        "discovery",
                        "peer_up",
                        peer=p,
                        reason="handshake",
                    )
                )
    return [*out, *extra]


def test_full_view_holds_and_times_are_measured(spark: SparkSession) -> None:
    df = events_frame(spark, meshed())
    assert discovery.full_view(df).count() == 0
    times = {r["node"]: r["seconds"] for r in discovery.full_view_times(df).collect()}
    assert times == pytest.approx({"n0": 0.52, "n1": 0.62, "n2": 0.71})
    late = discovery.full_view(df, within=0.6).collect()
    assert sorted(r["node"] for r in late) == ["n1", "n2"]


def test_a_node_missing_a_peer_never_has_a_full_view(spark: SparkSession) -> None:
    (row,) = discovery.full_view(events_frame(spark, meshed(without=("n1", "n2")))).collect()
    assert (row["node"], row["largest"], row["target"]) == ("n1", 1, 2)
    # max_peers caps what a full view is.
    df = events_frame(spark, meshed(without=("n1", "n2")))
    assert discovery.full_view(df, max_peers=1).count() == 0


def test_repeated_ups_do_not_inflate_the_view(spark: SparkSession) -> None:
    again = tuple(event("n1", 2.0 + k, "discovery", "peer_up", peer="n0") for k in range(3))
    df = events_frame(spark, meshed(without=("n1", "n2"), extra=again))
    assert [r["node"] for r in discovery.full_view(df).collect()] == ["n1"]


def crash_of_n2(*downs: tuple[str, float]) -> list[TraceEvent]:
    extra = [event("n2", 5.0, "net", "fault", fault="crash")]
    extra += [
        event(n, t, "discovery", "peer_down", peer="n2", reason="heartbeat") for n, t in downs
    ]
    return meshed(extra=tuple(extra))


def test_a_crash_removed_by_every_peer_holds(spark: SparkSession) -> None:
    df = events_frame(spark, crash_of_n2(("n0", 7.0), ("n1", 7.5)))
    assert discovery.crash_detection(df).count() == 0
    delays = {r["observer"]: r["seconds"] for r in discovery.detections(df).collect()}
    assert delays == pytest.approx({"n0": 2.0, "n1": 2.5})
    (late,) = discovery.crash_detection(df, within=2.2).collect()
    assert (late["observer"], late["seconds"]) == ("n1", pytest.approx(2.5))


def test_a_crash_nobody_noticed_is_caught(spark: SparkSession) -> None:
    (row,) = discovery.crash_detection(events_frame(spark, crash_of_n2(("n0", 7.0)))).collect()
    assert (row["crashed"], row["observer"], row["seconds"]) == ("n2", "n1", None)
    assert "never removed" in row["detail"]


def test_removing_a_live_peer_is_a_false_removal(spark: SparkSession) -> None:
    down = event("n0", 3.0, "discovery", "peer_down", peer="n1", reason="heartbeat")
    (row,) = discovery.false_removals(events_frame(spark, meshed(extra=(down,)))).collect()
    assert (row["node"], row["peer"], row["t"]) == ("n0", "n1", 3.0)


def test_removals_explained_by_crash_partition_or_leave_are_not_false(spark: SparkSession) -> None:
    extra = (
        event("n1", 2.0, "net", "fault", fault="partition"),
        event("n1", 2.5, "net", "fault", fault="heal"),
        event("n0", 3.0, "discovery", "peer_down", peer="n1", reason="heartbeat"),
        event("n2", 3.1, "discovery", "peer_down", peer="n0", reason="leave"),
        event("n1", 4.0, "discovery", "peer_down", peer="n2", reason="heartbeat"),
    )
    df = events_frame(spark, meshed(extra=extra))
    # n1 was partitioned: it may drop peers, and be dropped, within the window.
    assert discovery.false_removals(df).count() == 0
    found = discovery.false_removals(df, window=1.0).collect()
    assert sorted((r["node"], r["peer"]) for r in found) == [("n1", "n2")]
    # A peer that crashed and restarted within the window may be removed.
    restart = (
        event("n2", 6.0, "net", "fault", fault="crash"),
        event("n2", 6.5, "net", "fault", fault="restart"),
        event("n0", 7.0, "discovery", "peer_down", peer="n2", reason="heartbeat"),
    )
    assert discovery.false_removals(events_frame(spark, meshed(extra=restart))).count() == 0
