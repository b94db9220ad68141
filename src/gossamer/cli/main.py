"""``gossamer``: the command line. ``main(argv) -> int`` never calls ``sys.exit``.

Exit codes: 0 success, 1 a checked property failed, 2 unusable input (bad
arguments, unknown scenario, bad parameter), always with a one-line message.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from gossamer._version import __version__
from gossamer.cli import (
    analyze_cmd,
    discovery_cmd,
    gateway_cmd,
    gossip_cmd,
    isis_cmd,
    lab_cmd,
    node_cmd,
    ping_cmd,
    sim_cmd,
    trace_cmd,
)
from gossamer.errors import GossamerError

__all__ = ["entry", "main"]

EXIT_OK = 0
EXIT_USAGE = 2


class UsageError(Exception):
    """Raised instead of argparse's print-usage-and-exit, so main() can report one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gossamer",
        description="Group communication for processes on LANs and clusters.",
    )
    parser.add_argument("--version", action="version", version=f"gossamer {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sim_cmd.add_parser(commands)
    trace_cmd.add_parser(commands)
    ping_cmd.add_parser(commands)
    isis_cmd.COMMAND.add_parser(commands)
    gateway_cmd.COMMAND.add_parser(commands)
    discovery_cmd.COMMAND.add_parser(commands)
    gossip_cmd.COMMAND.add_parser(commands)
    analyze_cmd.COMMAND.add_parser(commands)
    node_cmd.COMMAND.add_parser(commands)
    lab_cmd.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: the process arguments) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        code: int = args.handler(args)
        return code
    except UsageError as exc:
        print(f"{exc} (see gossamer --help)", file=sys.stderr)
        return EXIT_USAGE
    except GossamerError as exc:
        print(f"gossamer: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def entry() -> NoReturn:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
