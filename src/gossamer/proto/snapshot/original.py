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

Trace events (``layer=snapshot``): ``marker`` (``attrs.direction``) and ``snapshot_done``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gossamer._types import Address, Datagram
from gossamer.errors import LocalProtocolError, RemoteProtocolError
from gossamer.proto.snapshot.core import SnapshotDone
from gossamer.proto.snapshot.node import Sequencer
from gossamer.trace.sink import Tracer
from gossamer.wire import isis as wire

__all__ = ["ORIGINAL_SNAPSHOT_ID", "OriginalSnapshotNode"]

LAYER = "snapshot"
#: The original's snapshots have no id; gossamer reports its one snapshot as id 1.
ORIGINAL_SNAPSHOT_ID = 1


class OriginalSnapshotNode:
    """An ISIS core (``inner``) taking part in the original's single snapshot (module
    docstring). A ``DatagramCore``: drive it instead of ``inner``."""

    def __init__(self, inner: Sequencer, *, tracer: Tracer) -> None:
        self.inner = inner
        self.me = inner.me
        self.name = inner.name_of(inner.me)
        self.peers = {m: inner.name_of(m) for m in inner.view if m != inner.me}
        self._trace = tracer
        self.initiator: str | None = None
        self.recorded_at: float | None = None
        self._state: dict[str, Any] = {}
        self._recording: dict[int, list[dict[str, int]]] = {}
        self._closed: dict[int, list[dict[str, int]]] = {}
        self._events: list[SnapshotDone] = []
        self.done: SnapshotDone | None = None
        inner.data_observer = self._observe

    # -- the DatagramCore contract: the ISIS core's, plus our events ------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.inner.receive_datagram(data, addr, now)

    def handle_timer(self, now: float) -> None:
        self.inner.handle_timer(now)

    def next_deadline(self) -> float | None:
        return self.inner.next_deadline()

    def datagrams_to_send(self) -> list[Datagram]:
        return self.inner.datagrams_to_send()

    def events_received(self) -> list[object]:
        events: list[object] = [*self.inner.events_received(), *self._events]
        self._events.clear()
        return events

    @property
    def started(self) -> bool:
        return self.recorded_at is not None

    def marker(self) -> bytes:
        """This member's marker, as the original writes it on the TCP connection."""
        return wire.encode(wire.MarkerMessage(sender=self.me))

    def initiate(self, now: float) -> Sequence[int]:
        """Start the snapshot here; returns the members to send the marker to."""
        if self.started:
            raise LocalProtocolError("the original takes one snapshot per lifetime")
        self.initiator = self.name
        return self._record(now, closed=None)

    def receive_marker(self, sender: int, now: float) -> Sequence[int]:
        """A marker from member ``sender``; returns the members to send our marker to
        (all peers on the first marker, none afterwards). A marker from a stranger, or a
        second one from the same peer, raises ``RemoteProtocolError`` (the driver counts
        it and closes that connection)."""
        if sender not in self.peers:
            raise RemoteProtocolError("a marker from a member that is not a peer", sender=sender)
        if sender in self._closed:
            raise RemoteProtocolError("a second marker from a peer", sender=sender)
        self._trace(now, LAYER, "marker", peer=self.peers[sender], attrs={"direction": "in"})
        out: Sequence[int] = ()
        if not self.started:
            self.initiator = self.peers[sender]
            out = self._record(now, closed=sender)
        self._closed[sender] = self._recording.pop(sender, [])
        self._finish(now)
        return out

    def _observe(self, msg: wire.DataMessage, src: int, now: float) -> None:
        """The ISIS core's report of a Data message first received from member ``src``."""
        channel = self._recording.get(src)
        if channel is not None:
            channel.append({"sender": msg.sender, "msg_id": msg.msg_id, "data": msg.data})

    def marker_sent(self, member: int, now: float) -> None:
        """The driver delivered our marker to ``member`` (for the trace)."""
        self._trace(now, LAYER, "marker", peer=self.peers[member], attrs={"direction": "out"})

    def _record(self, now: float, *, closed: int | None) -> Sequence[int]:
        self.recorded_at = now
        self._state = self.inner.state()
        self._recording = {p: [] for p in self.peers if p != closed}
        return sorted(self.peers)

    def _finish(self, now: float) -> None:
        if self.done is not None or len(self._closed) < len(self.peers):
            return
        assert self.recorded_at is not None and self.initiator is not None
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
        self._trace(
            now, LAYER, "snapshot_done",
            attrs={"snapshot": str(ORIGINAL_SNAPSHOT_ID), "initiator": self.initiator},
        )  # fmt: skip
