"""Deterministic discrete-event simulator that runs the protocol cores on a virtual clock.

``Simulator`` is the engine, ``Network`` the hosts and subnets, ``scenarios`` the
registry of named runs, and ``run_simulation`` writes a run directory.
"""

from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.network import Host, LinkModel, Network
from gossamer.sim.run import RunResult, SimRequest, run_simulation

__all__ = [
    "Host",
    "LinkModel",
    "Network",
    "NodeContext",
    "RunResult",
    "SimNode",
    "SimRequest",
    "Simulator",
    "run_simulation",
]
