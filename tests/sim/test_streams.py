"""Simulated TCP (``gossamer.sim.streams``): opens, order, latency, partitions, resets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gossamer._types import Address
from gossamer.proto.core import ConnectionsCore
from gossamer.sim import LinkModel, Network, NodeContext, Simulator
from gossamer.sim.run import SimRequest, run_simulation
from gossamer.sim.streams import StreamConfig, StreamNetwork
from gossamer.testing.connections import ScriptedConnections
from gossamer.trace import MemorySink, read_run

LAN = 0.001


def build(
    config: StreamConfig | None = None, seed: int = 1
) -> tuple[Simulator, StreamNetwork, dict[str, ScriptedConnections], MemorySink]:
    sink = MemorySink()
    sim = Simulator(
        seed=seed,
        run="t",
        network=Network(links=LinkModel(lan=LAN, wan=0.01, jitter=0.0005)),
        sink_for=lambda _node: sink,
    )
    net = StreamNetwork(sim, config)
    cores: dict[str, ScriptedConnections] = {}

    def factory(name: str, echo: bool) -> Callable[[NodeContext], ConnectionsCore]:
        def make(_ctx: NodeContext) -> ConnectionsCore:
            cores[name] = ScriptedConnections(echo=1 if echo else 0)
            return cores[name]

        return make

    net.add_node("server", sim.network.add_host("h0"), 9000, factory("server", True))
    net.add_node("client", sim.network.add_host("h1"), 9001, factory("client", False),
                 listen=False)
    return sim, net, cores, sink


def server_address(sim: Simulator) -> Address:
    return sim.node("server").address


def test_open_send_in_order_with_latency_and_close() -> None:
    sim, net, cores, _ = build()
    conns: list[int] = []

    def start(core: ScriptedConnections, now: float) -> None:
        conn = core.dial(server_address(sim))
        conns.append(conn)
        for i in range(20):
            core.send(conn, f"{i},".encode())  # queued before the connection is made

    net.local("client", start, when=1.0)
    sim.run(2.0)
    client, server = cores["client"], cores["server"]
    assert conns == [-1]
    assert [c for c, _, _ in server.made] == [1]
    assert server.made[0][1][0] == sim.node("client").host.ip
    assert server.made[0][1][1] >= 49152  # an ephemeral port
    (made,) = client.made
    assert made[0] == -1 and made[1] == server_address(sim)
    assert made[2] > server.made[0][2] > 1.0  # accept after one way, connect after a round
    echoed = b"".join(data for _, data, _ in client.received)
    assert echoed == b"".join(f"{i},".encode() for i in range(20))
    times = [t for _, _, t in client.received]
    assert times == sorted(times) and times[0] >= 1.0 + 4 * LAN
    net.local("client", lambda core, now: core.close(-1), when=3.0)
    sim.run(4.0)
    assert [c for c, _ in client.lost] == [-1] and client.lost[0][1] == 3.0
    assert [c for c, _ in server.lost] == [1] and server.lost[0][1] > 3.0


def test_bandwidth_serialises_each_direction() -> None:
    sim, net, cores, _ = build(StreamConfig(bandwidth=1000.0))

    def start(core: ScriptedConnections, now: float) -> None:
        core.dial(server_address(sim))
        core.send(-1, b"a" * 500)
        core.send(-1, b"b" * 500)  # one flush: one segment of 1000 bytes

    net.local("client", start, when=1.0)
    net.local("client", lambda core, now: core.send(-1, b"c" * 500), when=1.1)
    sim.run(5.0)
    (first, second) = cores["server"].received
    connected = cores["client"].made[0][2]
    assert first[1] == b"a" * 500 + b"b" * 500
    assert 1.0 <= first[2] - connected < 1.01  # 1000 bytes at 1000 B/s, plus the latency
    assert 0.5 <= second[2] - first[2] < 0.51  # queued behind the first


def test_refused_when_nothing_listens_and_timeout_when_no_host() -> None:
    sim, net, cores, _ = build(StreamConfig(connect_timeout=5.0))
    client_ip = sim.node("client").host.ip

    def start(core: ScriptedConnections, now: float) -> None:
        core.dial((client_ip, 1))  # a host, but no listener on that port
        core.dial(("10.0.0.200", 9000))  # no such host

    net.local("client", start, when=1.0)
    sim.run(10.0)
    lost = dict(cores["client"].lost)
    assert 1.0 < lost[-1] < 1.1
    assert lost[-2] == pytest.approx(6.0)
    assert cores["client"].made == []


def test_partition_stalls_then_delivers_in_order() -> None:
    sim, net, cores, _ = build()
    net.local("client", lambda core, now: core.dial(server_address(sim)), when=0.5)
    sim.partition(["client"], start=1.0, end=3.0)
    for i in range(3):
        net.local("client", lambda core, now, i=i: core.send(-1, bytes([65 + i])), when=1.5 + i)
    sim.run(10.0)
    server = cores["server"]
    assert b"".join(d for _, d, _ in server.received) == b"ABC"
    assert all(t >= 3.0 for _, _, t in server.received)  # held until the heal
    assert server.lost == [] and cores["client"].lost == []


def test_a_long_partition_aborts_the_sender_after_the_user_timeout() -> None:
    sim, net, cores, _ = build(StreamConfig(user_timeout=5.0))
    net.local("client", lambda core, now: core.dial(server_address(sim)), when=0.5)
    sim.partition(["client"], start=1.0, end=30.0)
    net.local("client", lambda core, now: core.send(-1, b"lost"), when=2.0)
    sim.run(40.0)
    (lost,) = cores["client"].lost
    assert lost[0] == -1 and 7.0 <= lost[1] < 9.0
    assert cores["server"].received == []
    assert cores["server"].lost == []  # half-open: the server never sent anything
    net.local("server", lambda core, now: core.send(1, b"anyone?"), when=41.0)
    sim.run(42.0)
    assert [c for c, _ in cores["server"].lost] == [1]  # answered by a reset


def test_reset_loses_both_ends_and_crash_resets_peers() -> None:
    sim, net, cores, sink = build()
    net.local("client", lambda core, now: core.dial(server_address(sim)), when=0.5)
    net.local("client", lambda core, now: core.dial(server_address(sim)), when=0.6)
    net.reset("client", "server", 1.0)
    sim.run(2.0)
    assert sorted(c for c, _ in cores["client"].lost) == [-2, -1]
    assert sorted(c for c, _ in cores["server"].lost) == [1, 2]
    assert sim.fault_counts["reset"] == 4
    net.local("client", lambda core, now: core.dial(server_address(sim)), when=3.0)
    net.crash("server", 4.0)
    sim.run(5.0)
    assert [c for c, _ in cores["client"].lost][-1] == -3
    closes = [e.attrs["reason"] for e in sink.select(layer="net", kind="close")]
    assert closes.count("reset") == 5


def test_a_restarted_node_resets_old_connections_and_accepts_new_ones() -> None:
    sim, net, cores, _ = build()
    net.local("client", lambda core, now: core.dial(server_address(sim)), when=0.5)
    sim.crash("server", 1.0)  # the engine's crash: peers learn of it when they send
    sim.restart("server", 2.0)
    net.local("client", lambda core, now: core.send(-1, b"old"), when=3.0)
    sim.run(3.5)
    (lost,) = cores["client"].lost
    assert lost[0] == -1 and 3.0 < lost[1] < 3.1
    assert cores["server"].received == []  # the new incarnation never saw "old"
    net.local("client", lambda core, now: core.dial(server_address(sim)), when=4.0)
    net.local("client", lambda core, now: core.send(-2, b"new"), when=4.0)
    sim.run(5.0)
    assert [c for c, _, _ in cores["server"].made] == [1]  # ids restart with the core
    assert [d for _, d, _ in cores["server"].received] == [b"new"]


def test_runs_are_deterministic() -> None:
    def run() -> list[object]:
        sim, net, cores, sink = build(seed=7)
        net.local("client", lambda core, now: core.dial(server_address(sim)), when=0.1)
        for i in range(50):
            net.local("client", lambda core, now, i=i: core.send(-1, b"x" * i), when=0.2 + i / 100)
        sim.run(2.0)
        return [*cores["client"].received, *sink.events]

    assert run() == run()


def test_gossip_runs_on_streams_and_replans_a_crashed_hop_when_refused(tmp_path: Path) -> None:
    result = run_simulation(SimRequest(
        scenario="gossip", nodes=32, seed=4, out=tmp_path,
        params={"multicast": "off", "crashed": "0.2", "broadcasts": "3"},
    ))
    summary = result.summary
    assert summary["violations"] == [] and summary["coverage_min"] == 1.0
    assert result.stats["stream_segments"] > 0 and "datagrams_sent" not in result.stats
    events, _ = read_run(tmp_path)
    reasons = {e.attrs["reason"] for e in events if e.kind == "replan"}
    assert "stream_failed" in reasons  # the crashed host's reset, before any ACK timeout
    refused = [e for e in events if e.layer == "net" and e.kind == "close"]
    assert refused and {e.attrs["reason"] for e in refused} <= {"reset", "refused"}
