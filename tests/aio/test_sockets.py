"""gossamer.aio.sockets, and the datagram driver over broadcast and multicast.

Broadcast and multicast run only between hosts of network namespaces that the
test builds (10.77.x.y); in the machine's own namespace these tests touch
127.0.0.1 only and never broadcast or multicast (DESIGN.md, "Real networks in
tests").
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from gossamer.aio.sockets import broadcast_socket, multicast_socket, udp_socket
from gossamer.errors import ConfigError
from gossamer.lab.netns import Host
from gossamer.testing.processes import wait_ready
from gossamer.testing.pytest_plugin import NetnsFactory

GROUP = "239.77.0.1"
PORT = 47_001

# One ping node on the datagram driver inside a namespace host. It binds its
# sockets, prints "ready", waits for "go" on stdin, pings the broadcast address or
# the group until its pings are settled and it has heard a PING from every node
# in ``expect``, then prints one JSON line describing what it saw.
NODE = textwrap.dedent(
    """
    import asyncio, json, random, sys
    from gossamer.aio.datagram import open_datagram
    from gossamer.aio.loop import run
    from gossamer.aio.sockets import (
        broadcast_socket, multicast_socket, set_multicast_send, udp_socket)
    from gossamer.proto.ping import PingConfig, PingCore
    from gossamer.trace import MemorySink, Tracer

    cfg = json.loads(sys.argv[1])

    async def main():
        loop = asyncio.get_running_loop()
        listen = []
        if cfg["mode"] == "broadcast":
            sock = broadcast_socket(cfg["port"], device=cfg["iface"])
            dest = (cfg["broadcast"], cfg["port"])
        elif cfg["mode"] == "multicast":
            sock = multicast_socket(cfg["group"], cfg["port"], interface=cfg["ip"],
                                    loopback=False)
            dest = (cfg["group"], cfg["port"])
        else:  # "shared": a unicast socket of its own plus the group port shared on the host
            sock = udp_socket(cfg["ip"], 0)
            set_multicast_send(sock, interface=cfg["ip"], loopback=True)
            listen = [multicast_socket(cfg["group"], cfg["port"], interface=cfg["ip"])]
            dest = (cfg["group"], cfg["port"])
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        sink = MemorySink()
        core = PingCore(
            PingConfig(node_id=cfg["node"], targets=[("all", dest)], count=cfg["count"],
                       interval=0.03, timeout=0.1, max_retries=3, start=loop.time()),
            tracer=Tracer(sink, run="netns", node=cfg["node"]),
            rng=random.Random(cfg["node"]),
        )
        expect = set(cfg["expect"])

        def heard():
            return {e.peer for e in sink.select(kind="recv") if e.attrs["type"] == "ping"}

        async with await open_datagram(core, sock, listen=listen) as driver:
            try:
                async with asyncio.timeout(10):
                    while not (core.done and expect <= heard()):
                        await asyncio.sleep(0.01)
            except TimeoutError:
                pass
            await asyncio.sleep(0.2)  # keep answering the others for a moment
        ponged_by = {e.peer for e in sink.select(kind="recv") if e.attrs["type"] == "pong"}
        print(json.dumps({
            "node": cfg["node"], "heard": sorted(heard()), "ponged_by": sorted(ponged_by),
            "delivered": core.counters.delivered, "lost": core.counters.lost,
            "errors": driver.counters.errors, "failure": repr(driver.failure),
        }), flush=True)

    run(main())
    """
)


def _start_node(host: Host, node: str, mode: str, expect: list[str], count: int = 4) -> Any:
    cfg = {"node": node, "mode": mode, "ip": host.ip, "broadcast": host.broadcast,
           "iface": host.iface, "group": GROUP, "port": PORT, "expect": expect, "count": count}
    proc = host.popen([sys.executable, "-c", NODE, json.dumps(cfg)], stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_ready(proc, timeout=15.0, what=f"node {node} in {host.name}")
    return proc


def _run_nodes(nodes: list[tuple[Host, str]], mode: str) -> dict[str, dict[str, Any]]:
    names = [name for _, name in nodes]
    procs = [
        _start_node(host, name, mode, [other for other in names if other != name])
        for host, name in nodes
    ]
    for proc in procs:  # all are listening: start them together
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = {}
    for proc in procs:
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        results[report["node"]] = report
    return results


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_broadcast_ping_reaches_every_other_host(netns: NetnsFactory) -> None:
    topo = netns(subnets=[3])
    nodes = [(host, f"n{i}") for i, host in enumerate(topo.hosts)]
    results = _run_nodes(nodes, "broadcast")
    for name, report in results.items():
        others = {n for n in results if n != name}
        assert others <= set(report["heard"]), report
        assert others <= set(report["ponged_by"]), report  # unicast answers came back
        assert report["delivered"] == 4 and report["lost"] == 0, report
        assert report["failure"] == "None"


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_multicast_ping_reaches_every_other_host(netns: NetnsFactory) -> None:
    topo = netns(subnets=[3])
    nodes = [(host, f"n{i}") for i, host in enumerate(topo.hosts)]
    results = _run_nodes(nodes, "multicast")
    for name, report in results.items():
        others = {n for n in results if n != name}
        # loopback=False: a node does not hear itself, and hears every other host.
        assert set(report["heard"]) == others, report
        assert set(report["ponged_by"]) == others, report
        assert report["delivered"] == 4 and report["lost"] == 0, report


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_two_nodes_on_one_host_share_the_group_port(netns: NetnsFactory) -> None:
    topo = netns(subnets=[2])
    h0, h1 = topo.hosts
    nodes = [(h0, "a0"), (h0, "a1"), (h1, "b0")]
    results = _run_nodes(nodes, "shared")
    for name, report in results.items():
        others = {n for n in results if n != name}
        # SO_REUSEPORT: both nodes of h0 get every group datagram, their sibling's included
        # (loopback on); answers reach each node's own unicast socket.
        assert others <= set(report["heard"]), report
        assert others <= set(report["ponged_by"]), report
        assert report["delivered"] == 4 and report["lost"] == 0, report


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_multicast_and_broadcast_socket_options(netns: NetnsFactory) -> None:
    topo = netns(subnets=[1])
    [host] = topo.hosts
    check = textwrap.dedent(
        """
        import json, socket, sys
        from gossamer.aio.sockets import broadcast_socket, multicast_socket
        group, ip = sys.argv[1], sys.argv[2]
        m = multicast_socket(group, 0, interface=ip, ttl=3, loopback=False)
        b = broadcast_socket(0, device="eth0")
        print(json.dumps({
            "ttl": m.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL),
            "loop": m.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP),
            "if": socket.inet_ntoa(m.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, 4)),
            "reuseport": m.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT),
            "broadcast": b.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST),
            "device": b.getsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, 16)
                       .rstrip(b"\\0").decode(),
            # /proc/net/igmp shows each joined group as a host-order hex number.
            "membership": open("/proc/net/igmp").read().count(
                format(int.from_bytes(socket.inet_aton(group), sys.byteorder), "08X")),
        }))
        """
    )
    out = host.run([sys.executable, "-c", check, GROUP, host.ip], timeout=20).stdout
    report = json.loads(out)
    assert report == {"ttl": 3, "loop": 0, "if": host.ip, "reuseport": 1, "broadcast": 1,
                      "device": "eth0", "membership": 1}


def test_udp_socket_binds_and_sets_requested_options() -> None:
    with udp_socket("127.0.0.1", 0, broadcast=True, reuse=True) as sock:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        assert not sock.getblocking()
    with udp_socket("127.0.0.1") as plain:
        assert plain.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) == 0


def test_broadcast_socket_can_share_its_port_on_loopback() -> None:
    with broadcast_socket(0, host="127.0.0.1") as first:
        port = first.getsockname()[1]
        with broadcast_socket(port, host="127.0.0.1") as second:
            assert second.getsockname() == first.getsockname()


@pytest.mark.parametrize("group", ["10.0.0.1", "not-an-address", "255.255.255.255"])
def test_multicast_socket_rejects_a_non_multicast_group(group: str) -> None:
    with pytest.raises(ConfigError):
        multicast_socket(group, 0, interface="127.0.0.1")


def test_bind_failure_closes_the_socket() -> None:
    with udp_socket("127.0.0.1") as taken, pytest.raises(OSError):
        udp_socket("127.0.0.1", taken.getsockname()[1])
