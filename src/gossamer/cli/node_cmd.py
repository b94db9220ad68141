"""``gossamer node --config node.toml [--check]``: run one member of a gossamer cluster.

The node daemon (``docs/node.md``): it finds the other nodes (discovery), agrees with
them on who is in the cluster (views), and serves applications through the 신경 gateway;
it runs no workload of its own. Its TOML file names the cluster, its seeds and its key
(environment overrides ``GOSSAMER__SECTION__KEY``; ``GOSSAMER_KEY`` for the key). It
prints one JSON status line per event on standard output (``ready``, ``view``,
``progress`` every second, ``done``) and stops cleanly on SIGTERM or SIGINT (exit 0).

Exit codes: 0 stopped; 2 bad configuration (one line on standard error naming the key);
1 runtime failure (a port in use, a driver that failed). ``--check`` validates the
configuration, prints it resolved (every default filled in; never the key) and exits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gossamer.aio.loop import run as run_loop
from gossamer.cli.command import Command
from gossamer.daemon.config import load_daemon_config
from gossamer.daemon.run import run_daemon
from gossamer.errors import ConfigError, GossamerError

__all__ = ["COMMAND", "main", "run"]


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, required=True, help="the node's TOML file")
    p.add_argument(
        "--check", action="store_true", help="validate, print the resolved configuration, exit"
    )


def run(args: argparse.Namespace) -> int:
    """Run the node; ``ConfigError`` propagates (exit 2), other failures exit 1."""
    config = load_daemon_config(args.config)
    if args.check:
        sys.stdout.write(config.to_toml())
        return 0
    try:
        code: int = run_loop(run_daemon(config))
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
