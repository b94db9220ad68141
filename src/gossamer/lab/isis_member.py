"""The lab app's ISIS member: what the app asks of it, and the static group's.

The app drives this host's member of the ISIS group through :class:`IsisMember`, the
same way whichever group it is:

- :class:`StaticMember` (this module): a static ISIS group of ``[isis] members``
  (``gossamer.open_isis``), as in the lab's ``isis`` and ``snapshot`` scenarios;
  discovery's ``peer_down`` removes the member for good;
- :class:`gossamer.lab.group_member.LabGroup`: the group on agreed views
  (``[isis] views = true``, the lab's ``demo``), where a member cut off is excluded and
  rejoins as its next incarnation.

With snapshots, each member holds a bank account (``gossamer.proto.snapshot.Bank``) and
every message of the workload is a transfer; the account is credited as the member
takes each delivery, before the app sees it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gossamer.aio.faults import FaultInjector
from gossamer.aio.isis import IsisService, open_isis
from gossamer.errors import ClosedError
from gossamer.proto.isis import Delivered, IsisConfig, Member
from gossamer.proto.snapshot import Bank
from gossamer.trace.sink import Tracer
from gossamer.wire.mode import Wire

__all__ = ["IsisMember", "StaticMember"]


class IsisMember(Protocol):
    """This host's member of the lab's ISIS group, as the app drives it."""

    async def start(self) -> None:
        """Join the group (found it, with the other hosts)."""

    def suspect(self, name: str) -> None:
        """Discovery's ``peer_down`` for host ``name``, a member of the group."""

    async def send(self, k: int) -> bool:
        """Multicast the workload's ``k``-th message: a transfer with an account, else
        the payload ``k + 1``. ``False`` when nothing went out (no member at the
        moment, an empty account, stopped meanwhile)."""

    def initiate_snapshot(self) -> None:
        """Start a snapshot here (nothing when this host is no member at the moment)."""

    def in_flight(self) -> int:
        """Messages held back or not yet acknowledged, at least 1 while anything is due."""

    async def close(self) -> None:
        """Stop cleanly."""

    def abort(self) -> None:
        """Close at once (a process on its way out), and trace what ISIS left unfinished."""


class StaticMember:
    """This host's member of a static ISIS group (module docstring): ``members`` in
    their id order, ``me`` this host's id among them."""

    def __init__(
        self,
        me: int,
        members: Sequence[Member],
        *,
        wire: Wire,
        isis: Mapping[str, Any],
        snapshots: bool,
        initial: int,
        tracer: Tracer,
        rng: random.Random,
        bank_rng: random.Random,
        faults: FaultInjector | None,
        on_delivered: Callable[[Delivered], None],
    ) -> None:
        self.config = IsisConfig(me=me, members=tuple(members), wire=wire.mode, **isis)
        self.ids = {m.name: m.id for m in members}
        self.wire = wire
        self.snapshots = snapshots
        self.tracer = tracer
        self.rng = rng
        self.faults = faults
        self.on_delivered = on_delivered
        #: The account (with snapshots): every member's initial balance is known, so
        #: the snapshots are held to the group's total.
        self.bank = (
            Bank(me=me, members=list(self.ids.values()), initial=initial, rng=bank_rng)
            if snapshots
            else None
        )
        self.total = float(initial * len(members))
        self.service: IsisService | None = None

    async def start(self) -> None:
        workload = self.bank.workload(total=self.total) if self.bank is not None else None
        self.service = await open_isis(
            self.config, tracer=self.tracer, rng=self.rng, faults=self.faults,
            workload=workload, on_event=self._on_event, snapshots=self.snapshots,
            wire=self.wire,
        )  # fmt: skip

    def _on_event(self, event: object) -> None:
        # Taken as made (no queue): the account is credited in the same step.
        if isinstance(event, Delivered):
            if self.bank is not None:
                self.bank.delivered(event.data)
            self.on_delivered(event)

    def suspect(self, name: str) -> None:
        if self.service is not None and name in self.ids:
            self.service.remove_member(self.ids[name])

    async def send(self, k: int) -> bool:
        if self.service is None:
            return False
        data: bytes | int = k + 1
        if self.bank is not None:
            transfer = self.bank.next_transfer()
            if transfer is None:
                return False
            data = transfer
        try:
            await self.service.send(data)  # waits while a snapshot holds multicasts back
        except ClosedError:
            return False  # stopped while held back: never sent
        return True

    def initiate_snapshot(self) -> None:
        if self.service is not None:
            self.service.initiate_snapshot()

    def in_flight(self) -> int:
        if self.service is None:
            return 0
        core = self.service.isis
        count = core.pending + core.outstanding
        # Retransmissions, markers, loopback still due: not idle, though nothing counts.
        return count if self.service.idle else max(count, 1)

    async def close(self) -> None:
        if self.service is not None:
            await self.service.close()

    def abort(self) -> None:
        if self.service is not None:
            self.service.abort()
            self.service.isis.trace_stop(time.monotonic())
