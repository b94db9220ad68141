"""``gossamer lab run`` / ``gossamer lab list`` / ``gossamer lab app``: real processes under
faults, analyzed.

``lab run`` starts N ``gossamer lab app`` processes (network namespaces when root,
otherwise 127.0.0.1), drives a scenario, injects the faults, runs ``gossamer analyze``
on the traces and exits with its code: 0 every property held, 1 one was violated, 2
unusable input or a run that could not be judged. Bad arguments are one line on
stderr and exit 2 (``gossamer.cli.main``). See docs/lab.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gossamer.cli import lab_app_cmd
from gossamer.daemon.protocols import PROTOCOLS
from gossamer.errors import GossamerError
from gossamer.faults import parse_crash, parse_partition
from gossamer.lab import scenarios
from gossamer.lab.plan import LabRequest
from gossamer.lab.runner import run_lab
from gossamer.params import parse_assignments

__all__ = ["add_parser", "list_scenarios", "main", "request_from_args", "run"]

EXIT_INTERRUPTED = 130


def add_parser(commands: Any) -> None:
    """Register ``lab`` (with ``run``, ``list`` and ``app``) on ``gossamer``'s subcommands."""
    lab = commands.add_parser(
        "lab",
        help="run a scenario on real node processes (netns or loopback) and analyze it",
        description="Run real gossamer nodes under faults and check what held.",
    )
    actions = lab.add_subparsers(dest="lab_action", metavar="ACTION", parser_class=type(lab))
    lab.set_defaults(handler=_no_action(lab))

    lab_app_cmd.COMMAND.add_parser(actions, name="app")

    listing = actions.add_parser("list", help="list the scenarios and their parameters")
    listing.set_defaults(handler=lambda args: list_scenarios())

    p = actions.add_parser(
        "run",
        help="run a scenario and analyze its traces",
        description="Start --hosts node processes, run the scenario's workload with the "
        "faults, analyze the traces with Spark, print the verdict and the report path. "
        "Exit 0 if every property held, 1 if one was violated, 2 on unusable input.",
    )
    p.add_argument("--scenario", required=True, help="scenario name (see gossamer lab list)")
    p.add_argument(
        "--hosts",
        type=int,
        default=None,
        metavar="N",
        help="number of node processes (default: the scenario's)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--netns",
        dest="mode",
        action="store_const",
        const="netns",
        help="network-namespace hosts (needs root; two subnets from 4 hosts)",
    )
    where.add_argument(
        "--loopback",
        dest="mode",
        action="store_const",
        const="loopback",
        help="every node on 127.0.0.1 with its own ports",
    )
    p.add_argument(
        "--drop", type=float, default=None, metavar="P", help="probability a datagram is lost"
    )
    p.add_argument(
        "--delay",
        type=float,
        default=None,
        metavar="MS",
        help="extra delay of delayed datagrams in milliseconds (see --param delay_rate)",
    )
    p.add_argument(
        "--crash",
        action="append",
        default=[],
        metavar="HOST@SECONDS",
        help="SIGKILL HOST this many seconds after the start (repeatable)",
    )
    p.add_argument(
        "--partition",
        action="append",
        default=[],
        metavar="A,B@FROM-TO",
        help="cut hosts A,B off from the rest from FROM to TO seconds (repeatable)",
    )
    p.add_argument(
        "--restart",
        action="append",
        default=[],
        metavar="HOST@SECONDS",
        help="start a crashed HOST again this many seconds after the start (cluster "
        "scenario: it rejoins as a new incarnation; repeatable)",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scenario parameter, or SECTION.FIELD of a protocol's config (repeatable; "
        "see gossamer lab list and docs/lab.md)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every node's RNGs (default 0)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="new output directory")
    p.add_argument(
        "--no-analyze",
        dest="analyze",
        action="store_false",
        help="only run and collect the traces (exit 0 unless a node failed)",
    )
    p.set_defaults(handler=run)


def _no_action(parser: argparse.ArgumentParser) -> Any:
    def handler(args: argparse.Namespace) -> int:
        print(
            f"{parser.prog}: choose an action: run, list or app (see {parser.prog} --help)",
            file=sys.stderr,
        )
        return 2

    return handler


def request_from_args(args: argparse.Namespace) -> LabRequest:
    """The ``LabRequest`` of parsed ``lab run`` arguments (syntax checked here)."""
    return LabRequest(
        scenario=args.scenario,
        hosts=args.hosts,
        out=args.out,
        mode=args.mode,
        drop=args.drop,
        delay_ms=args.delay,
        crashes=tuple(parse_crash(c) for c in args.crash),
        partitions=tuple(parse_partition(p) for p in args.partition),
        restarts=tuple(parse_crash(r, flag="--restart") for r in args.restart),
        params=parse_assignments(args.param),
        seed=args.seed,
        analyze=args.analyze,
    )


def list_scenarios() -> int:
    """Print every scenario, its services, defaults, parameters and checks."""
    for s in scenarios.scenarios():
        print(f"{s.name}: {s.description}")
        defaults = {p.name: p.default for p in s.params}
        print(f"    services: {', '.join(s.services)}; default hosts {s.default_hosts}")
        faults = s.faults_for(tuple(f"h{i}" for i in range(1, s.default_hosts + 1)))
        if faults.drop or faults.delay_ms or faults.crashes or faults.partitions:
            extra = (
                "".join(f", --crash {c}" for c in faults.crashes)
                + "".join(f", --partition {p}" for p in faults.partitions)
                + "".join(f", --restart {r}" for r in faults.restarts)
            )
            print(f"    default faults: --drop {faults.drop:g}, --delay {faults.delay_ms:g}{extra}")
        print(f"    checks: {', '.join(s.expected_checks(defaults))}")
        for param in s.params:
            print(f"    {param.describe()}")
    print("protocol parameters: --param SECTION.FIELD=VALUE sets a field of the core's config")
    print("on every node of the run (docs/lab.md, 'Parameters'):")
    for section, protocol in PROTOCOLS.items():
        names = sorted(
            f.name
            for f in dataclasses.fields(protocol.config)
            if f.init and f.name not in protocol.managed
        )
        line = f"{section} ({protocol.config.__name__}): {', '.join(names)}"
        print(textwrap.fill(line, 100, initial_indent="    ", subsequent_indent="        "))
    return 0


def run(args: argparse.Namespace) -> int:
    """``gossamer lab run``: the lab's exit code (0 held, 1 violated, 2 unusable)."""
    try:
        return run_lab(request_from_args(args)).code
    except KeyboardInterrupt:
        print("gossamer lab: interrupted (nodes stopped, namespaces removed)", file=sys.stderr)
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """Run just this command: ``python -m gossamer.cli.lab_cmd run --scenario ...``."""
    from gossamer.cli.main import UsageError, _Parser  # noqa: PLC0415 - the CLI's own parser

    parser = _Parser(prog="gossamer")
    add_parser(parser.add_subparsers(dest="command", parser_class=_Parser))
    try:
        args = parser.parse_args(["lab", *(sys.argv[1:] if argv is None else argv)])
        code: int = args.handler(args)
        return code
    except UsageError as exc:
        print(f"{exc} (see gossamer lab --help)", file=sys.stderr)
        return 2
    except GossamerError as exc:
        print(f"gossamer: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
