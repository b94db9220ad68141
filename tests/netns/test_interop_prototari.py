"""gossamer discovery nodes on a LAN with the original Go Prototari, on namespace hosts.

Two hosts run the emulation of the Go original (``originals/prototari.py``: ephemeral
source ports, IP identity, a broadcast every 5 s, no answer to ``hor?``, no removal; CI
cannot build the original itself), two run ``gossamer discovery --wire original`` over a
real subnet broadcast. Checked: full view in both directions, held without a single
flap for longer than several inactive-peer times; no phantom peer; then one node of each
kind is killed and the gossamer survivor removes both within the bound (a Go peer: its
broadcast interval plus the inactive time plus the heartbeat waits; a gossamer peer:
the inactive time plus the waits). The real Go original was run the same way during
development, for longer (``docs/interop.md``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gossamer.lab.netns import Host, Topology
from gossamer.testing.pytest_plugin import require_netns

ORIGINAL = Path(__file__).with_name("originals") / "prototari.py"
INTERVAL, INACTIVE, WAIT, MISSES = 5.0, 10.0, 1.0, 3
HOLD = 40.0  # four inactive-peer times, eight Go broadcasts
GO_BOUND = INTERVAL + INACTIVE + MISSES * WAIT + 2.0  # + scheduling slack
GOSSAMER_BOUND = INACTIVE + MISSES * WAIT + 2.0


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[Host]]:
    require_netns()
    with Topology(subnets=[4]) as topology:
        yield topology.hosts


class Node:
    def __init__(self, host: Host, kind: str, proc: subprocess.Popen[str]) -> None:
        self.host, self.kind, self.proc = host, kind, proc
        self.lines: list[tuple[float, str]] = []
        self.err: list[str] = []
        for stream, sink in ((proc.stdout, self.lines), (proc.stderr, None)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream: Any, sink: list[tuple[float, str]] | None) -> None:
        for line in stream:
            if sink is None:
                self.err.append(line.rstrip())
            else:
                sink.append((time.monotonic(), line.rstrip()))

    def view(self) -> set[str]:
        """The IPs this node has as peers now."""
        if self.kind == "go":
            lists = [line.split("peers: ")[1] for _, line in list(self.lines) if "peers: " in line]
            return set(lists[-1].split(",")) if lists else set()
        up: set[str] = set()
        for _, event in self.events():
            if event["event"] not in ("peer_up", "peer_down"):
                continue
            ip = event["peer"].rsplit(":", 1)[0]
            if event["event"] == "peer_up":
                up.add(ip)
            elif event["event"] == "peer_down":
                up.discard(ip)
        return up

    def events(self) -> list[tuple[float, dict[str, Any]]]:
        return [(t, orjson.loads(line)) for t, line in list(self.lines) if line.startswith("{")]


def start(host: Host, kind: str) -> Node:
    if kind == "go":
        argv = [sys.executable, str(ORIGINAL), "--ip", host.ip, "--broadcast", host.broadcast,
                "--interval", str(INTERVAL)]  # fmt: skip
    else:
        argv = [sys.executable, "-m", "gossamer.cli.discovery_cmd", "--wire", "original",
                "--interface", host.iface, "--broadcast-interval", str(INTERVAL),
                "--inactive-time", str(INACTIVE), "--heartbeat-wait", str(WAIT)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "GOSSAMER_KEY"}
    proc = host.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return Node(host, kind, proc)


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.netns
@pytest.mark.slow
def test_full_view_both_ways_held_then_the_dead_are_removed(hosts: list[Host]) -> None:
    kinds = ["go", "go", "gossamer", "gossamer"]
    nodes = [start(host, kind) for host, kind in zip(hosts, kinds, strict=True)]
    ips = {h.ip for h in hosts}
    try:
        def full() -> bool:
            return all(n.view() == ips - {n.host.ip} for n in nodes)

        wait_for(full, 3 * INTERVAL, "full view on every node")
        settled = time.monotonic()
        time.sleep(HOLD)
        assert full(), {n.host.ip: sorted(n.view()) for n in nodes}
        for node in nodes[2:]:
            events = node.events()
            # No flap: not one peer went down, and every peer came up once, named
            # by its IP and the well-known port (no phantom from an ephemeral port).
            assert [e for _, e in events if e["event"] == "peer_down"] == []
            ups = [e["peer"] for _, e in events if e["event"] == "peer_up"]
            assert sorted(ups) == sorted(f"{ip}:21450" for ip in ips - {node.host.ip})
        for node in nodes[:2]:
            changes = [t for t, line in list(node.lines) if "peers: " in line and t > settled]
            assert changes == [], "a Go node's peer list changed while the view was held"

        # Kill one node of each kind; the gossamer survivor must remove both.
        killed_at = time.monotonic()
        hosts[0].crash()
        hosts[3].crash()
        survivor = nodes[2]
        gone = {hosts[0].ip, hosts[3].ip}
        wait_for(lambda: not (survivor.view() & gone), GO_BOUND + 5, "the survivor's removals")
        downs = {e["peer"].rsplit(":", 1)[0]: t for t, e in survivor.events()
                 if e["event"] == "peer_down"}  # fmt: skip
        assert set(downs) == gone
        assert downs[hosts[0].ip] - killed_at <= GO_BOUND
        assert downs[hosts[3].ip] - killed_at <= GOSSAMER_BOUND
        assert survivor.view() == {hosts[1].ip}
        # The Go survivor, like the original, never removes anyone.
        assert nodes[1].view() == ips - {hosts[1].ip}
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.proc.kill()
            node.proc.wait()
