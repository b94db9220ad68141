"""Scenario ``queues``: the replicated queues on ISIS under crashes, restarts, partitions
and network faults, checked for the promises of docs/cluster.md ("Replicated queues"):
a confirmed message was committed by a majority and is never lost, an acked message is
never delivered again, a message is held by one consumer at a time, the minority never
confirms, every member holds the same queues and every confirmed message is received and
acked once the run is quiet. A failure prints the ``gossamer sim`` command that replays it."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gossamer.faults import FaultPlan
from gossamer.proto.gateway.queue_confirms import ConfirmTracker
from gossamer.sim.run import RunResult
from gossamer.sim.scenarios.queues import QueueMember
from gossamer.testing.sim import replay_command
from gossamer.testing.sweeps import FaultCase, SweepShape, assert_exercised, fault_case, run_sweep

from . import runs


def simulate(
    out: Path, nodes: int = 3, seed: int = 1, faults: FaultPlan | None = None, **params: Any
) -> RunResult:
    return runs.simulate("queues", out, nodes=nodes, seed=seed, faults=faults, **params)


def assert_kept(result: RunResult) -> dict[str, Any]:
    summary, replay = result.summary, replay_command(result.request)
    assert summary["violation_count"] == 0, f"{summary['violations']}\nreplay: {replay}"
    assert summary["converged"], f"{summary['not_converged']}\nreplay: {replay}"
    assert summary["quiet"], f"replay: {replay}"
    return summary


def test_a_quiet_cluster_confirms_delivers_and_acks_every_message(tmp_path: Path) -> None:
    summary = assert_kept(simulate(tmp_path, stop=2, duration=5))
    assert summary["pushed"] == summary["confirmed"] == summary["received"] == summary["acked"]
    assert summary["pushed"] > 20 and summary["redelivered"] == 0
    assert set(summary["left"].values()) == {0}
    assert len(set(summary["positions"].values())) == 1


def test_deliveries_held_at_a_crashed_node_are_redelivered_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    """Consumers that work long hold deliveries when their node (n1) dies; the others take
    the node's deliveries back at the view cut and redeliver them."""
    summary = assert_kept(
        simulate(tmp_path, 3, 2, FaultPlan(drop=0.05), crash="n1@1.5", work=0.6,
                 stop=2.5, duration=10)
    )
    assert summary["redelivered"] > 0
    assert summary["live"] == ["n0#1", "n2#1"]


def test_an_expired_delivery_goes_to_another_consumer_and_a_late_ack_still_counts(
    tmp_path: Path,
) -> None:
    summary = assert_kept(
        simulate(tmp_path, 3, 3, work=0.8, ack_timeout=0.5, stop=2, duration=10)
    )
    assert summary["redelivered"] > 0 and summary["acked"] == summary["confirmed"]


def test_the_minority_refuses_never_confirms_and_serves_again_after_the_heal(
    tmp_path: Path,
) -> None:
    """n2 (with producer p2) is cut off from 1.5 s to 4 s: it refuses with no_majority,
    confirms nothing meanwhile (checked), then rejoins as a new incarnation with the
    others' queues and its clients are served again."""
    result = simulate(tmp_path, 3, 4, partition="n2@1.5-4", stop=6, duration=12)
    summary = assert_kept(result)
    assert summary["refused"].get("no_majority", 0) > 0
    assert summary["excluded"] == 1 and "n2#2" in summary["live"]
    assert summary["confirmed"] > 0


def test_a_restarted_node_takes_the_queues_from_the_others(tmp_path: Path) -> None:
    summary = assert_kept(
        simulate(tmp_path, 3, 5, FaultPlan(drop=0.1, duplicate=0.1, reorder=0.3),
                 crash="n0@1", restart="n0@2", stop=3, duration=10)
    )
    assert summary["live"] == ["n0#2", "n1#1", "n2#1"]
    assert len(set(summary["positions"].values())) == 1


#: Seeds of the sweep below; ``GOSSAMER_QUEUES_SEEDS=3000`` makes it a soak.
SWEEP_SEEDS = int(os.environ.get("GOSSAMER_QUEUES_SEEDS", "200"))


