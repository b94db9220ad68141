"""The simulator engine: ordering, routing scopes, latency, faults, crashes, partitions."""

from __future__ import annotations

import gc
from collections.abc import Sequence

import pytest

from gossamer._types import Address, Datagram
from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.sim import LinkModel, Network, NodeContext, Simulator
from gossamer.trace import MemorySink


class Recorder:
    """A minimal core: records what it receives, sends what it is told to."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.received: list[tuple[bytes, Address, float]] = []
        self.outbox: list[Datagram] = []
        self.deadline: float | None = None
        self.timer_calls: list[float] = []

    def send(self, data: bytes, addr: Address) -> None:
        self.outbox.append((data, addr))

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.received.append((data, addr, now))

    def handle_timer(self, now: float) -> None:
        self.timer_calls.append(now)
        self.deadline = None

    def datagrams_to_send(self) -> list[Datagram]:
        out, self.outbox = self.outbox, []
        return out

    def events_received(self) -> Sequence[object]:
        return []

    def next_deadline(self) -> float | None:
        return self.deadline


def make_sim(
    *, subnets: int = 2, faults: FaultPlan | None = None, seed: int = 1
) -> tuple[Simulator, MemorySink]:
    sink = MemorySink()
    links = LinkModel(lan=0.001, wan=0.010, jitter=0.0)
    sim = Simulator(
        seed=seed,
        run="t",
        network=Network(subnets=subnets, links=links),
        faults=faults,
        sink_for=lambda _node: sink,
    )
    return sim, sink


def add(
    sim: Simulator, name: str, subnet: int, port: int = 5000, groups: Sequence[str] = ()
) -> None:
    host = sim.network.add_host(f"host-{name}", subnet=subnet)
    sim.add_node(name, host, port, Recorder, groups=groups)


def core(sim: Simulator, name: str) -> Recorder:
    c = sim.nodes[name].core
    assert isinstance(c, Recorder)
    return c


def test_events_run_in_time_then_insertion_order() -> None:
    sim, _ = make_sim()
    seen: list[str] = []
    sim.at(2.0, lambda: seen.append("late"))
    sim.at(1.0, lambda: seen.append("first"))
    sim.at(1.0, lambda: seen.append("second"))
    sim.run(until=1.5)
    assert seen == ["first", "second"] and sim.now == 1.5
    sim.run(until=3.0)
    assert seen[-1] == "late"


def test_an_action_gets_the_arguments_it_was_scheduled_with() -> None:
    sim, _ = make_sim()
    seen: list[tuple[str, int]] = []
    sim.at(1.0, lambda label, n: seen.append((label, n)), "x", 7)
    sim.run(until=1.0)
    assert seen == [("x", 7)]


def test_run_scales_the_young_gc_generation_with_the_nodes_and_restores_it() -> None:
    sim, _ = make_sim(subnets=1)
    for i in range(200):
        add(sim, f"n{i}", 0)
    before = gc.get_threshold()
    during: list[tuple[int, ...]] = []
    sim.at(0.5, lambda: during.append(gc.get_threshold()))

    def fail() -> None:
        raise ValueError("an action failed")

    sim.at(0.6, fail)
    with pytest.raises(ValueError, match="an action failed"):
        sim.run(until=1.0)
    assert during == [(max(before[0], Simulator.YOUNG_PER_NODE * 200), *before[1:])]
    assert gc.get_threshold() == before


def test_unicast_crosses_subnets_with_wan_latency_and_lan_is_faster() -> None:
    sim, _ = make_sim()
    add(sim, "a", 0)
    add(sim, "b", 0)
    add(sim, "c", 1)
    sim.run(until=0.0)
    b_addr, c_addr = sim.nodes["b"].address, sim.nodes["c"].address
    sim.local("a", lambda c, now: c.send(b"x", b_addr))
    sim.local("a", lambda c, now: c.send(b"y", c_addr))
    sim.run(until=1.0)
    ((_, src, t_b),) = core(sim, "b").received
    ((_, _, t_c),) = core(sim, "c").received
    assert src == sim.nodes["a"].address
    assert t_b == pytest.approx(0.001) and t_c == pytest.approx(0.010)


def test_broadcast_and_multicast_stay_in_the_senders_subnet() -> None:
    sim, _ = make_sim()
    group = "239.1.1.1"
    add(sim, "a", 0, groups=[group])
    add(sim, "b", 0, groups=[group])
    add(sim, "other-port", 0, port=6000)
    add(sim, "not-joined", 0)
    add(sim, "c", 1, groups=[group])
    sim.run(until=0.0)
    bcast = sim.nodes["a"].host.broadcast
    sim.local("a", lambda c, now: c.send(b"bcast", (bcast, 5000)))
    sim.local("a", lambda c, now: c.send(b"mcast", (group, 5000)))
    sim.run(until=1.0)
    got = {name: sorted(d for d, _, _ in core(sim, name).received) for name in sim.nodes}
    assert got["b"] == [b"bcast", b"mcast"]
    assert got["a"] == [b"bcast", b"mcast"]  # loopback of own broadcast/multicast, as on Linux
    assert got["not-joined"] == [b"bcast"]
    assert got["other-port"] == []
    assert got["c"] == []  # the router forwards neither broadcast nor multicast


def test_drop_faults_are_counted_and_traced_per_datagram() -> None:
    sim, sink = make_sim(faults=FaultPlan(drop=0.5), seed=5)
    add(sim, "a", 0)
    add(sim, "b", 0)
    sim.run(until=0.0)
    b_addr = sim.nodes["b"].address
    for _ in range(400):
        sim.local("a", lambda c, now: c.send(b"x", b_addr))
    sim.run(until=1.0)
    dropped = sim.fault_counts["drop"]
    assert 150 < dropped < 250
    assert len(core(sim, "b").received) == 400 - dropped
    traced = [e for e in sink.events if e.layer == "net" and e.kind == "fault"]
    assert len(traced) == dropped
    assert {e.attrs["fault"] for e in traced} == {"drop"} and {e.node for e in traced} == {"b"}


def test_extra_ports_receive_unicast_and_broadcast_but_send_from_the_main_port() -> None:
    sim, _ = make_sim(subnets=1)
    add(sim, "a", 0)
    host = sim.network.add_host("host-b", subnet=0)
    sim.add_node("b", host, 5000, Recorder, extra_ports=[5001])
    sim.run(until=0.0)
    sim.local("a", lambda c, now: c.send(b"bcast", (host.broadcast, 5001)))
    sim.local("a", lambda c, now: c.send(b"ucast", (host.ip, 5001)))
    a_addr = sim.nodes["a"].address
    sim.local("b", lambda c, now: c.send(b"reply", a_addr), when=0.5)
    sim.run(until=1.0)
    assert sorted(d for d, _, _ in core(sim, "b").received) == [b"bcast", b"ucast"]
    assert core(sim, "a").received[-1][:2] == (b"reply", (host.ip, 5000))
    with pytest.raises(ConfigError, match="already taken"):
        sim.add_node("c", host, 5001, Recorder)
    # A second node of the same host may share the extra port (SO_REUSEPORT).
    sim.add_node("e", host, 5002, Recorder, extra_ports=[5001])
    sim.run(until=1.0)
    sim.local("a", lambda c, now: c.send(b"bcast2", (host.broadcast, 5001)))
    sim.run(until=2.0)
    assert core(sim, "e").received[-1][0] == b"bcast2"
    assert core(sim, "b").received[-1][0] == b"bcast2"
    with pytest.raises(ConfigError, match="twice"):
        sim.add_node("d", host, 6000, Recorder, extra_ports=[6000])


def test_duplicate_and_reorder_faults() -> None:
    sim, _ = make_sim(faults=FaultPlan(duplicate=1.0, reorder=0.5, reorder_by=0.05), seed=2)
    add(sim, "a", 0)
    add(sim, "b", 0)
    sim.run(until=0.0)
    b_addr = sim.nodes["b"].address
    for i in range(50):
        sim.local("a", lambda c, now, i=i: c.send(bytes([i]), b_addr), when=0.001 * i)
    sim.run(until=1.0)
    received = [d[0] for d, _, _ in core(sim, "b").received]
    assert sorted(received) == sorted(list(range(50)) * 2)
    assert received != sorted(received)  # some overtook others
    assert sim.fault_counts["duplicate"] == 50 and sim.fault_counts["reorder"] > 0


def test_crash_loses_state_and_in_flight_datagrams_restart_rebuilds() -> None:
    sim, sink = make_sim()
    add(sim, "a", 0)
    add(sim, "b", 0)
    sim.run(until=0.0)
    first = core(sim, "b")
    b_addr = sim.nodes["b"].address
    sim.local("a", lambda c, now: c.send(b"before", b_addr), when=0.1)
    sim.local("a", lambda c, now: c.send(b"in flight", b_addr), when=0.2)
    sim.crash("b", 0.2005)
    sim.local("a", lambda c, now: c.send(b"while down", b_addr), when=0.3)
    sim.restart("b", 0.4)
    sim.local("a", lambda c, now: c.send(b"after", b_addr), when=0.5)
    sim.run(until=1.0)
    assert [d for d, _, _ in first.received] == [b"before"]
    second = core(sim, "b")
    assert second is not first and second.ctx.incarnation == 2
    assert [d for d, _, _ in second.received] == [b"after"]
    assert sim.stats["lost_to_crashed"] == 2
    faults = [e.attrs["fault"] for e in sink.events if e.kind == "fault"]
    assert faults == ["crash", "restart"]


def test_partition_blocks_both_ways_until_healed() -> None:
    sim, _ = make_sim()
    for name in "abc":
        add(sim, name, 0)
    sim.run(until=0.0)
    sim.partition(["c"], start=0.1, end=0.5)
    for when in (0.2, 0.6):
        for src, dst in (("a", "c"), ("c", "a"), ("a", "b")):
            addr = sim.nodes[dst].address
            sim.local(src, lambda core_, now, addr=addr: core_.send(b"m", addr), when=when)
    sim.run(until=1.0)
    times = {n: [round(t, 1) for _, _, t in core(sim, n).received] for n in "abc"}
    assert times == {"a": [0.6], "b": [0.2, 0.6], "c": [0.6]}
    assert sim.fault_counts["partition_drop"] == 2
    assert sim.fault_counts["partition"] == 1 and sim.fault_counts["heal"] == 1


def test_timer_fires_at_the_latest_deadline_only() -> None:
    sim, _ = make_sim()
    add(sim, "a", 0)
    sim.run(until=0.0)
    c = core(sim, "a")

    def arm(core_: Recorder, now: float, when: float) -> None:
        core_.deadline = when

    sim.local("a", lambda core_, now: arm(core_, now, 0.5), when=0.1)
    sim.local("a", lambda core_, now: arm(core_, now, 0.3), when=0.2)  # moves it earlier
    sim.run(until=1.0)
    assert c.timer_calls == [0.3]


def test_configuration_errors() -> None:
    sim, _ = make_sim(subnets=1)
    host = sim.network.add_host("h", subnet=0)
    sim.add_node("a", host, 1, Recorder)
    with pytest.raises(ConfigError, match="duplicate node"):
        sim.add_node("a", host, 2, Recorder)
    with pytest.raises(ConfigError, match="already taken"):
        sim.add_node("b", host, 1, Recorder)
    with pytest.raises(ConfigError, match="not a multicast"):
        sim.add_node("c", host, 3, Recorder, groups=["10.0.0.1"])
    with pytest.raises(ConfigError, match="does not exist"):
        sim.network.add_host("x", subnet=4)
    with pytest.raises(ConfigError, match="unknown node"):
        sim.crash("zz", 1.0)
    with pytest.raises(ConfigError, match="unknown node"):
        sim.local("zz", lambda core_, now: None)
