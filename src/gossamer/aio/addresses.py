"""Resolving host names for the drivers: ``localhost`` and names through the resolver.

The one place a driver turns what a user wrote (``gossamer.addresses.AddressLike``) into
the literal ``(ip, port)`` a socket needs. Literals pass through without a lookup.
"""

from __future__ import annotations

import asyncio
import socket

from gossamer._types import Address
from gossamer.addresses import AddressLike, is_ip, parse_address
from gossamer.errors import NetworkError

__all__ = ["resolve"]


async def resolve(
    address: AddressLike,
    *,
    ipv6: bool = True,
    default_port: int | None = None,
    stream: bool = False,
) -> Address:
    """The first usable ``(ip, port)`` for ``address``.

    ``ipv6=False`` is for protocols whose wire carries IPv4 addresses only (the original
    programs'): a name then resolves to its IPv4 address, and an IPv6 literal is refused.
    Raises ``ConfigError`` for text that is not an address and ``NetworkError`` (its cause
    the resolver's ``socket.gaierror``) for a name that does not resolve.
    """
    host, port = parse_address(address, default_port=default_port)
    family = socket.AF_UNSPEC if ipv6 else socket.AF_INET
    if is_ip(host):
        if not ipv6 and ":" in host:
            raise NetworkError("this protocol carries IPv4 addresses only", address=host)
        return host, port
    kind = socket.SOCK_STREAM if stream else socket.SOCK_DGRAM
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, family=family, type=kind)
    except socket.gaierror as exc:
        raise NetworkError(f"cannot resolve {host!r}: {exc.strerror}", host=host) from exc
    if not found:
        raise NetworkError(f"cannot resolve {host!r}: no address", host=host)
    # Prefer IPv4 when a name has both: every gossamer protocol speaks it, and a peer
    # that wrote "localhost" most likely listens on 127.0.0.1.
    found.sort(key=lambda info: info[0] != socket.AF_INET)
    sockaddr = found[0][4]
    return str(sockaddr[0]), int(sockaddr[1])
