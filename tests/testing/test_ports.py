"""Free ports (``gossamer.testing.ports``): distinct, and bindable for what was asked."""

from __future__ import annotations

import socket

import pytest

from gossamer.errors import ConfigError, NetworkError
from gossamer.testing import free_port, free_ports


@pytest.mark.parametrize("kind", ["udp", "tcp", "both"])
def test_ports_are_distinct_and_bindable(kind: str) -> None:
    ports = free_ports(8, kind=kind)  # type: ignore[arg-type]
    assert len(set(ports)) == 8
    types = {"udp": [socket.SOCK_DGRAM], "tcp": [socket.SOCK_STREAM]}.get(
        kind, [socket.SOCK_DGRAM, socket.SOCK_STREAM]
    )
    for port in ports:
        for sock_type in types:
            with socket.socket(socket.AF_INET, sock_type) as sock:
                sock.bind(("127.0.0.1", port))


def test_one_port_and_ipv6() -> None:
    assert 0 < free_port(kind="udp") < 65536
    if socket.has_ipv6:
        try:
            port = free_port(host="::1")
        except NetworkError:
            return  # no IPv6 loopback here: the error is the documented one
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", port))


def test_zero_ports_and_bad_arguments() -> None:
    assert free_ports(0) == []
    with pytest.raises(ConfigError):
        free_ports(-1)
    with pytest.raises(ConfigError):
        free_ports(1, kind="sctp")  # type: ignore[arg-type]
    with pytest.raises(NetworkError) as info:
        free_ports(1, host="192.0.2.1")  # TEST-NET-1: not an address of this machine
    assert isinstance(info.value.__cause__, OSError)
