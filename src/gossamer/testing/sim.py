"""Helpers for tests that run the simulator.

DESIGN.md asks that a failing simulation test print the seed and the command
that replays it, and that a fault scenario that injected nothing fails.
"""

from __future__ import annotations

from gossamer.sim.run import RunResult, replay_command

__all__ = ["assert_faults_injected", "replay_command"]


def assert_faults_injected(result: RunResult, *faults: str) -> None:
    """Fail unless each named fault was injected at least once in the run."""
    missing = [f for f in faults if not result.fault_counts.get(f)]
    assert not missing, (
        f"fault scenario injected no {', '.join(missing)} (counts: {result.fault_counts}); "
        f"replay: {replay_command(result.request)}"
    )
