"""Real hosts: two namespace subnets of four hosts joined by a router.

Every host runs ``gossamer gossip`` (``python -m gossamer.cli.gossip_cmd``). They announce
themselves on their LAN (multicast only), then h0 broadcasts to all eight and to a phantom
address on subnet 1 where no host answers. The traces must show: every other host delivers
the broadcast exactly once; inside each subnet some hosts got it by multicast from a host of
their own subnet; it crossed the router by TCP; no multicast datagram crossed the router;
and the phantom's connect timed out and its share of the list was re-planned.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from gossamer.lab.netns import Host
from gossamer.testing.pytest_plugin import NetnsFactory
from gossamer.trace import read_run

KEY = "netns-test-key-of-enough-entropy"
TIMEOUT = 60.0
#: On subnet 1, where no host has this address: ARP fails and nothing ever answers.
PHANTOM = "10.77.2.99"


def start_node(
    host: Host, peers: list[Host], out: Path, start_at: float, *, broadcast: bool
) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "gossamer.cli.gossip_cmd",
        "--my-addr",
        host.ip,
        "--peers",
        ",".join([*(p.ip for p in peers), PHANTOM]),
        "--connect-timeout",
        "0.5",
        "--announce",
        "4",
        "--announce-interval",
        "0.4",
        "--start-at",
        f"{start_at:.3f}",
        "--duration",
        "4.5",
        "--out",
        str(out),
        "--run",
        "netns-gossip",
    ]
    if broadcast:
        argv += ["--broadcast", "hello from subnet 0", "--at", "2.2"]
    env = {**os.environ, "CHATTER_KEY": KEY}
    return host.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.netns
@pytest.mark.slow
def test_a_broadcast_crosses_the_router_by_tcp_and_each_lan_by_multicast(
    netns: NetnsFactory, tmp_path: Path
) -> None:
    topo = netns(subnets=[4, 4])
    hosts = topo.hosts
    subnet_of = {f"{h.ip}:29999": h.subnet for h in hosts}
    out = tmp_path / "traces"
    start_at = time.time() + 3.0  # every process is up by then
    procs = [start_node(h, hosts, out, start_at, broadcast=h.name == "h0") for h in hosts]
    outputs = []
    for host, proc in zip(hosts, procs, strict=True):
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        assert proc.returncode == 0, f"{host.name} exited {proc.returncode}: {stderr[-2000:]}"
        outputs.append(stdout)
    (sent,) = [line.split()[1] for line in outputs[0].splitlines() if line.startswith("broadcast")]

    events, bad = read_run(out)
    assert bad == []
    gossip = [e for e in events if e.layer == "gossip" and e.msg == sent]
    origin = f"{hosts[0].ip}:29999"

    # Every other host delivered it exactly once (and printed so); the origin did not.
    delivers = Counter(e.node for e in gossip if e.kind == "deliver")
    assert delivers == {f"{h.ip}:29999": 1 for h in hosts[1:]}, delivers
    for host, stdout in zip(hosts[1:], outputs[1:], strict=True):
        lines = [line for line in stdout.splitlines() if line.startswith(f"deliver {sent} ")]
        assert len(lines) == 1, (host.name, stdout)

    recvs = [e for e in gossip if e.kind == "recv"]
    by_multicast = [e for e in recvs if e.attrs["via"] == "multicast"]
    by_tcp = [e for e in recvs if e.attrs["via"] == "tcp"]
    # Multicast stayed inside each subnet, and was used inside each subnet.
    assert all(subnet_of[e.peer] == subnet_of[e.node] for e in by_multicast), by_multicast
    assert {subnet_of[e.node] for e in by_multicast} == {0, 1}, by_multicast
    # Subnet 1 heard of it first over TCP from subnet 0, across the router.
    assert any(subnet_of[e.node] == 1 and subnet_of[e.peer] == 0 for e in by_tcp), by_tcp
    sends = [e for e in gossip if e.kind == "send"]
    assert any(e.node == origin and e.attrs["via"] == "multicast" for e in sends)
    assert any(subnet_of[e.node] == 1 and e.attrs["via"] == "multicast" for e in sends), (
        "no host of subnet 1 multicast the broadcast on its LAN"
    )
    # The LAN peers that saw h0's multicast were left off its TCP list.
    tcp_from_origin = {e.peer for e in sends if e.node == origin and e.attrs["via"] == "tcp"}
    assert all(subnet_of.get(peer, 1) == 1 for peer in tcp_from_origin), tcp_from_origin
    # The phantom: its connect timed out (0.5 s, before ARP gave up) and was routed around.
    (replan,) = [e for e in gossip if e.kind == "replan"]
    assert replan.peer == f"{PHANTOM}:29999"
    assert replan.attrs["reason"] in ("stream_failed", "timeout")
