"""A node that composes a sequencing core (ISIS) with the snapshot core (sans-I/O).

Protocol subpackages do not import each other (DESIGN.md, "Layers"), so the node
states what it needs from the core underneath as a structural protocol,
:class:`Sequencer`, which ``gossamer.proto.isis.IsisCore`` satisfies. One UDP socket
carries both: a datagram whose first word is type 6 (a snapshot marker) goes to the
snapshot core, anything else to the sequencer.

What the composition adds (``gossamer.proto.snapshot.core`` has the argument):

- every *first* receipt of a DataMessage is shown to the snapshot core (channel states);
- ``drained(q)`` is "q acknowledged all my DataMessages" (the ISIS Acks);
- ``multicast`` holds new messages back while a snapshot needs the channels paused, and
  releases them, in order, once it does not: it never blocks;
- the local state recorded is ``{"isis": sequencer.state(), "app": app_state(),
  "queued": [held-back multicasts], "unread": [deliveries the application has not taken
  yet]}``, payloads as hex text (JSON), as in channel states;
- ``remove_member`` goes to both cores.

Every input is followed by ``snapshot.poll``: an ISIS Ack may be what lets a marker go.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gossamer._types import Address, Datagram
from gossamer.errors import DecodeError
from gossamer.proto.snapshot.core import SnapshotConfig, SnapshotCore, number_attr
from gossamer.trace.sink import Tracer
from gossamer.wire import isis as wire

if TYPE_CHECKING:
    from random import Random

__all__ = ["Sequencer", "SnapshotNode", "Workload"]

_TYPE = struct.Struct(">I")


class Tunables(Protocol):
    """The sequencer's settings the markers share (``gossamer.proto.isis.IsisConfig``)."""

    @property
    def retransmit_initial(self) -> float: ...

    @property
    def retransmit_max(self) -> float: ...

    @property
    def drop_rate(self) -> float: ...


