"""Where the lab's nodes run: network-namespace hosts, or 127.0.0.1 with distinct ports.

Two placements (docs/lab.md, "Loopback and network namespaces"):

- **netns**: one Linux network namespace per node, built with
  :class:`gossamer.lab.netns.Topology`. With four nodes or more the hosts are split
  over two subnets (``10.77.1.0/24`` and ``10.77.2.0/24``) joined by the topology's
  router, so broadcast and multicast stay inside a subnet as on a real LAN. Every node
  has its own address and the same (default) ports. Needs root.
- **loopback**: every node binds ``127.0.0.1`` with its own block of ports. Nothing is
  broadcast or multicast on the machine's own ``lo`` (DESIGN.md, "Real networks in
  tests"): the nodes send discovery "broadcasts" as unicast to each peer instead.

Node ids are ``h1`` .. ``hN`` (ISIS member ids 1..N follow the same order); node
``h<i>`` runs in the topology's host ``h<i-1>``.

Nothing here starts a process; :mod:`gossamer.lab.processes` does.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from gossamer.errors import ConfigError
from gossamer.lab.config import DEFAULT_PORTS, PORT_NAMES
from gossamer.lab.netns import Topology, netns_unavailable_reason

__all__ = [
    "DEFAULT_PORTS",
    "LOOPBACK",
    "MAX_HOSTS",
    "PORT_NAMES",
    "HostSpec",
    "Mode",
    "Placement",
    "check_hosts",
    "choose_mode",
    "loopback_placement",
    "netns_placement",
    "new_topology",
    "node_ids",
    "subnet_sizes",
]

Mode = Literal["netns", "loopback"]

LOOPBACK: Final = "127.0.0.1"
#: Upper bound on ``--hosts``: a 2-core machine runs a few dozen Python nodes at most.
MAX_HOSTS: Final = 64
#: On loopback node ``i`` owns ``base + PORT_STRIDE * i + k`` for ``k`` in ``PORT_NAMES``.
PORT_STRIDE: Final = 10
_PORT_RANGE: Final = (20_000, 60_000)
_PORT_ATTEMPTS: Final = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSpec:
    """One node's place: its id, address, ports, subnet and subnet broadcast address.

    ``broadcast`` is ``None`` on loopback (nothing is broadcast there); ``netns`` is the
    namespace the node runs in (``None`` on loopback).
    """

    id: str
    address: str
    ports: dict[str, int]
    subnet: int
    broadcast: str | None
    netns: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Every node's place, in node-id order, and how the hosts are split into subnets."""

    mode: Mode
    hosts: tuple[HostSpec, ...]
    subnets: tuple[int, ...]

    def host(self, node_id: str) -> HostSpec:
        """The host of ``node_id``; ``ConfigError`` when there is none."""
        for spec in self.hosts:
            if spec.id == node_id:
                return spec
        raise ConfigError(f"no host {node_id!r} (hosts are {', '.join(self.ids)})")

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(spec.id for spec in self.hosts)


def node_ids(count: int) -> tuple[str, ...]:
    """``h1`` .. ``h<count>``, after checking ``1 <= count <= MAX_HOSTS``."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_HOSTS:
        raise ConfigError(f"--hosts must be an integer between 1 and {MAX_HOSTS}", hosts=count)
    return tuple(f"h{i}" for i in range(1, count + 1))


def subnet_sizes(count: int) -> tuple[int, ...]:
    """Hosts per subnet: two subnets (the first one the larger) from four hosts on.

    Fewer than four hosts stay on one subnet: a subnet of one host would have nobody
    to exchange broadcasts or multicasts with.
    """
    node_ids(count)
    if count < 4:
        return (count,)
    return ((count + 1) // 2, count // 2)


def choose_mode(requested: Mode | None) -> tuple[Mode, str | None]:
    """The placement to use, and why namespaces are not used when they are not.

    ``requested=None`` means automatic: namespaces when they can be built here (root,
    iproute2, a working probe), otherwise loopback. Requesting ``netns`` where it
    cannot work is a ``ConfigError`` carrying the reason.
    """
    reason = netns_unavailable_reason() if requested != "loopback" else None
    if requested == "netns":
        if reason is not None:
            raise ConfigError(f"--netns is not possible here: {reason}")
        return "netns", None
    if requested == "loopback":
        return "loopback", "--loopback was requested"
    if reason is None:
        return "netns", None
    return "loopback", reason


def _bindable(port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                return False
    return True


def _free_base(count: int, rng: random.Random) -> int:
    """A base port whose whole block (``count`` nodes) is free for TCP and UDP right now.

    The block is chosen at random in ``_PORT_RANGE`` so that concurrent runs (tests of
    other helpers, a second lab) rarely even try the same ports; a port taken between
    this probe and the node's bind makes that node fail with a clear error.
    """
    span = PORT_STRIDE * count
    low, high = _PORT_RANGE
    for _ in range(_PORT_ATTEMPTS):
        base = rng.randrange(low, high - span)
        base -= base % PORT_STRIDE
        ports = [base + PORT_STRIDE * i + k for i in range(count) for k in range(len(PORT_NAMES))]
        if all(_bindable(port) for port in ports):
            return base
    raise ConfigError(f"found no free block of {span} loopback ports after {_PORT_ATTEMPTS} tries")


def loopback_placement(count: int, *, base_port: int | None = None) -> Placement:
    """``count`` nodes on 127.0.0.1, node ``h<i>`` with ports ``base + 10 (i - 1) + k``.

    ``base_port=None`` picks a free block at random. Subnets are informational on
    loopback (``subnet`` in the config's peer table): the split is the same as netns's.
    """
    ids = node_ids(count)
    if base_port is None:
        base_port = _free_base(count, random.Random())  # not seeded: must differ between runs
    elif not 1024 <= base_port <= 65535 - PORT_STRIDE * count:
        raise ConfigError("base port out of range", base_port=base_port)
    sizes = subnet_sizes(count)
    hosts: list[HostSpec] = []
    for index, node in enumerate(ids):
        base = base_port + PORT_STRIDE * index
        hosts.append(
            HostSpec(
                id=node,
                address=LOOPBACK,
                ports={name: base + k for k, name in enumerate(PORT_NAMES)},
                subnet=0 if index < sizes[0] else 1,
                broadcast=None,
            )
        )
    return Placement(mode="loopback", hosts=tuple(hosts), subnets=sizes)


def netns_placement(topology: Topology) -> Placement:
    """The nodes of a (not necessarily built) topology: ``h<i>`` on its host ``h<i-1>``."""
    hosts = tuple(
        HostSpec(
            id=f"h{index + 1}",
            address=host.ip,
            ports=dict(DEFAULT_PORTS),
            subnet=host.subnet,
            broadcast=host.broadcast,
            netns=host.netns,
        )
        for index, host in enumerate(topology.hosts)
    )
    return Placement(mode="netns", hosts=hosts, subnets=topology.subnets)


def new_topology(count: int) -> Topology:
    """An unbuilt topology for ``count`` nodes (``subnet_sizes``); enter it to build it."""
    return Topology(subnets=subnet_sizes(count))


def check_hosts(ids: Sequence[str], placement: Placement) -> None:
    """Raise ``ConfigError`` unless every id names a host of ``placement``."""
    for node in ids:
        placement.host(node)
