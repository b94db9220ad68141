"""Free ports on a local address, for tests that must know their addresses before binding.

A port is "free" when this process could bind it just now: the sockets used to find
the ports are all held at once (so the ports are distinct) and closed before the call
returns, so another process may still take one before the caller binds it. Binding
port 0 is always safer when the caller need not know the port in advance; these exist
for groups whose members must know each other's addresses before they start.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack
from typing import Literal

from gossamer.errors import ConfigError, NetworkError

__all__ = ["Kind", "free_port", "free_ports"]

#: Which protocols the port must be free for: ``both`` suits any service.
Kind = Literal["udp", "tcp", "both"]

_TYPES = {"udp": socket.SOCK_DGRAM, "tcp": socket.SOCK_STREAM}
# How many bound-but-busy candidates (free for TCP, taken for UDP) to skip before giving up.
_ATTEMPTS = 100


def free_ports(count: int, *, kind: Kind = "both", host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports of ``host`` free right now for ``kind`` (see module doc).

    ``host`` may be an IPv4 or IPv6 literal. ``ConfigError`` for a negative ``count``
    or an unknown ``kind``; ``NetworkError`` (an ``OSError``) when ``host`` cannot be
    bound or too few ports are free.
    """
    if count < 0:
        raise ConfigError("count must be non-negative", count=count)
    if kind not in ("udp", "tcp", "both"):
        raise ConfigError("kind must be 'udp', 'tcp' or 'both'", kind=kind)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    first = _TYPES["tcp" if kind == "both" else kind]
    ports: list[int] = []
    with ExitStack() as held:
        for _ in range(count * _ATTEMPTS):
            if len(ports) == count:
                return ports
            try:
                sock = held.enter_context(socket.socket(family, first))
                sock.bind((host, 0))
            except OSError as exc:
                raise NetworkError("cannot bind a port here", host=host) from exc
            port = int(sock.getsockname()[1])
            if kind == "both":
                other = held.enter_context(socket.socket(family, socket.SOCK_DGRAM))
                try:
                    other.bind((host, port))
                except OSError:  # free for TCP, taken for UDP: try another
                    continue
            ports.append(port)
    if len(ports) < count:
        raise NetworkError("found too few free ports", host=host, count=count, found=len(ports))
    return ports


def free_port(*, kind: Kind = "both", host: str = "127.0.0.1") -> int:
    """One port of ``host`` free right now for ``kind`` (see :func:`free_ports`)."""
    return free_ports(1, kind=kind, host=host)[0]
