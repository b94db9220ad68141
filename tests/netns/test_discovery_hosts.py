"""Prototari between real hosts: network namespaces on one bridge, real broadcast.

Every datagram here stays inside namespaces the test built (10.77.1.0/24, or
the loopback of one namespace); nothing is broadcast in the machine's own
namespace. Each node is the lab role ``python -m gossamer.cli.discovery_cmd``,
one process per node, printing its peer events as JSON lines; a reader thread
per process timestamps each line as it arrives (``time.monotonic()``), so the
detection times below include a few milliseconds of pipe and scheduling delay.

Timers are shortened so that the tests take seconds: broadcast interval 0.5 s,
inactive-peer time 1 s, heartbeat wait 0.25 s.
"""

from __future__ import annotations

import argparse
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from gossamer.lab.netns import Host
from gossamer.testing.pytest_plugin import NetnsFactory
from gossamer.trace import read_run

INTERVAL, INACTIVE, WAIT = 0.5, 1.0, 0.25
TIMERS = ["--broadcast-interval", str(INTERVAL), "--inactive-time", str(INACTIVE),
          "--heartbeat-wait", str(WAIT)]  # fmt: skip

#: The group key every node of this module's runs seals with (fresh per run).
GROUP_KEY = secrets.token_hex(32)


@dataclass
class NodeProcess:
    """One node process and the JSON lines it printed, with arrival times."""

    host: Host
    proc: subprocess.Popen[bytes]
    lines: queue.Queue[tuple[float, dict[str, Any]]] = field(default_factory=queue.Queue)
    seen: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    node: str = ""

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put((time.monotonic(), orjson.loads(raw)))

    def wait_for(self, predicate: Any, timeout: float) -> tuple[float, dict[str, Any]]:
        """The first record (old or new) that satisfies ``predicate``."""
        for item in self.seen:
            if predicate(item[1]):
                return item
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                item = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(item)
            if predicate(item[1]):
                return item
        err = (
            self.proc.stderr.read().decode()
            if self.proc.poll() is not None and self.proc.stderr
            else ""
        )
        raise AssertionError(
            f"{self.node or self.host.name}: no such event in {timeout} s; "
            f"seen {[r for _, r in self.seen]} {err}"
        )

    def peers(self) -> set[str]:
        view: set[str] = set()
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        for _, record in self.seen:
            if record["event"] == "peer_up":
                view.add(record["peer"])
            elif record["event"] == "peer_down":
                view.discard(record["peer"])
        return view


def start(host: Host, args: list[str]) -> NodeProcess:
    argv = [sys.executable, "-m", "gossamer.cli.discovery_cmd", *args, *TIMERS]
    # Sealed, the default: every node of a test shares the module's group key.
    env = {**os.environ, "GOSSAMER_KEY": GROUP_KEY}
    node = NodeProcess(
        host, host.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    )
    _, ready = node.wait_for(lambda r: r["event"] == "ready", timeout=20.0)
    node.node = ready["node"]
    return node


