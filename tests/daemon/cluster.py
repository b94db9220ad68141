"""Node daemons' files for the tests: lab-speed timers on 127.0.0.1 (the processes
themselves: ``gossamer.testing.daemons``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

from gossamer.daemon.config import DEFAULT_PORTS
from gossamer.testing import free_ports
from gossamer.testing.daemons import HOST


def write_key(tmp: Path) -> Path:
    key = tmp / "cluster.key"
    key.write_bytes(bytes(range(32)))
    return key


def node_file(
    tmp: Path, name: str, ports: dict[str, int], *, seeds: list[str], bootstrap: bool,
    address: str = HOST, **extra: dict[str, Any],
) -> Path:
    """A daemon's TOML file with lab-speed timers (and loopback discovery unless
    ``extra`` gives ``discovery.broadcast_address``)."""
    document: dict[str, Any] = {
        "cluster": {"name": "test", "key_file": "cluster.key", "seeds": seeds,
                    "bootstrap": bootstrap, "bootstrap_wait": 2.0},
        "node": {"name": name, "address": address, "trace": f"{name}.jsonl"},
        "ports": ports,
        "discovery": {"broadcast_interval": 0.3, "inactive_time": 1.0, "heartbeat_wait": 0.3},
        "views": {"retry": 0.05},
    }
    for section, values in extra.items():
        document.setdefault(section, {}).update(values)
    path = tmp / f"{name}.toml"
    path.write_text(tomli_w.dumps(document))
    return path


def mesh(tmp: Path, names: list[str], **extra: dict[str, Any]) -> dict[str, Path]:
    """One file per node: the first may found (bootstrap) and names the others as seeds,
    so that, restarted, it joins them; the others name it as their seed. ``extra``
    sections are added to every file (``gateway={"password": "pw"}``)."""
    write_key(tmp)
    numbers = free_ports(len(names) * len(DEFAULT_PORTS))
    ports = {
        name: dict(zip(DEFAULT_PORTS, numbers[i * len(DEFAULT_PORTS):], strict=False))
        for i, name in enumerate(names)
    }
    first = names[0]
    files = {}
    for name in names:
        seeds = [f"{HOST}:{ports[other]['discovery']}" for other in names
                 if other != name and first in (name, other)]
        files[name] = node_file(tmp, name, ports[name], seeds=seeds, bootstrap=name == first,
                                **extra)
    return files
