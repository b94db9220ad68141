"""``gossamer lab app --config host.toml [--check]``: run the lab's application on one host.

The program ``gossamer lab run`` starts on each of its hosts (``docs/lab-app.md``): an
application of the library with a built-in workload, not the cluster node (that is
``gossamer node``, ``docs/node.md``). It composes discovery, gossip, ISIS (with
snapshots), links, a gateway and its clients as its TOML configuration says
(environment overrides ``GOSSAMER__SECTION__KEY``), writes its trace, prints one JSON
status line per event on standard output (``ready``, ``progress`` about every second,
``done``) and shuts down cleanly on SIGTERM or SIGINT (discovery leave, sockets closed,
trace flushed, ``done``, exit 0).

Exit codes: 0 done; 2 bad configuration (one line on standard error naming the key);
1 runtime failure (a port in use, a driver that failed). ``--check`` validates the
configuration, prints it back as TOML and exits.
"""

from __future__ import annotations

import argparse
import sys

from gossamer.cli.command import Command
from gossamer.cli.config_file import add_config_arguments, run_configured
from gossamer.lab.app import run_app
from gossamer.lab.config import load_config

__all__ = ["COMMAND", "main", "run"]


def configure(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, "the host's TOML file (docs/lab-app.md)")


def run(args: argparse.Namespace) -> int:
    """Run it; ``ConfigError`` propagates (exit 2), other failures exit 1."""
    return run_configured(args, prog="gossamer lab app", load=load_config, program=run_app)


COMMAND = Command("lab app", __doc__, configure, run)
main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
