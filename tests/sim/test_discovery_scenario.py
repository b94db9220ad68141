"""Scenario ``discovery`` in the simulator: convergence, loss, crashes, leaves, scale.

Every test runs through ``run_simulation`` so that a failure prints the exact
``gossamer sim`` command that replays it, and records the measured figures
(``record_property``) rather than only pass/fail. Protocol timers are the
defaults: broadcast interval 5 s, inactive-peer time 10 s, heartbeat wait 1 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.sim.run import RunResult
from gossamer.testing.sim import assert_faults_injected, replay_command

from . import runs

INTERVAL, INACTIVE, WAIT = 5.0, 10.0, 1.0

Record = Any  # pytest's record_property fixture


def simulate(
    tmp_path: Path,
    nodes: int,
    duration: float,
    *,
    seed: int = 1,
    faults: FaultPlan | None = None,
    **params: object,
) -> tuple[RunResult, dict[str, Any], str]:
    result = runs.simulate("discovery", tmp_path / "run", nodes=nodes, seed=seed, faults=faults,
                           duration=duration, **params)
    return result, result.summary, f"replay: {replay_command(result.request)}"


def test_full_view_within_two_broadcast_intervals_without_loss(
    tmp_path: Path, record_property: Record
) -> None:
    _, summary, replay = simulate(tmp_path, 40, 12.0)
    record_property("full_view_s", summary["full_view_s"])
    assert summary["full_view_s"] is not None, replay
    assert summary["full_view_s"] <= 2 * INTERVAL, (summary, replay)
    assert summary["final_peers_min"] == summary["final_peers_max"] == 39, replay
    assert summary["one_sided_at_end"] == 0, replay


@pytest.mark.slow
def test_no_live_peer_is_removed_at_ten_percent_loss_over_ten_minutes(
    tmp_path: Path, record_property: Record
) -> None:
    result, summary, replay = simulate(tmp_path, 20, 600.0, faults=FaultPlan(drop=0.1))
    assert_faults_injected(result, "drop")
    record_property("full_view_s", summary["full_view_s"])
    record_property("misses", summary["counters"].get("misses", 0))
    assert summary["false_removals"] == 0, (summary["false_removal_examples"], replay)
    assert summary["spurious_leaves"] == 0, replay
    assert summary["final_peers_min"] == 19 and summary["one_sided_at_end"] == 0, replay
    # Heartbeats did go unanswered (the loss reached them): no removal followed.
    assert summary["counters"]["misses"] > 0, replay


@pytest.mark.parametrize("max_peers", [64, 6])
def test_crashed_node_is_removed_by_everyone_within_the_bound(
    tmp_path: Path, record_property: Record, max_peers: int
) -> None:
    # max_peers 6 of 19 possible: full nodes stop broadcasting, heartbeats are all there is.
    result, summary, replay = simulate(tmp_path, 20, 60.0, crash="n3@30.5", max_peers=max_peers)
    assert_faults_injected(result, "crash")
    record_property("detection_s_max", summary["detection_s_max"])
    assert summary["crash_pairs"] >= min(max_peers, 19) and summary["undetected"] == 0, replay
    assert summary["detections"] == summary["crash_pairs"], replay
    bound = INACTIVE + 3 * WAIT + INTERVAL
    assert summary["detection_s_max"] <= bound, (summary, replay)
    assert summary["false_removals"] == 0, replay


def test_clean_leave_removes_at_once(tmp_path: Path, record_property: Record) -> None:
    _, summary, replay = simulate(tmp_path, 10, 30.0, leave="n2@20")
    record_property("leave_s_max", summary["leave_s_max"])
    assert summary["leave_removals"] == 9, replay
    assert summary["leave_s_max"] < 0.01, replay  # one LAN hop, not a heartbeat timeout
    assert summary["final_peers_min"] == summary["final_peers_max"] == 8, replay


def test_restarted_node_is_rediscovered(tmp_path: Path) -> None:
    result, summary, replay = simulate(tmp_path, 10, 60.0, crash="n4@10", restart="n4@15")
    assert_faults_injected(result, "crash", "restart")
    assert summary["final_peers_min"] == summary["final_peers_max"] == 9, replay
    assert summary["one_sided_at_end"] == 0 and summary["false_removals"] == 0, replay


def test_partitioned_nodes_are_removed_and_rediscovered_after_heal(tmp_path: Path) -> None:
    result, summary, replay = simulate(tmp_path, 8, 80.0, partition="n0,n1@10-40")
    assert_faults_injected(result, "partition", "heal", "partition_drop")
    counters = summary["counters"]
    assert counters["removed_heartbeat"] == 2 * 6 * 2, replay  # each side drops the other
    assert summary["false_removals"] == 0, replay  # removals across the cut are expected
    assert summary["final_peers_min"] == summary["final_peers_max"] == 7, replay


def test_delivery_between_peers(tmp_path: Path) -> None:
    _, summary, replay = simulate(tmp_path, 6, 20.5, data=1.0)  # last round lands
    counters = summary["counters"]
    assert counters["data_sent"] > 0 and counters["data_received"] == counters["data_sent"], replay
    assert counters.get("non_peer_data", 0) == 0, replay


@pytest.mark.slow
def test_five_hundred_nodes_with_max_peers_64_all_end_with_64(
    tmp_path: Path, record_property: Record
) -> None:
    # Two broadcast domains of 250 nodes keep the test cheap; one domain of 500
    # (--param subnets=1) is measured in docs/discovery.md.
    _, summary, replay = simulate(tmp_path, 500, 30.0, max_peers=64, subnets=2)
    record_property("full_view_s", summary["full_view_s"])
    record_property("rebalances", summary["rebalances"])
    record_property("settled_s", summary["settled_s"])
    assert summary["final_peers_min"] == summary["final_peers_max"] == 64, (summary, replay)
    assert summary["settled_s"] is not None, replay
    assert summary["nodes_never_full"] == 0 and summary["one_sided_at_end"] == 0, replay
    assert summary["false_removals"] == 0 and summary["spurious_leaves"] == 0, replay


def test_same_seed_same_run(tmp_path: Path) -> None:
    first, _, _ = simulate(tmp_path / "a", 8, 20.0, seed=5, faults=FaultPlan(drop=0.05))
    second, _, _ = simulate(tmp_path / "b", 8, 20.0, seed=5, faults=FaultPlan(drop=0.05))
    for path in sorted((tmp_path / "a" / "run").glob("*.jsonl")):
        twin = tmp_path / "b" / "run" / path.name
        assert path.read_bytes() == twin.read_bytes()
    assert first.summary == second.summary


def test_bad_parameters_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown node"):
        simulate(tmp_path, 4, 5.0, crash="n9@1")
    with pytest.raises(ConfigError, match="interval"):
        simulate(tmp_path, 4, 5.0, interval="0")
