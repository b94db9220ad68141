"""The lab's ``cluster`` scenario: gossamer node daemons, their clients, kills, cuts, restarts.

The unit tests check what the lab builds (each daemon's file as the daemon reads it, each
client app's file as the app reads it, the restart in the fault grammar and timeline).
The slow test runs the scenario for real on 127.0.0.1: three daemons forming one
cluster, 신경 clients on every host routing across it, a partition (on loopback the
cut-off daemon is frozen), a SIGKILL and a restart that rejoins as a new incarnation,
then the analysis's cluster checks on the traces.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from gossamer.daemon.config import load_daemon_config
from gossamer.errors import ConfigError
from gossamer.faults import Crash, Partition
from gossamer.lab import scenarios
from gossamer.lab.cluster import client_configs, daemon_configs
from gossamer.lab.config import load_config
from gossamer.lab.hosts import loopback_placement
from gossamer.lab.inject import timeline
from gossamer.lab.plan import LabRequest, plan
from gossamer.lab.rundir import write_config, write_daemon_config, write_secret
from gossamer.lab.runner import run_lab

CLUSTER_CHECKS = ("views.agreement", "views.rejoin", "gateway.cluster_routing")


def test_each_host_gets_a_daemon_and_a_client_app_as_they_read_their_files(
    tmp_path: Path,
) -> None:
    key = tmp_path / "cluster.key"
    write_secret(key)
    the_plan = plan(LabRequest(scenario="cluster", hosts=4, out=tmp_path,
                               params={"discovery.inactive_time": "2.5"}))
    placement = loopback_placement(4, base_port=30_000)
    daemons = daemon_configs(the_plan.values, placement, run="r", out=tmp_path, key_file=key,
                             seed=1, protocol=the_plan.protocol)
    apps = client_configs(the_plan.values, placement, run="r", out=tmp_path, key_file=key,
                          start_at=5.0, seed=1)
    assert sorted(daemons) == ["h1", "h2", "h3", "h4"]
    assert sorted(apps) == ["h1-clients", "h2-clients", "h3-clients", "h4-clients"]
    for host, doc in daemons.items():
        write_daemon_config(tmp_path / f"{host}.toml", doc)
        written = load_daemon_config(tmp_path / f"{host}.toml", env={})  # as the daemon reads it
        assert written.cluster.name == "r" and written.node.name == host
        assert written.cluster.bootstrap is (host == "h1")  # one founder
        assert len(written.cluster.seeds) == 3  # every other host
        assert written.node.trace == tmp_path / f"{host}.jsonl"
        assert written.discovery.protocol["inactive_time"] == 2.5
        spec = placement.host(host)
        assert written.ports.views == spec.ports["isis"]
        app = write_config(tmp_path / f"{host}-clients.toml", apps[f"{host}-clients"])
        assert load_config(tmp_path / f"{host}-clients.toml", env={}) == app
        assert app.cluster.enabled and app.cluster.host == host
        assert app.cluster.gateway == f"127.0.0.1:{spec.ports['gateway']}"
        assert app.cluster.hosts == ("h1", "h2", "h3", "h4")
        assert not (app.gateway.enabled or app.isis.enabled or app.discovery.enabled)


def test_the_queues_scenario_gives_each_host_queue_clients_of_its_daemon(
    tmp_path: Path,
) -> None:
    the_plan = plan(LabRequest(scenario="queues", hosts=None, out=tmp_path,
                               params={"queue_rate": "7", "clients": "3"}))
    placement = loopback_placement(3, base_port=30_000)
    apps = client_configs(the_plan.values, placement, run="r", out=tmp_path,
                          key_file=tmp_path / "k", start_at=5.0, seed=1,
                          workload=the_plan.scenario.workload)
    write_secret(tmp_path / "k")
    for host in the_plan.ids:
        app = write_config(tmp_path / f"{host}-clients.toml", apps[f"{host}-clients"])
        assert load_config(tmp_path / f"{host}-clients.toml", env={}) == app
        assert app.cluster.workload == "queues"
        assert (app.cluster.rate, app.cluster.clients) == (7.0, 3)
    faults = the_plan.faults
    assert [c.host for c in faults.crashes] == ["h2", "h1"]
    assert faults.restarts == (Crash(host="h2", at=16.0),)
    assert faults.partitions == (Partition(hosts=("h3",), start=3.0, end=9.0),)
    checks = scenarios.get("queues").expected_checks(the_plan.values)
    assert [c for c in checks if c.startswith("queue.")] == [
        "queue.confirmed_delivered", "queue.no_redelivery_after_ack",
        "queue.no_double_holding", "queue.minority_refused",
    ]
    (tmp_path / "bad.toml").write_text(
        (tmp_path / "h1-clients.toml").read_text().replace('"queues"', '"jobs"')
    )
    with pytest.raises(ConfigError, match=r"cluster\.workload: must be one of routing, queues"):
        load_config(tmp_path / "bad.toml", env={})


def test_the_cluster_defaults_kill_cut_and_restart() -> None:
    the_plan = plan(LabRequest(scenario="cluster", hosts=None, out=Path("unused")))
    faults = the_plan.faults
    assert the_plan.ids == ("h1", "h2", "h3")
    assert faults.crashes == (Crash(host="h2", at=14.0),)
    assert faults.restarts == (Crash(host="h2", at=18.0),)
    assert faults.partitions == (Partition(hosts=("h3",), start=3.0, end=9.0),)
    actions = [(a.at, type(a.fault).__name__, a.heal, a.restart) for a in timeline(faults)]
    assert actions == [
        (3.0, "Partition", False, False),
        (9.0, "Partition", True, False),
        (14.0, "Crash", False, False),
        (18.0, "Crash", False, True),
    ]
    assert scenarios.get("cluster").expected_checks(the_plan.values) == CLUSTER_CHECKS


@pytest.mark.parametrize(
    ("scenario", "crashes", "restarts", "message"),
    [
        ("cluster", (), (Crash(host="h2", at=5.0),), "h2 must crash before it"),
        ("cluster", (Crash(host="h2", at=6.0),), (Crash(host="h2", at=5.0),), "must crash before"),
        ("cluster", (Crash(host="h2", at=1.0),), (Crash(host="h2", at=99.0),), "within the work"),
        ("isis", (Crash(host="h2", at=1.0),), (Crash(host="h2", at=2.0),), "only the cluster"),
    ],
)
def test_a_restart_needs_an_earlier_crash_and_the_cluster_scenario(
    scenario: str, crashes: tuple[Crash, ...], restarts: tuple[Crash, ...], message: str
) -> None:
    request = LabRequest(scenario=scenario, hosts=3, out=Path("unused"), crashes=crashes,
                         restarts=restarts)
    with pytest.raises(ConfigError, match=message):
        plan(request)


def _events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_cluster_routes_across_nodes_under_a_kill_a_partition_and_a_restart(
    tmp_path: Path, spark: SparkSession
) -> None:
    out = tmp_path / "cluster"
    stream = io.StringIO()
    result = run_lab(LabRequest(scenario="cluster", hosts=3, out=out, mode="loopback"), stream)
    text = stream.getvalue()
    meta = result.metadata
    assert [i["fault"] for i in meta["lab"]["injected"]] == [
        "partition", "heal", "crash", "restart"
    ], text
    assert meta["lab"]["unexpected_exits"] == {}, text
    assert meta["faults"]["restart"] == ["h2@18"]
    # The daemons agreed on views; h2 came back as a new incarnation, h3 after its cut.
    views: dict[str, list[tuple[int, str]]] = {}
    for host in ("h1", "h2", "h3"):
        views[host] = [(e["seq"], e["attrs"]["members"]) for e in _events(out / f"{host}.jsonl")
                       if e["layer"] == "views" and e["kind"] == "view_change"]
    incarnations = {m.split("#")[1] for _, members in views["h2"] for m in members.split(",")
                    if m.startswith("h2#")}
    assert len(incarnations) == 2, views["h2"]
    # h2's last view (the stop's leaves come after it) holds all three, at every node.
    final = views["h2"][-1]
    assert final in views["h1"] and final in views["h3"], views
    assert sorted(m.split("#")[0] for m in final[1].split(",")) == ["h1", "h2", "h3"]
    # Clients received messages sent by clients of other daemons.
    crossed = 0
    for host in ("h1", "h2", "h3"):
        for e in _events(out / f"{host}-clients.jsonl"):
            if e["kind"] == "client_recv" and not e["msg"].startswith(f"{host}-"):
                crossed += 1
    assert crossed > 20
    summary = json.loads((out / "analysis" / "summary.json").read_text())
    status = {c["name"]: c["status"] for c in summary["checks"]}
    for name in CLUSTER_CHECKS:
        assert status[name] == "pass", (name, text)
    # ... and the routing check held the cluster to a good part of the messages (outside
    # the faults' stretches), not to none of them.
    from gossamer.analysis.checks import cluster
    from gossamer.analysis.load import load_run

    events, _ = load_run(spark, str(out), str(tmp_path / "events.parquet"))
    owed = cluster.owed(events)
    assert owed.select("msg").distinct().count() >= 20
    # Every other check on the daemons' traces holds too: the run passes.
    assert result.code == 0, text


QUEUE_CHECKS = ("queue.confirmed_delivered", "queue.no_redelivery_after_ack",
                "queue.no_double_holding", "queue.minority_refused")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_replicated_queue_holds_under_a_cut_kills_and_a_restart(tmp_path: Path) -> None:
    out = tmp_path / "queues"
    stream = io.StringIO()
    result = run_lab(LabRequest(scenario="queues", hosts=3, out=out, mode="loopback"), stream)
    text = stream.getvalue()
    meta = result.metadata
    assert [i["fault"] for i in meta["lab"]["injected"]] == [
        "partition", "heal", "crash", "restart", "crash"
    ], text
    assert meta["lab"]["unexpected_exits"] == {}, text
    heal = next(i["t"] for i in meta["lab"]["injected"] if i["fault"] == "heal")
    kinds: dict[str, int] = {}
    crossed = 0
    served_after_heal = 0
    for host in ("h1", "h2", "h3"):
        for e in _events(out / f"{host}-clients.jsonl"):
            if e["layer"] == "queue":
                kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
                if e["kind"] == "receive" and not e["attrs"]["nonce"].startswith(host + "-"):
                    crossed += 1
                if host == "h3" and e["kind"] == "confirm" and e["t"] > heal + 5.0:
                    served_after_heal += 1
    # Pushes were confirmed and consumed, messages went from node to node, and h3, cut
    # off and refusing meanwhile, serves again once it has rejoined.
    assert kinds.get("refused", 0) > 0 and kinds.get("confirm", 0) > 120, kinds
    assert kinds.get("ack", 0) >= kinds["confirm"] and crossed > 20, (kinds, crossed)
    assert served_after_heal > 10, kinds
    summary = json.loads((out / "analysis" / "summary.json").read_text())
    status = {c["name"]: c["status"] for c in summary["checks"]}
    for name in ("isis.view_agreement", "isis.view_validity", "views.agreement",
                 "views.rejoin", *QUEUE_CHECKS):
        assert status[name] == "pass", (name, text)
    assert result.code == 0, text
