"""``gossamer discovery`` and ``gossamer gossip``: options named after the configuration."""

from __future__ import annotations

import argparse
import subprocess
import sys

import orjson

from gossamer.cli import discovery_cmd, gossip_cmd

GOSSAMER = [sys.executable, "-m", "gossamer.cli.main"]


def parsed(add: object, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add(parser)  # type: ignore[operator]
    return parser.parse_args(argv)


def test_discovery_options_are_the_configuration_names() -> None:
    args = parsed(discovery_cmd.configure, [
        "--address", "localhost:7000", "--broadcast-address", "127.0.0.1",
        "--broadcast-interval", "0.5", "--inactive-time", "2", "--heartbeat-wait", "0.25",
    ])  # fmt: skip
    config = discovery_cmd._config(args)
    assert config.address == ("localhost", 7000)  # resolved by the driver
    assert (config.broadcast_interval, config.inactive_time, config.heartbeat_wait) == (
        0.5, 2.0, 0.25,
    )  # fmt: skip
    assert config.max_peers == 64  # the configuration's default, not a second copy


def test_gossip_options_override_chatters_environment() -> None:
    args = parsed(gossip_cmd.configure, ["--my-addr", "localhost", "--ack-timeout", "0.5"])
    env = {"CHATTER_ADDRESS": "10.0.0.1", "CHATTER_PORT": "4000", "CHATTER_KEY": "k" * 32}
    config = gossip_cmd._config(args, env)
    assert (config.my_addr, config.my_port, config.ack_timeout) == ("localhost", 4000, 0.5)
    assert config.key == b"k" * 32


def test_a_discovery_node_runs_on_localhost_and_stops_cleanly() -> None:
    proc = subprocess.run(
        [*GOSSAMER, "discovery", "--address", "localhost", "--port", "0",
         "--broadcast-address", "127.0.0.1", "--wire", "original",
         "--duration", "0.3"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    records = [orjson.loads(line) for line in proc.stdout.splitlines()]
    assert [r["event"] for r in records] == ["ready", "stopped"]
    assert records[0]["node"].startswith("127.0.0.1:")
