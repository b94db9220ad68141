"""``gossamer sim``: run a scenario in the deterministic simulator.

Run a scenario on a virtual clock. The same arguments give byte-identical output.
``--param NAME=VALUE`` and the scheduled-fault syntax are those of ``gossamer lab``
(``gossamer.params``, ``gossamer.faults``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.params import parse_assignments
from gossamer.sim import scenarios
from gossamer.sim.run import SimRequest, run_simulation

_HELP = "run a scenario in the deterministic simulator"
_DESCRIPTION = "Run a scenario on a virtual clock. The same arguments give byte-identical output."


def add_parser(commands: Any) -> None:
    """Register ``sim`` on ``gossamer``'s subcommands."""
    p = commands.add_parser("sim", help=_HELP, description=_DESCRIPTION)
    p.add_argument("--list", action="store_true", help="list the scenarios and their parameters")
    p.add_argument("--scenario", help="scenario name (see --list)")
    p.add_argument("--nodes", type=int, default=10, help="number of nodes (default 10)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--drop", type=float, default=0.0, help="probability a datagram is lost")
    p.add_argument("--dup", type=float, default=0.0, help="probability a datagram is duplicated")
    p.add_argument(
        "--delay",
        type=float,
        default=0.0,
        metavar="MS",
        help="extra delay per datagram, uniform in [0, MS] milliseconds",
    )
    p.add_argument(
        "--reorder",
        type=float,
        default=0.0,
        help="probability a datagram is held back so later ones overtake it",
    )
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="virtual seconds to run (default: the scenario's)",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scenario parameter (repeatable)",
    )
    p.add_argument("--run", default=None, help="run id written into every event")
    p.add_argument("--out", type=Path, help="output directory for <node>.jsonl and run.json")
    p.set_defaults(handler=run)


def list_scenarios() -> int:
    for scenario in scenarios.scenarios():
        duration = f"default duration {scenario.default_duration:g} s"
        print(f"{scenario.name}: {scenario.description} ({duration})")
        for param in scenario.params:
            print(f"    {param.describe()}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return list_scenarios()
    if not args.scenario:
        raise ConfigError("--scenario is required (see gossamer sim --list)")
    if args.out is None:
        raise ConfigError("--out DIR is required")
    request = SimRequest(
        scenario=args.scenario,
        nodes=args.nodes,
        seed=args.seed,
        out=args.out,
        faults=FaultPlan(
            drop=args.drop, duplicate=args.dup, delay=args.delay / 1000.0, reorder=args.reorder
        ),
        duration=args.duration,
        params=parse_assignments(args.param),
        run=args.run,
    )
    result = run_simulation(request)
    faults = ", ".join(f"{k}={v}" for k, v in result.fault_counts.items()) or "none"
    print(
        f"run {result.run}: {result.events} events from {args.nodes} nodes in {result.run_dir}",
        file=sys.stderr,
    )
    print(f"injected faults: {faults}", file=sys.stderr)
    return 0
