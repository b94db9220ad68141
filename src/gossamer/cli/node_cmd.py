"""``gossamer node --config node.toml [--check]``: run one lab node (``docs/node.md``).

The node composes discovery, gossip, ISIS (with snapshots), links and the gateway as
its TOML configuration says (environment overrides ``GOSSAMER__SECTION__KEY``), writes
its trace, prints one JSON status line per event on standard output (``ready``,
``progress`` about every second, ``done``) and shuts down cleanly on SIGTERM or SIGINT
(discovery leave, sockets closed, trace flushed, ``done``, exit 0).

Exit codes: 0 done; 2 bad configuration (one line on standard error naming the key);
1 runtime failure (a port in use, a driver that failed). ``--check`` validates the
configuration, prints it back as TOML and exits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gossamer.aio.loop import run as run_loop
from gossamer.cli.command import Command
from gossamer.errors import ConfigError, GossamerError
from gossamer.lab.config import load_config
from gossamer.lab.node import run_node

__all__ = ["COMMAND", "main", "run"]


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, required=True, help="the node's TOML file")
    p.add_argument(
        "--check", action="store_true", help="validate, print the resolved configuration, exit"
    )


def run(args: argparse.Namespace) -> int:
    """Run the node; ``ConfigError`` propagates (exit 2), other failures exit 1."""
    config = load_config(args.config)
    if args.check:
        sys.stdout.write(config.to_toml())
        return 0
    try:
        # uvloop where installed: every driver, the fault injector and the gateway feed
        # cores and stamp traces with one clock, time.monotonic() (aio._pump.now), never
        # uvloop's loop.time(), which is cached to whole milliseconds.
        code: int = run_loop(run_node(config))
    except ConfigError:
        raise
    except (GossamerError, OSError) as exc:
        print(f"gossamer node: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return code


COMMAND = Command("node", __doc__, configure, run)
main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
