"""Command-line options named after a configuration's parameters.

One name per parameter (``docs/api.md``): a ``DiscoveryConfig`` or ``GossipConfig`` field
``broadcast_interval`` is the option ``--broadcast-interval``, in the same unit. An option
left out is absent from ``given``, so the configuration's own default applies.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["Option", "add_options", "given"]

#: ``(parameter name, type, help text)``.
Option = tuple[str, type, str]


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """Add ``--name-with-dashes`` for each option (no default: see ``given``)."""
    for name, kind, text in options:
        parser.add_argument("--" + name.replace("_", "-"), type=kind, help=text)


def given(args: argparse.Namespace, options: Sequence[Option]) -> dict[str, Any]:
    """The options the command line gave, by parameter name."""
    values = {name: getattr(args, name) for name, _, _ in options}
    return {name: value for name, value in values.items() if value is not None}
