"""One subcommand run on its own (``python -m gossamer.cli.<command>``).

The lab starts nodes, and tests start gateways and Spark jobs, as
``python -m gossamer.cli.<command>``: that imports only the one command, not the
whole CLI. Every such entry point parses, runs, and turns a ``GossamerError`` into
one line ``<prog>: error: ...`` on stderr and exit code 2 (unusable input), as
``gossamer <command>`` does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from gossamer.errors import GossamerError

__all__ = ["EXIT_UNUSABLE", "run_alone"]

EXIT_UNUSABLE = 2


def run_alone(
    prog: str,
    configure: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None,
    *,
    description: str | None = None,
) -> int:
    """Parse ``argv`` (default: the process arguments) with the options ``configure``
    adds, call ``run`` and return its exit code; a ``GossamerError`` exits 2."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    configure(parser)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return run(args)
    except GossamerError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_UNUSABLE
