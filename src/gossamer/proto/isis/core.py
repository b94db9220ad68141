"""The ISIS total-order multicast core (sans-I/O).

Spec: ``shared/specs/isis-total-order.md``; the original as it really behaves:
``shared/reference/isis-prototari-exon-as-coded.md`` part (a). Protocol, per message
(``sender`` s, every member r, s among them):

1. ``multicast(data)`` (non-blocking; ``data`` is ``bytes``, see :func:`payload`) makes
   ``DataMessage(s, msg_id, data)`` with
   ``msg_id`` counting from 1 and sends it to every member, retransmitting to those
   that have not answered (``retransmit.Transmitter``, the spec's ContinuousMsgSender).
2. r proposes ``latest + 1`` (then ``latest += 1``), puts the message in its
   hold-back queue as undeliverable and answers ``AckMessage(s, msg_id, proposal, r)``.
3. When s holds an Ack from every member it picks the final sequence: the largest
   proposal, ties to the smallest proposer id; it sends ``SeqMessage`` to every
   member, retransmitting until each answers ``SeqAckMessage``.
4. r marks the entry deliverable with the final sequence, ``latest = max(latest,
   final)``, answers the SeqAck, and delivers from the head of the queue while the
   head is deliverable (order rules in ``holdback``).

A member delivers its own messages through the same steps (spec, "How a process
delivers its own message?"); they are looped back inside the core instead of over
the network, so they cost no datagram and are not subject to injected faults.

Duplicates and late datagrams of every type follow the tables in ``machine``; a
malformed datagram, one from an address that is not a member's, one whose identity
fields contradict its source, or one from a removed member is dropped, counted and
traced as ``drop`` with ``attrs.reason``: nothing raises.

Membership and crashes (``remove_member``; ``docs/isis.md`` "View changes"): the
group starts as the configured members (the hostfile). ``remove_member(c, now)``,
wired by a node to the membership layer's ``peer_down``, removes a crashed member:
senders stop waiting for its Ack and SeqAck, and the survivors settle each of its
messages still undecided in their queues by a *flush* run by the coordinator, the
smallest id in the view, so that all survivors either deliver it (with the final
sequence the crashed sender chose) or all discard it. The flush reuses the wire
types (no new message type):

- ``AckMessage(c, m, 0, x)`` to a member: *query*, "x has no final for c's m; what
  do you know?";
- ``AckMessage(c, m, p >= 1, x)`` (c is not the receiver): *statement*, "x has
  removed c and has no final for c's m" (``p`` is x's proposal, informative only);
- ``SeqMessage(c, m, f >= 1, p)`` from a member other than c: the final of c's m;
- ``SeqMessage(c, m, 0, x)``: the decision to discard c's m.

Trace events (``layer=isis``): ``multicast`` (``msg`` = ``<sender name>/<msg_id>``),
``sequence`` at the sender when it fixes the final, ``deliver`` (``seq`` = final,
``attrs.proposer``), ``retransmit``, ``drop``, ``delay`` (an injected Ack/SeqAck
delay), ``view_change`` and ``discard``; on agreed views also ``hold`` (a multicast
asked for during a view change: it goes out, as ``multicast``, when the next view is
installed) and ``withdraw`` at the sender (its message lacked an Ack at a view change;
``attrs.as`` names the id its data goes out under in the next view). ``multicast``
and ``deliver`` record the payload by its length (``size``) and :func:`payload_digest`
(``attrs.digest``), not its bytes: enough to check that what was delivered is what was
multicast, at a fixed cost per event whatever the payload.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from gossamer._types import Address
from gossamer.errors import ConfigError, DecodeError, LocalProtocolError
from gossamer.proto.core import DatagramOutputs
from gossamer.proto.isis.holdback import HoldBackQueue, MsgKey, PendingMsg
from gossamer.proto.isis.join import JoinState, Member
from gossamer.proto.isis.machine import (
    RECEIVER,
    SENDER,
    RecvAction,
    RecvInput,
    RecvState,
    SendAction,
    SendInput,
    SendState,
    step,
)
from gossamer.proto.isis.retransmit import (
    RetransmitSchedule,
    RttEstimator,
    RttTransmitter,
    Transmission,
    Transmitter,
)
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire import isis as wire
from gossamer.wire.mode import WireMode

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "ACK_DELAY_FRACTION",
    "TUNABLES",
    "Delivered",
    "Discarded",
    "IsisConfig",
    "IsisCore",
    "IsisCounters",
    "Member",
    "MemberRemoved",
    "ViewFlushed",
    "payload",
    "payload_digest",
    "tunable_defaults",
]

LAYER = "isis"
U32_MAX = (1 << 32) - 1


def payload(data: bytes | bytearray | memoryview | int, mode: WireMode) -> bytes:
    """The bytes a multicast of ``data`` carries, or ``LocalProtocolError`` saying why not.

    On the sealed wire ``data`` is up to ``wire.MAX_DATA_SIZE`` bytes. On the original wire
    it is the original's uint32: 4 bytes, or an ``int`` from 0 to 2**32 - 1 (its 4
    big-endian bytes). An ``int`` is the same 4 bytes on the sealed wire too.
    """
    if isinstance(data, int) and not isinstance(data, bool):
        if not 0 <= data <= U32_MAX:
            raise LocalProtocolError("an int payload is a uint32 (0 to 2**32 - 1)", data=data)
        return data.to_bytes(wire.ORIGINAL_DATA_SIZE, "big")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise LocalProtocolError(
            "a multicast carries bytes (or an int, the original's uint32)",
            type=type(data).__name__,
        )
    data = bytes(data)
    if mode is WireMode.ORIGINAL and len(data) != wire.ORIGINAL_DATA_SIZE:
        raise LocalProtocolError(
            "on the original wire a payload is the original's uint32: 4 bytes or an int",
            size=len(data),
        )
    if len(data) > wire.MAX_DATA_SIZE:
        raise LocalProtocolError(
            f"a multicast carries at most {wire.MAX_DATA_SIZE} bytes",
            size=len(data),
            limit=wire.MAX_DATA_SIZE,
        )
    return data


def payload_digest(data: bytes) -> str:
    """What traces record of a payload (``attrs.digest``): 64 bits of BLAKE2b, in hex."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def payload_json(data: bytes) -> str:
    """A payload in a JSON state (hold-back queue, snapshot channels): its hex."""
    return data.hex()


#: The original's log names of the message types (reference (a), "Wire formats").
TYPE_NAMES: dict[type[wire.IsisMessage], str] = {
    wire.DataMessage: "DataMsg",
    wire.AckMessage: "AckMsg",
    wire.SeqMessage: "SeqMsg",
    wire.SeqAckMessage: "SeqAckMsg",
    wire.MarkerMessage: "MarkerMsg",
    wire.SnapshotMarker: "SnapshotMarkerMsg",
}


# -- configuration ------------------------------------------------------------------


#: An answer from a member that already answered (the SENDER table's duplicate inputs).
_DUPLICATE = {SendInput.ACK: SendInput.ACK_DUP, SendInput.SEQ_ACK: SendInput.SEQ_ACK_DUP}

