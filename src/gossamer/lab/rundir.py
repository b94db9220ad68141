"""The run directory: created empty, then the run's key and one checked config per node.

Layout (docs/lab.md): ``<out>/secrets/cluster.key`` (fresh per run, mode 0600),
``<out>/config/<node>.toml``, ``<out>/logs/``, ``<out>/state/``; the nodes write
``<out>/<node>.jsonl`` and the runner ``<out>/run.json``.

Contract: :func:`prepare_out` refuses an existing non-empty directory (runs never mix);
:func:`write_config` (and :func:`write_daemon_config`) write only what the node's own
loader accepted, so a node never
reads a configuration the lab did not check.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gossamer.daemon.config import DaemonConfig, parse_daemon_config
from gossamer.errors import ConfigError, GossamerError
from gossamer.lab import LabError
from gossamer.lab.config import NodeConfig, parse_config

__all__ = ["prepare_out", "write_config", "write_daemon_config", "write_secret"]


def prepare_out(out: Path) -> None:
    """Create ``out`` (empty or new) and its ``config``, ``logs`` and ``state`` folders."""
    if out.exists():
        if not out.is_dir():
            raise ConfigError(f"--out {out} exists and is not a directory")
        if any(out.iterdir()):
            raise ConfigError(f"--out {out} exists and is not empty (the lab never mixes runs)")
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("config", "logs", "state"):
        (out / sub).mkdir(exist_ok=True)


def write_secret(path: Path, size: int = 32) -> None:
    """Write ``size`` fresh random bytes to ``path``, created with mode 0600 (never reused).

    ``O_EXCL``: an existing key is an error rather than silently shared between runs.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(size))


def write_config(path: Path, doc: Mapping[str, Any]) -> NodeConfig:
    """Validate a node's configuration with the node's own rules and write it as TOML.

    What is written is ``NodeConfig.to_toml()``, so the node reads back exactly what was
    checked here; a document the node would reject raises ``LabError`` naming the key.
    """
    return _write_checked(path, lambda: parse_config(doc, base=path.parent, env={}), "node")


def write_daemon_config(path: Path, doc: Mapping[str, Any]) -> DaemonConfig:
    """:func:`write_config` for a ``gossamer node`` daemon (the ``cluster`` scenario):
    checked by the daemon's own loader, written as its resolved ``to_toml()``."""
    return _write_checked(path, lambda: parse_daemon_config(doc, base=path.parent, env={}),
                          "daemon")


class _Checked(Protocol):
    def to_toml(self) -> str: ...


_C = TypeVar("_C", bound=_Checked)


def _write_checked(path: Path, parse: Callable[[], _C], who: str) -> _C:
    try:
        config = parse()
    except GossamerError as exc:
        raise LabError(f"the lab built a config the {who} rejects: {path}: {exc}") from exc
    path.write_text(config.to_toml(), encoding="utf-8")
    return config