def full_view(nodes: list[NodeProcess], timeout: float) -> float:
    """Wait until every node has every other as a peer; when the last one got there."""
    last = 0.0
    for node in nodes:
        others = {n.node for n in nodes if n is not node}
        for other in others:
            at, _ = node.wait_for(
                lambda r, o=other: r["event"] == "peer_up" and r["peer"] == o, timeout
            )
            last = max(last, at)
        assert node.peers() == others
    return last


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_five_hosts_discover_detect_a_crash_and_a_leave(
    netns: NetnsFactory, tmp_path: Path, record_property: Any
) -> None:
    topo = netns(subnets=[5])
    started = time.monotonic()
    nodes = [
        start(host, ["--interface", "eth0", "--trace", str(tmp_path / f"{host.name}.jsonl")])
        for host in topo.hosts
    ]
    # The spec's fixed ports on every host.
    assert [n.node for n in nodes] == [f"{h.ip}:21450" for h in topo.hosts]
    converged = full_view(nodes, timeout=15.0) - started
    record_property("full_view_s_including_process_start", round(converged, 3))

    # Kill one host's process: a crash, no agur!.
    victim, *others = nodes
    crashed_at = time.monotonic()
    victim.host.crash()
    delays = []
    for node in others:
        at, record = node.wait_for(
            lambda r: r["event"] == "peer_down" and r["peer"] == victim.node, timeout=10.0
        )
        assert record["reason"] == "heartbeat"
        delays.append(at - crashed_at)
    record_property("crash_detection_s_max", round(max(delays), 3))
    assert max(delays) <= INACTIVE + 3 * WAIT + INTERVAL + 0.5, delays

    # A clean stop (SIGTERM): agur! removes it at once, long before any heartbeat could.
    leaver, *rest = others
    left_at = time.monotonic()
    leaver.proc.send_signal(signal.SIGTERM)
    leave_delays = []
    for node in rest:
        at, record = node.wait_for(
            lambda r: r["event"] == "peer_down" and r["peer"] == leaver.node, timeout=5.0
        )
        assert record["reason"] == "leave"
        leave_delays.append(at - left_at)
    record_property("leave_removal_s_max", round(max(leave_delays), 3))
    assert max(leave_delays) < INACTIVE, leave_delays  # agur!, not a timeout
    assert leaver.proc.wait(timeout=10) == 0
    _, stopped = leaver.wait_for(lambda r: r["event"] == "stopped", timeout=5.0)
    assert stopped["peers"] == 0
    for node in rest:
        assert node.peers() == {n.node for n in rest if n is not node}
    for node in rest:
        node.proc.send_signal(signal.SIGTERM)
        assert node.proc.wait(timeout=10) == 0

    events, bad = read_run(tmp_path)
    assert bad == [] or all("torn" in str(b) for b in bad)  # the killed node may tear a line
    kinds = {(e.kind, e.attrs.get("reason")) for e in events if e.layer == "discovery"}
    assert {("peer_up", "handshake"), ("peer_down", "heartbeat"), ("peer_down", "leave")} <= kinds


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_several_nodes_share_one_host_over_loopback_broadcast(netns: NetnsFactory) -> None:
    (host,) = netns(subnets=[1]).hosts
    ports = [21450, 21460, 21470]
    nodes = [
        start(
            host,
            [
                "--address",
                "127.0.0.1",
                "--broadcast-address",
                "127.255.255.255",
                "--port",
                str(port),
            ],
        )
        for port in ports
    ]
    assert [n.node for n in nodes] == [f"127.0.0.1:{p}" for p in ports]
    full_view(nodes, timeout=15.0)
    # One of them stops: only that identity leaves, though all share the address.
    nodes[1].proc.send_signal(signal.SIGTERM)
    for node in (nodes[0], nodes[2]):
        _, record = node.wait_for(lambda r: r["event"] == "peer_down", timeout=5.0)
        assert (record["peer"], record["reason"]) == ("127.0.0.1:21460", "leave")
        assert node.peers() == {n.node for n in (nodes[0], nodes[2]) if n is not node}
    # The stopped one exits cleanly on its own (a second SIGTERM could find it still
    # closing and kill it: a signal handler is there only for the first).
    assert nodes[1].proc.wait(timeout=10) == 0
    for node in (nodes[0], nodes[2]):
        node.proc.send_signal(signal.SIGTERM)
        assert node.proc.wait(timeout=10) == 0


def test_the_role_never_guesses_where_it_lives(capsys: pytest.CaptureFixture[str]) -> None:
    # No namespace needed: it refuses before opening any socket.
    from gossamer.cli import discovery_cmd

    assert discovery_cmd.main(["--port", "21450"]) == 2
    assert "--interface or --address" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    discovery_cmd.COMMAND.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["discovery", "--interface", "eth0", "--max-peers", "8"])
    assert (args.command, args.interface, args.max_peers) == ("discovery", "eth0", 8)
    assert args.handler is discovery_cmd.run
