"""The simulated network: hosts with IPv4 addresses in subnets, and links.

Subnets are carved out of ``10.0.0.0/8``, all of one size: the smallest prefix, ``/24``
or wider, that holds ``hosts_per_subnet`` hosts (254 by default: a ``/24``; 10,000: a
``/18``). Subnet ``s`` of a ``/p`` starts at ``10.0.0.0 + s * 2**(32 - p)``, its hosts
are numbered from 1 and its last address is the directed broadcast. With ``/24``
subnets that is ``10.<s // 256>.<s % 256>.0/24`` and hosts ``.1`` to ``.254``; the
address space bounds ``subnets * 2**(32 - p)`` to ``2**24``.

Subnets are joined by one router. Broadcast and multicast reach only the sender's
subnet (the router forwards neither, as on a real LAN); unicast crosses the router
with a higher latency. Latency is ``base + uniform(0, jitter)`` per datagram, drawn
from the simulator's RNG.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gossamer.errors import ConfigError

if TYPE_CHECKING:
    from random import Random

__all__ = ["Host", "LinkModel", "Network", "is_multicast"]

_MULTICAST = ipaddress.IPv4Network("224.0.0.0/4")
LIMITED_BROADCAST = "255.255.255.255"


def is_multicast(ip: str) -> bool:
    """True for an address in 224.0.0.0/4. The engine asks once per datagram, mostly of
    unicast addresses, as many as there are nodes: the first octet answers for those
    without a parse or a cache that so many addresses would thrash."""
    first, dot, _ = ip.partition(".")
    if not (dot and first.isdigit() and 224 <= int(first) <= 239):
        return False
    return _valid_multicast(ip)


@functools.lru_cache(maxsize=256)
def _valid_multicast(ip: str) -> bool:
    try:
        return ipaddress.IPv4Address(ip) in _MULTICAST
    except ipaddress.AddressValueError:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Host:
    """A simulated machine: a name, an address and the subnet it sits on."""

    name: str
    ip: str
    subnet: int
    #: The length of the subnet's prefix.
    prefix: int = 24
    #: The directed broadcast address of the host's subnet (from ``ip`` and ``prefix``):
    #: computed once, as the engine compares every datagram's destination with it.
    broadcast: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "broadcast", _broadcast_of(self.ip, self.prefix))


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkModel:
    """Latency of a hop inside a subnet (``lan``) and across the router (``wan``), seconds."""

    lan: float = 0.0005
    wan: float = 0.005
    jitter: float = 0.0002

    def __post_init__(self) -> None:
        if min(self.lan, self.wan, self.jitter) < 0:
            raise ConfigError("latencies must be non-negative seconds")


class Network:
    """Hosts, their subnets, and which pairs can currently talk (partitions)."""

    def __init__(
        self, *, subnets: int = 1, hosts_per_subnet: int = 254, links: LinkModel | None = None
    ) -> None:
        if hosts_per_subnet < 1:
            raise ConfigError("a subnet must hold at least one host", hosts=hosts_per_subnet)
        # Host bits: room for the network and broadcast addresses too, and at least a /24.
        bits = max(8, (hosts_per_subnet + 1).bit_length())
        if not 1 <= subnets <= 1 << (24 - min(bits, 24)):
            raise ConfigError(
                f"10.0.0.0/8 holds between 1 and {1 << (24 - min(bits, 24))} subnets "
                f"of {hosts_per_subnet} hosts",
                subnets=subnets,
            )
        self.subnets = subnets
        #: Usable host addresses per subnet (``2**bits - 2``).
        self.hosts_per_subnet = (1 << bits) - 2
        #: The subnets' prefix length (``/24`` or wider).
        self.prefix = 32 - bits
        self.links = links or LinkModel()
        self.hosts: dict[str, Host] = {}
        self._by_ip: dict[str, Host] = {}
        self._next_in_subnet = [1] * subnets
        self._bits = bits
        # host name -> partition side; hosts on different sides cannot exchange datagrams.
        self._side: dict[str, int] = {}

    def add_host(self, name: str, subnet: int = 0) -> Host:
        """Add a host with the next free address of ``subnet``."""
        if name in self.hosts:
            raise ConfigError(f"duplicate host name {name!r}")
        if not 0 <= subnet < self.subnets:
            raise ConfigError(f"subnet {subnet} does not exist", subnets=self.subnets)
        index = self._next_in_subnet[subnet]
        if index > self.hosts_per_subnet:
            raise ConfigError(f"subnet {subnet} is full ({self.hosts_per_subnet} hosts)")
        self._next_in_subnet[subnet] = index + 1
        address = (10 << 24) + (subnet << self._bits) + index
        host = Host(name=name, ip=_dotted(address), subnet=subnet, prefix=self.prefix)
        self.hosts[name] = host
        self._by_ip[host.ip] = host
        return host

    def host_by_ip(self, ip: str) -> Host | None:
        return self._by_ip.get(ip)

    def is_broadcast(self, ip: str, sender: Host) -> bool:
        """True when ``ip`` is a broadcast address as seen from ``sender``'s subnet."""
        return ip in (LIMITED_BROADCAST, sender.broadcast)

    def latency(self, src: Host, dst: Host, rng: Random) -> float:
        base = self.links.lan if src.subnet == dst.subnet else self.links.wan
        return base + (rng.uniform(0.0, self.links.jitter) if self.links.jitter else 0.0)

    # -- partitions -----------------------------------------------------------

    def partition(self, isolated: list[str]) -> None:
        """Cut the named hosts off from every other host (they still reach each other)."""
        side = max(self._side.values(), default=0) + 1
        for name in isolated:
            if name not in self.hosts:
                raise ConfigError(f"unknown host {name!r} in partition")
            self._side[name] = side

    def heal(self, hosts: list[str] | None = None) -> None:
        """Undo partitions, for the named hosts or for all."""
        if hosts is None:
            self._side.clear()
        else:
            for name in hosts:
                self._side.pop(name, None)

    def connected(self, a: Host, b: Host) -> bool:
        return self._side.get(a.name, 0) == self._side.get(b.name, 0)


def _dotted(address: int) -> str:
    return f"{address >> 24}.{(address >> 16) & 255}.{(address >> 8) & 255}.{address & 255}"


def _broadcast_of(ip: str, prefix: int) -> str:
    return _dotted(int(ipaddress.IPv4Address(ip)) | ((1 << (32 - prefix)) - 1))
