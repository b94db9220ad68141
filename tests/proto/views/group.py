"""A hand-driven group of views cores for the unit tests: datagrams are carried between
cores only when a test says so, with explicit times, and the layer above is played by
answering ``FlushRequired`` and ``StateNeeded`` at once (unless a test holds them)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from gossamer._types import Address
from gossamer.proto.views import (
    FlushRequired,
    Member,
    StateNeeded,
    ViewsConfig,
    ViewsCore,
    ViewsEvent,
)
from gossamer.trace.sink import MemorySink, Tracer


def member(name: str, incarnation: int = 1) -> Member:
    return Member(name=name, incarnation=incarnation, address=(f"10.0.0.{ord(name[0])}", 7100))


@dataclass
class Group:
    """Cores by name; ``cut`` holds pairs of names that cannot reach each other."""

    now: float = 0.0
    cores: dict[str, ViewsCore] = field(default_factory=dict)
    events: dict[str, list[ViewsEvent]] = field(default_factory=dict)
    sinks: dict[str, MemorySink] = field(default_factory=dict)
    cut: set[frozenset[str]] = field(default_factory=set)
    auto_flush: bool = True
    held: set[str] = field(default_factory=set)  # members whose layer never answers a flush
    in_flight: list[tuple[str, bytes, Address]] = field(default_factory=list)

    @classmethod
    def founded(cls, *names: str) -> Group:
        group = cls()
        initial = tuple(member(n) for n in names)
        for m in initial:
            group.add(ViewsConfig(me=m, initial=initial))
        return group

    def add(self, config: ViewsConfig) -> ViewsCore:
        name = config.me.name
        sink = self.sinks[name] = MemorySink()
        core = ViewsCore(
            config,
            tracer=Tracer(sink, run="t", node=name),
            rng=random.Random(len(self.cores)),
            now=self.now,
        )
        self.cores[name] = core
        self.events[name] = []
        self.pump(name)
        return core

    def join(self, name: str, incarnation: int = 1, *, seeds: tuple[str, ...] = ("a",)) -> None:
        addresses = tuple(self.cores[s].me.address for s in seeds)
        self.add(ViewsConfig(me=member(name, incarnation), seeds=addresses))

    def pump(self, name: str) -> None:
        """Collect a core's datagrams and answer its requests to the layer above."""
        core = self.cores[name]
        for data, addr in core.datagrams_to_send():
            self.in_flight.append((name, data, addr))
        for event in core.events_received():
            self.events[name].append(event)
            if isinstance(event, FlushRequired) and self.auto_flush and name not in self.held:
                core.flush_done(event.view_id, self.now)
                self.pump(name)
            elif isinstance(event, StateNeeded):
                core.provide_state(event.view_id, f"state@{event.view_id - 1}".encode(), self.now)
                self.pump(name)

    def deliver_all(self, *, drop: set[str] | None = None) -> int:
        """Carry every datagram in flight (and those they cause) until none is left."""
        delivered = 0
        while self.in_flight:
            sender, data, addr = self.in_flight.pop(0)
            target = next((n for n, c in self.cores.items() if c.me.address == addr), None)
            if target is None or frozenset((sender, target)) in self.cut:
                continue
            if drop is not None and target in drop:
                continue
            self.cores[target].receive_datagram(data, self.cores[sender].me.address, self.now)
            self.pump(target)
            delivered += 1
        return delivered

    def tick(self, seconds: float) -> None:
        """Advance time, fire due timers and carry what they send."""
        self.now += seconds
        for name, core in self.cores.items():
            deadline = core.next_deadline()
            if deadline is not None and deadline <= self.now:
                core.handle_timer(self.now)
                self.pump(name)
        self.deliver_all()

    def settle(self, rounds: int = 30) -> None:
        self.deliver_all()
        for _ in range(rounds):
            self.tick(0.1)

    def views(self, *names: str) -> dict[str, tuple[int, tuple[str, ...]] | None]:
        out: dict[str, tuple[int, tuple[str, ...]] | None] = {}
        for n in names or tuple(self.cores):
            view = self.cores[n].view
            out[n] = None if view is None else (view.id, view.names)
        return out