#: The fraction of Acks and SeqAcks ``ack_delay`` holds back: one half, as the original.
ACK_DELAY_FRACTION = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class IsisConfig:
    """One member's view of the group, and every tunable of the protocol.

    The one configuration of ISIS: the core takes it, ``gossamer.open_isis`` takes it,
    the CLI's options (``gossamer isis``), the simulator's ``--param`` and the lab's
    ``[isis]`` section fill the same fields under the same names. Durations are in
    seconds, sizes in bytes.

    ``members`` is the initial (static) group, ``me`` this member's id.

    Retransmission (``retransmit``). On the original wire, the spec's ContinuousMsgSender:
    a message is sent again after ``retransmit_initial`` seconds, the interval doubling
    while it stays at most ``retransmit_max`` and then starting again (the spec's 0.2 s
    doubling to 3.2 s under 4 s). On gossamer's own (sealed) wire, each member's timeout
    comes from its measured round trips (``retransmit.RttTransmitter``: RFC 6298's
    SRTT + max(``retransmit_granularity``, 4 RTTVAR), ``retransmit_initial`` until the
    first sample), doubles while the member stays silent, is at most ``retransmit_max``,
    and a copy that a later answer shows lost is sent again at once. Snapshot markers
    follow the spec's schedule of ``retransmit_initial`` and ``retransmit_max``.

    The original's fault flags (reference (a), "Fault injection (exact behaviour)"),
    drawn from the core's injected ``random.Random``:

    - ``drop_rate`` (the original's ``--dropRate``): each datagram received from the
      network, of every type, is dropped with this probability, and traced as ``drop``
      with ``attrs.reason = "injected"`` (snapshot markers too);
    - ``ack_delay`` (the original's ``--delay``, there in milliseconds): half the Acks and
      SeqAcks sent to other members (:data:`ACK_DELAY_FRACTION`) are held back this many
      seconds. Unlike the original, which slept in its only receive thread and so
      stalled the whole process, a held message waits on the core's timer while
      everything else goes on.

    ``retain_finals`` bounds, per sender, how many final sequences of delivered
    messages are remembered to answer a view-change flush (see ``docs/isis.md``).

    ``batch_delay`` (default 0: off) lets messages to the same member wait up to that
    long and leave together in one datagram of at most ``batch_bytes``, the messages
    simply concatenated (the codec frames itself). The original accepts only one message
    per datagram, so batching is for groups of gossamer members; every member *accepts*
    batches whatever its own setting. ``batch_bytes`` must hold the largest message
    (``wire.MAX_SIZE``: a Data of ``wire.MAX_DATA_SIZE`` bytes).

    ``batch_turn`` (default off) batches without a delay: messages to one member wait
    only until the driver's turn ends. The batch is due at once (``next_deadline()`` is
    the instant its first message was held), and a driver runs a deadline already due
    after the input at hand: the asyncio pump at the end of the event loop's turn
    (``loop.call_soon``), so everything one turn produces (the answers to every datagram
    that turn received, the multicasts it made) shares the datagrams to each member; the
    simulator at the same virtual instant, after the events already due then. Under load
    a turn takes many inputs, so its batches are nearly as full as ``batch_delay``'s;
    alone, a message waits for no timer. It excludes ``batch_delay`` (one way of batching
    at a time).

    ``wire`` decides who a datagram is from and what a payload may be (``docs/interop.md``).
    In gossamer's own (sealed) mode a member is its UDP address, IP and port, so several
    members can share a host, and a payload is up to ``wire.MAX_DATA_SIZE`` bytes. On the
    ``original`` wire a member is its IP, as the original identifies it: the original
    sends from unbound sockets, a fresh ephemeral port each, so the source port says
    nothing; replies still go to the member's configured port (the hostfile's, 10001 by
    default). That mode needs one member per IP and sends nothing the original cannot
    parse: a payload is the original's uint32 (4 bytes), one message per datagram (no
    batching) and no snapshot markers.
    """

    me: int
    members: tuple[Member, ...]
    wire: WireMode = WireMode.SEALED
    retransmit_initial: float = 0.2
    retransmit_max: float = 4.0
    retransmit_granularity: float = 0.001
    drop_rate: float = 0.0
    ack_delay: float = 0.0
    batch_delay: float = 0.0
    batch_bytes: int = 1400
    batch_turn: bool = False
    retain_finals: int = 100_000

    def __post_init__(self) -> None:
        ids = [m.id for m in self.members]
        if len(set(ids)) != len(ids):
            raise ConfigError("member ids must be unique", ids=ids)
        for member in self.members:
            if not 1 <= member.id <= U32_MAX:
                raise ConfigError("member ids are 32-bit and start at 1", id=member.id)
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ConfigError("member names must be unique", names=names)
        addrs = [m.addr for m in self.members]
        if len(set(addrs)) != len(addrs):
            raise ConfigError("member addresses must be unique", addrs=addrs)
        if self.wire is WireMode.ORIGINAL:
            ips = [m.addr[0] for m in self.members]
            if len(set(ips)) != len(ips):
                raise ConfigError(
                    "on the original wire a member is its IP (the original ignores source "
                    "ports): give every member its own IP",
                    ips=ips,
                )
            if self.batch_delay or self.batch_turn:
                raise ConfigError(
                    "batching is off on the original wire (the original reads one message "
                    "per datagram)",
                    batch_delay=self.batch_delay,
                    batch_turn=self.batch_turn,
                )
        if self.me not in ids:
            raise ConfigError("this member is not in the group", me=self.me, ids=ids)
        if self.retain_finals < 0:
            raise ConfigError("retain_finals must be non-negative")
        if not 0.0 <= self.drop_rate <= 1.0:
            raise ConfigError("drop_rate must be a probability in [0, 1]", drop_rate=self.drop_rate)
        if not 0.0 < self.retransmit_granularity <= self.retransmit_max:
            raise ConfigError(
                "retransmit_granularity must be positive and at most retransmit_max",
                retransmit_granularity=self.retransmit_granularity,
                retransmit_max=self.retransmit_max,
            )
        for name in ("ack_delay", "batch_delay"):
            value = getattr(self, name)
            if not value >= 0.0:
                raise ConfigError(
                    f"{name} must be a non-negative number of seconds", **{name: value}
                )
        if self.batch_turn and self.batch_delay:
            raise ConfigError(
                "batch_turn and batch_delay are two ways of batching: choose one",
                batch_delay=self.batch_delay,
            )
        if self.batch_bytes < wire.MAX_SIZE:
            raise ConfigError(
                "batch_bytes must hold the largest message",
                batch_bytes=self.batch_bytes,
                largest=wire.MAX_SIZE,
            )
        self.schedule  # noqa: B018 - validates the retransmission intervals

    @classmethod
    def of(cls, me: str, members: Sequence[tuple[str, Address]], **params: Any) -> IsisConfig:
        """The configuration of member ``me`` of a group given as ``(name, (host, port))``
        pairs, numbered from 1 in the given order (as the original's hostfile lines are);
        ``params`` are the other fields (``retransmit_initial=``, ``wire=``...)."""
        group = members_from(members)
        ids = [m.id for m in group if m.name == me]
        if not ids:
            raise ConfigError("this member is not in the group", me=me)
        return cls(me=ids[0], members=group, **params)

    @property
    def schedule(self) -> RetransmitSchedule:
        """The retransmission schedule of ``retransmit_initial`` and ``retransmit_max``."""
        return RetransmitSchedule(initial=self.retransmit_initial, maximum=self.retransmit_max)

    @property
    def round_trip(self) -> RttEstimator:
        """A member's round-trip estimate before any sample (the sealed wire's timeouts)."""
        return RttEstimator(
            initial=self.retransmit_initial,
            granularity=self.retransmit_granularity,
            maximum=self.retransmit_max,
        )


#: The fields of :class:`IsisConfig` a deployment tunes, and what each means: the CLI's
#: options, the simulator's parameters and the lab's ``[isis]`` keys of the same names,
#: units and defaults are made from this table.
TUNABLES: dict[str, str] = {
    "retransmit_initial": "seconds before the first retransmission (then doubling)",
    "retransmit_max": "seconds: the largest retransmission interval (original wire: the "
    "schedule then restarts)",
    "retransmit_granularity": "seconds: the least margin over the smoothed round trip "
    "before a retransmission (sealed wire)",
    "drop_rate": "probability that a received datagram is dropped (the original's --dropRate)",
    "ack_delay": "seconds half the Acks and SeqAcks are held back (the original's --delay)",
    "batch_delay": "seconds messages to one member may wait to share a datagram (0: off)",
    "batch_bytes": "bytes: the largest datagram a batch fills",
    "batch_turn": "on|off: messages to one member share a datagram that leaves when the "
    "driver's turn ends (sealed wire; excludes batch_delay)",
}


def tunable_defaults() -> dict[str, float | int | bool]:
    """Each tunable's default, as :class:`IsisConfig` declares it."""
    defaults = {f.name: f.default for f in fields(IsisConfig)}
    return {name: defaults[name] for name in TUNABLES}  # type: ignore[misc]


