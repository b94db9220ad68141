"""Running a scenario from a test, as ``gossamer sim`` does."""

from __future__ import annotations

from pathlib import Path

from gossamer.faults import FaultPlan
from gossamer.sim.run import RunResult, SimRequest, run_simulation


def simulate(
    scenario: str,
    out: Path,
    *,
    nodes: int,
    seed: int = 1,
    faults: FaultPlan | None = None,
    duration: float | None = None,
    **params: object,
) -> RunResult:
    """Run ``scenario`` into ``out``: ``params`` are its ``--param`` values (any value,
    passed as its text); ``duration`` ``None`` is the scenario's own."""
    request = SimRequest(
        scenario=scenario,
        nodes=nodes,
        seed=seed,
        out=out,
        faults=faults or FaultPlan(),
        duration=duration,
        params={name: str(value) for name, value in params.items()},
    )
    return run_simulation(request)
