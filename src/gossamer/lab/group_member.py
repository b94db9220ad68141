"""The lab app's ISIS group on agreed views (``[isis] views = true``, the lab's ``demo``).

A static ISIS group waits for every member, so a member cut off holds up every message
multicast meanwhile until the cut heals. On agreed views (``gossamer.open_group``, with
the snapshots of ``gossamer.proto.snapshot_group``) the others exclude it instead and go
on; it rejoins after the heal as its next incarnation. :class:`LabGroup` runs this host's
member:

- the hosts of ``[isis] members`` found the group (view 1), each as incarnation 1 at its
  ISIS port;
- discovery's ``peer_down`` is ``suspect`` (the app's ``_on_peer``);
- ``Excluded`` (the member was cut off and the others went on): it closes and opens its
  next incarnation at the same port, joining through the other hosts' addresses;
- the bank: each incarnation opens an account of ``initial`` units once admitted
  (``Bank.view_changed`` at every view, ``Bank.delivered`` with the sender's id); the
  joiners' state is empty (accounts are private).

What the app sees is the same as with a static group
(:class:`gossamer.lab.isis_member.IsisMember`): ``send`` (``False`` when this host is not
a member at the moment), ``initiate_snapshot``, ``in_flight``, deliveries through
``on_delivered``, and ``close`` / ``abort``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gossamer.aio.faults import FaultInjector
from gossamer.aio.group import GroupService, open_group
from gossamer.errors import ClosedError, LocalProtocolError
from gossamer.proto.isis import Delivered
from gossamer.proto.snapshot import Bank, Workload
from gossamer.proto.views import Excluded, Member, StateNeeded, ViewInstalled, ViewsConfig
from gossamer.trace.sink import Tracer
from gossamer.wire.mode import Wire

__all__ = ["LabGroup"]


class LabGroup:
    """This host's member of the lab's group on views (module docstring)."""

    def __init__(
        self,
        me: Member,
        founders: Sequence[Member],
        *,
        wire: Wire,
        isis: Mapping[str, Any],
        snapshots: bool,
        initial: int,
        tracer: Tracer,
        rng: random.Random,
        faults: FaultInjector | None,
        on_delivered: Callable[[Delivered], None],
        retry: float = 0.05,
    ) -> None:
        self.me = me
        self.founders = tuple(founders)
        self.wire = wire
        self.isis = dict(isis)
        self.snapshots = snapshots
        self.initial = initial
        self.tracer = tracer
        self.rng = rng
        self.faults = faults
        self.on_delivered = on_delivered
        self.retry = retry
        #: The running incarnation's member (``None`` while it rejoins).
        self.service: GroupService | None = None
        #: The running incarnation's account (``None`` until it is admitted).
        self.bank: Bank | None = None
        self._reader: asyncio.Task[None] | None = None
        self._rejoining: asyncio.Future[None] | None = None
        self._closed = False

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Found the group with the other hosts (view 1)."""
        await self._open(ViewsConfig(me=self.me, initial=self.founders, retry=self.retry))

    async def _open(self, config: ViewsConfig) -> None:
        self.bank = None
        self.service = await open_group(
            config, wire=self.wire, isis=self.isis, snapshots=self.snapshots,
            workload=self._workload if self.snapshots else None, tracer=self.tracer,
            rng=self.rng, faults=self.faults,
        )  # fmt: skip
        self._reader = asyncio.ensure_future(self._read(self.service))

    def _workload(self, me: int) -> Workload:
        self.bank = Bank(me=me, members=[me], initial=self.initial, rng=self.rng)
        return self.bank.workload()

    async def _rejoin(self, old: GroupService) -> None:
        """Excluded while alive: close, and join again as the next incarnation."""
        await old.close()
        if self._closed:
            return
        self.me = dataclasses.replace(self.me, incarnation=self.me.incarnation + 1)
        seeds = tuple(m.address for m in self.founders if m.name != self.me.name)
        await self._open(ViewsConfig(me=self.me, seeds=seeds, retry=self.retry))

    async def close(self) -> None:
        self._closed = True
        if self.service is not None:
            await self.service.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, ClosedError):
                await self._reader

    def abort(self) -> None:
        """Close at once (a process on its way out), and trace what ISIS left unfinished."""
        self._closed = True
        if self.service is None:
            return
        self.service.driver.close()
        core = self.service.core.isis
        if core is not None:
            core.trace_stop(time.monotonic())

    # -- the application -----------------------------------------------------------------

    async def _read(self, service: GroupService) -> None:
        with contextlib.suppress(ClosedError):
            async for event in service.events():
                if isinstance(event, Delivered):
                    if self.bank is not None:
                        self.bank.delivered(event.data, event.sender_id)
                    self.on_delivered(event)
                elif isinstance(event, ViewInstalled):
                    snapshots = service.snapshots
                    if self.bank is not None and snapshots is not None:
                        self.bank.view_changed(snapshots.member_ids(event.view))
                elif isinstance(event, StateNeeded):
                    with contextlib.suppress(ClosedError):
                        service.provide_state(event.view_id, b"")
                elif isinstance(event, Excluded) and not self._closed:
                    self._rejoining = asyncio.ensure_future(self._rejoin(service))
                    return

    def suspect(self, name: str) -> None:
        """Discovery's ``peer_down`` for host ``name``."""
        if self.service is not None and not self.service.closed:
            self.service.suspect(name)

    async def send(self, k: int) -> bool:
        """Multicast the workload's ``k``-th message: a transfer with snapshots, else the
        payload ``k + 1``; ``False`` when this host is no member at the moment
        (rejoining) or the account is empty."""
        service = self.service
        if service is None or service.closed or service.view is None:
            return False
        data: bytes | int = k + 1
        if self.snapshots:
            transfer = self.bank.next_transfer() if self.bank is not None else None
            if transfer is None:
                return False
            data = transfer
        try:
            await service.send(data)  # waits while a snapshot holds multicasts back
        except (ClosedError, LocalProtocolError):
            return False  # excluded or stopped meanwhile: the member (and money) left
        return True

    def initiate_snapshot(self) -> None:
        if self.service is not None and not self.service.closed:
            self.service.initiate_snapshot()

    def in_flight(self) -> int:
        """Messages held back or not yet acknowledged, at least 1 while anything is due."""
        service = self.service
        if service is None or service.closed:
            return 0 if self._closed else 1
        core = service.core.isis
        if core is None:
            return 1  # joining
        count = core.pending + core.outstanding
        node = service.snapshots.node if service.snapshots is not None else None
        busy = node is not None and (bool(node.snapshot.in_progress) or bool(node.queued))
        return max(count, 1) if busy or not core.quiescent else count
