"""The public API of ``docs/api.md``: what ``import gossamer`` offers, and that it is lazy."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import gossamer
from gossamer.aio.group import GroupService
from gossamer.aio.opening import Opening
from gossamer.errors import ConfigError
from gossamer.proto.views import Member
from gossamer.testing import sealed_wire

OPENERS = [name for name in gossamer.__all__ if name.startswith("open_")]


def test_every_public_name_resolves() -> None:
    for name in gossamer.__all__:
        assert getattr(gossamer, name) is not None, name
    assert sorted(OPENERS) == [
        "open_discovery", "open_gateway_client", "open_gateway_server", "open_gossip",
        "open_group", "open_isis", "open_node", "open_socket", "open_views",
    ]
    assert gossamer.GroupService is GroupService
    with pytest.raises(AttributeError, match="no attribute 'socket'"):
        gossamer.socket  # noqa: B018 - the old entry point is gone: one style


def test_import_gossamer_pulls_in_neither_asyncio_nor_the_drivers() -> None:
    probe = (
        "import sys, gossamer; "
        "print(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('gossamer.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert "asyncio" not in loaded and "gossamer.aio" not in loaded, loaded


def test_every_opener_returns_an_opening_without_starting_anything() -> None:
    # Nothing starts before the Opening is awaited or entered: making one needs no loop.
    wire = sealed_wire()
    me = Member(name="a", incarnation=1, address=("127.0.0.1", 1))
    made = [
        gossamer.open_socket("pull", tag="jobs", wire=wire),
        gossamer.open_node(wire=wire),
        gossamer.open_isis(gossamer.IsisConfig.of("a", [("a", ("127.0.0.1", 1))]), wire=wire),
        gossamer.open_gossip(gossamer.GossipConfig(my_addr="127.0.0.1", my_port=0), wire=wire),
        gossamer.open_discovery(gossamer.DiscoveryConfig(address=("127.0.0.1", 0)), wire=wire),
        gossamer.open_gateway_server(gossamer.GatewayConfig()),
        gossamer.open_gateway_client("singyeong://app@127.0.0.1:1"),
        gossamer.open_views(gossamer.ViewsConfig(me=me, initial=(me,)), wire=wire),
        gossamer.open_group(gossamer.ViewsConfig(me=me, initial=(me,)), wire=wire),
    ]
    assert all(isinstance(opening, Opening) for opening in made)
    for opener in OPENERS:
        assert not inspect.iscoroutinefunction(getattr(gossamer, opener)), opener


def test_isis_config_of_numbers_the_group_in_order() -> None:
    group = [("a", ("127.0.0.1", 7001)), ("b", ("127.0.0.1", 7002))]
    config = gossamer.IsisConfig.of("b", group, retransmit_initial=0.05)
    assert config.me == 2 and [m.name for m in config.members] == ["a", "b"]
    assert config.retransmit_initial == 0.05
    with pytest.raises(ConfigError, match="not in the group"):
        gossamer.IsisConfig.of("z", group)