# -- events ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivered:
    """A multicast message delivered in the total order.

    ``data`` is what was multicast; ``sender`` names the member that multicast it (its
    hostfile name), ``sender_id`` is its 1-based id; ``msg_id`` counts the sender's
    multicasts from 1; ``final_seq`` and ``proposer`` (a member id) are its place in the
    total order.
    """

    data: bytes
    sender: str
    sender_id: int
    msg_id: int
    final_seq: int
    proposer: int

    def log_line(self) -> str:
        """The original's delivery log line (spec, "How a message is delivered?"); a
        4-byte payload shows as the original's uint32, any other as ``0x`` and its hex."""
        data = self.data
        shown = int.from_bytes(data, "big") if len(data) == 4 else f"0x{data.hex()}"
        return (
            f"delivering dataMsg: type: 1, sender: {self.sender_id}, msg_id: {self.msg_id}, "
            f"data: {shown}, finalSeqId: {self.final_seq}, "
            f"finalSeqProposer: {self.proposer}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Discarded:
    """A crashed sender's message that the survivors agreed never to deliver."""

    data: bytes
    sender: str
    sender_id: int
    msg_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRemoved:
    """``member`` left the view; ``view`` is the new one."""

    member: int
    view: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewFlushed:
    """The view change begun by ``begin_view_change`` is settled here (``IsisCore.flushed``
    says the same): the layer below may confirm its flush (``flush_done``). ``members``
    are the ids the change keeps. From now on this member takes no new message of the
    ending view: it holds back Data it never saw until ``install_view``."""

    members: tuple[int, ...]


IsisEvent = Delivered | Discarded | MemberRemoved | ViewFlushed


@dataclass(slots=True)
class IsisCounters:
    """What the core did; for tests, summaries and benchmarks."""

    multicasts: int = 0
    delivered: int = 0
    datagrams_in: int = 0
    datagrams_out: int = 0
    messages_in: int = 0
    messages_out: int = 0
    retransmissions: int = 0  # datagrams re-sent by the transmitter
    gap_repairs: int = 0  # of which re-sent at once because a later answer showed a gap
    probes: int = 0  # of which re-sent as a tail-loss probe to a member gone silent
    duplicate_data: int = 0
    late_data: int = 0
    duplicate_acks: int = 0
    duplicate_seqs: int = 0
    duplicate_seq_acks: int = 0
    unknown: int = 0  # answers about messages never sent / never received
    malformed: int = 0
    unknown_sender: int = 0
    spoofed: int = 0
    from_removed: int = 0
    injected_drops: int = 0
    delayed: int = 0
    discarded: int = 0
    withdrawn: int = 0  # own messages discarded by a view change, to go out in the next view
    deferred: int = 0  # Data held back after a flush, until the next view
    stale_data: int = 0  # Data of a view this member closed, dropped (docs/cluster.md)
    conflicts: int = 0
    flush_answers: int = 0


# -- internal state ------------------------------------------------------------------


@dataclass(slots=True)
class _Outgoing:
    """Sender-side state of one of our own messages (SENDER table)."""

    msg_id: int
    data: bytes
    state: SendState
    awaiting: set[int]  # Acks while COLLECTING, SeqAcks while SEQUENCING (we are included)
    proposals: dict[int, int] = field(default_factory=dict)
    withdrawn: bool = False  # discarded by a view change (docs/cluster.md)


class _DoneLog:
    """Per sender: which messages are finished (delivered or discarded).

    Message ids finished in a row from 1 collapse into ``watermark``, so the log stays
    small for a live sender however many messages it sends; the finals of the last
    ``retain`` delivered messages are kept to answer a view-change flush.
    """

    __slots__ = ("above", "discarded", "finals", "kept", "retain", "watermark")

    def __init__(self, retain: int, *, watermark: int = 0) -> None:
        self.watermark = watermark
        self.above: set[int] = set()
        self.discarded: set[int] = set()
        self.finals: dict[int, tuple[int, int]] = {}
        # The ids in ``finals``, oldest first. (Not ``next(iter(finals))``: a dict deleted
        # from the front is scanned past its deleted slots, which cost 60 us a delivery
        # once ``retain`` finals were kept.)
        self.kept: deque[int] = deque()
        self.retain = retain

    def __contains__(self, msg_id: int) -> bool:
        return msg_id <= self.watermark or msg_id in self.above

    @property
    def highest(self) -> int:
        """The highest message id finished (0: none)."""
        return max(self.watermark, max(self.above, default=0))

    def add(self, msg_id: int, final: tuple[int, int] | None) -> None:
        if final is None:
            self.discarded.add(msg_id)
        elif self.retain:
            finals = self.finals
            if msg_id not in finals:
                self.kept.append(msg_id)
            finals[msg_id] = final
            if len(finals) > self.retain:
                del finals[self.kept.popleft()]
        if msg_id == self.watermark + 1:
            self.watermark = msg_id
            above = self.above
            while self.watermark + 1 in above:
                self.watermark += 1
                above.discard(self.watermark)
        elif msg_id > self.watermark:
            self.above.add(msg_id)


@dataclass(slots=True)
class _Flush:
    """A crashed sender's message this member cannot order alone (module docstring)."""

    key: MsgKey
    none_from: set[int] = field(default_factory=set)  # members that stated "no final"
    role: str = ""  # "statement" (telling the coordinator) or "collect" (we coordinate)


DataObserver = Callable[[wire.DataMessage, int, float], None]


class IsisCore(DatagramOutputs[IsisEvent]):
    """One member of an ISIS group. See the module docstring for the protocol."""

    def __init__(self, config: IsisConfig, *, tracer: Tracer, rng: Random) -> None:
        super().__init__()
        self.config = config
        self.counters = IsisCounters()
        #: Called on the first receipt of each DataMessage with ``(msg, source id, now)``
        #: (a snapshot layer records channel states with it).
        self.data_observer: DataObserver | None = None
        self._trace = tracer
        # The per-message events (multicast, sequence, deliver) cost a digest and an event
        # each; a tracer that discards everything is not worth them.
        self._tracing = not isinstance(tracer.sink, NullSink)
        self._rng = rng
        self._me = config.me
        self._members = {m.id: m for m in config.members}
        # Identity (``IsisConfig.wire``): the IP alone on the original wire, else IP and port.
        self._by_ip = config.wire is WireMode.ORIGINAL
        self._by_addr: dict[object, int] = {
            (m.addr[0] if self._by_ip else m.addr): m.id for m in config.members
        }
        self._names = {m.id: m.name for m in config.members}
        self._view: list[int] = sorted(self._members)
        self._peers = {m for m in self._view if m != self._me}
        #: The addresses of the members not removed (where the transmitter's copies go).
        self._live_addrs = {m.id: m.addr for m in config.members}
        self._removed: set[int] = set()
        self._latest = 0
        self._msg_counter = 0
        self._queue = HoldBackQueue()
        self._done: dict[int, _DoneLog] = {}
        self._received_from: dict[int, int] = {}
        self._outgoing: dict[int, _Outgoing] = {}
        self._flushes: dict[MsgKey, _Flush] = {}
        self._loopback: deque[wire.IsisMessage] = deque()
        self._delayed: list[tuple[float, int, bytes, Address]] = []
        self._delay_counter = 0
        self._batches: dict[Address, bytearray] = {}
        self._batch_due: float | None = None
        # Batching (``IsisConfig``): a member's batch is due this long after its first
        # message, 0 with ``batch_turn`` (due at once: the driver's turn end releases it).
        self._batching = config.batch_turn or config.batch_delay > 0
        self._batch_delay = config.batch_delay
        self._batch_bytes = config.batch_bytes
        self._now = 0.0
        # Dynamic membership (``begin_view_change``, ``install_view``; docs/cluster.md).
        self.view_id = 0  # the agreed view this member is in (0: static membership)
        self._next_id = max(self._members) + 1  # ids are never reused
        self._changing: tuple[int, ...] | None = None  # the ids the change under way keeps
        self._frozen = False  # flushed: Data never seen is held back until the next view
        self._deferred: dict[MsgKey, tuple[wire.DataMessage, int]] = {}
        self._sender_view: int | None = None  # the view tag of the datagram being read
        # This view's traffic, for a snapshot's cut on views (``state()["agreed"]``).
        self._view_sent = 0
        self._view_received: dict[int, int] = {}
        self._view_first_id = 1  # our Data of this view has ids from here on
        self._held: list[tuple[int, bytes]] = []  # multicasts made during a change, in order
        self._withdrawn_held: list[int] = []  # withdrawn ids whose data waits in _held
        self._reported = False  # ViewFlushed emitted for the change under way
        self._asks: set[MsgKey] = set()  # undecided messages asked about in the change
        self._tx: Transmitter | RttTransmitter
        if self._by_ip:  # the original wire: the spec's schedule
            self._tx = Transmitter(config.schedule, self._send_payload, self._retransmitted)
        else:
            self._tx = RttTransmitter(
                config.round_trip, self._send_payload, self._retransmitted, slack=config.batch_delay
            )

    # -- identity and introspection -------------------------------------------------

    @property
    def me(self) -> int:
        return self._me

    @property
    def view(self) -> tuple[int, ...]:
        """The current members, ascending ids, this member included."""
        return tuple(self._view)

    def name_of(self, member: int) -> str:
        return self._names.get(member, str(member))

    def address_of(self, member: int) -> Address:
        return self._members[member].addr

    def member_at(self, addr: Address) -> int | None:
        """The member sending from ``addr``, or ``None`` for a stranger."""
        return self._by_addr.get(addr[0] if self._by_ip else addr)

    def is_removed(self, member: int) -> bool:
        return member in self._removed

    def unacked_data(self, member: int) -> bool:
        """True while a DataMessage of ours has not been acknowledged by ``member``."""
        return any(
            out.state is SendState.COLLECTING and member in out.awaiting
            for out in self._outgoing.values()
        )

    @property
    def pending(self) -> int:
        """Messages in the hold-back queue (received, not yet delivered)."""
        return len(self._queue)

    @property
    def outstanding(self) -> int:
        """Our own messages whose final sequence is not yet fixed."""
        return sum(out.state is SendState.COLLECTING for out in self._outgoing.values())

    @property
    def quiescent(self) -> bool:
        """Nothing to retransmit, nothing held back, nothing undelivered."""
        return (
            not self._tx
            and not self._queue
            and not self._delayed
            and not self._loopback
            and not self._batches
        )

    def state(self) -> dict[str, Any]:
        """A JSON-able description of the local state (a snapshot's local state; the
        original's ``getCurrentState``)."""
        names = self._names
        return {
            "id": self._me,
            "name": self.name_of(self._me),
            "msg_id": self._msg_counter,
            "latest_seq": self._latest,
            "view": [names.get(m, str(m)) for m in self._view],
            "received_from": {
                names.get(m, str(m)): n for m, n in sorted(self._received_from.items())
            },
            "holdback": [
                {
                    "sender": e.sender,
                    "msg_id": e.msg_id,
                    "data": payload_json(e.data),
                    "seq": e.seq,
                    "proposer": e.proposer,
                    "deliverable": e.deliverable,
                }
                for e in self._queue.ordered()
            ],
            "outgoing": [
                {
                    "msg_id": out.msg_id,
                    "data": payload_json(out.data),
                    "phase": out.state.value,
                    "awaiting": sorted(out.awaiting),
                }
                for out in self._outgoing.values()
            ],
            "delivered": self.counters.delivered,
            **({"agreed": self._agreed_state()} if self.view_id else {}),
        }

    def sent_in_view(self) -> list[tuple[int, bytes]]:
        """``(msg_id, data)`` of our own Data of the current agreed view still outgoing
        here, oldest first. Right after ``install_view``: what it sent by itself, the
        multicasts held or withdrawn during the change (the withdrawn ids still waiting
        for their discard to be acknowledged belong to the view before)."""
        first = self._view_first_id
        return sorted((o.msg_id, o.data) for o in self._outgoing.values() if o.msg_id >= first)

    def _agreed_state(self) -> dict[str, Any]:
        """This agreed view's part of :meth:`state`: its id, its members' ids, the Data
        this member sent in it and those it received in it from each member (first
        receipts). A snapshot taken within one view counts its cut with these: a
        message withdrawn at a change is sent again under a new id, so the totals of
        ``msg_id`` and ``received_from`` do not match across changes."""
        names = self._names
        return {
            "view": self.view_id,
            "members": list(self._view),
            "sent": self._view_sent,
            "received_from": {
                names.get(m, str(m)): n for m, n in sorted(self._view_received.items())
            },
        }

    def trace_stop(self, now: float) -> None:
        """Trace ``isis``/``stop``: what this member leaves unfinished as it stops cleanly.

        ``attrs.held``: the messages in its hold-back queue (received, never delivered);
        ``attrs.outstanding``: its own messages some member had not yet acknowledged
        (Data or Seq), and those a view change withdrew whose data waits for the next view
        to go out again; ``attrs.view``: the group as it saw it. Call it once the member is
        closed (nothing moves any more), so that it is final. The analysis tells
        "unfinished at a clean stop" from "lost" with it (``docs/analysis.md``,
        ``isis.agreement``)."""
        me = self.name_of(self._me)
        held = [self._msg_name(e.sender, e.msg_id) for e in self._queue.ordered()]
        waiting = {out.msg_id for out in self._outgoing.values() if out.state is not SendState.DONE}
        outstanding = [f"{me}/{i}" for i in sorted(waiting.union(self._withdrawn_held))]
        self._trace(now, LAYER, "stop", attrs={
            "held": ",".join(held), "outstanding": ",".join(outstanding),
            "view": ",".join(self.name_of(m) for m in self._view),
        })  # fmt: skip

    # -- local requests ---------------------------------------------------------------

    def check_payload(self, data: bytes | int) -> bytes:
        """``data`` as a multicast would carry it here (:func:`payload`, this wire), or
        ``LocalProtocolError``: for layers that hold multicasts back before they start."""
        return payload(data, self.config.wire)

    def multicast(self, data: bytes | int, now: float) -> int:
        """Multicast ``data`` to the group; returns its ``msg_id``. Non-blocking: the
        message is on its way when this returns and is delivered later, here too.
        During a view change (``begin_view_change`` to ``install_view``) the message is
        held and goes out, in order, when the next view is installed.

        ``data`` is checked by :func:`payload` (bytes up to ``wire.MAX_DATA_SIZE``; the
        original's uint32 on the original wire): ``LocalProtocolError`` before anything
        is sent when it does not fit."""
        data = payload(data, self.config.wire)
        msg_id = self._new_msg_id()
        self.counters.multicasts += 1
        if self._changing is not None:
            # A view change is under way: the message goes out in the next view. Its
            # ``hold`` marks when the application asked, which its latency counts from.
            self._held.append((msg_id, data))
            self._trace(now, LAYER, "hold", msg=self._msg_name(self._me, msg_id))
            return msg_id
        self._send_data(msg_id, data, now)
        return msg_id

    def _new_msg_id(self) -> int:
        if self._msg_counter >= U32_MAX:
            # Reference (a), bug 9: the original wraps silently; we refuse.
            raise LocalProtocolError("message ids are exhausted (32 bits)")
        self._msg_counter += 1
        return self._msg_counter

    def _send_data(self, msg_id: int, data: bytes, now: float) -> None:
        self._now = now
        self._view_sent += 1
        self._outgoing[msg_id] = _Outgoing(
            msg_id=msg_id, data=data, state=SendState.COLLECTING, awaiting=set(self._view)
        )
        msg = wire.DataMessage(sender=self._me, msg_id=msg_id, data=data)
        name = self._msg_name(self._me, msg_id)
        if self._tracing:
            self._trace(
                now, LAYER, "multicast", msg=name, size=len(data),
                attrs={"digest": payload_digest(data)},
            )  # fmt: skip
        self._tx.start(
            ("data", msg_id), wire.encode(msg), self._others(), now, label="DataMsg", msg=name
        )
        self._loopback.append(msg)
        self._drain(now)

    def remove_member(self, member: int, now: float) -> None:
        """``member`` crashed (the membership layer's ``peer_down``): leave it out.

        Idempotent; an unknown id is ignored. Removing oneself is a local error.
        """
        if member == self._me:
            raise LocalProtocolError("a member cannot remove itself", member=member)
        if member not in self._members or member in self._removed:
            return
        self._now = now
        self._removed.add(member)
        self._view.remove(member)
        self._peers.discard(member)
        del self._live_addrs[member]
        self._trace(
            now,
            LAYER,
            "view_change",
            peer=self.name_of(member),
            attrs={"view": ",".join(self.name_of(m) for m in self._view)},
        )
        self._events.append(MemberRemoved(member=member, view=tuple(self._view)))
        self._tx.drop_member(member)
        # Senders stop waiting for the crashed member (reference (a), bug 6).
        for out in list(self._outgoing.values()):
            if member in out.awaiting:
                out.awaiting.discard(member)
                if not out.awaiting:
                    self._all_answered(out, now)
        # Its undecided messages are settled by the flush.
        for entry in self._queue.ordered():
            if entry.sender == member and not entry.deliverable:
                self._flushes.setdefault(entry.key, _Flush(key=entry.key))
        for flush in list(self._flushes.values()):
            self._flush_role(flush, now)
        self._drain(now)
        if self._changing is not None:
            self._note_flushed()

    # -- dynamic membership (docs/cluster.md, "Virtual synchrony") ------------------

    def begin_view_change(self, keep: Iterable[int], now: float) -> None:
        """The agreed view is ending and the next one keeps the members ``keep`` (ids;
        joiners have none yet): the membership layer's ``FlushRequired``.

        Every other member is removed (``remove_member``: its undecided messages are
        settled by the flush, delivered by all survivors or by none); new multicasts are
        held until ``install_view``; our own messages still collecting Acks are withdrawn
        (discarded by everyone: none of them has a final) and held to go out again in
        the next view. Once everything of this view is settled here (``flushed``) the
        core emits ``ViewFlushed`` and takes no new message of the view any more. A
        later call for the same view (the proposal changed) supersedes this one and is
        answered by its own ``ViewFlushed``. Only on the sealed wire (the original's
        membership is static): ``LocalProtocolError`` otherwise."""
        self._dynamic_only()
        keep_ids = set(keep)
        self._now = now
        # Withdraw first: no final may be fixed without the Ack of a member the change
        # removes, since a later proposal may keep it after all.
        for out in list(self._outgoing.values()):
            if out.state is SendState.COLLECTING:
                self._withdraw(out, now)
        self._changing = tuple(m for m in self._view if m == self._me or m in keep_ids)
        self._reported = False
        for member in list(self._view):
            if member not in self._changing:
                self.remove_member(member, now)
        self._drain(now)
        self._note_flushed()

    @property
    def changing(self) -> bool:
        """A view change is under way here: from ``begin_view_change`` to ``install_view``."""
        return self._changing is not None

    @property
    def flushed(self) -> bool:
        """A view change is under way and settled here: every message of the ending view
        this member proposed for is delivered or discarded, and none it multicast is still
        collecting Acks (each has its final, or was withdrawn). Its Seqs may still be on
        their way: the members that lack one are not settled either."""
        return (
            self._changing is not None
            and all(out.state is not SendState.COLLECTING for out in self._outgoing.values())
            and not self._queue
            and not self._flushes
            and not self._loopback
        )

    def install_view(
        self, view_id: int, members: Sequence[tuple[str, Address]], now: float
    ) -> tuple[Member, ...]:
        """The agreed view ``view_id`` is installed: ``members`` are its ``(name,
        address)`` in seniority order (names unique per incarnation). Members not known
        here are joiners and get the next unused ids in that order (every member assigns
        the same ids: founders 1..n, then each view's joiners in turn; ids are never
        reused); known members missing from it are removed. Held multicasts go out, in
        order, and Data that arrived since the flush is taken. Returns the view's members
        with their ids. ``LocalProtocolError`` if this member is not in it."""
        self._dynamic_only()
        names = [name for name, _ in members]
        if self.name_of(self._me) not in names:
            raise LocalProtocolError("this member is not in the view", view=view_id)
        self._now = now
        ids = self._ids_for(members)
        for (name, addr), member_id in zip(members, ids, strict=True):
            if member_id not in self._members:
                self._admit(Member(id=member_id, name=name, addr=addr))
        self._next_id = max(self._next_id, max(ids) + 1)
        for member in list(self._view):
            if member not in ids:
                self.remove_member(member, now)
        self.view_id = view_id
        self._view_sent = 0
        self._view_received = {}
        self._changing = None
        self._frozen = False
        for key in self._asks:
            self._tx.cancel(("ask", key))
        self._asks.clear()
        deferred, self._deferred = self._deferred, {}
        for msg, src in deferred.values():
            if src in self._peers:
                self._on_data(msg, src, now)
        held, self._held = self._held, []
        # The ids taken since the change began are those held, in order: every id of
        # this view's Data is at least the first of them.
        self._view_first_id = held[0][0] if held else self._msg_counter + 1
        self._withdrawn_held.clear()
        for msg_id, data in held:
            self._send_data(msg_id, data, now)
        self._drain(now)
        return tuple(self._members[i] for i in ids)

    def state_for_joiner(self, members: Sequence[tuple[str, Address]]) -> bytes:
        """What the joiners of the next view, ``members`` (as ``install_view`` will get
        them), start from: every member's id and the sequence numbers already used. Call
        it once flushed (the views layer's ``StateNeeded``); the joiner builds its core with
        :meth:`joining`."""
        self._dynamic_only()
        ids = self._ids_for(members)
        return JoinState(
            members=tuple(
                Member(id=i, name=name, addr=addr)
                for i, (name, addr) in zip(ids, members, strict=True)
            ),
            next_id=max(self._next_id, max(ids) + 1),
            latest=self._latest,
            seen=tuple((i, self._done[i].highest) for i in sorted(set(ids)) if i in self._done),
        ).encode()

    @classmethod
    def joining(
        cls,
        state: bytes,
        me: str,
        view_id: int,
        members: Sequence[tuple[str, Address]],
        *,
        tracer: Tracer,
        rng: Random,
        **params: Any,
    ) -> IsisCore:
        """The core of ``me``, a joiner of view ``view_id`` of ``members`` (as
        ``install_view`` takes them), from the ``state`` a member gave for that view
        (:meth:`state_for_joiner`); ``params`` are ``IsisConfig``'s other fields. Its
        proposals start above every final sequence of the views before: nothing it
        proposes can order a new message before one already delivered. ``DecodeError``
        for a state that is not one or is for other members, ``ConfigError`` when ``me``
        is not in it."""
        join = JoinState.decode(state)
        if [m.name for m in join.members] != [name for name, _ in members]:
            raise DecodeError("the join state is for another view", view=view_id)
        ids = [m.id for m in join.members if m.name == me]
        if not ids:
            raise ConfigError("the joiner is not in the view it joins", me=me)
        core = cls(IsisConfig(me=ids[0], members=join.members, **params), tracer=tracer, rng=rng)
        core._dynamic_only()
        core._latest = join.latest
        core._next_id = join.next_id
        for member_id, highest in join.seen:
            core._done[member_id] = _DoneLog(core.config.retain_finals, watermark=highest)
        core.view_id = view_id
        return core

    def id_of(self, name: str) -> int | None:
        """The id of the member called ``name``, removed or not; ``None`` if unknown."""
        for member in self._members.values():
            if member.name == name:
                return member.id
        return None

    def _dynamic_only(self) -> None:
        if self._by_ip:
            raise LocalProtocolError(
                "dynamic membership needs the sealed wire (the original's group is static)"
            )

    def _ids_for(self, members: Sequence[tuple[str, Address]]) -> list[int]:
        """The ids of ``members``: a known name keeps its id, the others take the next
        unused ones in order."""
        by_name = {m.name: m.id for m in self._members.values()}
        ids, next_id = [], self._next_id
        for name, _ in members:
            if name in by_name:
                ids.append(by_name[name])
            else:
                ids.append(next_id)
                next_id += 1
        return ids

    def _admit(self, member: Member) -> None:
        self._members[member.id] = member
        self._names[member.id] = member.name
        # A restarted process may come back at its old address: the address is its now.
        self._by_addr[member.addr[0] if self._by_ip else member.addr] = member.id
        bisect.insort(self._view, member.id)
        self._peers.add(member.id)
        self._live_addrs[member.id] = member.addr

    def _withdraw(self, out: _Outgoing, now: float) -> None:
        """Discard our message ``out``, which has no final (we lack an Ack), at every member,
        and hold its data for the next view under a new id."""
        self.counters.withdrawn += 1
        self._tx.cancel(("data", out.msg_id))
        out.state = SendState.SEQUENCING
        out.withdrawn = True
        out.awaiting = set(self._view)
        msg = wire.SeqMessage(
            sender=self._me, msg_id=out.msg_id, final_seq=0, final_seq_proposer=self._me
        )
        self._tx.start(
            ("seq", out.msg_id),
            wire.encode(msg),
            self._others(),
            now,
            label="SeqMsg",
            msg=self._msg_name(self._me, out.msg_id),
        )
        self._loopback.append(msg)
        again = self._new_msg_id()
        self._held.append((again, out.data))
        self._withdrawn_held.append(out.msg_id)
        # ``withdraw`` names the id the data goes out under, so that the analysis counts
        # the new message's latency from the first multicast (``metrics.renamed``).
        self._trace(
            now, LAYER, "withdraw", msg=self._msg_name(self._me, out.msg_id),
            attrs={"as": self._msg_name(self._me, again)},
        )  # fmt: skip

    def _note_flushed(self) -> None:
        """Emit ``ViewFlushed`` (once per ``begin_view_change``) when the change is settled
        here; from then on Data never seen waits for the next view. Until then, ask the
        members the change keeps about each message still undecided here whose sender
        may be gone (the removal flush settles a removed sender's too, but waits for every
        survivor): one that flushed knows its outcome for good (``_on_flush_ack``)."""
        if self._changing is not None and not self._reported and self._queue:
            targets = set(self._changing) - {self._me}
            for entry in self._queue.ordered():
                key = entry.key
                if entry.deliverable or key in self._asks:
                    continue
                # Not the sender: an Ack to the sender is an answer to its Data there.
                asked = targets - {entry.sender}
                if entry.sender == self._me or not asked:
                    continue
                self._asks.add(key)
                query = wire.AckMessage(
                    sender=key[0], msg_id=key[1], proposed_seq=0, proposer=self._me
                )
                self._tx.start(
                    ("ask", key),
                    wire.encode(query),
                    asked,
                    self._now,
                    label="QueryAck",
                    msg=self._msg_name(*key),
                )
        if not self._reported and self.flushed:
            assert self._changing is not None
            self._reported = True
            self._frozen = True
            self._trace(self._now, LAYER, "flushed", attrs={"view": str(self.view_id)})
            self._events.append(ViewFlushed(members=self._changing))

    # -- inputs ----------------------------------------------------------------------

    def receive_datagram(
        self, data: bytes, addr: Address, now: float, *, view: int | None = None
    ) -> None:
        """One datagram from ``addr``. ``view``: the agreed view its sender was in when
        it sent it, where the layer above tags datagrams with it (``GroupCore``);
        ``None`` when unknown. With the tag, Data this member never saw that belongs to a
        view it has closed (flushed, or left) is dropped, counted ``stale_data``: it can
        have no final (docs/cluster.md, "What ISIS does in a view change"). Without it,
        such Data waits for the next view and its sender's discard."""
        self._now = now
        self.counters.datagrams_in += 1
        src = self._by_addr.get(addr[0] if self._by_ip else addr)
        if src is None:
            self.counters.unknown_sender += 1
            self._drop(now, data, None, "unknown sender", peer=f"{addr[0]}:{addr[1]}")
            return
        if src in self._removed:
            self.counters.from_removed += 1
            self._drop(now, data, None, "removed member", peer=self.name_of(src))
            return
        try:
            # One message, or a batch of several back to back (see ``IsisConfig``).
            messages = wire.decode_batch(data)
            if self._by_ip:
                self._original_only(messages)
        except DecodeError as exc:
            # All or nothing: a batch with a bad message is dropped whole.
            self.counters.malformed += 1
            self._drop(now, data, None, exc.reason, peer=self.name_of(src))
            return
        drop_rate = self.config.drop_rate
        if drop_rate and self._rng.random() < drop_rate:
            self.counters.injected_drops += 1
            self._drop(now, data, messages[0], "injected", peer=self.name_of(src))
            return
        self.counters.messages_in += len(messages)
        # A message's size matters only to a trace of its drop: worked out then (None).
        size = len(data) if len(messages) == 1 else None
        dispatch = self._dispatch
        loopback = self._loopback
        self._sender_view = view
        try:
            for msg in messages:
                dispatch(msg, src, now, size)
                if loopback:
                    self._drain(now)
        finally:
            self._sender_view = None  # a tag belongs to its datagram only
        if self._changing is not None:
            self._note_flushed()

    @staticmethod
    def _original_only(messages: list[wire.IsisMessage]) -> None:
        """The original wire carries the original's messages only: a Data's payload is
        its uint32 (a longer payload is gossamer's type 7, which no original sends)."""
        for msg in messages:
            if isinstance(msg, wire.DataMessage) and len(msg.data) != wire.ORIGINAL_DATA_SIZE:
                raise DecodeError("a payload that is not a uint32 on the original wire")

    def handle_timer(self, now: float) -> None:
        self._now = now
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, _, payload, addr = heapq.heappop(delayed)
            self._emit(payload, addr)
        self._tx.due(now)
        self._drain(now)
        if self._changing is not None:
            self._note_flushed()
        if self._batch_due is not None and self._batch_due <= now:
            self._flush_batches()

    # -- outputs (and datagrams_to_send, events_received: DatagramOutputs) --------------

    def next_deadline(self) -> float | None:
        deadline = self._tx.next_deadline()
        if self._delayed:
            first = self._delayed[0][0]
            deadline = first if deadline is None else min(deadline, first)
        if self._batch_due is not None:
            deadline = self._batch_due if deadline is None else min(deadline, self._batch_due)
        return deadline

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self, msg: wire.IsisMessage, src: int, now: float, size: int | None) -> None:
        """Hand ``msg`` from member ``src`` to its handler; ``size`` is its bytes on the wire
        (for a trace), ``None`` when it shared a datagram (:func:`wire_size` then)."""
        if type(msg) is wire.AckMessage:
            if msg.proposer != src:
                self._spoofed(now, msg, src, size)
            elif msg.sender == self._me:
                self._on_ack(msg, src, now)
            else:
                self._on_flush_ack(msg, src, now)
        elif type(msg) is wire.DataMessage:
            if msg.sender != src:
                self._spoofed(now, msg, src, size)
                return
            self._on_data(msg, src, now)
        elif type(msg) is wire.SeqMessage:
            self._on_seq(msg, src, now)
        elif type(msg) is wire.SeqAckMessage:
            if msg.ack_sender != src:
                self._spoofed(now, msg, src, size)
            elif msg.sender == self._me:
                self._on_seq_ack(msg, src, now)
            # else: the acknowledgement of a flush answer; answers are not retransmitted.
        else:
            # Markers belong to a snapshot layer, which a node puts in front of this core.
            self._drop(
                now,
                b"",
                msg,
                "snapshot marker without a snapshot layer",
                peer=self.name_of(src),
                size=wire_size(msg) if size is None else size,
            )

    def _drain(self, now: float) -> None:
        """Process our own messages to ourselves (the "same path" of the spec)."""
        loopback = self._loopback
        while loopback:
            self._dispatch(loopback.popleft(), self._me, now, 0)

    # -- receiver side (RECEIVER table) ----------------------------------------------------

    def _recv_state(self, key: MsgKey) -> RecvState:
        entry = self._queue.get(key)
        if entry is not None:
            return RecvState.ORDERED if entry.deliverable else RecvState.PROPOSED
        log = self._done.get(key[0])
        if log is not None:
            if key[1] in log.discarded:
                return RecvState.DISCARDED
            if key[1] in log:
                return RecvState.DELIVERED
        return RecvState.UNKNOWN

    def _on_data(self, msg: wire.DataMessage, src: int, now: float) -> None:
        key = (msg.sender, msg.msg_id)
        state = self._recv_state(key)
        if state is RecvState.UNKNOWN and self._of_closed_view():
            # Sent in a view this member closed and never seen here: it has no final (a
            # final carries this member's Ack from before its flush): its sender withdraws
            # it, or the removal flush discards it. Taking it would only hold deliveries
            # up until that discard arrives.
            self.counters.stale_data += 1
            self._drop(
                now, b"", msg, "Data of a closed view", peer=self.name_of(src),
                size=wire_size(msg),
            )  # fmt: skip
            return
        if self._frozen and state is RecvState.UNKNOWN:
            # Flushed: the set of this view's messages is closed here. This is Data of the
            # next view, or untagged: then a message of the ending view is withdrawn by
            # its sender, and one of the next view is taken at ``install_view``.
            self.counters.deferred += 1
            self._deferred[key] = (msg, src)
            return
        _, action = step(RECEIVER, state, RecvInput.DATA)
        if action is RecvAction.PROPOSE:
            self._latest += 1
            self._queue.add(
                sender=msg.sender,
                msg_id=msg.msg_id,
                data=msg.data,
                proposal=self._latest,
                me=self._me,
            )
            if src != self._me:
                self._received_from[src] = self._received_from.get(src, 0) + 1
                self._view_received[src] = self._view_received.get(src, 0) + 1
            if self.data_observer is not None:
                self.data_observer(msg, src, now)
            self._send_ack(msg.sender, msg.msg_id, self._latest, now)
        elif action is RecvAction.RESEND_ACK:
            # Spec: a duplicate Data gets the same Ack (same proposal): repairs a lost Ack.
            self.counters.duplicate_data += 1
            entry = self._queue.get(key)
            assert entry is not None
            self._send_ack(msg.sender, msg.msg_id, entry.proposal, now)
        else:  # IGNORE_LATE_DATA
            self.counters.late_data += 1

    def _of_closed_view(self) -> bool:
        """The datagram being read was sent in a view this member has closed: an earlier
        one, or this one once flushed."""
        view = self._sender_view
        return view is not None and (view < self.view_id or (view == self.view_id and self._frozen))

    def _on_seq(self, msg: wire.SeqMessage, src: int, now: float) -> None:
        key = (msg.sender, msg.msg_id)
        event = RecvInput.SEQ if msg.final_seq else RecvInput.DISCARD
        _, action = step(RECEIVER, self._recv_state(key), event)
        if action is RecvAction.MARK:
            self._queue.mark_deliverable(key, msg.final_seq, msg.final_seq_proposer)
            self._latest = max(self._latest, msg.final_seq)
            self._send_seq_ack(msg, src, now)
            self._flush_resolved(key, now)
            self._deliver_ready(now)
        elif action is RecvAction.RESEND_SEQ_ACK:
            self.counters.duplicate_seqs += 1
            self._send_seq_ack(msg, src, now)
        elif action is RecvAction.DROP_ENTRY:
            entry = self._queue.discard(key)
            self._finish(key, None)
            self.counters.discarded += 1
            self._trace(now, LAYER, "discard", msg=self._msg_name(*key), peer=self.name_of(src))
            self._events.append(
                Discarded(
                    data=entry.data, sender=self.name_of(key[0]), sender_id=key[0], msg_id=key[1]
                )
            )
            self._send_seq_ack(msg, src, now)
            self._flush_resolved(key, now)
            self._deliver_ready(now)
        elif action is RecvAction.RECORD_DISCARD:
            self._finish(key, None)
            self._send_seq_ack(msg, src, now)
            self._flush_resolved(key, now)
        elif action is RecvAction.IGNORE_UNKNOWN:
            self.counters.unknown += 1
            self._flush_resolved(key, now)  # nothing to settle for a message never seen
            self._drop(
                now, b"", msg, "seq for a message never received", peer=self.name_of(src), size=20
            )
        else:  # CONFLICT
            self.counters.conflicts += 1
            self._drop(
                now, b"", msg, "contradicts the known outcome", peer=self.name_of(src), size=20
            )

    def _deliver_ready(self, now: float) -> None:
        ready = self._queue.pop_deliverable()
        if not ready:
            return
        step(RECEIVER, RecvState.ORDERED, RecvInput.HEAD)  # the same step for every entry
        self.counters.delivered += len(ready)
        names = self._names
        events = self._events
        for entry in ready:
            sender = entry.sender
            self._finish((sender, entry.msg_id), (entry.seq, entry.proposer))
            if self._tracing:
                self._trace_delivery(entry, now)
            events.append(
                Delivered(
                    data=entry.data,
                    sender=names.get(sender, str(sender)),
                    sender_id=sender,
                    msg_id=entry.msg_id,
                    final_seq=entry.seq,
                    proposer=entry.proposer,
                )
            )

    def _trace_delivery(self, entry: PendingMsg, now: float) -> None:
        self._trace(
            now,
            LAYER,
            "deliver",
            msg=self._msg_name(entry.sender, entry.msg_id),
            peer=self.name_of(entry.sender),
            seq=entry.seq,
            size=len(entry.data),
            attrs={"proposer": str(entry.proposer), "digest": payload_digest(entry.data)},
        )

    def _finish(self, key: MsgKey, final: tuple[int, int] | None) -> None:
        log = self._done.get(key[0])
        if log is None:
            log = self._done[key[0]] = _DoneLog(self.config.retain_finals)
        log.add(key[1], final)

    # -- sender side (SENDER table) -----------------------------------------------------

    def _on_ack(self, msg: wire.AckMessage, src: int, now: float) -> None:
        if self.view_id and src != self._me:
            self._repair_stale_ack(msg, src, now)
        out = self._first_answer(msg, src, now, SendInput.ACK, SendAction.RECORD_PROPOSAL)
        if out is not None:
            out.proposals[src] = msg.proposed_seq
            self._answered(out, src, "data", now)

    def _repair_stale_ack(self, msg: wire.AckMessage, src: int, now: float) -> None:
        """With agreed views: an Ack for a message of ours that ``src`` must never order (a
        late copy of a view's Data reached a member admitted since, or the message was
        withdrawn) gets the discard, so that it leaves ``src``'s hold-back queue. (A member
        that has the message's final ignores the discard: an outcome never changes.)"""
        out = self._outgoing.get(msg.msg_id)
        if out is None:
            stale = 1 <= msg.msg_id <= self._msg_counter and all(
                msg.msg_id != held for held, _ in self._held
            )
        else:
            stale = out.withdrawn or (
                out.state is SendState.SEQUENCING and src not in out.proposals
            )
        if stale:
            discard = wire.SeqMessage(
                sender=self._me, msg_id=msg.msg_id, final_seq=0, final_seq_proposer=self._me
            )
            self._send(discard, src, now)

    def _on_seq_ack(self, msg: wire.SeqAckMessage, src: int, now: float) -> None:
        out = self._first_answer(msg, src, now, SendInput.SEQ_ACK, SendAction.STOP_SEQ)
        if out is not None:
            self._answered(out, src, "seq", now)

    def _first_answer(
        self,
        msg: wire.AckMessage | wire.SeqAckMessage,
        src: int,
        now: float,
        answer: SendInput,
        expected: SendAction,
    ) -> _Outgoing | None:
        """Our message that ``msg`` answers, when it is ``src``'s first answer to it in
        this phase; ``None`` for any other answer, which is counted: a duplicate or late
        one, or one about a message never sent (also dropped and traced)."""
        out = self._outgoing.get(msg.msg_id)
        if out is None:
            if not 1 <= msg.msg_id <= self._msg_counter:
                self.counters.unknown += 1
                what = "ack" if answer is SendInput.ACK else "seq ack"
                self._drop(
                    now, b"", msg, f"{what} for a message never sent", peer=self.name_of(src),
                    size=wire_size(msg),
                )  # fmt: skip
                return None
            step(SENDER, SendState.DONE, answer)
        else:
            event = answer if src in out.awaiting else _DUPLICATE[answer]
            if step(SENDER, out.state, event)[1] is expected:
                return out
        if answer is SendInput.ACK:
            self.counters.duplicate_acks += 1
        else:
            self.counters.duplicate_seq_acks += 1
        return None

    def _answered(self, out: _Outgoing, src: int, phase: str, now: float) -> None:
        """``src`` answered ``out``'s Data (``phase`` "data") or Seq ("seq")."""
        out.awaiting.discard(src)
        self._tx.answered((phase, out.msg_id), src, now)
        if not out.awaiting:
            self._all_answered(out, now)

    def _all_answered(self, out: _Outgoing, now: float) -> None:
        if out.state is SendState.COLLECTING:
            step(SENDER, out.state, SendInput.ALL_ACKED)
            self._send_seq(out, now)
        else:
            step(SENDER, out.state, SendInput.ALL_SEQ_ACKED)
            self._tx.cancel(("seq", out.msg_id))
            del self._outgoing[out.msg_id]

    def _send_seq(self, out: _Outgoing, now: float) -> None:
        # Spec: the final sequence is the largest proposal; on a tie the smallest
        # proposer id wins.
        proposer, final = max(out.proposals.items(), key=lambda item: (item[1], -item[0]))
        self._tx.cancel(("data", out.msg_id))
        out.state = SendState.SEQUENCING
        out.awaiting = set(self._view)
        msg = wire.SeqMessage(
            sender=self._me, msg_id=out.msg_id, final_seq=final, final_seq_proposer=proposer
        )
        name = self._msg_name(self._me, out.msg_id)
        if self._tracing:
            self._trace(
                now, LAYER, "sequence", msg=name, seq=final, attrs={"proposer": str(proposer)}
            )
        self._tx.start(
            ("seq", out.msg_id), wire.encode(msg), self._others(), now, label="SeqMsg", msg=name
        )
        self._loopback.append(msg)

    # -- view-change flush ------------------------------------------------------------

    def _coordinator(self) -> int:
        return self._view[0]

    def _outcome(self, key: MsgKey) -> tuple[int, int] | None:
        """What this member knows for sure about a message: its final, or ``(0, me)``
        when it was discarded; ``None`` when undecided or forgotten."""
        entry = self._queue.get(key)
        if entry is not None:
            return (entry.seq, entry.proposer) if entry.deliverable else None
        log = self._done.get(key[0])
        if log is None:
            return None
        if key[1] in log.discarded:
            return (0, self._me)
        return log.finals.get(key[1])

    def _flush_role(self, flush: _Flush, now: float) -> None:
        """(Re)assign our part in settling ``flush.key`` after a view change."""
        sender, msg_id = flush.key
        if self._coordinator() == self._me:
            self._tx.cancel(("stmt", flush.key))
            awaiting = set(self._view) - {self._me} - flush.none_from
            if flush.role != "collect":
                flush.role = "collect"
                query = wire.AckMessage(
                    sender=sender, msg_id=msg_id, proposed_seq=0, proposer=self._me
                )
                self._tx.start(
                    ("query", flush.key),
                    wire.encode(query),
                    awaiting,
                    now,
                    label="QueryAck",
                    msg=self._msg_name(*flush.key),
                )
            else:
                self._tx.retarget(("query", flush.key), awaiting, now)
            if not awaiting:
                # Every survivor stated it has no final: nobody can have delivered it.
                self._on_seq(
                    wire.SeqMessage(
                        sender=sender, msg_id=msg_id, final_seq=0, final_seq_proposer=self._me
                    ),
                    self._me,
                    now,
                )
            return
        self._tx.cancel(("query", flush.key))
        coordinator = {self._coordinator()}
        if flush.role == "statement" and ("stmt", flush.key) in self._tx:
            self._tx.retarget(("stmt", flush.key), coordinator, now)
            return
        flush.role = "statement"
        entry = self._queue.get(flush.key)
        statement = wire.AckMessage(
            sender=sender,
            msg_id=msg_id,
            proposed_seq=entry.proposal if entry else 1,
            proposer=self._me,
        )
        self._tx.start(
            ("stmt", flush.key),
            wire.encode(statement),
            coordinator,
            now,
            label="StatementAck",
            msg=self._msg_name(*flush.key),
        )

    def _flush_resolved(self, key: MsgKey, now: float) -> None:
        """``key`` got its outcome here: stop the flush and tell whoever asked."""
        if key in self._asks:
            self._asks.discard(key)
            self._tx.cancel(("ask", key))
        flush = self._flushes.pop(key, None)
        if flush is None:
            return
        self._tx.cancel(("stmt", key))
        self._tx.cancel(("query", key))
        outcome = self._outcome(key)
        if outcome is None:
            return
        for member in sorted(flush.none_from):
            if member != self._me and member not in self._removed:
                self._send_outcome(key, outcome, member, now)

    def _on_flush_ack(self, msg: wire.AckMessage, src: int, now: float) -> None:
        """An Ack about another member's message: a flush query or statement."""
        key = (msg.sender, msg.msg_id)
        outcome = self._outcome(key)
        if outcome is not None:
            self._send_outcome(key, outcome, src, now)
            return
        state = self._recv_state(key)
        if state is RecvState.DELIVERED:
            return  # delivered but its final is no longer retained: cannot help
        if self._frozen and state is RecvState.UNKNOWN:
            # Flushed and never proposed for it: we take no Data of this view any more
            # and its sender never fixes a final without our Ack (a view change
            # withdraws what lacks one). It is discarded, for good: tell the asker (a
            # query or a statement) and whoever else waits for us.
            self._deferred.pop(key, None)
            self._finish(key, None)
            self._send_outcome(key, (0, self._me), src, now)
            self._flush_resolved(key, now)
            return
        if msg.sender not in self._removed:
            # The sender's Seq may still reach us; we must not speak for it before our
            # own membership layer removes it (the asker retransmits).
            return
        if self._coordinator() == self._me:
            flush = self._flushes.get(key)
            if flush is None:
                flush = self._flushes[key] = _Flush(key=key)
            flush.none_from.add(src)
            self._flush_role(flush, now)
        if msg.proposed_seq == 0:  # a query: give our statement
            entry = self._queue.get(key)
            self._send(
                wire.AckMessage(
                    sender=msg.sender,
                    msg_id=msg.msg_id,
                    proposed_seq=entry.proposal if entry else 1,
                    proposer=self._me,
                ),
                src,
                now,
            )

    def _send_outcome(self, key: MsgKey, outcome: tuple[int, int], to: int, now: float) -> None:
        self.counters.flush_answers += 1
        seq = wire.SeqMessage(
            sender=key[0], msg_id=key[1], final_seq=outcome[0], final_seq_proposer=outcome[1]
        )
        self._send(seq, to, now)

    # -- sending -------------------------------------------------------------------------

    def _others(self) -> set[int]:
        """The other members of the view (the transmitter copies it: do not change it)."""
        return self._peers

    def _send_ack(self, sender: int, msg_id: int, proposal: int, now: float) -> None:
        ack = wire.AckMessage(
            sender=sender, msg_id=msg_id, proposed_seq=proposal, proposer=self._me
        )
        self._send(ack, sender, now)

    def _send_seq_ack(self, msg: wire.SeqMessage, to: int, now: float) -> None:
        # Answer the member the Seq came from: the data sender, or a member that
        # settled a crashed sender's message.
        seq_ack = wire.SeqAckMessage(sender=msg.sender, msg_id=msg.msg_id, ack_sender=self._me)
        self._send(seq_ack, to, now)

    def _send(self, msg: wire.IsisMessage, to: int, now: float) -> None:
        if to == self._me:
            self._loopback.append(msg)
            return
        addr = self._live_addrs.get(to)
        if addr is None:  # removed, or no member
            return
        payload = wire.encode(msg)
        delay = self.config.ack_delay
        if (
            delay
            and isinstance(msg, wire.AckMessage | wire.SeqAckMessage)
            and self._rng.random() < ACK_DELAY_FRACTION
        ):
            self.counters.delayed += 1
            label = TYPE_NAMES[type(msg)]
            self._trace(
                now,
                LAYER,
                "delay",
                msg=self._msg_name(msg.sender, msg.msg_id),
                peer=self.name_of(to),
                attrs={"type": label, "ms": f"{delay * 1000:g}"},
            )
            self._delay_counter += 1
            heapq.heappush(self._delayed, (now + delay, self._delay_counter, payload, addr))
            return
        self._emit(payload, addr)

    def _send_payload(self, payload: bytes, to: int) -> None:
        """The transmitter's way out (never to ourselves: it addresses other members)."""
        addr = self._live_addrs.get(to)
        if addr is not None:
            self._emit(payload, addr)

    def _emit(self, payload: bytes, addr: Address) -> None:
        self.counters.messages_out += 1
        if not self._batching:
            self.counters.datagrams_out += 1
            self._outbox.append((payload, addr))
            return
        # A member's batch is one growing buffer: the messages back to back, as they leave.
        batch = self._batches.get(addr)
        if batch is None:
            self._batches[addr] = bytearray(payload)
            if self._batch_due is None:
                self._batch_due = self._now + self._batch_delay
        elif len(batch) + len(payload) > self._batch_bytes:
            self.counters.datagrams_out += 1
            self._outbox.append((bytes(batch), addr))
            batch[:] = payload
        else:
            batch += payload

    def _flush_batches(self) -> None:
        for addr, batch in self._batches.items():
            self.counters.datagrams_out += 1
            self._outbox.append((bytes(batch), addr))
        self._batches.clear()
        self._batch_due = None

    # -- tracing --------------------------------------------------------------------------

    def _msg_name(self, sender: int, msg_id: int) -> str:
        return f"{self._names.get(sender, sender)}/{msg_id}"

    def _retransmitted(self, item: Transmission, recipients: list[int], cause: str) -> None:
        """The transmitter sent ``item`` again to ``recipients``: count and trace it
        (``attrs.cause`` on the sealed wire: ``timeout``, or ``gap`` for a fast repair)."""
        self.counters.retransmissions += len(recipients)
        if cause == "gap":
            self.counters.gap_repairs += len(recipients)
        elif cause == "probe":
            self.counters.probes += len(recipients)
        attrs = {
            "type": item.label,
            "attempt": str(item.attempt),
            "to": ",".join(self.name_of(m) for m in recipients),
        }
        if not self._by_ip:
            attrs["cause"] = cause
        self._trace(self._now, LAYER, "retransmit", msg=item.msg, attrs=attrs)

    def _drop(
        self,
        now: float,
        data: bytes,
        msg: wire.IsisMessage | None,
        reason: str,
        *,
        peer: str | None,
        size: int | None = None,
    ) -> None:
        attrs = {"reason": reason}
        if msg is not None:
            attrs["type"] = TYPE_NAMES[type(msg)]
        self._trace(
            now, LAYER, "drop", peer=peer, size=size if size is not None else len(data), attrs=attrs
        )

    def _spoofed(self, now: float, msg: wire.IsisMessage, src: int, size: int | None) -> None:
        self.counters.spoofed += 1
        self._drop(
            now,
            b"",
            msg,
            "identity field does not match the source address",
            peer=self.name_of(src),
            size=wire_size(msg) if size is None else size,
        )


_SIZES: dict[type[wire.IsisMessage], int] = {
    wire.AckMessage: 20,
    wire.SeqMessage: 20,
    wire.SeqAckMessage: 16,
    wire.MarkerMessage: 8,
    wire.SnapshotMarker: 12,
}


def wire_size(msg: wire.IsisMessage) -> int:
    """Bytes of one message on the wire (reference (a), "Wire formats"; type 7 for a
    payload that is not 4 bytes)."""
    if isinstance(msg, wire.DataMessage):
        n = len(msg.data)
        return 16 if n == wire.ORIGINAL_DATA_SIZE else wire.DATA_HEADER_SIZE + n
    return _SIZES[type(msg)]


def members_from(entries: Sequence[tuple[str, Address]]) -> tuple[Member, ...]:
    """Members numbered from 1 in the given order (the original's hostfile line index)."""
    return tuple(
        Member(id=index, name=name, addr=addr) for index, (name, addr) in enumerate(entries, 1)
    )
