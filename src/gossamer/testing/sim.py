"""Helpers for tests that run the simulator.

DESIGN.md asks that a failing simulation test print the seed and the command
that replays it, and that a fault scenario that injected nothing fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gossamer.sim.run import RunResult, replay_command

if TYPE_CHECKING:
    from gossamer.faults import FaultPlan

__all__ = ["assert_faults_injected", "expected_faults", "replay_command"]


def expected_faults(result: RunResult, faults: FaultPlan, *, at_least: float = 10) -> list[str]:
    """The faults of ``faults`` that the run must have injected: those expected at least
    ``at_least`` times over the datagrams it sent (a small run may by chance inject none
    of a rare fault). Pass them to :func:`assert_faults_injected`."""
    sent = result.stats.get("datagrams_sent", 0)
    plan = {
        "drop": faults.drop,
        "duplicate": faults.duplicate,
        "reorder": faults.reorder,
        "delay": 1.0 if faults.delay else 0.0,
    }
    return [name for name, p in plan.items() if p * sent * (1 - faults.drop) >= at_least]


def assert_faults_injected(result: RunResult, *faults: str) -> None:
    """Fail unless each named fault was injected at least once in the run."""
    missing = [f for f in faults if not result.fault_counts.get(f)]
    assert not missing, (
        f"fault scenario injected no {', '.join(missing)} (counts: {result.fault_counts}); "
        f"replay: {replay_command(result.request)}"
    )
