"""Addresses as Python users write them, parsed without I/O.

Every service takes an address as a ``(host, port)`` tuple or as text:
``"10.0.0.1:7001"``, ``"localhost:7001"``, ``"[::1]:7001"`` (IPv6 in brackets, as in
URLs). Host names are resolved by the driver (``gossamer.aio.addresses.resolve``); this
module only splits and checks.
"""

from __future__ import annotations

import ipaddress

from gossamer._types import Address
from gossamer.errors import ConfigError

__all__ = ["AddressLike", "format_address", "is_ip", "parse_address"]

#: What an address parameter accepts: ``(host, port)`` or ``"host:port"``.
AddressLike = Address | tuple[str, int] | str


def parse_address(address: AddressLike, *, default_port: int | None = None) -> Address:
    """``(host, port)`` from a tuple or ``"host:port"`` text (``"[v6]:port"`` for IPv6).

    ``default_port`` is used when the text has no port. Raises ``ConfigError`` naming
    what is wrong: an empty host, a port that is not a number in 0..65535.
    """
    port: object
    if isinstance(address, tuple):
        if len(address) < 2:
            raise ConfigError("an address is (host, port)", address=address)
        host, port = str(address[0]), address[1]
    else:
        host, port = _split(address.strip(), default_port)
    if not host:
        raise ConfigError("the address has no host", address=address)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError("the port must be a number from 0 to 65535", address=address)
    return host, port


def _split(text: str, default_port: int | None) -> tuple[str, int | str | None]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ConfigError("an IPv6 address in brackets needs its ']'", address=text)
        if not rest:
            return host, default_port
        if not rest.startswith(":"):
            raise ConfigError("write an IPv6 address as [address]:port", address=text)
        return host, _port(rest[1:], text)
    if text.count(":") > 1:
        # A bare IPv6 literal: no port can be told apart from its groups.
        if is_ip(text):
            return text, default_port
        raise ConfigError("write an IPv6 address as [address]:port", address=text)
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    return host, _port(port, text)


def _port(text: str, address: str) -> int:
    if not text.isdigit():
        raise ConfigError("the port must be a number from 0 to 65535", address=address)
    return int(text)


def is_ip(host: str) -> bool:
    """True for an IPv4 or IPv6 literal (no name to resolve)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def format_address(address: Address) -> str:
    """``host:port``, with IPv6 hosts in brackets: the inverse of ``parse_address``."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
