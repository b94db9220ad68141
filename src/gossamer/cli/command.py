"""One subcommand: how ``gossamer`` registers it and how it runs on its own.

A command module describes itself once, ``COMMAND = Command(name, __doc__, configure,
run)``: its docstring is the command's one text (the first line's summary is what
``gossamer --help`` lists, the whole is what ``--help`` prints), ``configure`` adds its
options and ``run`` handles it. ``gossamer`` registers it with :meth:`Command.add_parser`;
the lab starts nodes, and tests start gateways and Spark jobs, as ``python -m
gossamer.cli.<command>`` through :meth:`Command.main`, which imports only the one command,
not the whole CLI, and turns a ``GossamerError`` into one line ``<prog>: error: ...`` on
stderr and exit code 2 (unusable input), as ``gossamer`` does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gossamer.errors import GossamerError

__all__ = ["EXIT_UNUSABLE", "Command"]

EXIT_UNUSABLE = 2

#: The docstring keeps its lines and examples in ``--help``.
_RAW = argparse.RawDescriptionHelpFormatter


class Command:
    """``gossamer <name>``: ``configure`` adds its options, ``run`` handles it.

    ``doc`` starts with a line ``NAME-AND-USAGE: summary.``, where the name and usage are
    in double back-quotes: the summary, back-quotes removed, is the ``help`` listed by
    ``gossamer --help``; the whole text is the ``description``.
    """

    __slots__ = ("configure", "description", "help", "name", "run")

    def __init__(
        self,
        name: str,
        doc: str | None,
        configure: Callable[[argparse.ArgumentParser], None],
        run: Callable[[argparse.Namespace], int],
    ) -> None:
        self.name = name
        self.description = doc or ""  # None under python -OO
        first = self.description.split("\n", 1)[0]
        self.help = first.partition("``: ")[2].replace("``", "").rstrip(".") or first
        self.configure = configure
        self.run = run

    def _parser(self, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        self.configure(parser)
        parser.set_defaults(handler=self.run)
        return parser

    def add_parser(self, commands: Any, *, name: str | None = None) -> None:
        """Register the command on the ``gossamer`` command's subparsers (or, under
        ``name``, on a command's own: ``lab app`` is ``app`` of ``lab``)."""
        self._parser(
            commands.add_parser(
                name or self.name, help=self.help, description=self.description,
                formatter_class=_RAW,
            )
        )

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Run the command on its own (``python -m gossamer.cli.<module> ARGS``)."""
        prog = f"gossamer {self.name}"
        parser = argparse.ArgumentParser(
            prog=prog, description=self.description, formatter_class=_RAW
        )
        args = self._parser(parser).parse_args(list(sys.argv[1:] if argv is None else argv))
        try:
            return self.run(args)
        except GossamerError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
            return EXIT_UNUSABLE
