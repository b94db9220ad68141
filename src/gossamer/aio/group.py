"""A group member on a real UDP socket, sealed: agreed views with ISIS total order flushed
through them (``gossamer.proto.group``, ``docs/cluster.md`` "ISIS on the views").

The protocol and the glue between views and ISIS are entirely in ``GroupCore``; this module
resolves the addresses, binds one socket for both protocols, seals the datagrams and turns
the calls into ``driver.call``::

    me = Member(name="d", incarnation=1, address=("127.0.0.1", 0))
    async with gossamer.open_group(ViewsConfig(me, seeds=(seed,)), wire=wire) as group:
        async for event in group.events():      # Delivered, ViewInstalled, StateNeeded, ...
            if isinstance(event, StateNeeded):
                group.provide_state(event.view_id, application_state())
        await group.send(b"job")                 # total order, in the current view

``close()`` is a crash to the others (no goodbye), which remove the member once their
membership layer suspects it (``suspect``).

With ``snapshots=True`` the member also takes Chandy–Lamport snapshots of the group, one
view at a time (``gossamer.proto.snapshot_group``): ``initiate_snapshot()``, and
``SnapshotDone`` / ``SnapshotAbandoned`` among the events.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

from gossamer.aio._pump import now
from gossamer.aio.faults import FaultInjector
from gossamer.aio.opening import Opening
from gossamer.aio.sealing import rejected_by
from gossamer.aio.views import MemberService, start_member
from gossamer.errors import ClosedError, ConfigError, LocalProtocolError
from gossamer.proto.group import GroupCore
from gossamer.proto.isis import Delivered, payload
from gossamer.proto.snapshot import SnapshotConfig
from gossamer.proto.snapshot_group import SnapshotGroup, SnapshotGroupEvent, WorkloadFor
from gossamer.proto.views import ViewsConfig
from gossamer.trace.sink import Tracer
from gossamer.wire.mode import Wire, WireMode

__all__ = ["GroupService", "open_group"]


def open_group(
    config: ViewsConfig,
    *,
    wire: Wire,
    isis: Mapping[str, Any] | None = None,
    snapshots: bool = False,
    workload: WorkloadFor | None = None,
    snapshot_config: SnapshotConfig | None = None,
    tracer: Tracer | None = None,
    rng: random.Random | None = None,
    faults: FaultInjector | None = None,
    sock: socket.socket | None = None,
) -> Opening[GroupService]:
    """Open this member of the group: ``await`` it for the started service, or use it
    with ``async with`` to close it on the way out (``docs/api.md``).

    ``config`` is the views' (``me``, founders' ``initial`` or a joiner's ``seeds``,
    ``retry``): as for ``open_views``, ``me.address`` is bound (port 0: any, for a
    joiner) and names are resolved once. ``isis`` holds ``IsisConfig``'s tunables
    (``retransmit_initial=``, ``batch_delay=``...). ``wire`` carries the group key: the
    group runs on the sealed wire only. ``snapshots=True`` adds the snapshots of the
    group (``SnapshotGroup``): ``workload`` makes this member's ``Workload`` from its
    ISIS id when it first has a view; ``snapshot_config`` defaults to ISIS's
    retransmission schedule. ``tracer`` receives the ``views``, ``isis`` (and
    ``snapshot``) events; ``faults`` injects network faults around the socket.

    Raises ``ConfigError`` for a wire that is not sealed and ``NetworkError`` (its cause
    the ``OSError``) when a name does not resolve or the address cannot be bound.
    """
    if not isinstance(wire, Wire) or not wire.sealed:
        raise ConfigError(
            "a group runs on the sealed wire only: give wire=Wire(key=...) (no default key)"
        )
    return Opening(
        lambda: _start(
            config,
            wire=wire,
            isis=isis,
            tracer=tracer,
            rng=rng,
            faults=faults,
            sock=sock,
            snapshots=snapshots,
            workload=workload,
            snapshot_config=snapshot_config,
        )
    )


class GroupService(MemberService[GroupCore | SnapshotGroup, SnapshotGroupEvent]):
    """One running member of a group (from :func:`open_group`). Use it from one loop.

    Inputs, run on the core at once: ``send`` (a multicast in total order), ``suspect``
    and ``join_request`` (the membership layer), ``provide_state`` (the application's
    state, after ``StateNeeded``). Outputs, in order, from ``events()`` or
    ``next_event()``: ``Delivered`` and ``Discarded`` (ISIS), ``ViewInstalled`` (a
    joiner's first with the application's state), ``StateNeeded``, ``Blocked``,
    ``Unblocked``, ``Excluded``; what is delivered before ``ViewInstalled(v+1)`` belongs
    to view v; with snapshots also ``SnapshotDone`` and ``SnapshotAbandoned``. ``view``,
    ``blocked`` and ``excluded`` say the same at any time.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # Sends waiting for a snapshot to let their multicast into the group, oldest first.
        self._held: deque[asyncio.Future[int]] = deque()
        if isinstance(self.core, SnapshotGroup):
            self.core.on_multicast = self._entered
            self.core.on_dropped = self._dropped
            # Deliveries wait in the events until the application reads them: a snapshot
            # recorded meanwhile holds them (``SnapshotNode.unread``).
            self.core.unread = self._unread

    @property
    def snapshots(self) -> SnapshotGroup | None:
        """The snapshot composition (``None`` when opened without snapshots)."""
        return self.core if isinstance(self.core, SnapshotGroup) else None

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams refused, by reason: by the envelope (not sealed with the group key,
        replayed...) and by the group (``unknown_protocol``)."""
        refused = rejected_by(self.driver.core)
        group = self.core.group if isinstance(self.core, SnapshotGroup) else self.core
        refused.update({k: v for k, v in group.counters.items() if v})
        return refused

    async def send(self, data: bytes | int) -> int:
        """Multicast ``data`` (bytes up to 512) in total order; returns its ISIS ``msg_id``.
        During a view change it is held and goes out in the next view. With snapshots it
        waits while a snapshot holds new multicasts back (as ``IsisService.send``).
        ``LocalProtocolError`` for a payload that does not fit, before this member is
        admitted, or when it is excluded before its multicast could go out;
        ``ClosedError`` once closed."""
        payload(data, WireMode.SEALED)  # refused here, not inside the driver
        driver = self._require_open()
        core = self.core
        if isinstance(core, GroupCore):
            return driver.call(lambda t: core.multicast(data, t))
        # In line before the call: the call itself may let this message in (``_entered``).
        entered: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._held.append(entered)
        try:
            driver.call(lambda t: core.multicast(data, t))
        except BaseException:
            self._held.remove(entered)  # refused: it never entered the line
            raise
        return await entered

    def initiate_snapshot(self) -> int | None:
        """Start a snapshot of the current view here; its id, or ``None`` outside a
        stable view (before the first, during a change). Every member's part comes as a
        ``SnapshotDone`` from its ``events()``, or ``SnapshotAbandoned`` if a view change
        came first. ``LocalProtocolError`` when opened without snapshots."""
        core = self.core
        if not isinstance(core, SnapshotGroup):
            raise LocalProtocolError("this member was opened without snapshots")
        return self._require_open().call(core.initiate_snapshot)

    def _unread(self) -> list[tuple[int, bytes]]:
        return [(e.sender_id, e.data) for e in self._events.pending() if isinstance(e, Delivered)]

    def _entered(self, msg_id: int, data: bytes, now: float) -> None:
        if self._held:  # the multicasts enter in the order of the sends
            future = self._held.popleft()
            if not future.done():
                future.set_result(msg_id)

    def _dropped(self, data: bytes, now: float) -> None:
        if self._held:
            future = self._held.popleft()
            if not future.done():
                future.set_exception(
                    LocalProtocolError("excluded from the group before it could be multicast")
                )

    async def _close(self) -> None:
        await super()._close()
        while self._held:
            future = self._held.popleft()
            if not future.done():
                future.set_exception(ClosedError("the group member is closed"))


async def _start(
    config: ViewsConfig,
    *,
    wire: Wire,
    isis: Mapping[str, Any] | None,
    tracer: Tracer | None,
    rng: random.Random | None,
    faults: FaultInjector | None,
    sock: socket.socket | None,
    snapshots: bool,
    workload: WorkloadFor | None,
    snapshot_config: SnapshotConfig | None,
) -> GroupService:
    def core(config: ViewsConfig, tracer: Tracer) -> GroupCore | SnapshotGroup:
        chosen = rng or random.Random()
        if not snapshots:
            return GroupCore(config, isis=isis, tracer=tracer, rng=chosen, now=now())
        return SnapshotGroup(
            config,
            isis=isis,
            tracer=tracer,
            rng=chosen,
            now=now(),
            workload=workload,
            config=snapshot_config,
        )

    return await start_member(
        config, core, GroupService, wire=wire, tracer=tracer, faults=faults, sock=sock
    )
