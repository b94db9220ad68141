"""Chandy–Lamport snapshots of a group on agreed views (sans-I/O).

``SnapshotGroup`` is a :class:`~gossamer.proto.group.GroupCore` (agreed views with ISIS
total order) with the snapshots of ``gossamer.proto.snapshot`` on the same address. It
composes protocol cores, as ``gossamer.proto.group`` does; no protocol subpackage
imports another. Within one view the group is a static ISIS group, where
``SnapshotNode``'s rules make each channel FIFO at the cut (``docs/snapshots.md``).
Across a view change they would not hold (members come and go; a message withdrawn at
a change goes out again under a new id), so:

1. **A snapshot belongs to the view it starts in.** The member runs one
   ``SnapshotNode`` per view it installs, over that view's ISIS members.
   ``initiate_snapshot`` returns ``None`` while no view is installed here or one is
   changing.
2. **A view change abandons it.** When a change begins here (ISIS
   ``begin_view_change``), or the member is excluded, every snapshot still in progress
   here is abandoned: event ``SnapshotAbandoned`` and trace ``abandon``
   (``attrs.snapshot``, ``attrs.view``), with no ``SnapshotDone``. The multicasts its
   snapshots held back go to the group, which holds them in turn until the next view.
3. **A marker says its view.** It travels as ``S``, the view id (4 bytes, big-endian),
   then the marker. One of another view than the one running here is dropped, counted
   (``counters["stale_markers"]``) and traced as a snapshot ``drop``: a late marker of an
   ended view, or one of the next view at a member that has not installed it yet (its
   sender repeats it until acknowledged, so it gets through then).
4. **The cut counts one view's traffic.** The recorded ISIS state has the view's own
   counts (``IsisCore.state()["agreed"]``), which ``check_cut`` compares; and Data of an
   ended view never enters the next view's hold-back queue (the group's view tags), so no
   withdrawn message is counted with the copy that replaced it.

The bank's money is conserved within each view (``gossamer.proto.snapshot.bank``:
refunds for payees that left); a member that leaves takes its account with it, a joiner
opens one. The application sees the group's events (``GroupEvent``),
``SnapshotDone`` and ``SnapshotAbandoned``, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gossamer._types import Address
from gossamer.errors import LocalProtocolError
from gossamer.proto.core import DatagramLayer, DatagramOutputs
from gossamer.proto.group import GroupCore, GroupEvent, isis_name
from gossamer.proto.isis import IsisCore, payload
from gossamer.proto.snapshot import SnapshotConfig, SnapshotDone, SnapshotNode, Workload
from gossamer.proto.views import Excluded, Member, View, ViewInstalled, ViewsConfig
from gossamer.trace.sink import Tracer
from gossamer.wire import isis as wire
from gossamer.wire.mode import WireMode

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "SNAPSHOT_TAG",
    "SnapshotAbandoned",
    "SnapshotGroup",
    "SnapshotGroupEvent",
    "WorkloadFor",
]

SNAPSHOT_TAG = b"S"
_VIEW_SIZE = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotAbandoned:
    """Snapshot ``snapshot_id``, of view ``view_id``, ended here without a result: a view
    change began (or this member was excluded) before its part was done."""

    snapshot_id: int
    view_id: int


SnapshotGroupEvent = GroupEvent | SnapshotDone | SnapshotAbandoned

#: The workload of a member, made once its ISIS id is known (a joiner learns it with its
#: first view): the id gives, for example, the bank account's number.
WorkloadFor = Callable[[int], Workload]


class SnapshotGroup(DatagramOutputs[SnapshotGroupEvent]):
    """One group member with snapshots (module docstring). ``group`` is the member;
    ``multicast``, ``suspect``, ``join_request`` and ``provide_state`` are its inputs,
    as on ``GroupCore``. ``workload`` is made at the member's first view."""

    def __init__(
        self,
        views: ViewsConfig,
        *,
        isis: Mapping[str, Any] | None = None,
        tracer: Tracer,
        rng: Random,
        now: float,
        workload: WorkloadFor | None = None,
        config: SnapshotConfig | None = None,
    ) -> None:
        super().__init__()
        self.group = GroupCore(views, isis=isis, tracer=tracer, rng=rng, now=now)
        self.counters = {"stale_markers": 0}
        #: This member's workload, once it has a view (``None`` before, or without one).
        self.workload: Workload | None = None
        #: The snapshots of the view running here; ``None`` outside a stable view.
        self.node: SnapshotNode | None = None
        self._workload_for = workload
        self._config = config
        self._tracer = tracer
        self._rng = rng
        #: Called as ``(msg_id, data, now)`` whenever a multicast really enters the group
        #: (at once, or when a snapshot releases it), in the order they were asked for.
        self.on_multicast: Callable[[int, bytes, float], None] | None = None
        #: Called as ``(data, now)`` for a multicast a snapshot held back that never
        #: enters the group: this member was excluded first (it leaves, and its data).
        self.on_dropped: Callable[[bytes, float], None] | None = None
        self._unread: Callable[[], Iterable[tuple[int, bytes]]] | None = None
        self._view_id = 0  # the view of ``node``
        self._started = 0  # snapshots started here in the views before ``node``'s
        self._settle(now)  # a founder installs view 1 here, before a driver can set unread

    @property
    def unread(self) -> Callable[[], Iterable[tuple[int, bytes]]] | None:
        """The deliveries the application has not taken yet, as ``SnapshotNode.unread``:
        set by a driver that queues them, for every view's node, the running one
        included (a founder's view 1 is installed before any driver has the core)."""
        return self._unread

    @unread.setter
    def unread(self, value: Callable[[], Iterable[tuple[int, bytes]]] | None) -> None:
        self._unread = value
        if self.node is not None:
            self.node.unread = value

    # -- the group's surface ----------------------------------------------------------

    @property
    def me(self) -> Member:
        return self.group.me

    @property
    def view(self) -> View | None:
        return self.group.view

    @property
    def blocked(self) -> bool:
        return self.group.blocked

    @property
    def excluded(self) -> bool:
        return self.group.excluded

    @property
    def isis(self) -> IsisCore | None:
        return self.group.isis

    def member_ids(self, view: View) -> list[int]:
        """The ISIS ids of ``view``'s members (of a view installed here), in its order."""
        isis = self.group.isis
        if isis is None:
            return []
        ids = (isis.id_of(isis_name(m)) for m in view.members)
        return [i for i in ids if i is not None]

    # -- inputs ----------------------------------------------------------------------

    def multicast(self, data: bytes | int, now: float) -> int | None:
        """Multicast ``data`` in total order: as ``SnapshotNode.multicast`` within a view
        (``None`` while a snapshot holds it back), else as ``GroupCore.multicast`` (held
        during a change; ``LocalProtocolError`` before this member is admitted)."""
        data = payload(data, WireMode.SEALED)  # refused before anything holds it back
        msg_id = self.node.multicast(data, now) if self.node is not None else self._enter(data, now)
        self._settle(now)
        return msg_id

    def initiate_snapshot(self, now: float) -> int | None:
        """Start a snapshot of the current view; its id, or ``None`` outside a stable
        view (before the first, during a change, once excluded)."""
        if self.node is None:
            return None
        sid = self.node.initiate_snapshot(now)
        self._settle(now)
        return sid

    def suspect(self, name: str, now: float, *, incarnation: int | None = None) -> None:
        self.group.suspect(name, now, incarnation=incarnation)
        self._settle(now)

    def join_request(self, member: Member, now: float) -> None:
        self.group.join_request(member, now)
        self._settle(now)

    def provide_state(self, view_id: int, state: bytes, now: float) -> None:
        self.group.provide_state(view_id, state, now)
        self._settle(now)

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        if data[:1] != SNAPSHOT_TAG:
            if self.node is not None:
                self.node.receive_datagram(data, addr, now)  # releases held multicasts too
            else:
                self.group.receive_datagram(data, addr, now)
        elif len(data) > 1 + _VIEW_SIZE and self._marker_view(data) == self._view_id:
            assert self.node is not None  # ``_view_id`` is 0 without one: no view is 0
            self.node.receive_datagram(data[1 + _VIEW_SIZE :], addr, now)
        else:
            self.counters["stale_markers"] += 1
            self._tracer(
                now, "snapshot", "drop", size=len(data),
                attrs={"reason": "a marker of another view", "view": str(self._view_id)},
            )  # fmt: skip
        self._settle(now)

    def handle_timer(self, now: float) -> None:
        if self.node is not None:
            self.node.handle_timer(now)
        else:
            self.group.handle_timer(now)
        self._settle(now)

    def next_deadline(self) -> float | None:
        return self.node.next_deadline() if self.node is not None else self.group.next_deadline()

    # -- the glue ------------------------------------------------------------------------

    @staticmethod
    def _marker_view(data: bytes) -> int:
        return int.from_bytes(data[1 : 1 + _VIEW_SIZE], "big")

    def _settle(self, now: float) -> None:
        """Pass every event up, opening a view's snapshots at its installation and
        abandoning them when a change begins; then collect the datagrams."""
        while True:
            self._collect_markers()
            events: list[SnapshotGroupEvent] = [*self.group.events_received()]
            if self.node is not None:
                events += self.node.snapshot.events_received()
            if not events:
                break
            for event in events:
                self._events.append(event)
                if isinstance(event, ViewInstalled):
                    self._open(event.view.id, now)
                elif isinstance(event, Excluded):
                    self._abandon(now)
        isis = self.group.isis
        if self.node is not None and (isis is None or isis.changing):
            self._abandon(now)
        self._outbox.extend(self.group.datagrams_to_send())

    def _open(self, view_id: int, now: float) -> None:
        """View ``view_id`` is installed here: its own snapshots from now on."""
        started = self._abandon(now)
        isis = self.group.isis
        if isis is None:
            return
        if self.workload is None and self._workload_for is not None:
            self.workload = self._workload_for(isis.me)
        self.node = SnapshotNode(
            _ViewIsis(self.group, isis),
            tracer=self._tracer,
            rng=self._rng,
            config=self._config,
            workload=self.workload,
        )
        self.node.on_multicast = self._entered
        self.node.unread = self._unread
        self.node.snapshot.started = started  # ids are never reused across views
        self._view_id = view_id
        # What ISIS sent at the install went out without the node: trace it as its own.
        for msg_id, data in isis.sent_in_view():
            self.node.trace_sends(msg_id, data, now)

    def _abandon(self, now: float) -> int:
        """End this view's snapshots here: those in progress are abandoned, the
        multicasts they held back go to the group. Returns how many snapshots this member
        has started so far."""
        node, self.node, view_id, self._view_id = self.node, None, self._view_id, 0
        if node is None:
            return self._started
        self._started = node.snapshot.started
        node.inner.data_observer = None
        node.snapshot.datagrams_to_send()  # markers of abandoned snapshots stay unsent
        for sid in node.snapshot.in_progress:
            self._events.append(SnapshotAbandoned(snapshot_id=sid, view_id=view_id))
            self._tracer(
                now, "snapshot", "abandon", msg=f"snapshot/{sid}",
                attrs={"snapshot": str(sid), "view": str(view_id)},
            )  # fmt: skip
        for data in node.release_queued():
            if self.group.isis is not None:
                self._enter(data, now)
            elif self.on_dropped is not None:  # excluded: it leaves, its money with it
                self.on_dropped(data, now)
        return self._started

    def _enter(self, data: bytes, now: float) -> int:
        """Multicast ``data`` on the group itself (no snapshot holds it back)."""
        msg_id = self.group.multicast(data, now)
        self._entered(msg_id, data, now)
        return msg_id

    def _entered(self, msg_id: int, data: bytes, now: float) -> None:
        if self.on_multicast is not None:
            self.on_multicast(msg_id, data, now)

    def _collect_markers(self) -> None:
        if self.node is not None:
            head = SNAPSHOT_TAG + self._view_id.to_bytes(_VIEW_SIZE, "big")
            self._outbox.extend((head + d, a) for d, a in self.node.snapshot.datagrams_to_send())


