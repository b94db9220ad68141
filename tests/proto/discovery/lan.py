"""A hand-driven LAN for Prototari cores: one broadcast domain, zero latency, a virtual clock.

Real cores, no mocks: ``Lan`` only moves the bytes the cores emit. A datagram to
the broadcast address reaches every node (its sender included, as a real
broadcast loops back); a unicast reaches the node with that address. Every
datagram is logged as a ``Wire`` record, and ``drop`` can lose chosen ones.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gossamer._types import Address
from gossamer.proto.discovery import DiscoveryConfig, DiscoveryCore, DiscoveryEvent
from gossamer.trace import MemorySink, Tracer

BROADCAST = "10.0.0.255"


@dataclass(frozen=True, slots=True)
class Wire:
    """One datagram on the LAN: when, from which node, to which address, and what."""

    t: float
    src: str
    dst: Address
    data: bytes

    @property
    def label(self) -> str:
        return "data" if self.data[:1] == b"\x00" else self.data.decode()


@dataclass(slots=True)
class Node:
    name: str
    core: DiscoveryCore
    sink: MemorySink
    events: list[DiscoveryEvent] = field(default_factory=list)

    @property
    def address(self) -> Address:
        return self.core.address


class Lan:
    """Cores on one broadcast domain, driven on a virtual clock."""

    def __init__(
        self, *, drop: Callable[[Wire], bool] | None = None, seed: int = 0, start: float = 0.0
    ) -> None:
        self.now = start
        self.nodes: dict[str, Node] = {}
        self.log: list[Wire] = []
        self.dropped: list[Wire] = []
        self.drop = drop
        self._rng = random.Random(seed)

    def add(self, name: str, ip: str, port: int = 21450, **config: Any) -> Node:
        config.setdefault("start_jitter", 0.0)
        config.setdefault("start", self.now)
        cfg = DiscoveryConfig(address=(ip, port), broadcast_address=BROADCAST, **config)
        sink = MemorySink()
        core = DiscoveryCore(
            cfg,
            tracer=Tracer(sink, run="lan", node=name),
            rng=random.Random(self._rng.getrandbits(32)),
        )
        node = Node(name=name, core=core, sink=sink)
        self.nodes[name] = node
        return node

    def by_address(self, addr: Address) -> Node | None:
        for node in self.nodes.values():
            if node.address == addr:
                return node
        return None

    def inject(self, target: Node, data: bytes, source: Address) -> None:
        """A datagram from outside the LAN's nodes (a forged or foreign source)."""
        target.core.receive_datagram(data, source, self.now)
        self.settle()

    def settle(self) -> None:
        """Deliver everything the cores emitted, and what that caused, at ``now``."""
        busy = True
        while busy:
            busy = False
            for node in list(self.nodes.values()):
                node.events.extend(node.core.events_received())
                for data, dst in node.core.datagrams_to_send():
                    busy = True
                    wire = Wire(t=self.now, src=node.name, dst=dst, data=data)
                    self.log.append(wire)
                    if self.drop is not None and self.drop(wire):
                        self.dropped.append(wire)
                        continue
                    if dst[0] == BROADCAST:
                        receivers = [
                            n
                            for n in self.nodes.values()
                            if n.core.config.broadcast_port == dst[1] and not n.core.stopped
                        ]
                    else:
                        target = self.by_address(dst)
                        receivers = [target] if target is not None else []
                    for receiver in receivers:
                        receiver.core.receive_datagram(data, node.address, self.now)
            for node in self.nodes.values():
                node.events.extend(node.core.events_received())

    def run(self, until: float) -> None:
        """Fire timers in time order up to and including ``until``."""
        self.settle()
        while True:
            due = [
                (d, n.name)
                for n in self.nodes.values()
                if (d := n.core.next_deadline()) is not None and d <= until
            ]
            if not due:
                break
            when, name = min(due)
            self.now = max(self.now, when)
            self.nodes[name].core.handle_timer(self.now)
            self.settle()
        self.now = max(self.now, until)

    def sent(self, name: str, label: str | None = None) -> list[Wire]:
        return [w for w in self.log if w.src == name and (label is None or w.label == label)]
