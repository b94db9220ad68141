"""Chandy–Lamport snapshots over non-FIFO, lossy UDP channels (sans-I/O).

Any member may start a snapshot, any number of times, concurrently with others'.
Each member records its local state once per snapshot and the state of each
incoming channel, and emits the result (:class:`SnapshotDone`) when its part is over.

Chandy–Lamport needs FIFO channels: a marker must arrive after every message sent
before it on its channel and before every message sent after it. The original sent
markers over TCP and data over UDP, which breaks that (reference (a), "Chandy-Lamport
part"). Here markers travel as UDP datagrams next to the data, and the order is
*enforced* rather than assumed, with three rules (``docs/snapshots.md`` gives the proof):

1. **Drain before marking.** Member p sends its marker for snapshot S to q only when q
   has acknowledged every application message p sent before recording. The reliable
   layer underneath (ISIS: q's Ack of each DataMessage) tells, through the
   ``drained(q)`` callback. So every pre-cut message reaches q before p's marker.
2. **Pause until marked.** From recording until every peer has acknowledged p's
   marker, p sends no new application message (``active`` is true and the node holds
   new multicasts back; ``multicast`` stays non-blocking). So every post-cut message
   reaches q after p's marker, hence after q recorded.
3. **Reliable markers.** A marker is retransmitted on the retransmission schedule until
   the peer acknowledges it; every marker received is acknowledged, duplicates included.

With 1 and 2 each channel behaves as FIFO at the cut, which is all the classic proof
uses: the recorded local states and channel states form a consistent cut.

On the wire a marker is the codec's ``SnapshotMarker(sender, snapshot_id)`` (type 6).
Snapshot ids are 31 bits, ``initiator << 16 | counter`` so that ids chosen by different
initiators never collide; the top bit marks a marker *acknowledgement*. The original's
id-less marker (type 5, sent over TCP) is not spoken.

The core is protocol-agnostic: it learns about application messages through
:meth:`SnapshotCore.on_message` (called on the first receipt of each), asks for the
local state through ``local_state()``, and for channel drainage through
``drained(peer)``. ``gossamer.proto.snapshot.node`` wires it to an ISIS core.

Trace events (``layer=snapshot``): ``marker`` (``attrs.direction`` ``out``/``in``,
``attrs.ack``), ``local_state`` (``attrs.state``: the JSON), ``channel_state`` (``peer``,
``attrs.messages``: the JSON list, ``attrs.count``, ``attrs.closed_by``), ``snapshot_done``;
every one carries ``attrs.snapshot``. With a workload's ``value``/``channel_value``/``total``
(see ``node.Workload``), ``local_state`` also carries ``attrs.value`` and ``attrs.total``
and ``channel_state`` ``attrs.value``: the conventions of ``gossamer.analysis.checks.snapshot``.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from gossamer._types import Address
from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.params import Checked, PositiveSeconds, Probability, check
from gossamer.proto.core import DatagramOutputs
from gossamer.trace.sink import Tracer
from gossamer.wire import isis as wire

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "ACK_BIT",
    "SnapshotConfig",
    "SnapshotCore",
    "SnapshotDone",
    "initiator_of",
    "snapshot_id",
]

LAYER = "snapshot"
ACK_BIT = 1 << 31
_MAX_INITIATOR = (1 << 15) - 1
_MAX_COUNTER = (1 << 16) - 1


def snapshot_id(initiator: int, counter: int) -> int:
    """The id of the ``counter``-th snapshot started by member ``initiator``."""
    if not 1 <= initiator <= _MAX_INITIATOR or not 1 <= counter <= _MAX_COUNTER:
        raise LocalProtocolError(
            "snapshot ids hold a 15-bit initiator and a 16-bit counter",
            initiator=initiator,
            counter=counter,
        )
    return initiator << 16 | counter


def initiator_of(sid: int) -> int:
    return (sid & ~ACK_BIT) >> 16


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotConfig(Checked):
    """Marker retransmission and the original's receive drop rate, applied to markers too:
    the sequencer's own settings, same names and units (seconds), when a ``SnapshotNode``
    makes it (``IsisConfig.retransmit_initial``, ``retransmit_max``, ``drop_rate``)."""

    retransmit_initial: PositiveSeconds = 0.2
    retransmit_max: PositiveSeconds = 4.0
    drop_rate: Probability = 0.0

    def __post_init__(self) -> None:
        check(self)  # the Bounds of the fields (not super(): see Checked)
        if self.retransmit_initial > self.retransmit_max:
            raise ConfigError("need retransmit_initial <= retransmit_max")

    def interval(self, attempt: int) -> float:
        value = self.retransmit_initial
        cycle = [value]
        while value * 2 <= self.retransmit_max + 1e-12:
            value *= 2
            cycle.append(value)
        return cycle[attempt % len(cycle)]


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotDone:
    """This member's part of snapshot ``snapshot_id``: its local state and, per peer,
    the messages that were in flight to it when the cut was made."""

    snapshot_id: int
    initiator: str
    node: str
    recorded_at: float
    completed_at: float
    local_state: Mapping[str, Any]
    #: peer name -> {"messages": [...], "closed_by": "marker" | "removed"}
    channels: Mapping[str, Mapping[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """Every field, as plain (copied) dicts and lists."""
        return dataclasses.asdict(self)


@dataclass(slots=True, kw_only=True)
class _Snapshot:
    sid: int
    recorded_at: float
    local_state: dict[str, Any]
    open_channels: dict[int, list[dict[str, Any]]]
    closed: dict[int, dict[str, Any]] = field(default_factory=dict)
    to_mark: set[int] = field(default_factory=set)  # peers waiting for rule 1
    unacked: dict[int, int] = field(default_factory=dict)  # peer -> transmissions so far
    due: dict[int, float] = field(default_factory=dict)

    @property
    def paused(self) -> bool:
        return bool(self.to_mark or self.unacked)

    @property
    def complete(self) -> bool:
        return not self.open_channels and not self.paused


LocalState = Callable[[], dict[str, Any]]
Drained = Callable[[int], bool]
#: A member's share of a conserved quantity, from its recorded local state.
Value = Callable[[Mapping[str, Any]], float]
#: The quantity carried to this member by one recorded channel message.
ChannelValue = Callable[[Mapping[str, Any]], float]


class SnapshotCore(DatagramOutputs[SnapshotDone]):
    """One member's side of every snapshot. See the module docstring."""

    def __init__(
        self,
        *,
        me: int,
        peers: Mapping[int, tuple[str, Address]],
        name: str,
        tracer: Tracer,
        rng: Random,
        local_state: LocalState,
        drained: Drained,
        config: SnapshotConfig | None = None,
        value: Value | None = None,
        channel_value: ChannelValue | None = None,
        total: float | None = None,
    ) -> None:
        if me in peers:
            raise ConfigError("peers must not include this member", me=me)
        super().__init__()
        self.config = config or SnapshotConfig()
        self._me = me
        self._name = name
        self._peers = dict(peers)
        self._names = {peer: peer_name for peer, (peer_name, _) in peers.items()}
        self._names[me] = name
        self._removed: set[int] = set()
        self._trace = tracer
        self._rng = rng
        self._local_state = local_state
        self._drained = drained
        self._value = value
        self._channel_value = channel_value
        self._total = total
        #: Snapshots started here: the next id counts on from it (a layer that makes a
        #: new core per view carries it over, so that ids are never reused).
        self.started = 0
        self._snapshots: dict[int, _Snapshot] = {}
        self._completed: set[int] = set()
        self._heap: list[tuple[float, int, int]] = []  # (due, sid, peer), lazily invalidated
        #: Markers dropped by the injected receive drop rate.
        self.injected_drops = 0

    # -- queries --------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """True while new application messages must be held back (rule 2)."""
        return any(s.paused for s in self._snapshots.values())

    @property
    def in_progress(self) -> list[int]:
        return sorted(self._snapshots)

    def _live_peers(self) -> list[int]:
        return sorted(p for p in self._peers if p not in self._removed)

    # -- inputs ---------------------------------------------------------------------

    def initiate(self, now: float) -> int:
        """Start a new snapshot here; returns its id."""
        self.started += 1
        sid = snapshot_id(self._me, self.started)
        self._record(sid, None, now)
        self.poll(now)
        return sid

    def receive_marker(self, msg: wire.SnapshotMarker, src: int, now: float) -> None:
        """A marker (or marker acknowledgement) from member ``src``."""
        if src in self._removed or src not in self._peers:
            return
        if self.config.drop_rate and self._rng.random() < self.config.drop_rate:
            self.injected_drops += 1
            self._trace(
                now,
                LAYER,
                "drop",
                peer=self._names[src],
                size=12,
                attrs={"reason": "injected", "type": "SnapshotMarkerMsg"},
            )
            return
        is_ack = bool(msg.snapshot_id & ACK_BIT)
        sid = msg.snapshot_id & ~ACK_BIT
        self._trace(
            now,
            LAYER,
            "marker",
            msg=self._marker_name(sid, src),
            peer=self._names[src],
            attrs={"direction": "in", "ack": str(is_ack).lower(), "snapshot": str(sid)},
        )
        snap = self._snapshots.get(sid)
        if is_ack:
            if snap is not None and snap.unacked.pop(src, None) is not None:
                snap.due.pop(src, None)
                self._maybe_complete(snap, now)
            return
        # Rule 3: acknowledge every marker, duplicates included (our ack may be lost).
        self._send_marker(sid | ACK_BIT, src, now)
        if sid in self._completed:
            return
        if snap is None:
            snap = self._record(sid, src, now)
        elif src in snap.open_channels:
            self._close(snap, src, "marker", now)
        self.poll(now)
        self._maybe_complete(snap, now)

    def on_message(self, src: int, message: Mapping[str, Any], now: float) -> None:
        """The first receipt of an application message from ``src``: it belongs to the
        state of channel ``src -> me`` of every snapshot still recording that channel."""
        for snap in self._snapshots.values():
            channel = snap.open_channels.get(src)
            if channel is not None:
                channel.append(dict(message))

    def remove_member(self, member: int, now: float) -> None:
        """``member`` crashed: stop waiting for its marker and its acknowledgement."""
        if member == self._me or member not in self._peers or member in self._removed:
            return
        self._removed.add(member)
        for snap in list(self._snapshots.values()):
            snap.to_mark.discard(member)
            snap.unacked.pop(member, None)
            snap.due.pop(member, None)
            if member in snap.open_channels:
                self._close(snap, member, "removed", now)
            self._maybe_complete(snap, now)

    def poll(self, now: float) -> None:
        """Send the markers whose channels are now drained (rule 1). A node calls this
        after every input of the underlying protocol."""
        for snap in list(self._snapshots.values()):
            if not snap.to_mark:
                continue
            for peer in sorted(snap.to_mark):
                if self._drained(peer):
                    snap.to_mark.discard(peer)
                    snap.unacked[peer] = 0
                    self._send_marker(snap.sid, peer, now)
                    self._arm(snap, peer, now)
            self._maybe_complete(snap, now)

    def handle_timer(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, sid, peer = heapq.heappop(heap)
            snap = self._snapshots.get(sid)
            if snap is None or snap.due.get(peer) != due:
                continue
            snap.unacked[peer] += 1
            self._send_marker(sid, peer, now, retransmission=snap.unacked[peer])
            self._arm(snap, peer, now)

    # -- outputs (and datagrams_to_send, events_received: DatagramOutputs) -----------

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap:
            due, sid, peer = heap[0]
            snap = self._snapshots.get(sid)
            if snap is not None and snap.due.get(peer) == due:
                return due
            heapq.heappop(heap)
        return None

    # -- internals -----------------------------------------------------------------

    def _record(self, sid: int, first_from: int | None, now: float) -> _Snapshot:
        """Record the local state and start recording every incoming channel except the
        one the first marker came on (its state is empty)."""
        peers = self._live_peers()
        state = self._local_state()
        snap = _Snapshot(
            sid=sid,
            recorded_at=now,
            local_state=state,
            open_channels={p: [] for p in peers if p != first_from},
            to_mark=set(peers),
        )
        self._snapshots[sid] = snap
        attrs = {
            "snapshot": str(sid),
            "initiator": self._initiator_name(sid),
            "state": orjson.dumps(state).decode(),
        }
        if self._value is not None:
            attrs["value"] = number_attr(self._value(state))
        if self._total is not None:
            attrs["total"] = number_attr(self._total)
        self._trace(now, LAYER, "local_state", msg=f"snapshot/{sid}", attrs=attrs)
        if first_from is not None:
            snap.closed[first_from] = {"messages": [], "closed_by": "marker"}
            self._trace_channel(snap, first_from, now)
        return snap

    def _close(self, snap: _Snapshot, peer: int, why: str, now: float) -> None:
        messages = snap.open_channels.pop(peer)
        snap.closed[peer] = {"messages": messages, "closed_by": why}
        self._trace_channel(snap, peer, now)

    def _maybe_complete(self, snap: _Snapshot, now: float) -> None:
        if not snap.complete or snap.sid not in self._snapshots:
            return
        del self._snapshots[snap.sid]
        self._completed.add(snap.sid)
        done = SnapshotDone(
            snapshot_id=snap.sid,
            initiator=self._initiator_name(snap.sid),
            node=self._name,
            recorded_at=snap.recorded_at,
            completed_at=now,
            local_state=snap.local_state,
            channels={self._names[p]: ch for p, ch in sorted(snap.closed.items())},
        )
        self._trace(
            now,
            LAYER,
            "snapshot_done",
            msg=f"snapshot/{snap.sid}",
            attrs={
                "snapshot": str(snap.sid),
                "initiator": done.initiator,
                "channels": str(len(done.channels)),
            },
        )
        self._events.append(done)

    def _arm(self, snap: _Snapshot, peer: int, now: float) -> None:
        due = now + self.config.interval(snap.unacked[peer])
        snap.due[peer] = due
        heapq.heappush(self._heap, (due, snap.sid, peer))

    def _send_marker(self, sid: int, peer: int, now: float, retransmission: int = 0) -> None:
        if peer in self._removed or peer not in self._peers:
            return
        data = wire.encode(wire.SnapshotMarker(sender=self._me, snapshot_id=sid))
        self._outbox.append((data, self._peers[peer][1]))
        is_ack = bool(sid & ACK_BIT)
        base = sid & ~ACK_BIT
        attrs = {"direction": "out", "ack": str(is_ack).lower(), "snapshot": str(base)}
        if retransmission:
            attrs["attempt"] = str(retransmission)
        self._trace(
            now,
            LAYER,
            "marker",
            msg=self._marker_name(base, self._me),
            peer=self._names[peer],
            size=len(data),
            attrs=attrs,
        )

    def _trace_channel(self, snap: _Snapshot, peer: int, now: float) -> None:
        channel = snap.closed[peer]
        attrs = {
            "snapshot": str(snap.sid),
            "closed_by": channel["closed_by"],
            "count": str(len(channel["messages"])),
            "messages": orjson.dumps(channel["messages"]).decode(),
        }
        if self._channel_value is not None:
            attrs["value"] = number_attr(sum(self._channel_value(m) for m in channel["messages"]))
        self._trace(
            now,
            LAYER,
            "channel_state",
            msg=f"snapshot/{snap.sid}",
            peer=self._names[peer],
            attrs=attrs,
        )

    def _initiator_name(self, sid: int) -> str:
        initiator = initiator_of(sid)
        return self._names.get(initiator, str(initiator))

    def _marker_name(self, sid: int, sender: int) -> str:
        return f"snapshot/{sid}/{self._names.get(sender, sender)}"


def number_attr(value: float) -> str:
    """A trace attribute for a quantity: integral values without a decimal point."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
