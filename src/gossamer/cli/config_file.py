"""Long-running programs configured by one TOML file: ``--config FILE [--check]``.

``gossamer node`` (the cluster daemon) and ``gossamer lab app`` (the lab's per-host
program) take the same two options and handle them the same way: ``--check`` validates
the file and prints the resolved configuration as TOML; otherwise the program runs on
the project's event loop (uvloop where installed: every driver feeds cores and stamps
traces with one clock, ``time.monotonic()``, never uvloop's millisecond-cached
``loop.time()``). A ``ConfigError`` propagates (the command prints one line naming the
key and exits 2); a runtime failure (a port in use, a driver that failed) is one line
``<prog>: error: ...`` on standard error and exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gossamer.aio.loop import run as run_loop
from gossamer.errors import ConfigError, GossamerError

__all__ = ["add_config_arguments", "run_configured"]


class _Printable(Protocol):
    def to_toml(self) -> str: ...


_C = TypeVar("_C", bound=_Printable)


def add_config_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--config FILE`` (required; ``what`` says whose file) and ``--check``."""
    parser.add_argument("--config", type=Path, required=True, help=what)
    parser.add_argument(
        "--check", action="store_true", help="validate, print the resolved configuration, exit"
    )


def run_configured(
    args: argparse.Namespace,
    *,
    prog: str,
    load: Callable[[Path], _C],
    program: Callable[[_C], Coroutine[Any, Any, int]],
) -> int:
    """Load ``args.config``; print it (``--check``) or run ``program`` on it."""
    config = load(args.config)
    if args.check:
        sys.stdout.write(config.to_toml())
        return 0
    try:
        code: int = run_loop(program(config))
    except ConfigError:
        raise
    except (GossamerError, OSError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return code
