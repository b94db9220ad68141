"""The node daemon's configuration: defaults, every error named by its key, overrides,
``--check``, and the command's exit codes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gossamer.daemon.config import DEFAULT_PORTS, load_daemon_config, parse_daemon_config
from gossamer.daemon.protocols import PROTOCOLS
from gossamer.errors import ConfigError

from .cluster import node_file, write_key

KEY = "ab" * 32


def minimal(**sections: dict[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = {
        "cluster": {"name": "shop", "seeds": ["10.0.0.1:7400"]},
        "node": {"name": "a", "address": "10.0.0.2"},
    }
    for name, values in sections.items():
        document.setdefault(name, {}).update(values)
    return document


def parse(document: dict[str, Any], **env: str) -> Any:
    return parse_daemon_config(document, env={"GOSSAMER_KEY": KEY, **env})


def test_a_minimal_file_gets_the_documented_defaults() -> None:
    config = parse(minimal())
    assert config.cluster.seeds == (("10.0.0.1", 7400),)
    assert config.cluster.bootstrap is False
    assert config.cluster.key == bytes.fromhex(KEY)
    assert config.ports.as_dict() == DEFAULT_PORTS
    assert config.gateway.enabled and config.gateway.db is None
    assert config.discovery.broadcast_address is None  # no broadcast unless asked
    assert config.gossip.protocol["multicast"] is False
    assert config.cluster.wire().cluster == "shop"


def test_the_node_detects_failures_quicker_than_the_lab_app_unless_its_file_says() -> None:
    # A daemon's group is on agreed views: a live member wrongly suspected rejoins. The
    # lab app's static ISIS group cannot re-admit one, so it keeps the slower timers.
    discovery = PROTOCOLS["discovery"]
    timers = ("broadcast_interval", "inactive_time", "heartbeat_wait", "max_missed")
    node = discovery.resolved(parse(minimal()).discovery.protocol)
    assert [node[k] for k in timers] == [1.0, 0.5, 0.3, 3]
    lab = discovery.resolved(discovery.settings({}, "discovery"))
    assert [lab[k] for k in timers] == [1.0, 3.0, 0.5, 3]
    chosen = parse(minimal(discovery={"inactive_time": 3.0})).discovery.protocol
    assert chosen["inactive_time"] == 3.0 and chosen["heartbeat_wait"] == 0.3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cluster": {"name": ""}}, "cluster.name: must be a non-empty string"),
        ({"cluster": {"seeds": ["nowhere"]}}, "cluster.seeds: 'nowhere' is not host:port"),
        ({"cluster": {"seeds": ["h:0"]}}, "cluster.seeds: 'h:0' names no port"),
        ({"cluster": {"seeds": []}}, "cluster.seeds: names no member, bootstrap is false and"),
        ({"cluster": {"bootstrap_wait": -1}}, "cluster.bootstrap_wait: must be >= 0"),
        ({"node": {"address": 5}}, "node.address: must be a non-empty string, not an integer"),
        ({"ports": {"views": 70000}}, "ports.views: must be <= 65535"),
        ({"ports": {"gateway": 7400}}, "ports.gateway: is 7400, like ports.discovery"),
        ({"ports": {"web": 1}}, "ports.web: unknown key"),
        ({"views": {"retry": 0}}, "views.retry"),
        ({"gateway": {"heartbeat_interval_ms": 0}}, "gateway.heartbeat_interval_ms"),
        ({"discovery": {"max_peers": "many"}}, "discovery.max_peers"),
        ({"isis": {}}, "isis: unknown key"),
        ({"link": {"max_message": 65536}}, "link.max_message: is 65536 bytes, less than a "
         "gateway batch (gateway.cluster.max_batch = 4194304)"),
        ({"link": {"transport": "udp"}}, "link.max_message: is "),
        ({"link": {"wire": "original"}}, "link.wire: is set by the caller"),
        ({"link": {"exon": {"slots": 2500}}}, "link.exon: is set by the caller"),
    ],
)
def test_each_error_names_its_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(minimal(**change))
    assert str(caught.value).startswith(message), str(caught.value)


def test_the_link_carries_a_whole_gateway_batch() -> None:
    # Not set: over TCP it is the gateway's batch; a smaller batch fits smaller messages.
    assert parse(minimal()).link_options()["max_message"] == 4 << 20
    assert "max_message = 4194304" in parse(minimal()).to_toml()  # --check shows it
    config = parse(minimal(link={"max_message": 1 << 20},
                           gateway={"cluster": {"max_batch": 1 << 20}}))
    assert config.link_options()["max_message"] == 1 << 20
    # Without a gateway the link keeps its own default.
    assert parse(minimal(gateway={"enabled": False})).link_options() == {"transport": "tcp"}


def test_the_links_options_are_what_open_node_takes() -> None:
    # What the lab writes back is every field but the managed ones (the wire is the
    # node's sealed one, Exon's constants the original's).
    config = parse(minimal())
    options = config.link_options()
    assert "wire" not in options and "exon" not in options
    assert "wire" not in config.to_toml().split("[link]")[1].split("[")[0]
    assert options["transport"] == "tcp" and options["max_message"] == 4 << 20


def test_on_a_subnet_a_joiner_may_find_the_cluster_by_broadcast() -> None:
    config = parse(minimal(cluster={"seeds": []}, discovery={"broadcast_address": "10.0.0.255"}))
    assert config.cluster.seeds == () and not config.cluster.bootstrap


def test_the_name_and_the_node_are_required() -> None:
    with pytest.raises(ConfigError, match=r"^cluster.name: is required"):
        parse({"node": {"name": "a", "address": "h"}, "cluster": {"bootstrap": True}})
    with pytest.raises(ConfigError, match=r"^node.name: is required"):
        parse({"cluster": {"name": "c", "bootstrap": True}})


def test_there_is_no_default_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^cluster.key_file: is required on the sealed wire"):
        parse_daemon_config(minimal(), env={})
    document = minimal(cluster={"key_file": "missing.key"})
    with pytest.raises(ConfigError, match=r"^cluster.key_file: cannot be read"):
        parse_daemon_config(document, base=tmp_path, env={})
    (tmp_path / "short.key").write_bytes(b"short")
    document = minimal(cluster={"key_file": "short.key"})
    with pytest.raises(ConfigError, match=r"^cluster.key_file: "):
        parse_daemon_config(document, base=tmp_path, env={})


def test_environment_overrides_a_key_before_validation(tmp_path: Path) -> None:
    write_key(tmp_path)
    path = tmp_path / "n.toml"
    path.write_text(tomli_w.dumps(minimal(cluster={"key_file": "cluster.key"})))
    config = load_daemon_config(path, env={
        "GOSSAMER__GATEWAY__PASSWORD": "secret", "GOSSAMER__PORTS__GATEWAY": "4000",
    })
    assert config.gateway.protocol["password"] == "secret"
    assert config.ports.gateway == 4000
    assert config.cluster.key == bytes(range(32))
    grace = r"^gateway.heartbeat_grace: heartbeat_grace must be at least 1"
    with pytest.raises(ConfigError, match=grace):
        load_daemon_config(path, env={"GOSSAMER__GATEWAY__HEARTBEAT_GRACE": "0.5"})


def node(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gossamer.cli.main", "node", *args], capture_output=True,
        text=True, timeout=60, check=False, cwd=cwd, env=None,
    )


def test_check_prints_the_resolved_configuration_and_never_the_key(tmp_path: Path) -> None:
    write_key(tmp_path)
    path = node_file(tmp_path, "a", {"discovery": 7500}, seeds=["127.0.0.1:7600"],
                     bootstrap=False)
    done = node("--config", str(path), "--check", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert 'seeds = [\n    "127.0.0.1:7600",\n]' in done.stdout
    assert "discovery = 7500" in done.stdout
    assert f"gateway = {DEFAULT_PORTS['gateway']}" in done.stdout
    assert "heartbeat_interval_ms = 45000" in done.stdout  # the gateway's defaults, filled
    assert bytes(range(32)).hex() not in done.stdout
    # What --check prints is a configuration that means the same.
    again = tmp_path / "again.toml"
    again.write_text(done.stdout)
    assert load_daemon_config(again, env={}).to_toml() == done.stdout


def test_a_bad_file_exits_2_with_one_line_naming_the_key(tmp_path: Path) -> None:
    write_key(tmp_path)
    path = node_file(tmp_path, "a", {"views": 0, "gateway": 0}, seeds=[], bootstrap=True,
                     gateway={"max_frame_size": 1})
    done = node("--config", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("gossamer: error: gateway.max_frame_size: max_frame_size must")
    assert len(done.stderr.strip().splitlines()) == 1
    missing = node("--config", str(tmp_path / "none.toml"), cwd=tmp_path)
    assert missing.returncode == 2
    assert "cannot read the configuration" in missing.stderr


def test_a_port_in_use_is_a_runtime_failure(tmp_path: Path) -> None:
    write_key(tmp_path)
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        taken = blocker.getsockname()[1]
        path = node_file(tmp_path, "a", {**dict.fromkeys(DEFAULT_PORTS, 0), "gateway": taken},
                         seeds=[], bootstrap=True)
        done = node("--config", str(path), cwd=tmp_path)
    finally:
        blocker.close()
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("gossamer node: error: ")
    assert str(taken) in done.stderr
