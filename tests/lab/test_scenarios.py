"""The lab's scenarios: parameters, fault flags, and the node configs they produce.

Every config is written with the lab's TOML writer and read back with the node's own
loader (``gossamer.lab.config.load_config``), so the two sides of the contract agree.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gossamer.errors import ConfigError
from gossamer.faults import Crash, Partition, parse_crash, parse_partition
from gossamer.lab import hosts, scenarios
from gossamer.lab.config import NodeConfig, load_config
from gossamer.lab.netns import Topology
from gossamer.lab.plan import LabRequest, plan
from gossamer.lab.rundir import write_config, write_secret
from gossamer.lab.scenarios import FaultSchedule

IDS6 = hosts.node_ids(6)


def test_scenario_names_and_parameters_are_unique() -> None:
    names = [s.name for s in scenarios.scenarios()]
    assert names == [
        "discovery", "gossip", "isis", "snapshot", "link", "gateway", "demo", "cluster",
        "queues",
    ]
    for s in scenarios.scenarios():
        params = [p.name for p in s.params]
        assert len(params) == len(set(params)), s.name
        assert {"duration", "linger", "delay_rate"} <= set(params)
        # The cluster's hosts run daemons and clients, not the lab app's services.
        assert set(s.services) <= set(scenarios.SERVICES) or s.daemons
        assert s.min_hosts <= s.default_hosts
        # Every default is valid under its own parser.
        values = s.resolve({}, hosts.node_ids(s.default_hosts))
        assert values == {p.name: p.default for p in s.params}


def test_expected_checks_exist_in_the_analysis_catalog() -> None:
    pytest.importorskip("pyspark")
    from gossamer.analysis.catalog import CHECKS

    known = {c.name for c in CHECKS}
    for s in scenarios.scenarios():
        expected = s.expected_checks(s.resolve({}, hosts.node_ids(s.default_hosts)))
        assert expected, s.name
        assert set(expected) <= known, s.name


def test_each_scenario_expects_the_checks_of_its_services() -> None:
    demo = scenarios.get("demo")
    checks = demo.expected_checks(demo.resolve({}, IDS6))
    for layer in ("isis", "snapshot", "gossip", "discovery", "link", "gateway"):
        assert any(c.startswith(layer + ".") for c in checks), layer
    # The demo's group is on agreed views: virtual synchrony and the views are judged,
    # agreement and validity over every node are not.
    assert {"isis.view_agreement", "isis.view_validity", "views.rejoin"} <= set(checks)
    assert not {"isis.agreement", "isis.validity"} & set(checks)
    snapshot = scenarios.get("snapshot")
    assert "isis.agreement" in snapshot.expected_checks(snapshot.resolve({}, IDS6))
    isis = scenarios.get("isis")
    assert "discovery.full_view" in isis.expected_checks(isis.resolve({}, IDS6))
    assert "discovery.full_view" not in isis.expected_checks(
        isis.resolve({"discovery": "off"}, IDS6)
    )
    assert not any(c.startswith("snapshot.") for c in isis.expected_checks({}))
    assert scenarios.get("link").expected_checks({}) == ("link.delivery", "link.credit")


def test_unknown_scenario_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown scenario 'nope' \\(known: discovery, gossip"):
        scenarios.get("nope")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"bogus": "1"}, "scenario isis has no parameter 'bogus' \\(known: duration"),
        ({"isis_rate": "fast"}, "--param isis_rate=fast: expected a number"),
        ({"isis_rate": "nan"}, "expected a finite number"),
        ({"isis_rate": "-1"}, "must be at least 0"),
        ({"duration": "601"}, "must be at most 600"),
        ({"heartbeat_attempts": "2.5"}, "expected an integer"),
        ({"discovery": "maybe"}, "expected on/off"),
        ({"broken": "h9"}, "--param broken=h9: no such host \\(hosts are h1, h2, h3"),
    ],
)
def test_bad_parameters_are_one_clear_error(raw: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        scenarios.get("isis").resolve(raw, hosts.node_ids(3))


def test_parameters_are_typed() -> None:
    values = scenarios.get("isis").resolve(
        {"isis_rate": "2.5", "heartbeat_attempts": "4", "discovery": "no", "broken": "h2"},
        hosts.node_ids(3),
    )
    assert values["isis_rate"] == 2.5
    assert values["heartbeat_attempts"] == 4
    assert values["discovery"] is False
    assert values["broken"] == "h2"
    assert scenarios.get("isis").resolve({"broken": "none"}, IDS6)["broken"] is None


def test_a_default_host_must_exist() -> None:
    snapshot = scenarios.get("snapshot")
    assert snapshot.resolve({}, hosts.node_ids(2))["initiator"] == "h1"
    with pytest.raises(ConfigError, match="initiator"):
        snapshot.resolve({"initiator": "h3"}, hosts.node_ids(2))


def test_parse_crash() -> None:
    assert parse_crash("h3@12") == Crash(host="h3", at=12.0)
    assert parse_crash(" h10 @ 0.5 ") == Crash(host="h10", at=0.5)
    assert str(Crash(host="h3", at=12.5)) == "h3@12.5"
    for bad in ("h3", "h3@", "@5", "h3@-1", "h3@x", "h3@1@2"):
        with pytest.raises(ConfigError, match="expected HOST@SECONDS"):
            parse_crash(bad)


def test_parse_partition() -> None:
    part = parse_partition("h1,h2@5-10.5")
    assert part == Partition(hosts=("h1", "h2"), start=5.0, end=10.5)
    assert str(part) == "h1,h2@5-10.5"
    assert parse_partition("h4@0-1").hosts == ("h4",)
    for bad in ("h1,h2", "h1@5", "h1@5-", "@1-2", "h1,h2@a-b"):
        with pytest.raises(ConfigError, match="expected A,B@FROM-TO"):
            parse_partition(bad)
    with pytest.raises(ConfigError, match="FROM must be before TO"):
        parse_partition("h1@5-5")
    with pytest.raises(ConfigError, match="distinct"):
        parse_partition("h1,h1@1-2")


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (FaultSchedule(drop=1.5), "--drop 1.5: must be a probability"),
        (FaultSchedule(delay_ms=-1), "--delay -1"),
        (FaultSchedule(crashes=(Crash(host="h7", at=1),)), "no such host"),
        (FaultSchedule(crashes=(Crash(host="h1", at=20),)), "within the workload"),
        (
            FaultSchedule(crashes=(Crash(host="h1", at=1), Crash(host="h1", at=2))),
            "already crashes",
        ),
        (
            FaultSchedule(crashes=tuple(Crash(host=h, at=1) for h in hosts.node_ids(3))),
            "at least one host must survive",
        ),
        (
            FaultSchedule(partitions=(Partition(hosts=("h1", "h2", "h3"), start=1, end=2),)),
            "the other side would be empty",
        ),
        (FaultSchedule(partitions=(Partition(hosts=("h9",), start=1, end=2),)), "no such host"),
        (FaultSchedule(partitions=(Partition(hosts=("h1",), start=11, end=12),)), "starts after"),
        (
            FaultSchedule(
                partitions=(
                    Partition(hosts=("h1",), start=1, end=4),
                    Partition(hosts=("h2",), start=3, end=5),
                )
            ),
            "overlap",
        ),
    ],
)
def test_fault_schedules_are_validated(schedule: FaultSchedule, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        schedule.validate(hosts.node_ids(3), duration=10.0)


def test_only_the_demo_the_cluster_and_the_queues_have_default_faults() -> None:
    demo = scenarios.get("demo").faults_for(IDS6)
    assert demo.drop > 0 and demo.delay_ms > 0
    assert demo.crashes == (Crash(host="h1", at=13.0),)
    assert demo.partitions == (Partition(hosts=("h2",), start=6.0, end=8.0),)
    demo.validate(IDS6, duration=24.0)
    # The cluster's (and the queues') kills, cut and restart: tests/lab/test_cluster.py.
    assert scenarios.get("cluster").faults_for(IDS6).restarts
    assert scenarios.get("queues").faults_for(IDS6).restarts
    for s in scenarios.scenarios():
        if s.name not in ("demo", "cluster", "queues"):
            assert s.faults_for(IDS6) == FaultSchedule(), s.name


def _write_and_load(
    tmp_path: Path,
    scenario: str,
    placement: hosts.Placement,
    faults: FaultSchedule,
    raw: dict[str, str] | None = None,
) -> dict[str, NodeConfig]:
    s = scenarios.get(scenario)
    values = s.resolve(raw or {}, placement.ids)
    key = tmp_path / "secrets" / "cluster.key"
    write_secret(key)
    docs = scenarios.node_configs(
        s, values, placement, faults,
        run="lab-test", out=tmp_path, key_file=key, start_at=time.monotonic() + 5, seed=7,
    )  # fmt: skip
    configs: dict[str, NodeConfig] = {}
    for node, doc in docs.items():
        path = tmp_path / "config" / f"{node}.toml"
        path.parent.mkdir(exist_ok=True)
        configs[node] = write_config(path, doc)
        assert load_config(path, env={}) == configs[node]
    return configs


def test_demo_configs_on_loopback(tmp_path: Path) -> None:
    placement = hosts.loopback_placement(6, base_port=31_000)
    faults = scenarios.get("demo").faults_for(placement.ids)
    configs = _write_and_load(tmp_path, "demo", placement, faults)
    assert list(configs) == list(placement.ids)
    start = {c.node.start_at for c in configs.values()}
    assert len(start) == 1  # one common start
    for index, (node, cfg) in enumerate(configs.items()):
        assert cfg.node.id == node and cfg.node.run == "lab-test"
        assert cfg.node.trace == tmp_path.resolve() / f"{node}.jsonl"
        assert cfg.node.address == "127.0.0.1"
        assert cfg.node.exit_when_done is False
        assert cfg.node.seed == 7000 + index + 1
        assert cfg.ports.discovery == 31_000 + 10 * index
        assert sorted(p.id for p in cfg.peers) == sorted(set(placement.ids) - {node})
        assert all(p.ports.gossip == placement.host(p.id).ports["gossip"] for p in cfg.peers)
        assert cfg.faults.drop == faults.drop and cfg.faults.delay_ms == faults.delay_ms
        # Loopback partitions: each node drops the datagrams of the other side.
        (part,) = cfg.faults.partitions
        assert (part.start, part.end) == (6.0, 8.0)
        other_side = set(placement.ids) - {"h2"} if node == "h2" else {"h2"}
        assert set(part.peers) == other_side
        assert cfg.discovery.enabled and cfg.discovery.broadcast_address is None
        assert cfg.gossip.enabled and not cfg.gossip.protocol["multicast"]  # never multicast on lo
        assert cfg.node.key is not None and len(cfg.node.key) == 32
        assert cfg.node.wire_config().sealed
        assert cfg.isis.enabled and cfg.isis.snapshots and cfg.isis.views
        assert cfg.isis.members == placement.ids
        # The node daemon's discovery timers: the partitioned host is excluded.
        timers = {k: cfg.discovery.protocol[k] for k in ("inactive_time", "heartbeat_wait")}
        assert timers == {"inactive_time": 0.5, "heartbeat_wait": 0.3}
        assert cfg.isis.snapshot_every == (5.0 if node == "h1" else 0.0)
        assert not cfg.isis.broken_order
        assert cfg.link.push_to == (placement.ids[(index + 1) % 6],)
        assert cfg.gateway.enabled and cfg.gateway.db is not None
        assert cfg.gateway.db.name == f"{node}-queues.db"


def test_configs_in_namespaces(tmp_path: Path) -> None:
    placement = hosts.netns_placement(Topology(subnets=hosts.subnet_sizes(4)))
    faults = FaultSchedule(partitions=(Partition(hosts=("h1",), start=1, end=2),))
    configs = _write_and_load(tmp_path, "gossip", placement, faults)
    for node, cfg in configs.items():
        spec = placement.host(node)
        assert cfg.node.address == spec.address
        assert cfg.ports.as_dict() == hosts.DEFAULT_PORTS
        assert cfg.discovery.broadcast_address == spec.broadcast
        assert cfg.gossip.protocol["multicast"]  # between namespace hosts only
        assert cfg.faults.partitions == ()  # the runner cuts the real links instead
        assert not cfg.isis.enabled and not cfg.link.enabled and not cfg.gateway.enabled


def test_broken_node_and_disabled_discovery(tmp_path: Path) -> None:
    placement = hosts.loopback_placement(3, base_port=32_000)
    configs = _write_and_load(
        tmp_path, "isis", placement, FaultSchedule(), {"broken": "h2", "discovery": "off"}
    )
    assert [c.isis.broken_order for c in configs.values()] == [False, True, False]
    assert not any(c.discovery.enabled for c in configs.values())
    assert not any(c.isis.snapshots for c in configs.values())
    assert not any(c.gossip.enabled for c in configs.values())


def test_parameters_reach_the_configs(tmp_path: Path) -> None:
    placement = hosts.loopback_placement(3, base_port=33_000)
    raw = {"link_rate": "7", "link_size": "33", "credit": "4", "duration": "9", "linger": "1"}
    configs = _write_and_load(tmp_path, "link", placement, FaultSchedule(delay_ms=5), raw)
    cfg = configs["h3"]
    assert (cfg.link.rate, cfg.link.size, cfg.link.credit) == (7.0, 33, 4)
    assert cfg.link.push_to == ("h1",)
    assert (cfg.node.duration, cfg.node.linger) == (9.0, 1.0)
    assert (cfg.faults.delay_ms, cfg.faults.delay_rate) == (5.0, 1.0)


def test_protocol_parameters_reach_every_node(tmp_path: Path) -> None:
    params = {
        "isis_rate": "2",
        "isis.batch_delay": "0.01",
        "isis.retransmit_initial": "0.1",
        "discovery.answer_rate": "8",
        "link.max_message": "512",  # link is not a service of this scenario: ignored
    }
    the_plan = plan(LabRequest(scenario="isis", hosts=3, out=tmp_path / "run", params=params))
    assert the_plan.values["isis_rate"] == 2.0
    assert the_plan.protocol["isis"]["retransmit_initial"] == 0.1
    placement = hosts.loopback_placement(3, base_port=32_000)
    key = tmp_path / "cluster.key"
    write_secret(key)
    docs = scenarios.node_configs(
        the_plan.scenario, the_plan.values, placement, the_plan.faults,
        run="lab-test", out=tmp_path, key_file=key, start_at=time.monotonic() + 5, seed=7,
        protocol=the_plan.protocol,
    )  # fmt: skip
    for node, doc in docs.items():
        config = write_config(tmp_path / f"{node}.toml", doc)
        assert config.isis.protocol["batch_delay"] == 0.01
        assert config.isis.protocol["retransmit_initial"] == 0.1
        assert config.discovery.protocol["answer_rate"] == 8.0
        assert config.discovery.protocol["broadcast_interval"] == 1.0  # the scenario's
        assert not config.link.enabled and "max_message" not in config.link.protocol


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("isis.batch_delay", "soon", "--param isis.batch_delay=soon: expected a number"),
        ("isis.me", "2", "--param isis.me=2: is set by the caller"),
        ("chord.rate", "1", "--param chord.rate=1: no protocol 'chord' \\(known: discovery"),
        ("discovery.max_missed", "0", "--param discovery.max_missed: max_missed must be at"),
    ],
)
def test_bad_protocol_parameters_are_one_clear_error(name: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(LabRequest(scenario="isis", hosts=3, out=Path("unused"), params={name: text}))
