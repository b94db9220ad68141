"""``gossamer trace summary DIR``: counts of a run's events per layer and kind."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from gossamer.errors import ConfigError
from gossamer.trace import TraceReader


def add_parser(commands: Any) -> None:
    p = commands.add_parser("trace", help="inspect trace files")
    sub = p.add_subparsers(
        dest="trace_command", metavar="SUBCOMMAND", required=True, parser_class=type(p)
    )
    summary = sub.add_parser("summary", help="count events per layer and kind")
    summary.add_argument("dir", type=Path, help="a run directory of <node>.jsonl files")
    summary.add_argument("--strict", action="store_true", help="fail on the first malformed line")
    summary.set_defaults(handler=run_summary)


def summarize(
    run_dir: Path, *, strict: bool = False
) -> tuple[Counter[tuple[str, str]], int, TraceReader]:
    """Counts per (layer, kind), the number of node files, and the reader (with its bad lines)."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir} is not a directory")
    files = sorted(run_dir.glob("*.jsonl"))
    if not files:
        raise ConfigError(f"{run_dir} has no .jsonl trace files")
    reader = TraceReader(strict=strict)
    counts: Counter[tuple[str, str]] = Counter()
    for path in files:
        for event in reader.read(path):
            counts[(event.layer, event.kind)] += 1
    return counts, len(files), reader


def format_summary(counts: Counter[tuple[str, str]], files: int) -> str:
    total = sum(counts.values())
    width = max([len(f"{layer}/{kind}") for layer, kind in counts] + [12])
    lines = [f"{files} node files, {total} events", f"{'layer/kind':<{width}}  {'events':>8}"]
    for (layer, kind), n in sorted(counts.items()):
        lines.append(f"{layer + '/' + kind:<{width}}  {n:>8}")
    return "\n".join(lines)


def run_summary(args: argparse.Namespace) -> int:
    counts, files, reader = summarize(args.dir, strict=args.strict)
    print(format_summary(counts, files))
    for bad in reader.bad_lines[:20]:
        print(f"skipped {bad}", file=sys.stderr)
    if len(reader.bad_lines) > 20:
        print(f"... and {len(reader.bad_lines) - 20} more malformed lines", file=sys.stderr)
    return 0