class _ViewIsis(DatagramLayer[GroupCore]):
    """One view's ISIS core as the ``Sequencer`` of that view's ``SnapshotNode``: the
    queries go to the core; multicasts, and (as a ``DatagramLayer``) inputs and outputs,
    to the whole group, ``inner``, which routes them."""

    def __init__(self, group: GroupCore, isis: IsisCore) -> None:
        super().__init__(group)
        self._isis = isis
        self.config = isis.config

    @property
    def data_observer(self) -> Callable[[wire.DataMessage, int, float], None] | None:
        return self._isis.data_observer

    @data_observer.setter
    def data_observer(self, value: Callable[[wire.DataMessage, int, float], None] | None) -> None:
        self._isis.data_observer = value

    @property
    def me(self) -> int:
        return self._isis.me

    @property
    def view(self) -> tuple[int, ...]:
        return self._isis.view

    def name_of(self, member: int) -> str:
        return self._isis.name_of(member)

    def address_of(self, member: int) -> Address:
        return self._isis.address_of(member)

    def member_at(self, addr: Address) -> int | None:
        return self._isis.member_at(addr)

    def is_removed(self, member: int) -> bool:
        return self._isis.is_removed(member)

    def unacked_data(self, member: int) -> bool:
        return self._isis.unacked_data(member)

    def check_payload(self, data: bytes | int) -> bytes:
        return self._isis.check_payload(data)

    def state(self) -> dict[str, Any]:
        return self._isis.state()

    def multicast(self, data: bytes, now: float) -> int:
        return self.inner.multicast(data, now)

    def remove_member(self, member: int, now: float) -> None:
        raise LocalProtocolError("a group removes members by a view change", member=member)
