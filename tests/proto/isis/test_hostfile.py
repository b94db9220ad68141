"""Hostfile parsing: the original's one-host-per-line files, plus ports and names."""

from __future__ import annotations

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.isis import HostEntry, parse_hostfile


def test_the_originals_hostfile() -> None:
    text = "sumeet-g-alpha\nsumeet-g-beta\nsumeet-g-gamma\nsumeet-g-delta\n"
    entries = parse_hostfile(text)
    assert [(e.id, e.name, e.host, e.port) for e in entries] == [
        (1, "sumeet-g-alpha", "sumeet-g-alpha", 10001),
        (2, "sumeet-g-beta", "sumeet-g-beta", 10001),
        (3, "sumeet-g-gamma", "sumeet-g-gamma", 10001),
        (4, "sumeet-g-delta", "sumeet-g-delta", 10001),
    ]


def test_duplicate_lines_are_dropped_comments_blank_lines_ports_and_names() -> None:
    text = "# group\na\n\na\nb:7002   # second\nn3 127.0.0.1:7003\n"
    assert parse_hostfile(text) == [
        HostEntry(id=1, name="a", host="a", port=10001),
        HostEntry(id=2, name="b:7002", host="b", port=7002),
        HostEntry(id=3, name="n3", host="127.0.0.1", port=7003),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "a\nb\n",  # fewer than 3 hosts, as the original CHECKs
        "a\nb\nc:x\n",
        "a\nb\nc:70000\n",
        "a\nb\nx y z\n",
        "a\nb\na 1.2.3.4:5\n",  # the name "a" twice
        "a\nb\n:5\n",
    ],
)
def test_unusable_hostfiles_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_hostfile(text)


def test_minimum_can_be_lowered() -> None:
    assert len(parse_hostfile("a\n", min_hosts=1)) == 1
