"""UDP sockets for the datagram driver: unicast, broadcast and multicast (IPv4).

Each function returns a bound, non-blocking ``socket.socket`` ready to be
handed to ``open_datagram``. Keeping socket set-up apart from the driver keeps
the driver a pump, and lets callers (the lab, tests) set any other option first.

No function here picks an interface for the caller: the host, interface address
or device is always given (DESIGN.md, "Real networks in tests": defaults that
pick "the first interface" must not be used outside a namespace). The wildcard
``0.0.0.0`` appears only as a *bind* address, because Linux delivers broadcast
and multicast datagrams to sockets bound to the wildcard (or to the destination
group or broadcast address), never to one bound to the interface's own address.
"""

from __future__ import annotations

import ipaddress
import socket
import sys

from gossamer.errors import ConfigError

__all__ = [
    "broadcast_socket",
    "join_group",
    "multicast_socket",
    "set_multicast_send",
    "udp_socket",
]

# IP_MULTICAST_ALL (Linux, <linux/in.h>) is not exported by the socket module.
_IP_MULTICAST_ALL = 49


def _udp() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)


def _reuse(sock: socket.socket) -> None:
    # SO_REUSEADDR lets several sockets bind the same group or broadcast port;
    # SO_REUSEPORT is what Linux requires when those sockets belong to
    # different processes. Every socket bound to the port receives its own copy
    # of each broadcast and multicast datagram.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if hasattr(socket, "SO_REUSEPORT"):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)


def _bind(sock: socket.socket, host: str, port: int, device: str | None) -> socket.socket:
    try:
        if device is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def udp_socket(
    host: str,
    port: int = 0,
    *,
    broadcast: bool = False,
    reuse: bool = False,
    device: str | None = None,
) -> socket.socket:
    """A UDP socket bound to ``host:port`` (port 0: any free port).

    ``broadcast`` sets ``SO_BROADCAST`` so the socket may *send* to a broadcast
    address; ``reuse`` sets ``SO_REUSEADDR``/``SO_REUSEPORT``; ``device`` binds
    the socket to one network interface (``SO_BINDTODEVICE``, Linux, root).
    """
    sock = _udp()
    if broadcast:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    if reuse:
        _reuse(sock)
    return _bind(sock, host, port, device)


def broadcast_socket(
    port: int,
    *,
    host: str = "0.0.0.0",
    device: str | None = None,
) -> socket.socket:
    """A UDP socket that sends and receives broadcasts on ``port``.

    ``SO_BROADCAST`` is set, and ``SO_REUSEADDR``/``SO_REUSEPORT`` so that
    several nodes on one host can listen on the same port. ``host`` must be the
    wildcard or a broadcast address for broadcasts to arrive (see the module
    docstring); ``device`` restricts the socket to one interface on a
    multi-homed host. Unicast datagrams to a shared port reach only one of the
    sockets sharing it: nodes that share a host should also have a unicast
    socket of their own (see ``open_datagram``'s ``listen``).
    """
    sock = _udp()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    _reuse(sock)
    return _bind(sock, host, port, device)


def _check_group(group: str) -> None:
    try:
        address = ipaddress.IPv4Address(group)
    except ValueError:
        raise ConfigError("multicast group is not an IPv4 address", group=group) from None
    if not address.is_multicast:
        raise ConfigError("multicast group must be in 224.0.0.0/4", group=group)


def set_multicast_send(
    sock: socket.socket,
    *,
    interface: str,
    ttl: int = 1,
    loopback: bool = True,
) -> None:
    """Make ``sock`` send multicast out of ``interface`` (an IPv4 address of that interface).

    ``ttl`` bounds how many routers a datagram crosses (1: this subnet only);
    ``loopback`` says whether the sending host's own group members get a copy.
    """
    if not 0 <= ttl <= 255:
        raise ConfigError("multicast TTL must be 0 to 255", ttl=ttl)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1 if loopback else 0)


def join_group(sock: socket.socket, group: str, *, interface: str) -> None:
    """Join ``group`` on the interface that has the IPv4 address ``interface``."""
    _check_group(group)
    mreq = socket.inet_aton(group) + socket.inet_aton(interface)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)


def multicast_socket(
    group: str,
    port: int,
    *,
    interface: str,
    ttl: int = 1,
    loopback: bool = True,
    bind_host: str = "0.0.0.0",
) -> socket.socket:
    """A UDP socket that is a member of ``group`` on ``interface`` and sends to it.

    The socket is bound to ``bind_host:port`` with ``SO_REUSEADDR`` and
    ``SO_REUSEPORT``, so several nodes on one host can share the group port;
    it joins ``group`` on the interface whose address is ``interface`` and
    sends multicast out of it (``IP_MULTICAST_IF``) with ``ttl`` and the
    ``loopback`` flag (see ``set_multicast_send``).

    The default wildcard bind also receives unicast datagrams sent to the port,
    so a peer can answer a multicast with a unicast reply to the sender's
    address. Pass ``bind_host=group`` to receive only the group's traffic.
    On Linux, ``IP_MULTICAST_ALL`` is switched off so that a wildcard-bound
    socket receives only the groups it joined itself, not every group some
    other socket on the host joined.
    """
    _check_group(group)
    sock = _udp()
    try:
        _reuse(sock)
        if sys.platform == "linux":
            sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
        set_multicast_send(sock, interface=interface, ttl=ttl, loopback=loopback)
        join_group(sock, group, interface=interface)
    except BaseException:
        sock.close()
        raise
    return _bind(sock, bind_host, port, None)
