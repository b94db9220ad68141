"""Placement of the lab's nodes: ids, subnets, loopback ports, namespace hosts, the mode."""

from __future__ import annotations

import pytest

from gossamer.errors import ConfigError
from gossamer.lab import hosts
from gossamer.lab.netns import Topology, netns_unavailable_reason


def test_node_ids_are_h1_to_hn() -> None:
    assert hosts.node_ids(3) == ("h1", "h2", "h3")
    assert len(hosts.node_ids(hosts.MAX_HOSTS)) == hosts.MAX_HOSTS


@pytest.mark.parametrize("bad", [0, -1, hosts.MAX_HOSTS + 1, True, 2.0])
def test_node_ids_reject_bad_counts(bad: object) -> None:
    with pytest.raises(ConfigError, match="--hosts"):
        hosts.node_ids(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("count", "sizes"),
    [(1, (1,)), (3, (3,)), (4, (2, 2)), (5, (3, 2)), (6, (3, 3)), (9, (5, 4))],
)
def test_two_subnets_from_four_hosts(count: int, sizes: tuple[int, ...]) -> None:
    assert hosts.subnet_sizes(count) == sizes
    assert sum(sizes) == count


def test_loopback_placement_gives_every_node_its_own_ports() -> None:
    placement = hosts.loopback_placement(5, base_port=30_000)
    assert placement.mode == "loopback"
    assert placement.ids == ("h1", "h2", "h3", "h4", "h5")
    assert placement.subnets == (3, 2)
    ports = [port for spec in placement.hosts for port in spec.ports.values()]
    assert len(ports) == len(set(ports)) == 5 * len(hosts.PORT_NAMES)
    for index, spec in enumerate(placement.hosts):
        assert spec.address == "127.0.0.1"
        assert spec.broadcast is None  # nothing is ever broadcast on the machine's lo
        assert spec.netns is None
        assert list(spec.ports) == list(hosts.PORT_NAMES)
        assert spec.ports["discovery"] == 30_000 + 10 * index
        assert spec.subnet == (0 if index < 3 else 1)


def test_loopback_placement_picks_a_free_block() -> None:
    first = hosts.loopback_placement(3)
    ports = [p for spec in first.hosts for p in spec.ports.values()]
    assert all(20_000 <= p < 60_000 for p in ports)
    assert len(set(ports)) == len(ports)


def test_loopback_placement_rejects_a_bad_base_port() -> None:
    with pytest.raises(ConfigError, match="base port"):
        hosts.loopback_placement(3, base_port=80)


def test_netns_placement_follows_the_topology() -> None:
    topology = Topology(subnets=hosts.subnet_sizes(6))  # not built: names are known already
    placement = hosts.netns_placement(topology)
    assert placement.mode == "netns"
    assert placement.subnets == (3, 3)
    assert placement.ids == tuple(f"h{i}" for i in range(1, 7))
    assert [spec.address for spec in placement.hosts] == [
        "10.77.1.10", "10.77.1.11", "10.77.1.12", "10.77.2.10", "10.77.2.11", "10.77.2.12",
    ]  # fmt: skip
    assert {spec.broadcast for spec in placement.hosts} == {"10.77.1.255", "10.77.2.255"}
    for spec, host in zip(placement.hosts, topology.hosts, strict=True):
        assert spec.ports == hosts.DEFAULT_PORTS
        assert spec.netns == host.netns
        assert spec.subnet == host.subnet


def test_placement_host_lookup() -> None:
    placement = hosts.loopback_placement(2, base_port=30_000)
    assert placement.host("h2").ports["discovery"] == 30_010
    with pytest.raises(ConfigError, match="no host 'h9'"):
        placement.host("h9")
    with pytest.raises(ConfigError):
        hosts.check_hosts(["h1", "h3"], placement)


def test_choose_mode() -> None:
    assert hosts.choose_mode("loopback") == ("loopback", "--loopback was requested")
    reason = netns_unavailable_reason()
    mode, why = hosts.choose_mode(None)
    if reason is None:
        assert (mode, why) == ("netns", None)
        assert hosts.choose_mode("netns") == ("netns", None)
    else:
        assert (mode, why) == ("loopback", reason)
        with pytest.raises(ConfigError, match="--netns is not possible here"):
            hosts.choose_mode("netns")
