"""Configuration: Chatter's settings and environment variables, no default key."""

from __future__ import annotations

import random

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.gossip import GossipCore
from gossamer.proto.gossip.config import GossipConfig, WireMode
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.chatter import NetID, derive_key

KEY = "a-generated-passphrase-of-enough-entropy"


def test_from_env_reads_chatters_variables_with_chatters_defaults() -> None:
    config = GossipConfig.from_env({"CHATTER_ADDRESS": "10.1.2.3", "CHATTER_KEY": KEY})
    assert config.netid == NetID("10.1.2.3", 29999)
    assert config.group == ("224.1.1.1", 29999)
    assert config.multicast_ttl == 4
    assert config.wire is WireMode.SEALED
    env = {
        "CHATTER_ADDRESS": "10.1.2.3",
        "CHATTER_PORT": "4000",
        "CHATTER_MULTICAST_ADDRESS": "239.5.5.5",
        "CHATTER_MULTICAST_PORT": "4001",
        "CHATTER_MULTICAST_TTL": "1",
        "CHATTER_KEY": "secret",
        "CHATTER_WIRE": "original",
    }
    config = GossipConfig.from_env(env, ack_timeout=0.25)
    assert (config.my_port, config.multicast_addr, config.multicast_port) == (
        4000,
        "239.5.5.5",
        4001,
    )
    assert config.multicast_ttl == 1 and config.ack_timeout == 0.25
    assert config.wire is WireMode.ORIGINAL
    assert config.chatter_key() == derive_key("secret") == b"secret01234567890123456789012345"
    assert GossipConfig.from_env(env, my_port=5000).my_port == 5000  # overrides win
    # A host name stays a name: the driver resolves it (the core needs the literal).
    assert GossipConfig.from_env({"CHATTER_ADDRESS": "localhost"}).my_addr == "localhost"


def test_a_missing_key_is_an_error_never_a_default() -> None:
    # The key may come later (the driver's wire=), but nothing is keyed without one.
    config = GossipConfig.from_env({"CHATTER_ADDRESS": "10.1.2.3"})
    assert config.key is None
    with pytest.raises(ConfigError, match="no key"):
        config.keyring()
    with pytest.raises(ConfigError, match="no key"):
        GossipConfig(my_addr="10.1.2.3", key=b"", wire=WireMode.ORIGINAL).chatter_key()
    with pytest.raises(ConfigError, match="no key"):
        GossipCore(config, tracer=Tracer(NullSink(), run="t", node="n"), rng=random.Random(1))
    with pytest.raises(ConfigError, match="no address"):
        GossipConfig.from_env({"CHATTER_KEY": KEY})


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"CHATTER_PORT": "x"}, "CHATTER_PORT"),
        ({"CHATTER_PORT": "70000"}, "my_port"),
        ({"CHATTER_MULTICAST_ADDRESS": "10.0.0.1"}, "224.0.0.0/4"),
        ({"CHATTER_MULTICAST_TTL": "300"}, "multicast_ttl"),
        ({"CHATTER_WIRE": "xml"}, "CHATTER_WIRE"),
        ({"CHATTER_ADDRESS": "::1"}, "IPv4"),  # NetIDs carry IPv4 only
        ({"CHATTER_ADDRESS": "-"}, "host name"),
    ],
)
def test_bad_values_are_config_errors(env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GossipConfig.from_env({"CHATTER_ADDRESS": "10.1.2.3", "CHATTER_KEY": KEY, **env})


def test_unknown_overrides_and_oversized_compat_datagrams_are_refused() -> None:
    base = {"CHATTER_ADDRESS": "10.1.2.3", "CHATTER_KEY": KEY}
    with pytest.raises(ConfigError, match="unknown"):
        GossipConfig.from_env(base, colour="blue")
    with pytest.raises(ConfigError, match="8192"):
        GossipConfig(my_addr="10.1.2.3", key=b"k", wire=WireMode.ORIGINAL, max_multicast_size=9000)
    GossipConfig(my_addr="10.1.2.3", key=b"k" * 32, max_multicast_size=9000)  # envelope: fine


def test_envelope_keys_raw_or_passphrase_and_no_public_ones() -> None:
    raw = GossipConfig(my_addr="10.1.2.3", key=bytes(range(32))).keyring()
    assert raw.primary.secret == bytes(range(32))
    derived = GossipConfig(my_addr="10.1.2.3", key=KEY.encode()).keyring()
    assert derived.primary.secret != KEY.encode()
    with pytest.raises(ConfigError, match="passphrase"):
        GossipConfig(my_addr="10.1.2.3", key=b"short").keyring()
    with pytest.raises(ConfigError, match="publicly known"):
        GossipConfig(my_addr="10.1.2.3", key=b"01234567890123456789012345678912").keyring()
