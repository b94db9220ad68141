"""The node configuration: parsing, defaults, validation errors, environment overrides."""

from __future__ import annotations

import dataclasses
import tomllib
import zlib
from pathlib import Path
from typing import Any

import pytest

from gossamer.daemon.protocols import PROTOCOLS, plain
from gossamer.errors import ConfigError
from gossamer.lab.config import (
    KEY_ENV,
    NodeConfig,
    Ports,
    load_config,
    parse_config,
)
from gossamer.proto.isis.core import IsisConfig, Member

MINIMAL = """
[node]
id = "h3"
run = "lab-1"
trace = "traces/h3.jsonl"
address = "127.0.0.1"
"""

PEERS = """
[[peers]]
id = "h1"
address = "127.0.0.1"
ports = { discovery = 7110, discovery_broadcast = 7111, gossip = 7112, isis = 7113, \
link = 7114, gateway = 7115 }

[[peers]]
id = "h2"
address = "127.0.0.1"
ports = { discovery = 7120, discovery_broadcast = 7121, gossip = 7122, isis = 7123, \
link = 7124, gateway = 7125 }
subnet = 1
"""

KEYED = MINIMAL + 'key_file = "cluster.key"\n'

FULL = KEYED + PEERS + """
[faults]
drop = 0.05
delay_ms = 20.0
delay_rate = 0.2
[[faults.partition]]
peers = ["h1"]
from = 5.0
to = 10.0

[discovery]
enabled = true
broadcast_address = "10.77.1.255"
seeds = ["h1"]

[gossip]
rate = 3

[isis]
rate = 10.0
snapshot_every = 2.0

[link]
push_to = ["h1"]

[gateway]
db = "state/h3.db"
"""


def write(tmp_path: Path, text: str, *, key: bytes = b"k" * 32) -> Path:
    (tmp_path / "cluster.key").write_bytes(key)
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env=env or {})
    return str(info.value)


def test_minimal_config_takes_the_documented_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL), env={})
    n = config.node
    assert (n.id, n.run, n.address) == ("h3", "lab-1", "127.0.0.1")
    assert n.trace == tmp_path / "traces" / "h3.jsonl"  # relative to the file
    assert n.seed == zlib.crc32(b"h3")
    assert (n.start_at, n.duration, n.linger, n.exit_when_done) == (None, 0.0, 5.0, True)
    assert config.ports == Ports()
    assert config.ports.as_dict() == {"discovery": 7100, "discovery_broadcast": 7101,
                                      "gossip": 7102, "isis": 7103, "link": 7104,
                                      "gateway": 7105}
    # Absent sections are disabled.
    assert not any(s.enabled for s in (config.discovery, config.gossip, config.isis,
                                       config.link, config.gateway))
    assert not config.faults.active


def test_full_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), env={})
    assert [p.id for p in config.peers] == ["h1", "h2"]
    assert config.peers[1].subnet == 1 and config.peers[0].ports.isis == 7113
    assert config.faults.drop == 0.05 and config.faults.partitions[0].peers == ("h1",)
    assert config.faults.partitions[0].start == 5.0 and config.faults.partitions[0].end == 10.0
    assert config.discovery.enabled and config.discovery.broadcast_address == "10.77.1.255"
    assert config.discovery.seeds == ("h1",)
    timers = config.discovery.protocol
    assert timers["broadcast_interval"] == 1.0 and timers["inactive_time"] == 3.0
    # A present section is enabled unless it says otherwise.
    assert config.gossip.enabled and config.node.key == b"k" * 32
    assert config.node.wire_config().sealed
    assert config.gossip.rate == 3.0 and not config.gossip.protocol["multicast"]
    assert config.isis.enabled and config.isis.members == ("h1", "h2", "h3")
    assert config.isis.snapshots and not config.isis.broken_order
    assert config.link.push_to == ("h1",) and config.link.credit == 16
    assert config.gateway.db == tmp_path / "state" / "h3.db" and config.gateway.clients == 3


def test_to_toml_round_trips(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), env={})
    again = tmp_path / "again.toml"
    again.write_text(config.to_toml())
    assert load_config(again, env={}) == config


