"""The ``cluster`` and ``queues`` scenarios' processes: a ``gossamer node`` daemon and a
client app per host.

Where every other scenario runs one ``gossamer lab app`` per host, these scenarios
(``Scenario.daemons``) run on each host ``h<i>``:

- process ``h<i>``: the daemon, ``gossamer node --config config/h<i>.toml``
  (``docs/node.md``): cluster name = the run's id, the run's fresh key, every other host's
  discovery address as a seed (``h1`` alone may found the cluster), on namespaces the
  subnet's broadcast too; its trace ``<out>/h<i>.jsonl``; its queues in ``<out>/state``;
- process ``h<i>-clients``: ``gossamer lab app`` with only a ``[cluster]`` section
  (``gossamer.lab.cluster_clients``, or ``gossamer.lab.queue_clients`` for ``queues``):
  신경 clients of that daemon's gateway and their workload, traced into
  ``<out>/h<i>-clients.jsonl``.

Ports: the lab's block of a host, its ``isis`` port serving as the daemon's ``views`` port.
Scenario parameters ``SECTION.FIELD`` go into the daemons' protocol sections.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from gossamer.addresses import format_address
from gossamer.daemon.config import DEFAULT_PORTS as DAEMON_PORTS
from gossamer.lab.hosts import HostSpec, Placement
from gossamer.lab.scenarios import Value

__all__ = ["CLIENTS_SUFFIX", "client_configs", "clients_of", "daemon_configs"]

#: A host's client app is the process (and trace) ``<host>-clients``.
CLIENTS_SUFFIX: Final = "-clients"
#: The daemon's ports by the lab's port names (``views`` takes the ``isis`` port).
_PORT_OF: Final = {name: ("isis" if name == "views" else name) for name in DAEMON_PORTS}
#: Seconds the founder waits for a member before founding (the others start with it).
BOOTSTRAP_WAIT: Final = 2.0
_DAEMON_SECTIONS: Final = ("discovery", "views", "gossip", "link", "gateway")


def clients_of(host: str) -> str:
    """The client app process (and trace node) of ``host``."""
    return host + CLIENTS_SUFFIX


def _address(host: HostSpec, port: str) -> str:
    return format_address((host.address, host.ports[port]))


def daemon_configs(
    values: Mapping[str, Value],
    placement: Placement,
    *,
    run: str,
    out: Path,
    key_file: Path,
    seed: int,
    protocol: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """One ``gossamer node`` document per host (the TOML tables of ``docs/node.md``)."""
    out = out.resolve()
    docs: dict[str, dict[str, Any]] = {}
    for index, host in enumerate(placement.hosts):
        discovery: dict[str, Any] = {
            name: values[name]
            for name in ("broadcast_interval", "inactive_time", "heartbeat_wait",
                         "heartbeat_attempts", "max_peers")
        }
        if host.broadcast is not None:
            discovery["broadcast_address"] = host.broadcast
        doc: dict[str, Any] = {
            "cluster": {
                "name": run,
                "key_file": str(key_file.resolve()),
                "seeds": [_address(o, "discovery") for o in placement.hosts if o.id != host.id],
                # One founder: a restarted h1 hears of the members and joins instead.
                "bootstrap": index == 0,
                "bootstrap_wait": BOOTSTRAP_WAIT,
            },
            "node": {
                "name": host.id,
                "address": host.address,
                "trace": str(out / f"{host.id}.jsonl"),
                "seed": seed * 1000 + index + 1,
            },
            "ports": {name: host.ports[lab] for name, lab in _PORT_OF.items()},
            "discovery": discovery,
            "gateway": {"db": str(out / "state" / f"{host.id}-queues.db")},
        }
        for section, settings in (protocol or {}).items():
            if section in _DAEMON_SECTIONS:
                doc.setdefault(section, {}).update(settings)
        docs[host.id] = doc
    return docs


def client_configs(
    values: Mapping[str, Value],
    placement: Placement,
    *,
    run: str,
    out: Path,
    key_file: Path,
    start_at: float,
    seed: int,
    workload: str = "routing",
) -> dict[str, dict[str, Any]]:
    """One ``gossamer lab app`` document per host: its clients of that host's daemon
    (the app holds the run's key like every lab app, though its clients seal nothing),
    running ``workload`` (``routing``: the ``cluster`` scenario's, at ``cluster_rate``;
    ``queues``: the ``queues`` scenario's, at ``queue_rate``)."""
    out = out.resolve()
    docs: dict[str, dict[str, Any]] = {}
    for index, host in enumerate(placement.hosts):
        name = clients_of(host.id)
        docs[name] = {
            "node": {
                "id": name,
                "run": run,
                "trace": str(out / f"{name}.jsonl"),
                "address": host.address,
                "seed": seed * 1000 + 500 + index + 1,
                "start_at": start_at,
                "duration": values["duration"],
                "linger": values["linger"],
                "exit_when_done": False,
                "key_file": str(key_file.resolve()),
            },
            "cluster": {
                "enabled": True,
                "workload": workload,
                "gateway": _address(host, "gateway"),
                "host": host.id,
                "hosts": list(placement.ids),
                "clients": values["clients"],
                "rate": values["queue_rate" if workload == "queues" else "cluster_rate"],
                "work": values["queue_work"] if workload == "queues" else 0.0,
            },
        }
    return docs
