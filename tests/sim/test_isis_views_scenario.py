"""Scenario ``isis_views``: ISIS total order on agreed views, seeded simulations under
crashes, joins, restarts, partitions and network faults. Every run is checked for virtual
synchrony (the same messages in the same order in every view by every member that
installs the next, one view per message, the application's state equal at every install,
total order, integrity) and the views' own safety; runs that keep a majority converge,
and then every message of a live member is delivered by every live member (validity). A
failure prints the ``gossamer sim`` command that replays it."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.sim.run import RunResult
from gossamer.testing.sim import assert_faults_injected, replay_command
from gossamer.testing.sweeps import FaultCase, SweepShape, assert_exercised, fault_case, run_sweep
from gossamer.trace import read_run

from . import runs


def simulate(
    out: Path, nodes: int, seed: int = 1, faults: FaultPlan | None = None, **params: Any
) -> RunResult:
    return runs.simulate("isis_views", out, nodes=nodes, seed=seed, faults=faults, **params)


def assert_synchronous(result: RunResult, live: list[str] | None = None) -> dict[str, Any]:
    summary, replay = result.summary, replay_command(result.request)
    assert summary["violation_count"] == 0, f"{summary['violations']}\nreplay: {replay}"
    assert summary["converged"], f"{summary['not_converged']}\nreplay: {replay}"
    if live is not None:
        assert summary["live"] == live, f"replay: {replay}"
    return summary


def test_a_joiner_starts_from_the_state_at_the_cut_and_delivers_in_the_same_order(
    tmp_path: Path,
) -> None:
    result = simulate(tmp_path, 4, 1, join="n3@2", stop=5, duration=8)
    summary = assert_synchronous(result, ["n0#1", "n1#1", "n2#1", "n3#1"])
    # Everyone counts the same messages: the joiner's count started from the state.
    assert len(set(summary["delivered"].values())) == 1
    assert summary["delivered"]["n3#1"] == summary["multicast"]
    events, bad = read_run(tmp_path)
    assert bad == []
    joined = [e for e in events if e.layer == "views" and e.kind == "view_change" and e.seq == 2]
    assert sorted(e.node for e in joined) == ["n0", "n1", "n2", "n3"]
    # The joiner multicast too, and every member delivered its messages.
    delivered = [e for e in events if e.layer == "isis" and e.kind == "deliver"]
    from_joiner = Counter(e.node for e in delivered if e.msg and e.msg.startswith("n3#1/"))
    assert set(from_joiner) == {"n0", "n1", "n2", "n3"} and len(set(from_joiner.values())) == 1


def test_a_crashed_sender_leaves_and_its_messages_are_settled_alike(tmp_path: Path) -> None:
    result = simulate(tmp_path, 5, 2, FaultPlan(drop=0.1), crash="n1@3", stop=6, duration=10)
    assert_synchronous(result, ["n0#1", "n2#1", "n3#1", "n4#1"])
    assert result.summary["views_installed"] == 2
    assert_faults_injected(result, "crash", "drop")


def test_a_view_change_withdraws_unfinished_messages_and_sends_them_in_the_next_view(
    tmp_path: Path,
) -> None:
    """Multicasts keep flowing through three view changes (a join, a crash, a restart):
    messages that could not finish in their view are withdrawn and go out again, and the
    ones asked for during a change are held; none is lost by a live member."""
    result = simulate(
        tmp_path,
        5,
        3,
        FaultPlan(drop=0.1, duplicate=0.1, reorder=0.3),
        join="n4@2",
        crash="n1@3",
        restart="n1@6",
        interval=0.02,
        stop=9,
        duration=14,
    )
    summary = assert_synchronous(result, ["n0#1", "n1#2", "n2#1", "n3#1", "n4#1"])
    assert summary["views_installed"] == 4
    assert summary["withdrawn"] > 0 and summary["deferred"] > 0
    # Late copies of withdrawn messages reached members in the next view, and were dropped.
    assert summary["stale_data"] > 0
    assert_faults_injected(result, "crash", "restart", "drop", "duplicate", "reorder")


def test_a_partitioned_minority_is_excluded_and_rejoins_with_the_state(tmp_path: Path) -> None:
    result = simulate(tmp_path, 5, 4, partition="n3,n4@2-6", stop=8, duration=12)
    summary = assert_synchronous(result, ["n0#1", "n1#1", "n2#1", "n3#2", "n4#2"])
    assert summary["excluded"] == 2


def test_bad_parameters_are_refused_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown node"):
        simulate(tmp_path, 3, join="n7@1")
    with pytest.raises(ConfigError, match="founder"):
        simulate(tmp_path, 2, join="n0@1,n1@1")


#: Seeds of the sweep below; ``GOSSAMER_ISIS_VIEWS_SEEDS=3000`` makes it a soak.
SWEEP_SEEDS = int(os.environ.get("GOSSAMER_ISIS_VIEWS_SEEDS", "200"))


#: Where the sweep's faults fall: members multicast until second 8 of 25.
SWEEP = SweepShape(
    nodes=(3, 6),
    join_by=5,
    crash_within=5,
    restart_after=(0.5, 2),
    partition_from=(1, 5),
    partition_for=(0.5, 2),
)


def sweep_params(rng: random.Random) -> dict[str, Any]:
    """The ISIS members' own parameters of a seed: every member multicasts until second
    8 of 25, then the run is quiet for the checks of a quiet end; ISIS batches nothing,
    batches per turn (as the daemon does) or for 2 ms."""
    retry = rng.choice([0.05, 0.1])
    detect = rng.choice([0.2, 0.5, 1.0])
    interval = rng.choice([0.2, 0.5])
    # One draw, of three: no batching, the daemon's turn batching, or a 2 ms delay.
    batching = rng.choice(["off", "turn", "delay"])
    return {
        "retry": retry,
        "detect": detect,
        "interval": interval,
        "batch_delay": 0.002 if batching == "delay" else 0.0,
        "batch_turn": batching == "turn",
        "retransmit_max": 1.0,
        "stop": 8,
        "duration": 25,
    }


def sweep_case(seed: int) -> FaultCase:
    """Seed ``seed`` of the sweep (:func:`gossamer.testing.sweeps.fault_case`): 3 to 6
    nodes, up to two joiners, crashes (half of them restarted), a partition, loss up to
    30 %, duplication, reordering and delay. In about 85 % of the seeds the faulty nodes
    are a minority of the founders and the run must converge (and every live member's
    messages reach every live member); in the rest only safety is checked."""
    return fault_case(seed, SWEEP, sweep_params)


def test_virtual_synchrony_holds_over_hundreds_of_seeds(tmp_path: Path) -> None:
    """The guarantees of docs/cluster.md over at least 200 seeds of crashes, restarts,
    joins, partitions, loss, duplication and reordering."""
    seen: Counter[str] = Counter()
    for case, result in run_sweep(SWEEP_SEEDS, sweep_case, simulate, tmp_path, seen):
        summary = result.summary
        seen["batch_turn"] += case.params["batch_turn"]
        seen["batch_delay"] += case.params["batch_delay"] > 0
        seen["views>2"] += summary["views_installed"] > 2
        seen["withdrawn"] += summary["withdrawn"] > 0
        seen["deferred"] += summary["deferred"] > 0
        seen["stale_data"] += summary["stale_data"] > 0
        seen["excluded"] += summary["excluded"] > 0
        seen["not converged"] += not summary["converged"]
    assert_exercised(
        seen, SWEEP_SEEDS, "views>2", "withdrawn", "deferred", "stale_data", "excluded",
        "batch_turn", "batch_delay",
    )
