"""``--wire``, ``--key-file`` and ``--cluster``: one way to choose the wire, for every command.

Every protocol command takes the same three options with the same meaning:

- ``--wire sealed`` (the default): gossamer's authenticated envelope around every datagram
  and frame. It needs the group key, from ``--key-file`` or the ``GOSSAMER_KEY`` environment
  variable: 32 raw bytes, 64 hex digits, or a generated passphrase of at least 16 bytes.
  There is no default key.
- ``--wire original``: the original programs' bytes and socket habits, plaintext, to work
  with them (``docs/interop.md``). A key is refused there, so nobody believes it is used.
- ``--cluster NAME``: bound into the key, so one key gives unrelated keys in two clusters.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gossamer.errors import ConfigError
from gossamer.wire.mode import (
    DEFAULT_CLUSTER,
    KEY_ENV,
    WIRE_CHOICES,
    Wire,
    WireMode,
    parse_key,
    parse_wire,
)

__all__ = ["KEY_ENV", "add_wire_arguments", "read_key_file", "wire_from_args"]

def add_wire_arguments(parser: Any) -> None:
    """Add ``--wire``, ``--key-file`` and ``--cluster`` to ``parser``."""
    parser.add_argument(
        "--wire",
        choices=WIRE_CHOICES,
        default="sealed",
        help="sealed (default): authenticated encryption under the group key; "
        "original: the original programs' plaintext wire, to work with them",
    )
    parser.add_argument(
        "--key-file",
        type=Path,
        metavar="PATH",
        help=f"the group key for --wire sealed (or ${KEY_ENV}): 32 raw bytes, 64 hex "
        "digits, or a generated passphrase of 16+ bytes",
    )
    parser.add_argument(
        "--cluster",
        default=DEFAULT_CLUSTER,
        help=f"cluster name bound into the key (default {DEFAULT_CLUSTER!r})",
    )


def read_key_file(path: Path) -> bytes:
    """The key in ``path`` (``parse_key`` rules); ``ConfigError`` if it cannot be read."""
    try:
        return parse_key(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read the key file {str(path)!r}: {exc.strerror}") from None


def wire_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Wire:
    """The :class:`Wire` the options describe (``ConfigError`` when unusable)."""
    environ = os.environ if environ is None else environ
    mode = parse_wire(args.wire, setting="--wire")
    key: bytes | None = None
    if args.key_file is not None:
        key = read_key_file(args.key_file)
    elif environ.get(KEY_ENV):
        key = parse_key(environ[KEY_ENV].encode())
    if mode is WireMode.ORIGINAL:
        if args.key_file is not None:
            raise ConfigError("--key-file has no use with --wire original (it is plaintext)")
        key = None
    return Wire(mode=mode, key=key, cluster=args.cluster)
