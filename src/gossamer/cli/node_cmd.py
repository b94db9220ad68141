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

from gossamer.cli.command import Command
from gossamer.cli.config_file import add_config_arguments, run_configured
from gossamer.daemon.config import load_daemon_config
from gossamer.daemon.run import run_daemon

__all__ = ["COMMAND", "main", "run"]


def configure(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, "the node's TOML file (docs/node.md)")


def run(args: argparse.Namespace) -> int:
    """Run it; ``ConfigError`` propagates (exit 2), other failures exit 1."""
    return run_configured(args, prog="gossamer node", load=load_daemon_config, program=run_daemon)


COMMAND = Command("node", __doc__, configure, run)
main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
