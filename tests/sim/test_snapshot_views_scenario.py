"""Scenario ``snapshot_views``: Chandy–Lamport snapshots of a bank on agreed views,
seeded simulations under crashes, joins, restarts, partitions and network faults. Every
snapshot is complete, abandoned by a view change, or cut short by a crash; a complete
one is a consistent cut of its view, and all of a view's hold the same money (the
founders' total in view 1, the accounts' final sum in the last). A failure prints the
``gossamer sim`` command that replays it."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

from gossamer.faults import FaultPlan
from gossamer.sim.run import RunResult
from gossamer.testing.sim import assert_faults_injected, replay_command
from gossamer.testing.sweeps import FaultCase, assert_exercised, fault_case, run_sweep

from . import runs
from .test_isis_views_scenario import SWEEP as ISIS_VIEWS_SWEEP


def simulate(
    out: Path, nodes: int, seed: int = 1, faults: FaultPlan | None = None, **params: Any
) -> RunResult:
    return runs.simulate("snapshot_views", out, nodes=nodes, seed=seed, faults=faults, **params)


def assert_consistent(result: RunResult) -> dict[str, Any]:
    summary, replay = result.summary, replay_command(result.request)
    assert summary["violation_count"] == 0, f"{summary['violations']}\nreplay: {replay}"
    assert summary["converged"], f"{summary['not_converged']}\nreplay: {replay}"
    return summary


def test_in_one_view_every_snapshot_completes_and_holds_all_the_money(tmp_path: Path) -> None:
    summary = assert_consistent(simulate(tmp_path, 4, 1, FaultPlan(drop=0.1), stop=6, duration=10))
    assert summary["views_installed"] == 1 and summary["abandoned"] == 0
    assert summary["complete"] == summary["snapshots_started"] >= 20
    assert summary["money_per_view"] == {"1": [4000]} and summary["final_money"] == 4000


def test_snapshots_go_on_view_after_view_through_a_join_a_crash_and_a_restart(
    tmp_path: Path,
) -> None:
    result = simulate(
        tmp_path,
        5,
        3,
        FaultPlan(drop=0.1, duplicate=0.1, reorder=0.3),
        join="n4@2",
        crash="n1@3",
        restart="n1@6",
        stop=9,
        duration=20,
    )
    summary = assert_consistent(result)
    assert summary["live"] == ["n0#1", "n1#2", "n2#1", "n3#1", "n4#1"]
    # Each of the four views has complete snapshots: the founders' 4,000, the joiner's
    # account added, the crashed member's account gone, the restarted member's added.
    money = summary["money_per_view"]
    assert sorted(money) == ["1", "2", "3", "4"] and money["1"] == [4000]
    assert money["2"] == [5000] and money["4"] == [money["3"][0] + 1000]
    assert summary["final_money"] == money["4"][0]
    # Changes abandoned the snapshots under way; transfers to the crashed member that
    # went out again in the next view were refunded; late markers were dropped.
    assert summary["abandoned"] > 0 and summary["refunds"] > 0 and summary["stale_markers"] > 0
    assert_faults_injected(result, "crash", "restart", "drop", "duplicate", "reorder")


def test_a_partitioned_minority_leaves_with_its_money_and_rejoins_with_new_accounts(
    tmp_path: Path,
) -> None:
    result = simulate(tmp_path, 5, 3, FaultPlan(drop=0.05), partition="n3,n4@2-6", stop=9,
                      duration=20)  # fmt: skip
    summary = assert_consistent(result)
    assert summary["live"] == ["n0#1", "n1#1", "n2#1", "n3#2", "n4#2"]
    assert summary["excluded"] == 2
    money = summary["money_per_view"]
    last = str(summary["views_installed"])
    assert money["1"] == [5000] and money[last] == [money["2"][0] + 2000]


#: Seeds of the sweep below; ``GOSSAMER_SNAPSHOT_VIEWS_SEEDS=3000`` makes it a soak.
SWEEP_SEEDS = int(os.environ.get("GOSSAMER_SNAPSHOT_VIEWS_SEEDS", "200"))

#: Where the sweep's faults fall: scenario ``isis_views``'s shape (members transfer and
#: snapshot until second 8 of 25).
SWEEP = ISIS_VIEWS_SWEEP


def sweep_params(rng: random.Random) -> dict[str, Any]:
    return {
        "retry": rng.choice([0.05, 0.1]),
        "detect": rng.choice([0.2, 0.5, 1.0]),
        "interval": rng.choice([0.2, 0.5]),
        "every": rng.choice([1.0, 2.0]),
        "retransmit_max": 1.0,
        "stop": 8,
        "duration": 25,
    }


def sweep_case(seed: int) -> FaultCase:
    """Seed ``seed``: 3 to 6 nodes, up to two joiners, crashes (half of them restarted),
    a partition, loss up to 30 %, duplication, reordering and delay
    (:func:`gossamer.testing.sweeps.fault_case`)."""
    return fault_case(seed, SWEEP, sweep_params)


def test_snapshots_on_views_are_consistent_over_hundreds_of_seeds(tmp_path: Path) -> None:
    seen: Counter[str] = Counter()
    for _, result in run_sweep(SWEEP_SEEDS, sweep_case, simulate, tmp_path, seen):
        summary = result.summary
        seen["views>2"] += summary["views_installed"] > 2
        seen["complete after a change"] += summary["views_with_complete_snapshots"] > 1
        seen["abandoned"] += summary["abandoned"] > 0
        seen["cut short"] += summary["cut_short"] > 0
        seen["refunds"] += summary["refunds"] > 0
        seen["stale_markers"] += summary["stale_markers"] > 0
        seen["excluded"] += summary["excluded"] > 0
    assert_exercised(
        seen, SWEEP_SEEDS, "views>2", "complete after a change", "abandoned", "cut short",
        "refunds", "stale_markers", "excluded",
    )  # fmt: skip