#: Where the sweep's faults fall: crashes and partitions begin by second 2.5, around the
#: producers' stop at second 2.
SWEEP = SweepShape(
    nodes=(3, 5),
    faulty=(1, 1, 2),
    crash_within=2.5,
    restart_after=(0.3, 2),
    partition_from=(0.5, 2.5),
    partition_for=(0.5, 2),
    drop=(0.0, 0.05, 0.2),
)


def sweep_params(rng: random.Random) -> dict[str, Any]:
    """The queues' own parameters of a seed: slow consumers and short ack timeouts, and a
    quiet end long enough for the consumers to drain what was pushed."""
    params: dict[str, Any] = {
        "detect": rng.choice([0.2, 0.5]),
        "producers": rng.randint(1, 3),
        "consumers": rng.randint(1, 3),
        "credits": rng.choice([1, 2, 4]),
        "interval": rng.choice([0.1, 0.2]),
        "work": rng.choice([0.05, 0.2, 0.6]),
        "ack_timeout": rng.choice([0.5, 1.0, 2.0]),
        "stop": 2,
        "retransmit_initial": 0.05,
        "retransmit_max": 0.5,
    }
    # Long enough a quiet end for the consumers to drain what was pushed (a delivery that
    # outlives its ack timeout is made twice), after view changes of a few seconds.
    pushed = params["producers"] * params["stop"] / params["interval"]
    rate = params["consumers"] * params["credits"] / (params["work"] + 0.05)
    if params["work"] > params["ack_timeout"]:
        rate /= 2
    params["duration"] = round(params["stop"] + 6 + 2 * pushed / rate, 1)
    return params


def sweep_case(seed: int) -> FaultCase:
    """Seed ``seed`` of the sweep (:func:`gossamer.testing.sweeps.fault_case`): 3 to 5
    nodes, producers and consumers on different nodes, crashes (some restarted), a
    partition, loss up to 20 %, duplication, reordering and delay, slow consumers and
    short ack timeouts; producers stop at second 2 and the run goes on, quiet, so that
    every confirmed message must be received and acked. In about 85 % of the seeds the
    faulty nodes are a minority and the run must converge; in the rest only safety is
    checked (and the drain is not)."""
    case = fault_case(seed, SWEEP, sweep_params)
    if not case.keep_majority:
        case.params["drain"] = "false"
    return case


def test_the_promises_hold_over_hundreds_of_seeds(tmp_path: Path) -> None:
    seen: Counter[str] = Counter()
    for case, result in run_sweep(SWEEP_SEEDS, sweep_case, simulate, tmp_path, seen):
        summary = result.summary
        # The scenario carries a joiner's state in the view's INSTALL: it always fit.
        assert summary["state_too_large"] == 0, f"replay: {replay_command(result.request)}"
        if case.keep_majority:
            seen["majority"] += 1
            seen["drained"] += summary["quiet"]
        seen["redelivered"] += summary["redelivered"] > 0
        seen["refused"] += bool(summary["refused"])
        seen["excluded"] += summary["excluded"] > 0
        seen["confirmed"] += summary["confirmed"] > 0
    assert_exercised(seen, SWEEP_SEEDS, "redelivered", "refused", "excluded")
    assert seen["confirmed"] >= SWEEP_SEEDS * 9 // 10, seen
    # The drain checks ran (the run ended quiet) in nearly every run that kept a majority.
    assert seen["drained"] >= seen["majority"] * 9 // 10, seen


def test_the_checks_catch_a_node_that_confirms_without_a_majority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deliberately broken rule, every report vouching for any history and the view
    size ignored, makes the cut-off n2 confirm on its own: the checkers report it."""
    monkeypatch.setattr(ConfirmTracker, "vouches", lambda self, member, position: True)
    monkeypatch.setattr(QueueMember, "serving", property(lambda self: True))
    result = simulate(tmp_path, 3, 4, partition="n2@1.5-4", producers=3, stop=3, duration=8)
    found = " ".join(result.summary["violations"])
    assert "on a minority side" in found or "committed by 1 of its view" in found, found
