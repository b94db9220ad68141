"""The simulator at scale: subnets of any size, routing by subnet, one trace budget, and the
scenarios' bounded defaults (the figures themselves are in ``bench/sim_scale.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossamer.errors import ConfigError
from gossamer.sim import Network
from gossamer.sim.network import is_multicast
from gossamer.sim.run import SimRequest, TraceSpool, run_simulation
from gossamer.sim.scenarios import get
from gossamer.trace import read_run


def test_subnets_of_254_hosts_keep_the_slash_24_layout() -> None:
    net = Network(subnets=300)
    a = net.add_host("a", subnet=0)
    b = net.add_host("b", subnet=257)
    assert (net.prefix, net.hosts_per_subnet) == (24, 254)
    assert (a.ip, a.broadcast) == ("10.0.0.1", "10.0.0.255")
    assert (b.ip, b.broadcast) == ("10.1.1.1", "10.1.1.255")
    for i in range(253):
        net.add_host(f"a{i}", subnet=0)
    with pytest.raises(ConfigError, match="subnet 0 is full"):
        net.add_host("one-too-many", subnet=0)


def test_a_subnet_grows_its_prefix_to_hold_the_hosts_asked_for() -> None:
    net = Network(subnets=3, hosts_per_subnet=10_000)  # 2**14 - 2 >= 10,000: a /18
    assert (net.prefix, net.hosts_per_subnet) == (18, 16_382)
    hosts = [net.add_host(f"h{i}", subnet=1) for i in range(300)]
    assert hosts[0].ip == "10.0.64.1" and hosts[255].ip == "10.0.65.0"
    assert hosts[-1].ip == "10.0.65.44"
    assert {h.broadcast for h in hosts} == {"10.0.127.255"}
    assert net.add_host("x", subnet=2).ip == "10.0.128.1"
    assert len({h.ip for h in net.hosts.values()}) == len(net.hosts)


@pytest.mark.parametrize(
    ("ip", "multicast"),
    [
        ("224.0.0.1", True),
        ("239.255.255.255", True),
        ("223.255.255.255", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("10.0.0.1", False),
        ("0224.1.1.1", False),  # not a canonical address
        ("224.1.1", False),
        ("224", False),
        ("", False),
    ],
)
def test_multicast_addresses_are_told_from_the_first_octet_and_then_validated(
    ip: str, multicast: bool
) -> None:
    assert is_multicast(ip) is multicast


def test_the_address_space_bounds_subnets_times_their_size() -> None:
    Network(subnets=1024, hosts_per_subnet=16_000)  # 1024 * 2**14 == 2**24
    with pytest.raises(ConfigError, match="holds between 1 and 1024 subnets"):
        Network(subnets=1025, hosts_per_subnet=16_000)
    with pytest.raises(ConfigError, match="at least one host"):
        Network(hosts_per_subnet=0)


def test_gossip_runs_256_nodes_on_one_subnet_without_multicast(tmp_path: Path) -> None:
    result = run_simulation(
        SimRequest(
            scenario="gossip",
            nodes=256,
            seed=2,
            out=tmp_path,
            duration=8.0,
            params={"multicast": "off", "subnets": "1", "broadcasts": "2"},
        )
    )
    s = result.summary
    assert s["coverage_min"] == 1.0 and s["violations"] == [] and s["live"] == 256
    files = {p.name for p in tmp_path.glob("*.jsonl")}
    assert len(files) == 256  # one per node, hosts 255 and 256 of one /23 among them
    assert {"10.0.0.255:29999.jsonl", "10.0.1.0:29999.jsonl"} <= files


def test_discovery_puts_every_node_on_its_own_host_past_254(tmp_path: Path) -> None:
    result = run_simulation(
        SimRequest(
            scenario="discovery",
            nodes=300,
            seed=1,
            out=tmp_path,
            duration=20.0,
            params={"subnets": "1", "max_peers": "4"},
        )
    )
    assert result.summary["target_peers"] == 4
    assert result.summary["nodes_never_full"] == 0
    assert result.metadata["params"]["subnets"] == 1


@pytest.mark.parametrize(("scenario", "nodes", "subnets"), [
    ("gossip", 32, 1), ("gossip", 33, 2), ("gossip", 1000, 32),
    ("discovery", 128, 1), ("discovery", 129, 2), ("ping", 500, 1),
])  # fmt: skip
def test_subnets_default_to_one_per_lan_of_the_scenario(
    scenario: str, nodes: int, subnets: int
) -> None:
    s = get(scenario)
    assert s.subnet_count(nodes, s.parse_params({})) == subnets
    assert s.subnet_count(nodes, s.parse_params({"subnets": "3"})) == 3


def test_gossip_bounds_addressees_and_measures_coverage_over_them(tmp_path: Path) -> None:
    result = run_simulation(
        SimRequest(
            scenario="gossip",
            nodes=40,
            seed=3,
            out=tmp_path,
            duration=8.0,
            params={"destinations": "10", "broadcasts": "3", "multicast": "off"},
        )
    )
    s = result.summary
    assert s["coverage_min"] == 1.0 and s["violations"] == [], s
    assert result.metadata["params"]["subnets"] == 2  # one per 32 nodes
    delivered: dict[str, set[str]] = {}
    for event in read_run(tmp_path)[0]:
        if event.layer == "gossip" and event.kind == "deliver" and event.msg:
            delivered.setdefault(event.msg, set()).add(event.node)
    # Without multicast only addressees deliver: 9 or 10 of them (the origin may be one).
    assert len(delivered) == 3 and all(9 <= len(nodes) <= 10 for nodes in delivered.values())


def test_the_trace_budget_flushes_early_without_changing_the_files(tmp_path: Path) -> None:
    def run(out: Path, budget: int) -> dict[str, bytes]:
        original = TraceSpool.BUDGET, TraceSpool.PER_NODE
        TraceSpool.BUDGET, TraceSpool.PER_NODE = budget, 1
        try:
            run_simulation(SimRequest(scenario="ping", nodes=6, seed=4, out=out))
        finally:
            TraceSpool.BUDGET, TraceSpool.PER_NODE = original
        return {p.name: p.read_bytes() for p in sorted(out.glob("*.jsonl"))}

    small, large = run(tmp_path / "small", 2_000), run(tmp_path / "large", 1 << 30)
    assert small == large and len(small) == 6 and all(small.values())
