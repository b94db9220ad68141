"""Sweeps of simulated runs over hundreds of seeds: :func:`fault_case` draws each seed's
faults (crashes, restarts, joins, a partition, loss, duplication, reordering and delay),
:func:`run_sweep` runs the seeds and checks what every run of a sweep must keep, and
:func:`assert_exercised` that the sweep as a whole injected what it claims.

Contract of :func:`fault_case`: everything is drawn from ``random.Random(seed)`` in a
fixed order, so a seed names one case for good and a failing seed replays. The order is

1. the node count, ``randint(*shape.nodes)``;
2. the scenario's own parameters, ``draw_params(rng)`` (it may draw, and may add derived
   values such as a duration);
3. when ``shape.join_by`` is set and there are more than three nodes, up to two joiners
   (never ``n0``), each joining at a time in ``[0.5, join_by]``;
4. whether the run keeps a majority (about 85 % of the seeds): if so at most a minority
   of the founders (the nodes that are not joiners) is faulty, otherwise any number;
5. the faulty nodes, as many as one of ``shape.faulty`` allows; each crashes with
   probability 0.6, ``[0.5, crash_within]`` seconds after it started, and a crashed one
   restarts with probability 0.5, ``restart_after`` seconds after its crash;
6. the faulty nodes that did not crash (or, in a case that loses its majority and
   crashed them all, all the faulty ones) are cut off by one partition that begins in
   ``partition_from`` and lasts ``partition_for`` seconds;
7. the network faults: drop from ``shape.drop``, duplicate 0 or 0.1, reorder 0 or 0.3,
   delay up to 0, 2 or 20 ms.

Changing that order or a range changes every case of every sweep that uses the shape
(and so which runs the suite checks): add to a scenario's own parameters instead.
``crash``, ``restart``, ``join`` and ``partition`` are set in ``params`` only when drawn,
in the text form of the scenarios' ``--param`` values (``n1@2.50``, ``n3,n4@2.00-4.50``).
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from gossamer.faults import FaultPlan
from gossamer.sim.run import RunResult, replay_command

__all__ = ["SWEEP_FAULTS", "FaultCase", "Simulate", "SweepShape", "assert_exercised",
           "fault_case", "run_sweep"]

#: The faults :func:`fault_case` draws, as a run counts them (``RunResult.fault_counts``).
SWEEP_FAULTS = ("crash", "restart", "partition", "drop", "duplicate", "reorder")


@dataclass(frozen=True)
class SweepShape:
    """The ranges a sweep draws its faults from (times in seconds of simulated time)."""

    nodes: tuple[int, int]
    """Fewest and most nodes, both included."""
    crash_within: float
    """A crash comes between 0.5 s and this long after the node started."""
    restart_after: tuple[float, float]
    """A restart comes this long after the crash."""
    partition_from: tuple[float, float]
    """The partition begins in this span."""
    partition_for: tuple[float, float]
    """The partition lasts this long."""
    faulty: tuple[int, ...] = (1, 1, 2, 3)
    """How many nodes are faulty, one drawn (then capped by the majority's budget)."""
    drop: tuple[float, ...] = (0.0, 0.1, 0.3)
    """The loss rate, one drawn."""
    join_by: float | None = None
    """Joiners join by then; ``None``: no joiners (and nothing drawn for them)."""


class FaultCase(NamedTuple):
    """One seed's run: ``nodes`` nodes, the network ``faults``, the scenario's ``params``
    and whether the faults leave a majority, so the run must converge (``keep_majority``);
    otherwise only safety can be checked."""

    nodes: int
    faults: FaultPlan
    params: dict[str, Any]
    keep_majority: bool


def fault_case(
    seed: int, shape: SweepShape, draw_params: Callable[[random.Random], dict[str, Any]]
) -> FaultCase:
    """The case of ``seed`` for a sweep of ``shape``; ``draw_params`` draws the scenario's
    own parameters (step 2 of the module's order). The result's ``params`` is a new dict
    the caller may add to."""
    rng = random.Random(seed)
    n = rng.randint(*shape.nodes)
    names = [f"n{i}" for i in range(n)]
    params = draw_params(rng)
    starts: dict[str, float] = {}
    if shape.join_by is not None:
        joiners = rng.sample(names[1:], rng.choice([0, 0, 1, 2]) if n > 3 else 0)
        starts = {j: round(rng.uniform(0.5, shape.join_by), 2) for j in joiners}
        if joiners:
            params["join"] = ",".join(f"{j}@{t}" for j, t in starts.items())
    founders = [x for x in names if x not in starts]
    keep_majority = rng.random() < 0.85
    budget = (len(founders) - 1) // 2 if keep_majority else len(founders)
    faulty = rng.sample(names, min(budget, rng.choice(shape.faulty)))
    crashes = {
        c: starts.get(c, 0) + rng.uniform(0.5, shape.crash_within)
        for c in faulty
        if rng.random() < 0.6
    }
    if crashes:
        params["crash"] = ",".join(f"{c}@{t:.2f}" for c, t in crashes.items())
        restarts = [
            f"{c}@{t + rng.uniform(*shape.restart_after):.2f}"
            for c, t in crashes.items()
            if rng.random() < 0.5
        ]
        if restarts:
            params["restart"] = ",".join(restarts)
    side = [x for x in faulty if x not in crashes] or ([] if keep_majority else faulty)
    if side:
        start = rng.uniform(*shape.partition_from)
        end = start + rng.uniform(*shape.partition_for)
        params["partition"] = f"{','.join(side)}@{start:.2f}-{end:.2f}"
    faults = FaultPlan(
        drop=rng.choice(shape.drop),
        duplicate=rng.choice([0.0, 0.1]),
        reorder=rng.choice([0.0, 0.3]),
        delay=rng.choice([0.0, 0.002, 0.02]),
    )
    return FaultCase(n, faults, params, keep_majority)


class Simulate(Protocol):
    """Runs one scenario into ``out``: ``params`` are its ``--param`` values (a
    ``duration`` among them is how long the run lasts)."""

    def __call__(
        self, out: Path, nodes: int, seed: int, faults: FaultPlan, **params: Any
    ) -> RunResult: ...


def run_sweep(
    seeds: int,
    draw: Callable[[int], FaultCase],
    simulate: Simulate,
    out: Path,
    seen: Counter[str],
) -> Iterator[tuple[FaultCase, RunResult]]:
    """Run seeds ``0`` to ``seeds - 1`` one after the other: ``draw(seed)`` gives the case,
    ``simulate`` runs it into ``out / str(seed)``. Fails, with the command that replays
    the run, on any violation the scenario's checks found, or when a case that keeps a
    majority did not converge. Counts in ``seen`` each fault the run injected (so the
    counts are of seeds), then yields the case and the result for the scenario's own
    checks and counts; once the caller moves on, the run's output is removed."""
    for seed in range(seeds):
        case = draw(seed)
        path = out / str(seed)
        result = simulate(path, case.nodes, seed, case.faults, **case.params)
        summary, replay = result.summary, replay_command(result.request)
        assert summary["violation_count"] == 0, f"{summary['violations']}\nreplay: {replay}"
        if case.keep_majority:
            assert summary["converged"], f"{summary['not_converged']}\nreplay: {replay}"
        seen.update(k for k, v in result.fault_counts.items() if v)
        yield case, result
        shutil.rmtree(path)


def assert_exercised(seen: Counter[str], seeds: int, *also: str) -> None:
    """Fail unless each of :data:`SWEEP_FAULTS` and of ``also`` was counted in ``seen`` in
    at least one seed in 50 of a sweep of ``seeds``: the sweep exercised what it claims."""
    for what in (*SWEEP_FAULTS, *also):
        assert seen[what] >= seeds // 50, (what, seen)