class Sequencer(Protocol):
    """What the snapshot node needs from the multicast core underneath."""

    data_observer: Callable[[wire.DataMessage, int, float], None] | None

    @property
    def config(self) -> Tunables: ...

    @property
    def me(self) -> int: ...

    @property
    def view(self) -> tuple[int, ...]: ...

    def name_of(self, member: int) -> str: ...

    def address_of(self, member: int) -> Address: ...

    def member_at(self, addr: Address) -> int | None: ...

    def is_removed(self, member: int) -> bool: ...

    def unacked_data(self, member: int) -> bool: ...

    def check_payload(self, data: bytes | int) -> bytes: ...

    def multicast(self, data: bytes, now: float) -> int: ...

    def remove_member(self, member: int, now: float) -> None: ...

    def state(self) -> dict[str, Any]: ...

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None: ...

    def handle_timer(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...

    def datagrams_to_send(self) -> list[Datagram]: ...

    def events_received(self) -> Sequence[object]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """The application above the node, as the snapshots see it.

    - ``state()``: the application's part of the local state (JSON-able);
    - ``value(local_state)``: this member's share of a conserved quantity in a recorded
      local state (the whole ``{"isis", "app", "queued", "unread"}`` dict);
    - ``amount(data, receiver)``: how much of it a multicast of ``data`` (bytes) carries
      to member ``receiver``;
    - ``total``: the quantity's known global total, if any.

    ``state()`` must reflect exactly the deliveries the application has *taken*: a
    delivery the node made but the application has not read yet (it waits in a queue
    between them, see ``SnapshotNode.unread``) is recorded in ``"unread"``, and ``value``
    must count it there, as it counts ``"queued"`` multicasts.

    With a workload, the node traces each application message as the analysis pipeline
    expects (``layer=snapshot``): ``send`` at the sender per receiving channel (``peer``
    = receiver) and ``recv`` at its first receipt (``peer`` = sender), both with
    ``msg`` = ``<sender>/<msg_id>><receiver>`` and ``attrs.amount``.
    """

    state: Callable[[], Any]
    value: Callable[[Mapping[str, Any]], float] | None = None
    amount: Callable[[bytes, int], float] | None = None
    total: float | None = None


class SnapshotNode:
    """A ``DatagramCore``: the sequencer plus Chandy–Lamport snapshots on one socket.

    ``config`` defaults to the sequencer's own retransmission schedule and drop rate."""

    def __init__(
        self,
        inner: Sequencer,
        *,
        tracer: Tracer,
        rng: Random,
        config: SnapshotConfig | None = None,
        workload: Workload | None = None,
    ) -> None:
        self.inner = inner
        self.workload = workload
        me = inner.me
        amount = workload.amount if workload is not None else None
        peers = {m: (inner.name_of(m), inner.address_of(m)) for m in inner.view if m != me}
        self.snapshot = SnapshotCore(
            me=me,
            peers=peers,
            name=inner.name_of(me),
            tracer=tracer,
            rng=rng,
            local_state=self._local_state,
            drained=lambda peer: not inner.unacked_data(peer),
            config=config or _markers_like(inner.config),
            value=workload.value if workload is not None else None,
            channel_value=(
                (lambda message: amount(bytes.fromhex(message["data"]), me))
                if amount is not None
                else None
            ),
            total=workload.total if workload is not None else None,
        )
        #: Called as ``(msg_id, data, now)`` whenever a message really enters the
        #: sequencer (at once, or when a snapshot releases it).
        self.on_multicast: Callable[[int, bytes, float], None] | None = None
        #: The deliveries this node made that the application has not taken yet, oldest
        #: first, as ``(sender id, payload)``: set by a driver that queues deliveries for
        #: the application to read later (``gossamer.aio.isis``, ``gossamer.aio.group``).
        #: A snapshot recorded while they wait must hold them, since neither the hold-back
        #: queue (they left it) nor the application's state (it has not seen them) does.
        #: ``None``: the application takes each delivery as it is made (an ``on_event``
        #: callback, the simulator).
        self.unread: Callable[[], Iterable[tuple[int, bytes]]] | None = None
        self._queued: deque[bytes] = deque()
        self._trace = tracer
        inner.data_observer = self._observe

    # -- local requests ----------------------------------------------------------------

    def multicast(self, data: bytes | int, now: float) -> int | None:
        """Multicast now, or hold the message back while a snapshot pauses the channels
        (then ``None``: its msg_id is assigned when it is released). ``data`` is checked
        (``gossamer.proto.isis.payload``) here, before it is held back."""
        data = self.inner.check_payload(data)
        if self.snapshot.active:
            # Rule 2 of the snapshot core. Whenever no snapshot is active the queue is
            # empty: every input that can end the pause releases it (``_after``).
            self._queued.append(data)
            return None
        return self._multicast(data, now)

    def initiate_snapshot(self, now: float) -> int:
        sid = self.snapshot.initiate(now)
        self._after(now)
        return sid

    def remove_member(self, member: int, now: float) -> None:
        self.inner.remove_member(member, now)
        self.snapshot.remove_member(member, now)
        self._after(now)

    @property
    def queued(self) -> int:
        """Multicasts held back by a snapshot."""
        return len(self._queued)

    def release_queued(self) -> list[bytes]:
        """Hand back the multicasts held back, oldest first, and hold none any more: for
        a layer that abandons this node's snapshots and multicasts them itself
        (``gossamer.proto.snapshot_group``)."""
        out = list(self._queued)
        self._queued.clear()
        return out

    # -- DatagramCore -----------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        if len(data) >= 4 and _TYPE.unpack_from(data)[0] == wire.IsisType.SNAPSHOT_MARKER:
            src = self.inner.member_at(addr)
            try:
                msg = wire.decode(data)
            except DecodeError as exc:
                self._trace(now, "snapshot", "drop", size=len(data), attrs={"reason": exc.reason})
                return
            if (
                src is None
                or self.inner.is_removed(src)
                or not isinstance(msg, wire.SnapshotMarker)
                or msg.sender != src
            ):
                self._trace(
                    now,
                    "snapshot",
                    "drop",
                    size=len(data),
                    attrs={"reason": "marker from a stranger or removed member"},
                )
                return
            self.snapshot.receive_marker(msg, src, now)
        else:
            self.inner.receive_datagram(data, addr, now)
        self._after(now)

    def handle_timer(self, now: float) -> None:
        inner_due = self.inner.next_deadline()
        if inner_due is not None and inner_due <= now:
            self.inner.handle_timer(now)
        snap_due = self.snapshot.next_deadline()
        if snap_due is not None and snap_due <= now:
            self.snapshot.handle_timer(now)
        self._after(now)

    def datagrams_to_send(self) -> list[Datagram]:
        return self.inner.datagrams_to_send() + self.snapshot.datagrams_to_send()

    def events_received(self) -> list[object]:
        return [*self.inner.events_received(), *self.snapshot.events_received()]

    def next_deadline(self) -> float | None:
        deadlines = [
            d for d in (self.inner.next_deadline(), self.snapshot.next_deadline()) if d is not None
        ]
        return min(deadlines, default=None)

    # -- internals ----------------------------------------------------------------------

    def _after(self, now: float) -> None:
        self.snapshot.poll(now)
        while self._queued and not self.snapshot.active:
            self._multicast(self._queued.popleft(), now)

    def _multicast(self, data: bytes, now: float) -> int:
        msg_id = self.inner.multicast(data, now)
        if self.on_multicast is not None:
            self.on_multicast(msg_id, data, now)
        self.trace_sends(msg_id, data, now)
        return msg_id

    def trace_sends(self, msg_id: int, data: bytes, now: float) -> None:
        """Trace the workload's ``send`` of message ``msg_id`` on each channel (with a
        workload's ``amount``): what ``multicast`` does, for a layer whose sequencer sent
        a message by itself (``gossamer.proto.snapshot_group``: one withdrawn at a view
        change and sent again in the next)."""
        amount = self.workload.amount if self.workload is not None else None
        if amount is None:
            return
        inner = self.inner
        me = inner.name_of(inner.me)
        for peer in inner.view:
            if peer != inner.me:
                name = inner.name_of(peer)
                self._trace(
                    now,
                    "snapshot",
                    "send",
                    msg=f"{me}/{msg_id}>{name}",
                    peer=name,
                    attrs={"amount": number_attr(amount(data, peer))},
                )

    def _observe(self, msg: wire.DataMessage, src: int, now: float) -> None:
        inner = self.inner
        if src == inner.me:
            return
        self.snapshot.on_message(
            src, {"sender": msg.sender, "msg_id": msg.msg_id, "data": msg.data.hex()}, now
        )
        amount = self.workload.amount if self.workload is not None else None
        if amount is not None:
            sender, me = inner.name_of(src), inner.name_of(inner.me)
            self._trace(
                now,
                "snapshot",
                "recv",
                msg=f"{sender}/{msg.msg_id}>{me}",
                peer=sender,
                attrs={"amount": number_attr(amount(msg.data, inner.me))},
            )

    def _local_state(self) -> dict[str, Any]:
        return {
            "isis": self.inner.state(),
            "app": self.workload.state() if self.workload is not None else None,
            "queued": [data.hex() for data in self._queued],
            "unread": [
                {"sender": sender, "data": data.hex()} for sender, data in self.unread()
            ]
            if self.unread is not None
            else [],
        }


def _markers_like(tunables: Tunables) -> SnapshotConfig:
    """Markers retransmitted and dropped as the sequencer's own messages are."""
    return SnapshotConfig(
        retransmit_initial=tunables.retransmit_initial,
        retransmit_max=tunables.retransmit_max,
        drop_rate=tunables.drop_rate,
    )