def test_node_config_can_be_built_in_code_and_written(tmp_path: Path) -> None:
    text = load_config(write(tmp_path, MINIMAL), env={}).to_toml()
    parsed = parse_config(__import__("tomllib").loads(text), env={})
    assert isinstance(parsed, NodeConfig) and parsed.node.id == "h3"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "node: is required"),
        (MINIMAL.replace('id = "h3"\n', ""), "node.id: is required"),
        (MINIMAL.replace('address = "127.0.0.1"', "address = 7"),
         "node.address: must be a non-empty string, not an integer"),
        (MINIMAL + "duration = -1\n", "node.duration: must be >= 0"),
        (MINIMAL + "durations = 1\n", "node.durations: unknown key"),
        (MINIMAL + "exit_when_done = 1\n", "node.exit_when_done: must be true or false"),
        (MINIMAL + "[isis]\nrate = -1\n", "isis.rate: must be >= 0"),
        (MINIMAL + "[isis]\nrate = 'fast'\n", "isis.rate: must be a number, not a string"),
        (MINIMAL + "[isis]\nmembers = ['h1']\n", "isis.members: 'h1' is not a peer"),
        (MINIMAL + "[discovery]\nseeds = ['h9']\n", "discovery.seeds: 'h9' is not a peer"),
        (MINIMAL + PEERS + "[isis]\nmembers = ['h1', 'h2']\n",
         "isis.members: must include this node"),
        (MINIMAL + "[faults]\ndrop = 1.5\n", "faults.drop: must be <= 1"),
        (MINIMAL + PEERS + "[[faults.partition]]\npeers = ['h1']\nfrom = 5.0\nto = 2.0\n",
         "faults.partition[0].to: must be > from (5)"),
        (MINIMAL + "[ports]\nisis = 70000\n", "ports.isis: must be <= 65535"),
        (MINIMAL + "[ports]\nisis = 7100\n", "ports.isis: is 7100, like ports.discovery"),
        (MINIMAL + PEERS.replace('id = "h2"', 'id = "h1"'), "peers[1].id: 'h1' is listed twice"),
        (MINIMAL + PEERS.replace('id = "h2"', 'id = "h3"'), "peers[1].id: is this node's own id"),
        (MINIMAL + PEERS.replace("isis = 7113", "isis = '7113'"),
         "peers[0].ports.isis: must be an integer"),
        (MINIMAL + "[gossip]\nrate = 1\n", "node.key_file: is required on the sealed wire"),
        (MINIMAL + "[isis]\n", "node.key_file: is required on the sealed wire"),
        (MINIMAL + "key_file = 'nope.key'\n[isis]\n", "node.key_file: cannot be read"),
        (KEYED + "[gossip]\nkey_file = 'cluster.key'\n", "gossip.key_file: unknown key"),
        (MINIMAL + "wire = 'plain'\n", "node.wire: must be 'sealed' or 'original'"),
        (MINIMAL + "[gateway]\nclients = 2\n", "gateway.db: is required"),
        (MINIMAL + PEERS + "[link]\npush_to = ['h3']\n", "link.push_to: names this node"),
        (
            MINIMAL + "[discovery]\nheartbeat_wait = 0\n",
            "discovery.heartbeat_wait: heartbeat_wait must be a positive",
        ),
        # Every protocol parameter is a key, checked by the protocol's configuration.
        (MINIMAL + "[discovery]\nmax_missed = 0\n", "discovery.max_missed: max_missed must be"),
        (MINIMAL + "[discovery]\naddress = 'x'\n", "discovery.address"),
        (KEYED + "[gossip]\nack_timeout = -1\n", "gossip.ack_timeout: ack_timeout must be"),
        (MINIMAL + "[bogus]\n", "bogus: unknown key"),
        (MINIMAL + "[node]\n", "not valid TOML"),
    ],
)
def test_bad_configs_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_of(tmp_path, text)


def test_error_carries_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, MINIMAL + "[isis]\nrate = -1\n"), env={})
    assert info.value.key == "isis.rate"  # type: ignore[attr-defined]
    assert str(info.value) == "isis.rate: must be >= 0"


def test_short_key_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, KEYED + "[gossip]\n", key=b"short")
    with pytest.raises(ConfigError, match=r"node\.key_file: .*at least 16 bytes"):
        load_config(path, env={})


def test_the_original_wire_needs_no_key_except_for_chatter(tmp_path: Path) -> None:
    original = MINIMAL + "wire = 'original'\n"
    config = load_config(write(tmp_path, original + "[isis]\n[discovery]\n"), env={})
    assert config.node.key is None and not config.node.wire_config().sealed
    # Chatter's own wire is encrypted (badly) with its key: still required.
    assert "node.key_file: is required" in error_of(tmp_path, original + "[gossip]\n")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config(tmp_path / "absent.toml", env={})


def test_environment_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    env = {
        "GOSSAMER__FAULTS__DROP": "0.1",
        "GOSSAMER__NODE__DURATION": "30",
        "GOSSAMER__NODE__RUN": "plain text, not TOML",
        "GOSSAMER__ISIS__BROKEN_ORDER": "true",
        "GOSSAMER__LINK__PUSH_TO": '["h2"]',
        "GOSSAMER__PORTS__GATEWAY": "9999",
        "UNRELATED": "x",
    }
    config = load_config(path, env=env)
    assert config.faults.drop == 0.1
    assert config.node.duration == 30.0
    assert config.node.run == "plain text, not TOML"
    assert config.isis.broken_order
    assert config.link.push_to == ("h2",)
    assert config.ports.gateway == 9999


