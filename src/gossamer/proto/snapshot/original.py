"""The original ISIS program's snapshots, for a member on the original wire (sans-I/O).

The original (``docs/interop.md``) takes one Chandy–Lamport snapshot per process lifetime,
with no snapshot id. Its markers are not datagrams: a member sends its marker to a peer
by opening a TCP connection to the peer's port 10002, writing the 8-byte
``MarkerMessage(type 5, sender)`` and closing, and it accepts exactly one marker from
each peer. The rules, as the original plays them:

- the initiator records its local state, records every incoming channel and sends its
  marker to every peer;
- a member that gets its first marker, from X, records its local state, records every
  channel but X's (which stays empty) and sends its marker to every peer, X included;
- a marker from Y closes Y's channel; the member's part is done with the markers of all
  its peers.

:class:`OriginalSnapshotNode` is that state machine, put in front of the ISIS core as
``SnapshotNode`` is for gossamer's own snapshots: it is the datagram core the driver
pumps, passes everything to the ISIS core, records the Data messages the core reports
(``data_observer``) and adds its ``SnapshotDone`` to the core's events. The driver owns the
TCP side: it calls :meth:`OriginalSnapshotNode.initiate` or
:meth:`OriginalSnapshotNode.receive_marker` (the sender named by the connection's IP, as
the original names it) and sends a marker to each member the call returns. A channel's
state is the list of Data messages received on it while it was recorded (the original also lists the
other message types and the duplicates; gossamer's snapshots are about the application's
messages). As in the original, markers travel on TCP and data on UDP, so the cut is
consistent only when no Data overtakes a marker; gossamer's own snapshots (``core``) make
it so, and are the ones to use in a group of gossamer members.

Order around the markers. Markers on TCP and data on UDP keep no order between them, and
a cut is consistent only if every message sent before a marker is received before it and
every message sent after it, after. The original gets this by accident of its threads (it
sends its markers holding the lock its receive thread needs, from the main thread that
queues its multicasts); the node makes it explicit:

- from recording until our marker has reached a peer, nothing is sent to that peer (its
  datagrams are held), and no new multicast starts (it is queued, as in ``SnapshotNode``);
- once the driver has accepted a marker connection from a peer, that peer's datagrams
  wait until the marker is read (``marker_coming``), so a datagram it sent after its
  marker is never taken before it. Drivers accept pending marker connections before they
  hand the node a datagram (``gossamer.aio.isis``).

The initiator is known only to itself: the original's marker names its sender, not the
snapshot's initiator, so the others report ``initiator=""`` and the sender of the first
marker they got (``first_marker_from`` in the trace).

Trace events (``layer=snapshot``): ``marker`` (``attrs.direction``) and ``snapshot_done``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gossamer._types import Address, Datagram
from gossamer.errors import LocalProtocolError, RemoteProtocolError
from gossamer.proto.core import DatagramLayer
from gossamer.proto.snapshot.core import SnapshotDone
from gossamer.proto.snapshot.node import Sequencer
from gossamer.trace.sink import Tracer
from gossamer.wire import isis as wire

__all__ = ["ORIGINAL_SNAPSHOT_ID", "OriginalSnapshotNode"]

LAYER = "snapshot"
#: The original's snapshots have no id; gossamer reports its one snapshot as id 1.
ORIGINAL_SNAPSHOT_ID = 1


class OriginalSnapshotNode(DatagramLayer[Sequencer]):
    """An ISIS core (``inner``) taking part in the original's single snapshot (module
    docstring). A ``DatagramCore``: drive it instead of ``inner``."""

    def __init__(self, inner: Sequencer, *, tracer: Tracer) -> None:
        super().__init__(inner)
        self.me = inner.me
        self.name = inner.name_of(inner.me)
        self.peers = {m: inner.name_of(m) for m in inner.view if m != inner.me}
        self._trace = tracer
        #: Our own name when we started the snapshot; ``""`` otherwise: the original's
        #: markers do not say who started it (the first one may come from anyone).
        self.initiator = ""
        self.first_marker_from: str | None = None
        self.recorded_at: float | None = None
        self._state: dict[str, Any] = {}
        self._recording: dict[int, list[dict[str, Any]]] = {}
        self._closed: dict[int, list[dict[str, Any]]] = {}
        self._events: list[SnapshotDone] = []
        self.done: SnapshotDone | None = None
        # The ordering rules (see "Order around the markers" in the module docstring).
        self._unsent: set[int] = set()  # peers our marker has not reached yet
        self._held_out: dict[int, list[Datagram]] = {}
        self._released: list[Datagram] = []  # held datagrams whose marker has arrived
        self._held_multicasts: list[bytes] = []
        self._incoming: dict[int, list[tuple[bytes, Address]]] = {}
        #: Called as ``(msg_id, data, now)`` whenever a message really enters the
        #: sequencer (at once, or when its markers arrived and it is released).
        self.on_multicast: Callable[[int, bytes, float], None] | None = None
        inner.data_observer = self._observe

    # -- the DatagramCore contract: the ISIS core's, held where the order needs it --------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        held = self._incoming.get(self.inner.member_at(addr) or 0)
        if held is not None:
            held.append((data, addr))  # its sender's marker is on its way: it goes first
            return
        self.inner.receive_datagram(data, addr, now)

    def datagrams_to_send(self) -> list[Datagram]:
        out = self.inner.datagrams_to_send()
        if self._released:
            out, self._released = [*self._released, *out], []
        if not self._unsent:
            return out
        ready = []
        for data, addr in out:
            member = self.inner.member_at(addr)
            if member in self._unsent:
                self._held_out.setdefault(member, []).append((data, addr))
            else:
                ready.append((data, addr))
        return ready

    def events_received(self) -> list[object]:
        events: list[object] = [*self.inner.events_received(), *self._events]
        self._events.clear()
        return events

    def multicast(self, data: bytes | int, now: float) -> int | None:
        """Multicast through the ISIS core; ``None`` while our markers are still on their
        way (the message is queued and multicast once they all arrived). ``data`` is
        checked before it is queued."""
        data = self.inner.check_payload(data)
        if self._unsent:
            self._held_multicasts.append(data)
            return None
        msg_id = self.inner.multicast(data, now)
        if self.on_multicast is not None:
            self.on_multicast(msg_id, data, now)
        return msg_id

    # -- the snapshot ---------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self.recorded_at is not None

    @property
    def busy(self) -> bool:
        """Markers of ours on their way, or multicasts held back until they arrive."""
        return bool(self._unsent or self._held_multicasts)

    def marker(self) -> bytes:
        """This member's marker, as the original writes it on the TCP connection."""
        return wire.encode(wire.MarkerMessage(sender=self.me))

    def initiate(self, now: float) -> Sequence[int]:
        """Start the snapshot here; returns the members to send the marker to."""
        if self.started:
            raise LocalProtocolError("the original takes one snapshot per lifetime")
        self.initiator = self.name
        return self._record(now, closed=None)

    def marker_coming(self, sender: int) -> None:
        """The driver accepted a marker connection from member ``sender`` and has not read
        the marker yet: its datagrams wait until the marker is handled (or abandoned)."""
        if sender in self.peers and sender not in self._closed:
            self._incoming.setdefault(sender, [])

    def marker_abandoned(self, sender: int, now: float) -> None:
        """The marker connection from ``sender`` ended without a marker."""
        self._release_incoming(sender, now)

    def receive_marker(self, sender: int, now: float) -> Sequence[int]:
        """A marker from member ``sender``; returns the members to send our marker to
        (all peers on the first marker, none afterwards). A marker from a stranger, or a
        second one from the same peer, raises ``RemoteProtocolError`` (the driver counts
        it and closes that connection)."""
        if sender not in self.peers:
            raise RemoteProtocolError("a marker from a member that is not a peer", sender=sender)
        if sender in self._closed:
            self._release_incoming(sender, now)
            raise RemoteProtocolError("a second marker from a peer", sender=sender)
        self._trace(now, LAYER, "marker", peer=self.peers[sender], attrs={"direction": "in"})
        out: Sequence[int] = ()
        if not self.started:
            self.first_marker_from = self.peers[sender]
            out = self._record(now, closed=sender)
        self._closed[sender] = self._recording.pop(sender, [])
        self._finish(now)
        self._release_incoming(sender, now)
        return out

    def marker_sent(self, member: int, now: float) -> None:
        """The driver delivered our marker to ``member``: what waited for it may go."""
        self._trace(now, LAYER, "marker", peer=self.peers[member], attrs={"direction": "out"})
        self._unsent.discard(member)
        self._released += self._held_out.pop(member, [])
        if not self._unsent:
            held, self._held_multicasts = self._held_multicasts, []
            for data in held:
                msg_id = self.inner.multicast(data, now)
                if self.on_multicast is not None:
                    self.on_multicast(msg_id, data, now)

    # -- internals --------------------------------------------------------------------------

    def _observe(self, msg: wire.DataMessage, src: int, now: float) -> None:
        """The ISIS core's report of a Data message first received from member ``src``."""
        channel = self._recording.get(src)
        if channel is not None:
            channel.append({"sender": msg.sender, "msg_id": msg.msg_id, "data": msg.data.hex()})

    def _release_incoming(self, sender: int, now: float) -> None:
        for data, addr in self._incoming.pop(sender, []):
            self.inner.receive_datagram(data, addr, now)

    def _record(self, now: float, *, closed: int | None) -> Sequence[int]:
        self.recorded_at = now
        self._state = self.inner.state()
        self._recording = {p: [] for p in self.peers if p != closed}
        self._unsent = set(self.peers)
        return sorted(self.peers)

    def _finish(self, now: float) -> None:
        if self.done is not None or len(self._closed) < len(self.peers):
            return
        assert self.recorded_at is not None
        channels = {
            self.peers[p]: {"messages": msgs, "closed_by": "marker"}
            for p, msgs in sorted(self._closed.items())
        }
        self.done = done = SnapshotDone(
            snapshot_id=ORIGINAL_SNAPSHOT_ID, initiator=self.initiator, node=self.name,
            recorded_at=self.recorded_at, completed_at=now, local_state=self._state,
            channels=channels,
        )  # fmt: skip
        self._events.append(done)
        attrs = {"snapshot": str(ORIGINAL_SNAPSHOT_ID), "initiator": self.initiator}
        if self.first_marker_from is not None:
            attrs["first_marker_from"] = self.first_marker_from
        self._trace(now, LAYER, "snapshot_done", attrs=attrs)
