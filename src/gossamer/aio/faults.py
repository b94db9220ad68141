"""Fault injection on real sockets, with the same ``FaultPlan`` the simulator uses.

A ``FaultInjector`` sits between a datagram driver and its socket. For every
datagram it draws a ``FaultDecision`` from the plan with its own seeded
``random.Random``, then drops it, passes it on, or schedules each (possibly
duplicated) copy on the event loop after the copy's extra delay. Delayed copies
are loop timers, so a datagram sent after a delayed one overtakes it: that is
how ``delay`` and ``reorder`` reorder traffic on a real network.

DESIGN.md, "The simulator": every injected fault is counted and traced, so that
a fault scenario that injected nothing can be caught. Counts are kept in
``counts`` by fault name (``drop``, ``duplicate``, ``delay``, ``reorder``); each
fault applied to a datagram emits one trace event ``layer="net", kind="fault"``
with ``attrs["fault"]`` naming it, ``attrs["direction"]`` (``out`` or ``in``),
``attrs["addr"]`` (the remote address) and, when copies are held back,
``attrs["delays"]`` (seconds per copy).

The injector decides nothing about protocols: it sees bytes and addresses only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from gossamer._types import Address
from gossamer.aio._pump import now as clock
from gossamer.faults import FaultPlan

if TYPE_CHECKING:
    from random import Random

    from gossamer.trace.sink import Tracer

__all__ = ["Direction", "FaultInjector"]

#: Which way a datagram is travelling relative to the local node.
Direction = Literal["out", "in"]

#: Puts one copy of a datagram on its way (to the socket, or to the core).
Deliver = Callable[[bytes, Address], None]

LAYER = "net"


class FaultInjector:
    """Applies fault plans to a driver's outgoing and (optionally) incoming datagrams.

    ``outgoing`` applies to datagrams the core sends, ``incoming`` to datagrams
    the socket receives; either may be ``None`` (untouched). ``rng`` is the only
    source of randomness, so one seed and one sequence of datagrams give one
    sequence of faults. ``tracer``, when given, records each fault.

    One injector serves one driver: it owns the loop timers of the copies it
    holds back, and ``cancel()`` (called by the driver on close) discards them.
    """

    def __init__(
        self,
        outgoing: FaultPlan | None = None,
        *,
        incoming: FaultPlan | None = None,
        rng: Random,
        tracer: Tracer | None = None,
    ) -> None:
        self.outgoing = outgoing
        self.incoming = incoming
        self.rng = rng
        self.tracer = tracer
        #: Faults injected so far, by name.
        self.counts: dict[str, int] = {}
        #: Datagrams that went through a plan, by direction.
        self.seen: dict[Direction, int] = {"out": 0, "in": 0}
        self._held: set[asyncio.TimerHandle] = set()

    @property
    def injected(self) -> int:
        """The total number of faults injected in both directions."""
        return sum(self.counts.values())

    @property
    def held(self) -> int:
        """Copies currently held back by a delay, waiting for their timer."""
        return len(self._held)

    def plan_for(self, direction: Direction) -> FaultPlan | None:
        """The plan applied in ``direction``, or ``None`` when that way is untouched."""
        return self.outgoing if direction == "out" else self.incoming

    def apply(
        self,
        direction: Direction,
        data: bytes,
        addr: Address,
        deliver: Deliver,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Decide the fate of one datagram and act on it.

        Copies without extra delay are passed to ``deliver`` before this returns,
        in order; the others are scheduled with ``loop.call_later``.
        """
        reason = self.blocked(direction, addr)
        if reason is not None:
            attrs = {"reason": reason, "direction": direction, "addr": f"{addr[0]}:{addr[1]}"}
            self._record(f"{reason}_drop", "drop", data, attrs)
            return
        plan = self.plan_for(direction)
        if plan is None:
            deliver(data, addr)
            return
        self.seen[direction] += 1
        decision = plan.decide(self.rng)
        if decision.faults:
            held = [delay for delay in decision.copies if delay > 0.0]
            attrs = {"direction": direction, "addr": f"{addr[0]}:{addr[1]}"}
            if held:
                attrs["delays"] = ",".join(f"{delay:.6f}" for delay in decision.copies)
            for fault in decision.faults:
                self._record(fault, fault, data, attrs)
        for delay in decision.copies:
            if delay > 0.0:
                self._hold(delay, data, addr, deliver, loop)
            else:
                deliver(data, addr)

    def blocked(self, direction: Direction, addr: Address) -> str | None:
        """Why every datagram to or from ``addr`` is dropped right now, whatever the
        plans say (``"partition"``, say), or ``None``: the base blocks nothing.

        A subclass overrides it; a blocked datagram is counted as ``<reason>_drop``
        and traced as fault ``drop`` with ``attrs["reason"]``.
        """
        return None

    def _record(self, name: str, fault: str, data: bytes, attrs: dict[str, str]) -> None:
        """Count fault ``name`` and trace it as ``fault`` with ``attrs``."""
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.tracer is not None:
            self.tracer(clock(), LAYER, "fault", size=len(data), attrs={"fault": fault, **attrs})

    def cancel(self) -> int:
        """Discard every held copy (the driver is closing); return how many there were."""
        count = len(self._held)
        for handle in self._held:
            handle.cancel()
        self._held.clear()
        return count

    def _hold(
        self,
        delay: float,
        data: bytes,
        addr: Address,
        deliver: Deliver,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        handle: asyncio.TimerHandle

        def release() -> None:
            self._held.discard(handle)
            deliver(data, addr)

        handle = loop.call_later(delay, release)
        self._held.add(handle)
