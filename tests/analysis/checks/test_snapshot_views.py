"""Snapshot checkers on agreed views, over a simulated run of scenario ``snapshot_views``
(a join, a crash and a restart: four views, snapshots abandoned by the changes): the
checks hold on the real traces, and a recorded channel, a member's value or a member's
whole part changed by hand is caught."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import snapshot
from gossamer.analysis.frames import events_frame
from gossamer.faults import FaultPlan
from gossamer.sim.run import SimRequest, run_simulation
from gossamer.trace import TraceEvent, read_run

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> list[TraceEvent]:
    out: Path = tmp_path_factory.mktemp("snapshot_views")
    params = {"join": "n4@2", "crash": "n1@3", "restart": "n1@6", "stop": "9"}
    result = run_simulation(
        SimRequest(
            scenario="snapshot_views",
            nodes=5,
            seed=3,
            out=out,
            duration=20,
            faults=FaultPlan(drop=0.1),
            params=params,
        )
    )
    assert result.summary["violation_count"] == 0 and result.summary["abandoned"] > 0
    events, bad = read_run(out)
    assert bad == []
    return events


Edit = Callable[[TraceEvent], TraceEvent | None]


def changed(
    events: list[TraceEvent], pick: Callable[[TraceEvent], bool], edit: Edit
) -> tuple[list[TraceEvent], TraceEvent]:
    """``events`` with the first one ``pick`` chooses replaced by ``edit(it)`` (dropped
    when that is ``None``), and that event."""
    target = next(e for e in events if pick(e))
    made = edit(target)
    out = [made if e is target else e for e in events]
    return [e for e in out if e is not None], target


def with_attrs(event: TraceEvent, **attrs: str) -> TraceEvent:
    return dataclasses.replace(event, attrs={**event.attrs, **attrs})


def judged(
    events: list[TraceEvent], kind: str, also: Callable[[TraceEvent], bool]
) -> Callable[[TraceEvent], bool]:
    """Picks a ``kind`` event, for which ``also`` holds, of a snapshot that completed and
    that no member abandoned (one the checks judge)."""
    gone = {e.attrs["snapshot"] for e in events if e.layer == "snapshot" and e.kind == "abandon"}
    done = {e.attrs["snapshot"] for e in events if e.kind == "snapshot_done"}
    kept = done - gone
    return lambda e: e.kind == kind and e.attrs["snapshot"] in kept and also(e)


def in_view(view: int) -> Callable[[TraceEvent], bool]:
    """A recorded state of agreed view ``view``."""
    return lambda e: f'"view":{view}' in e.attrs["state"]


def test_the_checks_hold_view_after_view(spark: SparkSession, traces: list[TraceEvent]) -> None:
    df = events_frame(spark, traces)
    assert snapshot.consistency(df).count() == 0
    assert snapshot.invariant(df).count() == 0
    totals = snapshot.snapshot_totals(df).collect()
    by_view = {r["view"]: r["total"] for r in totals}
    assert sorted(by_view) == [1, 2, 3, 4] and by_view[1] == 4000.0 and by_view[2] == 5000.0
    assert snapshot.abandoned(df).count() > 0


def test_a_wrong_channel_state_is_caught(spark: SparkSession, traces: list[TraceEvent]) -> None:
    events, target = changed(
        traces,
        judged(traces, "channel_state", lambda e: int(e.attrs["count"]) > 0),
        lambda e: with_attrs(e, count=str(int(e.attrs["count"]) - 1)),
    )
    rows = snapshot.consistency(events_frame(spark, events)).collect()
    assert [(r["problem"], r["snapshot"], r["node"]) for r in rows] == [
        ("channel state", target.attrs["snapshot"], target.node)
    ]


def test_money_that_does_not_add_up_in_its_view_is_caught(
    spark: SparkSession, traces: list[TraceEvent]
) -> None:
    events, target = changed(
        traces,
        judged(traces, "local_state", in_view(3)),
        lambda e: with_attrs(e, value=str(int(e.attrs["value"]) + 7)),
    )
    (row,) = snapshot.invariant(events_frame(spark, events)).collect()
    assert row["snapshot"] == target.attrs["snapshot"] and row["total"] == row["expected"] + 7


def test_a_member_that_never_records_is_caught(
    spark: SparkSession, traces: list[TraceEvent]
) -> None:
    events, target = changed(traces, judged(traces, "local_state", in_view(2)), lambda e: None)
    rows = snapshot.consistency(events_frame(spark, events)).collect()
    missing = [(r["snapshot"], r["node"]) for r in rows if r["problem"] == "missing local state"]
    assert missing == [(target.attrs["snapshot"], target.node)]
