"""Three ``gossamer node`` daemons in namespace hosts of one subnet find each other by
broadcast (no seeds), form a cluster, remove a crashed host's node and take it back,
restarted, as a new incarnation. Every datagram stays inside the namespaces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossamer.daemon.config import DEFAULT_PORTS
from gossamer.testing.daemons import Daemon
from gossamer.testing.pytest_plugin import NetnsFactory

from .cluster import node_file, write_key


@pytest.mark.netns
@pytest.mark.slow
def test_daemons_on_a_subnet_find_each_other_by_broadcast(
    netns: NetnsFactory, tmp_path: Path
) -> None:
    topo = netns(subnets=[3])
    hosts = dict(zip(["a", "b", "c"], topo.hosts, strict=True))
    write_key(tmp_path)
    files = {
        name: node_file(
            tmp_path, name, dict(DEFAULT_PORTS), seeds=[], bootstrap=name == "a",
            address=host.ip, discovery={"broadcast_address": host.broadcast},
        )
        for name, host in hosts.items()
    }
    daemons = {name: Daemon(files[name], hosts[name].popen) for name in hosts}
    try:
        for daemon in daemons.values():
            daemon.view_with({"a", "b", "c"})
        hosts["c"].crash()  # SIGKILL every process of the host
        for name in ("a", "b"):
            daemons[name].view_with({"a", "b"})
        daemons["c"] = Daemon(files["c"], hosts["c"].popen)
        ready = daemons["c"].wait(lambda line: line["status"] == "ready", "ready")
        for daemon in daemons.values():
            daemon.view_with({"a", "b", "c"}, including=f"c#{ready['incarnation']}")
    finally:
        codes = {name: daemon.stop() for name, daemon in daemons.items()}
    assert codes == {"a": 0, "b": 0, "c": 0}, {n: d.errors() for n, d in daemons.items()}
