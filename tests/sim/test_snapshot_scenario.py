"""Scenario ``snapshot``: every snapshot is a consistent cut and holds all the bank's money."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.faults import FaultPlan
from gossamer.sim.run import RunResult
from gossamer.testing.sim import assert_faults_injected, expected_faults, replay_command
from gossamer.trace import read_run

from . import runs


def simulate(
    out: Path, nodes: int, seed: int, faults: FaultPlan | None = None, **params: Any
) -> RunResult:
    return runs.simulate("snapshot", out, nodes=nodes, seed=seed, faults=faults, duration=600.0,
                         **params)


def assert_snapshots_good(result: RunResult) -> None:
    s = result.summary
    replay = replay_command(result.request)
    assert s["violation_count"] == 0, f"{s['violations']}\nreplay: {replay}"
    assert s["snapshot_violation_count"] == 0, f"{s['snapshot_violations']}\nreplay: {replay}"
    assert s["snapshots_completed"] == s["snapshots_started"] > 0, f"replay: {replay}"


def test_snapshots_of_a_clean_run_hold_all_the_money(tmp_path: Path) -> None:
    result = simulate(tmp_path, 4, 5, senders=4, messages=10, snapshots=3)
    assert_snapshots_good(result)
    assert set(result.summary["money_per_snapshot"].values()) == {4000}
    events, _ = read_run(tmp_path)
    kinds = {e.kind for e in events if e.layer == "snapshot"}
    assert kinds == {"marker", "local_state", "channel_state", "snapshot_done", "send", "recv"}
    # The conventions of gossamer.analysis.checks.snapshot: values on the cut, amounts on
    # the workload's messages.
    states = [e for e in events if e.kind == "local_state"]
    assert all(e.attrs["total"] == "4000" and "value" in e.attrs for e in states)
    channels = [e for e in events if e.kind == "channel_state"]
    assert all("value" in e.attrs and "count" in e.attrs for e in channels)
    for sid in {e.attrs["snapshot"] for e in states}:
        cut = [e for e in states + channels if e.attrs["snapshot"] == sid]
        assert sum(int(e.attrs["value"]) for e in cut) == 4000
    done = [e for e in events if e.kind == "snapshot_done"]
    assert len(done) == 3 * 4
    state = next(e for e in events if e.kind == "local_state")
    assert "isis" in orjson.loads(state.attrs["state"])


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.integers(3, 7),
    data=st.data(),
    seed=st.integers(0, 2**31),
    drop=st.sampled_from([0.0, 0.2, 0.4]),
    dup=st.sampled_from([0.0, 0.2]),
    reorder=st.sampled_from([0.0, 0.3]),
    delay_ms=st.sampled_from([0.0, 20.0]),
    overlap=st.sampled_from([0.0, 0.02]),
)
def test_every_snapshot_is_consistent_and_keeps_the_invariant(
    *,
    nodes: int,
    data: st.DataObject,
    seed: int,
    drop: float,
    dup: float,
    reorder: float,
    delay_ms: float,
    overlap: float,
) -> None:
    params = {
        "senders": data.draw(st.integers(1, nodes), label="senders"),
        "messages": data.draw(st.integers(2, 10), label="messages"),
        "snapshots": data.draw(st.integers(1, 4), label="snapshots"),
        "interval": 0.02,
        "overlap": overlap,
        "batch_delay": data.draw(st.sampled_from([0.0, 0.001]), label="batch delay"),
    }
    faults = FaultPlan(drop=drop, duplicate=dup, reorder=reorder, delay=delay_ms / 1000)
    with tempfile.TemporaryDirectory() as out:
        result = simulate(Path(out), nodes, seed, faults, **params)
        assert_snapshots_good(result)
        total = result.summary["total"]
        assert set(result.summary["money_per_snapshot"].values()) == {total}
        assert_faults_injected(result, *expected_faults(result, faults))


def test_a_crashed_member_does_not_stall_snapshots(tmp_path: Path) -> None:
    result = simulate(
        tmp_path, 5, 4, FaultPlan(drop=0.1), senders=3, messages=8, snapshots=3, crash="n4@0.2"
    )
    assert_snapshots_good(result)
    assert_faults_injected(result, "crash")