def test_environment_override_alone_does_not_enable_a_section(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL), env={"GOSSAMER__LINK__RATE": "5"})
    assert not config.link.enabled and config.link.rate == 5.0
    enabled = load_config(write(tmp_path, KEYED), env={"GOSSAMER__LINK__ENABLED": "true"})
    assert enabled.link.enabled


def test_environment_overrides_are_validated(tmp_path: Path) -> None:
    assert "faults.drop: must be <= 1" in error_of(
        tmp_path, FULL, env={"GOSSAMER__FAULTS__DROP": "2"})
    assert "GOSSAMER__NODE: must be GOSSAMER__<SECTION>__<KEY>" in error_of(
        tmp_path, FULL, env={"GOSSAMER__NODE": "x"})
    assert "peers cannot be overridden" in error_of(
        tmp_path, FULL, env={"GOSSAMER__PEERS__ID": "x"})
    assert "node.colour: unknown key" in error_of(
        tmp_path, FULL, env={"GOSSAMER__NODE__COLOUR": "red"})


def test_key_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "[gossip]\n")
    config = load_config(path, env={KEY_ENV: "ab" * 32})
    assert config.node.key == bytes.fromhex("ab" * 32)
    assert f"{KEY_ENV}: passphrase must be at least 16 bytes" in error_of(
        tmp_path, MINIMAL + "[gossip]\n", env={KEY_ENV: "zz"})


# -- every protocol parameter, generically (gossamer.daemon.protocols) ------------------------


def _settable(section: str) -> dict[str, Any]:
    """Each settable field of the section's core config with its value on a probe."""
    protocol = PROTOCOLS[section]
    config = protocol.config(**protocol.probe)
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(protocol.config)
        if f.init and f.name not in protocol.managed
    }


@pytest.mark.parametrize("section", sorted(PROTOCOLS))
def test_every_protocol_field_is_a_key_of_its_section(tmp_path: Path, section: str) -> None:
    # Each field, at the core's own default, written as TOML and read back: what the file
    # says reaches the section's protocol settings with its type (enums, nested tables).
    fields = _settable(section)
    assert fields, section
    table = {k: v for k, v in plain(fields).items() if v is not None}
    doc = tomllib.loads(KEYED + PEERS)
    doc[section] = {"enabled": False, **table}
    config = parse_config(doc, base=tmp_path, env={KEY_ENV: "k" * 64})
    settings = getattr(config, section).protocol
    for name, value in fields.items():
        if value is not None:
            assert settings[name] == value, (section, name)
    again = load_config(write(tmp_path, config.to_toml()), env={KEY_ENV: "k" * 64})
    assert getattr(again, section).protocol == settings


def test_protocol_settings_reach_the_core_config(tmp_path: Path) -> None:
    text = KEYED + PEERS + "[isis]\nbatch_delay = 0.01\nretain_finals = 7\n"
    text += "retransmit_initial = 0.1\nretransmit_max = 2.0\n"
    config = load_config(write(tmp_path, text), env={})
    assert config.isis.protocol["batch_delay"] == 0.01
    assert config.isis.protocol["retransmit_initial"] == 0.1
    member = Member(id=1, name="h1", addr=("127.0.0.1", 7000))
    core = IsisConfig(me=1, members=(member,), **config.isis.protocol)
    assert core.retain_finals == 7 and core.retransmit_initial == 0.1
    env = {"GOSSAMER__ISIS__RETAIN_FINALS": "9"}
    assert load_config(write(tmp_path, text), env=env).isis.protocol["retain_finals"] == 9


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[isis]\nretain_finals = 'many'\n", "isis.retain_finals: expected an integer"),
        ("[isis]\nme = 3\n", "isis.me: is set by the caller"),
        ("[isis]\nbogus = 3\n", "isis.bogus: unknown key of IsisConfig (known: ack_delay"),
        ("[isis]\nretransmit_max = 'x'\n", "isis.retransmit_max: expected a finite"),
        ("[gateway.queues]\nbogus = 1\n", "gateway.queues.bogus: unknown key"),
        ("[link]\ntransport = 'carrier-pigeon'\n", "link.transport: expected one of udp"),
        ("[gateway]\nheartbeat_grace = 0.5\n", "gateway.heartbeat_grace: heartbeat_grace must be"),
        ("[gossip]\nmulticast_port = 0\n", "gossip.multicast_port: multicast_port must be"),
    ],
)
def test_protocol_settings_are_validated(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_of(tmp_path, KEYED + text)
