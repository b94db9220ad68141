"""The Prototari core: discovery, heartbeat, delivery and leave, without I/O.

One ``DiscoveryCore`` is one node. Its identity is its unicast address
``config.address`` (IP and unicast port), so several nodes can share a host;
on a LAN every node uses the spec's fixed ports and the identity is simply
``ip:21450``. Remote nodes are identified the same way: by the source address
of their datagrams.

On the original wire (``config.wire``, ``docs/interop.md``) a remote node is its IP
alone, as the Go original identifies it: the original sends every datagram from a
fresh socket with an ephemeral source port, and always to ``IP:21450``. So the source
port is ignored, every remote node is named ``(ip, <our unicast port>)`` (the well-known
port), replies go there, and a datagram from our own IP is our own. And since the
original never answers ``hor?``, a ``pelotari?`` from a registered peer counts as seen
there (it is the only sign of life such a peer gives; the Go original broadcasts every
5 s while it has room); ``inactive_time`` must then exceed the peers' broadcast interval.

Sockets (the driver's business, see ``gossamer.aio.discovery``): a node has a
unicast socket bound to its identity, and a listening socket on the broadcast
port. Both feed ``receive_datagram``; the core does not need to know which one
a datagram came in on, because the kind decides it: only ``pelotari?`` belongs
on the broadcast port (spec "The protocol uses two ports"), and a ``pelotari?``
that arrives by unicast is handled the same way (answered with the same rate
limit). Every datagram the core emits, the ``pelotari?`` broadcast included,
leaves from the unicast socket, so the source address of a broadcast is the
broadcaster's identity. That makes two things exact: a node recognises its
own broadcast (source == ``config.address``), and a responder's ``aupa!`` goes
to the broadcaster's unicast socket (the source), with no port guessed.

The protocol, by spec section (``table.py`` has the per-address state table):

- 1a Broadcasting: ``pelotari?`` to ``broadcast_address:broadcast_port`` every
  ``broadcast_interval`` (the first one jittered), skipped while full.
- 1b Responding: a ``pelotari?`` from an address that is neither a peer nor
  reserved, while not full, is answered with ``aupa!`` and a slot is reserved.
  ``dale!`` within ``handshake_timeout`` registers it; otherwise the slot is
  released and a late ``dale!`` is ignored. The ``aupa!`` is re-sent up to
  ``handshake_attempts`` times in that window while no ``dale!`` came.
- 1c Handshake: an ``aupa!`` registers its sender and is confirmed with
  ``dale!`` only if we broadcast within the last ``handshake_timeout`` and have
  a free slot; an ``aupa!`` from a registered peer in that window gets its
  ``dale!`` again (a lost ``dale!`` is repaired). Any other ``aupa!`` or
  ``dale!`` registers nobody.
- Max peers counts registered peers and reservations, on both sides; a full
  node neither broadcasts nor answers.
- 2 Heartbeat: a peer silent for ``inactive_time`` gets ``hor?``; no message
  from it within ``heartbeat_wait`` is a miss (``hor?`` is re-sent up to
  ``heartbeat_attempts`` times inside the wait, so one lost datagram is not a
  miss); ``max_missed`` (3) misses in a row remove it. Any unicast message
  from a peer counts as seen and resets the missed count.
- Delivery: ``send_data`` to a registered peer; data from non-peers is counted
  and dropped.
- Disconnect: ``stop`` sends ``agur!`` to every peer and reservation; an
  ``agur!`` from a peer removes it at once.
- Answers (``aupa!``, ``dale!``, ``hemen nago!``, ``agur!`` to a stranger's
  ``hor?``) are rate-limited per source and globally (``ratelimit.py``).
  Malformed, oversized and unexpected datagrams are counted and dropped.

Events (``events_received``): ``PeerUp``, ``PeerDown``, ``Received``.
Trace events (``layer=discovery``): ``send``/``recv`` of every message
(``attrs.type`` is the control string or ``data``), ``peer_up`` (reason
``handshake``), ``peer_down`` (reason ``heartbeat`` or ``leave``; ``attrs.side``
is ``local`` when we stopped), ``reserve``/``release``, ``miss``, and ``drop``
with ``attrs.reason`` for everything counted and dropped. ``peer`` is the
remote node's id: ``config.names[address]`` when given, else ``ip:port``.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal, cast

from gossamer._types import Address
from gossamer.addresses import AddressLike, parse_address
from gossamer.errors import ConfigError, DecodeError, LocalProtocolError
from gossamer.params import Bounds, Checked, PositiveCount, PositiveSeconds, Seconds, check
from gossamer.proto.core import DatagramOutputs
from gossamer.proto.discovery.ratelimit import AnswerLimiter
from gossamer.proto.discovery.table import Action, Input, PeerState, transition
from gossamer.trace.sink import Tracer
from gossamer.wire import prototari as wire
from gossamer.wire.mode import WireMode

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "LAYER",
    "DiscoveryConfig",
    "DiscoveryCore",
    "DiscoveryCounters",
    "DiscoveryEvent",
    "PeerDown",
    "PeerUp",
    "Received",
]

LAYER = "discovery"

_CK = wire.ControlKind
_LABEL = {kind: kind.value.decode("ascii") for kind in wire.ControlKind}
_INPUT_OF: dict[wire.ControlKind, Input] = {
    _CK.DISCOVER: Input.DISCOVER,
    _CK.RESPOND: Input.RESPOND,
    _CK.CONFIRM: Input.CONFIRM,
    _CK.HEARTBEAT: Input.HEARTBEAT,
    _CK.HEARTBEAT_REPLY: Input.HEARTBEAT_REPLY,
    _CK.DISCONNECT: Input.DISCONNECT,
}
_ENCODED = {kind: wire.encode(wire.ControlMessage(kind=kind)) for kind in wire.ControlKind}
_REGISTERED = (PeerState.PEER, PeerState.PROBING)


def _check_port(name: str, port: int, *, low: int = 1) -> None:
    if not low <= port <= 65535:
        raise ConfigError(f"{name} must be a UDP port between {low} and 65535", **{name: port})


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoveryConfig(Checked):
    """Everything a node needs: the one configuration of Prototari, for the core, the
    asyncio driver (``gossamer.open_discovery``), the CLI and the lab. Durations are
    seconds; the defaults are the spec's where it gives one.

    Where the node lives (always explicit, DESIGN.md: never "the first interface"):

    - ``address``: this node's identity, the ``(host, port)`` its unicast socket is
      bound to and that others see as the source of its datagrams; also written
      ``"host:port"``, or ``"host"`` for ``port``. The driver resolves a host name
      (``localhost``) to its IPv4 address; the core needs the literal. ``None`` with an
      ``interface``: the interface's address.
    - ``port``: the unicast port when ``address`` names none (spec: 21450).
    - ``interface``: a network device (driver only): the address and broadcast address
      are read from it when not given, and both sockets are bound to it.
    - ``broadcast_address``/``broadcast_port``: where ``pelotari?`` goes (spec 1a:
      the subnet's broadcast address, port 21451).
    - ``listen_port`` (driver only): the port the broadcast socket listens on; it
      defaults to ``broadcast_port`` and differs only where ``broadcast_address`` is
      one peer's address rather than a broadcast address (two nodes on 127.0.0.1 in
      a namespace where nothing may be broadcast).
    - ``broadcast_targets`` (driver only): when not empty, every datagram the core
      addresses to ``broadcast_address:broadcast_port`` leaves as one unicast copy per
      target: the broadcast emulated where nothing may be broadcast (nodes on
      127.0.0.1, each listening on its own port), or extended to seeds behind a router.
    - ``node_id``: the node's name in traces (default ``ip:port``).

    The protocol:

    - ``max_peers`` (spec: 64), ``broadcast_interval`` (spec: 5 s),
      ``inactive_time`` (the spec gives no default; 10 s here, two broadcast
      intervals), ``heartbeat_wait`` (spec: 1 s), ``max_missed`` (spec: 3).
    - ``heartbeat_attempts``: ``hor?`` datagrams sent per heartbeat wait, evenly
      spaced, while no answer came (1 is the spec's literal reading).
    - ``handshake_timeout``: how long a reservation waits for ``dale!``, and how
      long after our broadcast an ``aupa!`` is accepted. ``handshake_attempts``:
      ``aupa!`` datagrams sent per reservation while no ``dale!`` came.
    - ``start``: the core's start time (the driver sets it to its clock).
      ``start_jitter``: the first broadcast happens at ``start`` plus a uniform
      draw from ``[0, start_jitter]`` (default: one second or one interval,
      whichever is shorter), so nodes started together do not broadcast in step.
    - ``answer_rate``/``answer_burst``: answers per second and burst per source;
      ``global_answer_rate``/``global_answer_burst``: the same over all sources;
      ``rate_table_size``: sources tracked at most.
    - ``max_datagram``: larger datagrams are counted as oversized and dropped,
      and ``send_data`` refuses payloads that would exceed it.
    - ``rebalance``, ``rebalance_patience``, ``rebalance_chance``: a node whose
      slots all hold registered peers, after hearing the same non-peer broadcast
      ``rebalance_patience`` times, answers it anyway with probability
      ``rebalance_chance``; if that broadcaster confirms, the node says ``agur!``
      to one random peer to get back to ``max_peers`` (not in the spec; see
      ``docs/discovery.md``, "Rebalancing"). Never needed when ``N <= max_peers + 1``.
    - ``names``: node ids of known addresses, for traces and events.
    - ``wire``: ``sealed`` (default) or ``original``: who a datagram is from and what
      counts as seen (module docstring); the driver sets it from its ``wire=``.
      Sealing itself wraps the core (``gossamer.proto.sealing``).
    """

    address: Address | None = None
    port: int = wire.UNICAST_PORT
    interface: str | None = None
    broadcast_address: str | None = None
    broadcast_port: int = wire.BROADCAST_PORT
    listen_port: int | None = None
    broadcast_targets: tuple[Address, ...] = ()
    node_id: str | None = None
    max_peers: PositiveCount = 64
    broadcast_interval: PositiveSeconds = 5.0
    inactive_time: PositiveSeconds = 10.0
    heartbeat_wait: PositiveSeconds = 1.0
    heartbeat_attempts: PositiveCount = 3
    max_missed: PositiveCount = 3
    handshake_timeout: PositiveSeconds = 2.0
    handshake_attempts: PositiveCount = 3
    start: float = 0.0
    start_jitter: Seconds | None = None
    answer_rate: float = 4.0
    answer_burst: int = 8
    global_answer_rate: float = 100.0
    global_answer_burst: int = 200
    rate_table_size: int = 4096
    max_datagram: Annotated[int, Bounds(low=2, high=wire.MAX_DATAGRAM, unit="bytes")] = (
        wire.MAX_DATAGRAM
    )
    rebalance: bool = True
    rebalance_patience: PositiveCount = 3
    rebalance_chance: Annotated[
        float, Bounds(low=0.0, above=True, high=1.0, kind="a probability")
    ] = 0.25
    names: Mapping[Address, str] = field(default_factory=dict)
    wire: WireMode = WireMode.SEALED

    def __post_init__(self) -> None:
        check(self)  # the Bounds of the fields (not super(): see Checked)
        # Text and tuples as users write them (docs/api.md, "Addresses"), held as tuples.
        address: object = self.address
        if address is not None:
            address = parse_address(cast(AddressLike, address), default_port=self.port)
            object.__setattr__(self, "address", address)
        targets = cast(tuple[AddressLike, ...], self.broadcast_targets)
        targets = tuple(parse_address(target) for target in targets)
        object.__setattr__(self, "broadcast_targets", targets)
        if address is None and self.interface is None:
            raise ConfigError("give the node's address or its interface (never guessed)")
        # Port 0 (the unicast or listening socket's) asks the driver for any free port.
        _check_port("port", self.address[1] if self.address is not None else self.port, low=0)
        _check_port("broadcast_port", self.broadcast_port)
        if self.listen_port is not None:
            _check_port("listen_port", self.listen_port, low=0)

    @property
    def identity(self) -> Address:
        """``address``, which the core needs resolved (the driver fills it in)."""
        if self.address is None:
            raise ConfigError("the node's address is not known yet (resolve the interface)")
        return self.address

    @property
    def jitter(self) -> float:
        """The effective ``start_jitter``."""
        if self.start_jitter is not None:
            return self.start_jitter
        return min(1.0, self.broadcast_interval)


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerUp:
    """``peer`` was registered (spec 1b step 5 or 1c step 2)."""

    peer: Address
    name: str
    reason: Literal["handshake"] = "handshake"


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerDown:
    """``peer`` was removed: it missed ``max_missed`` heartbeats (``heartbeat``) or
    said ``agur!`` (``leave``). ``local`` is True when we removed it because we stopped."""

    peer: Address
    name: str
    reason: Literal["heartbeat", "leave"]
    local: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Received:
    """An application datagram from a registered peer (spec "Delivery").

    ``data`` and ``sender`` are what every service's messages have (``docs/api.md``):
    the payload and the peer's address."""

    peer: Address
    name: str
    payload: bytes

    @property
    def data(self) -> bytes:
        return self.payload

    @property
    def sender(self) -> Address:
        return self.peer


DiscoveryEvent = PeerUp | PeerDown | Received


@dataclass(slots=True)
class DiscoveryCounters:
    """What the node did and what it dropped, by cause."""

    received: int = 0
    sent: int = 0
    broadcasts: int = 0
    broadcasts_skipped_full: int = 0
    own_broadcasts: int = 0
    malformed: int = 0
    oversized: int = 0
    refused_full: int = 0
    refused_reservations: int = 0
    rate_limited: int = 0
    unsolicited: int = 0
    non_peer: int = 0
    non_peer_data: int = 0
    unexpected: int = 0
    peer_broadcasts: int = 0
    after_stop: int = 0
    reservations: int = 0
    reservations_expired: int = 0
    registered: int = 0
    removed_heartbeat: int = 0
    removed_leave: int = 0
    rebalances: int = 0
    heartbeats_sent: int = 0
    misses: int = 0
    data_sent: int = 0
    data_received: int = 0


@dataclass(slots=True, eq=False)
class _Entry:
    """What we know about one remote identity that is reserved or registered."""

    addr: Address
    name: str
    state: PeerState
    last_seen: float
    #: Start of the current reservation (RESERVED) or heartbeat wait (PROBING).
    window: float
    #: Requests (aupa! or hor?) sent in the current window.
    attempts: int = 0
    misses: int = 0
    #: Time of this entry's pending timer-heap item, None when none is pending.
    scheduled: float | None = None


class DiscoveryCore(DatagramOutputs[DiscoveryEvent]):
    """Sans-I/O Prototari node. See the module docstring for the protocol."""

    def __init__(self, config: DiscoveryConfig, *, tracer: Tracer, rng: Random) -> None:
        super().__init__()
        self.config = config
        self.counters = DiscoveryCounters()
        self._trace = tracer
        if config.broadcast_address is None:
            raise ConfigError("the broadcast address is not known yet (resolve the interface)")
        self._broadcast_to: Address = (config.broadcast_address, config.broadcast_port)
        self._self = config.identity
        self._entries: dict[Address, _Entry] = {}
        self._n_peers = 0
        self._n_reserved = 0
        # Per-entry timers: a heap of (time, tiebreak, address), invalidated lazily
        # (an item is current only while it matches its entry's ``scheduled``).
        self._heap: list[tuple[float, int, Address]] = []
        self._tiebreak = 0
        self._limiter = AnswerLimiter(
            rate=config.answer_rate,
            burst=config.answer_burst,
            global_rate=config.global_answer_rate,
            global_burst=config.global_answer_burst,
            table_size=config.rate_table_size,
            now=config.start,
        )
        self._rng = rng
        # Non-peer broadcasters refused while we were full of peers: address -> times.
        self._stranded: OrderedDict[Address, int] = OrderedDict()
        self._last_broadcast: float | None = None
        self._next_broadcast: float | None = config.start + rng.uniform(0.0, config.jitter)
        self._stopped = False
        self._by_ip = config.wire is WireMode.ORIGINAL

    # -- queries -----------------------------------------------------------------------

    @property
    def address(self) -> Address:
        return self._self

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def full(self) -> bool:
        """True when peers plus reservations reach ``max_peers``: no broadcast, no answer."""
        return self._n_peers + self._n_reserved >= self.config.max_peers

    @property
    def reservation_quota(self) -> int:
        """Reservations we may hold at once: half the free slots, rounded up, at least one.

        The other half stays free for ``aupa!`` answers to our own broadcasts. Without
        it, nodes started together on a large LAN each fill every slot with
        reservations for broadcasters that have filled theirs the same way, and
        handshakes barely complete (``docs/discovery.md``, "Reservation quota").
        """
        return max(1, (self.config.max_peers - self._n_peers + 1) // 2)

    def peers(self) -> list[Address]:
        """Registered peers, in the order their entries were created."""
        return [a for a, e in self._entries.items() if e.state in _REGISTERED]

    def reservations(self) -> list[Address]:
        return [a for a, e in self._entries.items() if e.state is PeerState.RESERVED]

    def state_of(self, addr: Address) -> PeerState:
        entry = self._entries.get(addr)
        return PeerState.UNKNOWN if entry is None else entry.state

    def missed(self, addr: Address) -> int:
        """The missed-heartbeats counter of a registered peer (0 otherwise)."""
        entry = self._entries.get(addr)
        return 0 if entry is None else entry.misses

    def name_of(self, addr: Address) -> str:
        name = self.config.names.get(addr)
        return name if name is not None else f"{addr[0]}:{addr[1]}"

    # -- inputs --------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        """A datagram from ``addr`` arrived on either socket (see the module docstring)."""
        if self._stopped:
            self.counters.after_stop += 1
            return
        self.counters.received += 1
        if self._by_ip:
            addr = (addr[0], self._self[1])
        if addr == self._self:
            # Our own pelotari? looped back by the broadcast (or a forged source).
            self.counters.own_broadcasts += 1
            self._drop(now, addr, "own_address", len(data))
            return
        if len(data) > self.config.max_datagram:
            self.counters.oversized += 1
            self._drop(now, addr, "oversized", len(data))
            return
        try:
            msg = wire.decode(data, max_size=self.config.max_datagram)
        except DecodeError:
            self.counters.malformed += 1
            self._drop(now, addr, "malformed", len(data))
            return
        label = "data" if isinstance(msg, wire.DataMessage) else _LABEL[msg.kind]
        self._trace(
            now, LAYER, "recv", peer=self.name_of(addr), size=len(data), attrs={"type": label}
        )
        entry = self._entries.get(addr)
        state = PeerState.UNKNOWN if entry is None else entry.state
        event, reason = self._classify(msg, addr, state, now)
        payload = msg.payload if isinstance(msg, wire.DataMessage) else b""
        self._step(addr, entry, state, event, now, reason=reason, payload=payload)

    def handle_timer(self, now: float) -> None:
        if self._stopped:
            return
        if self._next_broadcast is not None and now >= self._next_broadcast:
            self._broadcast(now)
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, addr = heapq.heappop(heap)
            entry = self._entries.get(addr)
            if entry is None or entry.scheduled != when:
                continue  # stale: the entry is gone or was rescheduled earlier
            entry.scheduled = None
            event = self._timer_input(entry, now)
            if event is not None:
                self._step(addr, entry, entry.state, event, now)
            current = self._entries.get(addr)
            if current is not None:
                self._schedule(current)

    def send_data(self, peer: Address, payload: bytes, now: float) -> None:
        """Send ``payload`` to registered ``peer`` (spec "Delivery", best effort).

        Raises ``LocalProtocolError`` when the node is stopped, ``peer`` is not a
        registered peer, or the datagram would exceed ``max_datagram``.
        """
        if self._stopped:
            raise LocalProtocolError("the node is stopped")
        entry = self._entries.get(peer)
        if entry is None or entry.state not in _REGISTERED:
            raise LocalProtocolError("not a registered peer", peer=f"{peer[0]}:{peer[1]}")
        try:
            data = wire.encode(wire.DataMessage(payload=payload), max_size=self.config.max_datagram)
        except ValueError:
            raise LocalProtocolError(
                "payload too large", size=len(payload), max_datagram=self.config.max_datagram
            ) from None
        self.counters.data_sent += 1
        self._emit(data, peer, now, "data")

    def send_to_peers(self, payload: bytes, now: float) -> int:
        """Send ``payload`` to every registered peer; returns how many."""
        peers = self.peers()
        for peer in peers:
            self.send_data(peer, payload, now)
        return len(peers)

    def stop(self, now: float) -> None:
        """Clean stop: ``agur!`` to every peer and reservation, then nothing more.

        Each registered peer is reported as ``PeerDown(reason="leave", local=True)``.
        Idempotent; afterwards inputs are counted and ignored and there is no deadline.
        """
        if self._stopped:
            return
        for addr, entry in list(self._entries.items()):
            self._send_control(_CK.DISCONNECT, addr, now)
            if entry.state in _REGISTERED:
                self._remove(entry, now, "leave", local=True)
            else:
                self._release(entry, now, "stop")
        self._stopped = True
        self._next_broadcast = None
        self._heap.clear()

    # -- outputs (and datagrams_to_send, events_received: DatagramOutputs) ----------------

    def next_deadline(self) -> float | None:
        if self._stopped:
            return None
        heap = self._heap
        while heap:
            when, _, addr = heap[0]
            entry = self._entries.get(addr)
            if entry is not None and entry.scheduled == when:
                if self._due(entry) <= when:
                    break
                # The entry's deadline moved later (it was seen): re-file it, so the
                # deadline we report is exact and drivers are not woken for nothing.
                heapq.heappop(heap)
                entry.scheduled = None
                self._schedule(entry)
                continue
            heapq.heappop(heap)
        deadlines = [heap[0][0]] if heap else []
        if self._next_broadcast is not None:
            deadlines.append(self._next_broadcast)
        return min(deadlines, default=None)

    # -- classification ---------------------------------------------------------------

    def _classify(
        self, msg: wire.PrototariMessage, addr: Address, state: PeerState, now: float
    ) -> tuple[Input, str | None]:
        """The table input for ``msg`` in ``state``, and why it is refused if it is.

        A token is spent only when the resulting transition sends an answer.
        """
        if isinstance(msg, wire.DataMessage):
            return Input.DATA, None
        event = _INPUT_OF[msg.kind]
        if event is Input.DISCOVER:
            if state in _REGISTERED:
                if self._by_ip:
                    return Input.DISCOVER_ALIVE, None  # see the module docstring
                return event, None  # 1b step 1: ignored, nothing to spend
            if state is PeerState.UNKNOWN:
                if self.full:
                    if self._may_claim(addr, now):
                        return event, None  # rebalancing: answer although full
                    return Input.DISCOVER_REFUSED, "full"  # 1b step 2
                if self._n_reserved >= self.reservation_quota:
                    return Input.DISCOVER_REFUSED, "reservations"
            if not self._limiter.allow(addr, now):
                return Input.DISCOVER_REFUSED, "rate_limited"
            return event, None
        if event is Input.RESPOND:
            recent = (
                self._last_broadcast is not None
                and now - self._last_broadcast <= self.config.handshake_timeout
            )
            if not recent:
                return Input.RESPOND_REFUSED, "unsolicited"
            if not self._limiter.allow(addr, now, solicited=True):
                return Input.RESPOND_REFUSED, "rate_limited"
            if state is PeerState.UNKNOWN and self.full:
                return Input.RESPOND_FULL, "full"  # 1c step 1
            return event, None
        if event is Input.HEARTBEAT and not self._limiter.allow(addr, now):
            return Input.HEARTBEAT_REFUSED, "rate_limited"
        return event, None

    def _may_claim(self, addr: Address, now: float) -> bool:
        """Rebalancing: may a node full of peers answer stranded broadcaster ``addr``?

        Only when every slot holds a registered peer (no reservation pending),
        after ``rebalance_patience`` broadcasts from ``addr`` heard while full,
        with probability ``rebalance_chance``, and within the answer budget. The
        answer reserves one slot beyond ``max_peers``; only if ``addr`` confirms
        it (its ``dale!``) is a random peer evicted to make room (``_step``), so
        a stranded node that takes one claim costs one eviction however many
        full nodes answered it: it answers the claims it has no room for with
        ``agur!``, which releases them.
        """
        cfg = self.config
        if not cfg.rebalance or self._n_reserved or self._n_peers < cfg.max_peers:
            return False
        times = self._stranded.pop(addr, 0) + 1
        self._stranded[addr] = times
        if len(self._stranded) > cfg.rate_table_size:
            self._stranded.popitem(last=False)
        if times < cfg.rebalance_patience or self._rng.random() >= cfg.rebalance_chance:
            return False
        if not self._limiter.allow(addr, now):
            return False
        del self._stranded[addr]
        return True

    def _evict_one(self, now: float, *, keep: Address) -> None:
        """Back to ``max_peers`` after a claim was confirmed: evict a random other peer."""
        candidates = [a for a in self.peers() if a != keep]
        victim = self._entries[self._rng.choice(candidates)]
        self.counters.rebalances += 1
        self._step(victim.addr, victim, victim.state, Input.EVICT, now)

    def _timer_input(self, entry: _Entry, now: float) -> Input | None:
        """The timer input that is due for ``entry`` at ``now``, if any."""
        cfg = self.config
        if entry.state is PeerState.RESERVED:
            if now >= entry.window + cfg.handshake_timeout:
                return Input.RESERVATION_EXPIRED
            if now >= self._retry_at(entry, cfg.handshake_timeout, cfg.handshake_attempts):
                return Input.RETRY_DUE
        elif entry.state is PeerState.PEER:
            if now >= entry.last_seen + cfg.inactive_time:
                return Input.INACTIVE
        elif entry.state is PeerState.PROBING:
            if now >= entry.window + cfg.heartbeat_wait:
                return Input.LAST_MISS if entry.misses + 1 >= cfg.max_missed else Input.MISS
            if now >= self._retry_at(entry, cfg.heartbeat_wait, cfg.heartbeat_attempts):
                return Input.RETRY_DUE
        return None

    @staticmethod
    def _retry_at(entry: _Entry, window: float, attempts: int) -> float:
        """When the next request of this window is due (inf when all were sent)."""
        if entry.attempts >= attempts:
            return float("inf")
        return entry.window + entry.attempts * window / attempts

    def _due(self, entry: _Entry) -> float:
        cfg = self.config
        if entry.state is PeerState.RESERVED:
            return min(
                entry.window + cfg.handshake_timeout,
                self._retry_at(entry, cfg.handshake_timeout, cfg.handshake_attempts),
            )
        if entry.state is PeerState.PROBING:
            return min(
                entry.window + cfg.heartbeat_wait,
                self._retry_at(entry, cfg.heartbeat_wait, cfg.heartbeat_attempts),
            )
        return entry.last_seen + cfg.inactive_time

    def _schedule(self, entry: _Entry) -> None:
        """Make sure a heap item fires no later than the entry's next deadline."""
        due = self._due(entry)
        if entry.scheduled is None or due < entry.scheduled:
            self._tiebreak += 1
            heapq.heappush(self._heap, (due, self._tiebreak, entry.addr))
            entry.scheduled = due

    # -- the table, carried out ------------------------------------------------------

    def _step(
        self,
        addr: Address,
        entry: _Entry | None,
        state: PeerState,
        event: Input,
        now: float,
        *,
        reason: str | None = None,
        payload: bytes = b"",
    ) -> None:
        next_state, actions = transition(state, event)
        for action in actions:
            entry = self._act(action, event, addr, entry, now, reason=reason, payload=payload)
        if next_state is PeerState.UNKNOWN:
            assert addr not in self._entries
            return
        assert entry is not None
        if entry.state is not next_state:
            self._set_state(entry, next_state)
        self._schedule(entry)
        if self._n_peers > self.config.max_peers:
            # Only a confirmed rebalancing claim gets here (its reservation was the
            # one slot beyond max_peers): make room, so max_peers holds again.
            self._evict_one(now, keep=addr)

    def _act(
        self,
        action: Action,
        event: Input,
        addr: Address,
        entry: _Entry | None,
        now: float,
        *,
        reason: str | None,
        payload: bytes,
    ) -> _Entry | None:
        match action:
            case Action.RESERVE:
                if entry is None:
                    entry = _Entry(
                        addr=addr,
                        name=self.name_of(addr),
                        state=PeerState.UNKNOWN,
                        last_seen=now,
                        window=now,
                    )
                    self._entries[addr] = entry
                    self._set_state(entry, PeerState.RESERVED)
                    self.counters.reservations += 1
                    self._trace(now, LAYER, "reserve", peer=entry.name)
                entry.window = now
                entry.attempts = 0
            case Action.RELEASE:
                assert entry is not None
                self._release(
                    entry, now, "expired" if event is Input.RESERVATION_EXPIRED else "leave"
                )
                return None
            case Action.REGISTER:
                entry = self._register(addr, entry, now)
            case Action.REMOVE_LEAVE:
                assert entry is not None
                self._remove(entry, now, "leave")
                return None
            case Action.REMOVE_HEARTBEAT:
                assert entry is not None
                self._remove(entry, now, "heartbeat")
                return None
            case Action.REMOVE_EVICT:
                assert entry is not None
                self._remove(entry, now, "leave", local=True, why="rebalance")
                return None
            case Action.SEEN:
                assert entry is not None
                entry.last_seen = now
                entry.misses = 0
            case Action.START_PROBE:
                assert entry is not None
                entry.window = now
                entry.attempts = 0
            case Action.COUNT_MISS:
                assert entry is not None
                entry.misses += 1
                entry.window = now
                entry.attempts = 0
                self.counters.misses += 1
                self._trace(now, LAYER, "miss", peer=entry.name, seq=entry.misses)
            case Action.DELIVER:
                assert entry is not None
                self.counters.data_received += 1
                self._events.append(Received(peer=addr, name=entry.name, payload=payload))
            case Action.SEND_RESPOND:
                assert entry is not None
                entry.attempts += 1
                self._send_control(_CK.RESPOND, addr, now)
            case Action.SEND_CONFIRM:
                self._send_control(_CK.CONFIRM, addr, now)
            case Action.SEND_HEARTBEAT:
                assert entry is not None
                entry.attempts += 1
                self.counters.heartbeats_sent += 1
                self._send_control(_CK.HEARTBEAT, addr, now)
            case Action.SEND_HEARTBEAT_REPLY:
                self._send_control(_CK.HEARTBEAT_REPLY, addr, now)
            case Action.SEND_DISCONNECT:
                self._send_control(_CK.DISCONNECT, addr, now)
            case Action.DROP_REFUSED | Action.DROP_UNSOLICITED:
                # ``_classify`` names every refusal; only a CONFIRM we never asked for
                # comes without a reason.
                why = reason or "unsolicited"
                self._count_refusal(why)
                self._drop(now, addr, why)
            case Action.DROP_NON_PEER:
                self.counters.non_peer += 1
                if reason == "rate_limited":
                    self.counters.rate_limited += 1
                self._drop(now, addr, "non_peer" if reason is None else f"non_peer,{reason}")
            case Action.DROP_NON_PEER_DATA:
                self.counters.non_peer_data += 1
                self._drop(now, addr, "non_peer_data", len(payload) + 2)
            case Action.DROP_UNEXPECTED:
                self.counters.unexpected += 1
                self._drop(now, addr, "unexpected")
            case Action.IGNORE_PEER_BROADCAST:
                self.counters.peer_broadcasts += 1
        return entry

    def _count_refusal(self, reason: str) -> None:
        """Count a message refused or dropped for ``reason``: ``full``, ``reservations``,
        ``rate_limited`` or ``unsolicited``."""
        counters = self.counters
        match reason:
            case "full":
                counters.refused_full += 1
            case "reservations":
                counters.refused_reservations += 1
            case "rate_limited":
                counters.rate_limited += 1
            case _:
                counters.unsolicited += 1

    # -- state bookkeeping ----------------------------------------------------------------

    def _set_state(self, entry: _Entry, state: PeerState) -> None:
        """Change ``entry.state`` keeping the peer and reservation counts exact."""
        old = entry.state
        if old is PeerState.RESERVED:
            self._n_reserved -= 1
        elif old in _REGISTERED:
            self._n_peers -= 1
        entry.state = state
        if state is PeerState.RESERVED:
            self._n_reserved += 1
        elif state in _REGISTERED:
            self._n_peers += 1

    def _register(self, addr: Address, entry: _Entry | None, now: float) -> _Entry:
        if entry is None:
            entry = _Entry(
                addr=addr, name=self.name_of(addr), state=PeerState.UNKNOWN, last_seen=now,
                window=now,
            )  # fmt: skip
            self._entries[addr] = entry
        self._set_state(entry, PeerState.PEER)
        entry.last_seen = now
        entry.misses = 0
        entry.attempts = 0
        self.counters.registered += 1
        self._trace(
            now, LAYER, "peer_up", peer=entry.name,
            attrs={"reason": "handshake", "addr": f"{addr[0]}:{addr[1]}"},
        )  # fmt: skip
        self._events.append(PeerUp(peer=addr, name=entry.name))
        return entry

    def _remove(
        self,
        entry: _Entry,
        now: float,
        reason: Literal["heartbeat", "leave"],
        *,
        local: bool = False,
        why: str | None = None,
    ) -> None:
        del self._entries[entry.addr]
        self._set_state(entry, PeerState.UNKNOWN)
        if reason == "heartbeat":
            self.counters.removed_heartbeat += 1
        else:
            self.counters.removed_leave += 1
        attrs = {"reason": reason, "addr": f"{entry.addr[0]}:{entry.addr[1]}"}
        if local:
            attrs["side"] = "local"
        if why is not None:
            attrs["why"] = why
        if reason == "heartbeat":
            attrs["missed"] = str(entry.misses + 1)
        self._trace(now, LAYER, "peer_down", peer=entry.name, attrs=attrs)
        self._events.append(PeerDown(peer=entry.addr, name=entry.name, reason=reason, local=local))

    def _release(self, entry: _Entry, now: float, why: str) -> None:
        del self._entries[entry.addr]
        self._set_state(entry, PeerState.UNKNOWN)
        if why == "expired":
            self.counters.reservations_expired += 1
        self._trace(now, LAYER, "release", peer=entry.name, attrs={"reason": why})

    # -- sending ------------------------------------------------------------------------

    def _broadcast(self, now: float) -> None:
        """Spec 1a: one ``pelotari?`` unless full, then sleep one interval."""
        assert self._next_broadcast is not None
        if self.full:
            self.counters.broadcasts_skipped_full += 1  # 1a step 3
        else:
            self.counters.broadcasts += 1
            self._last_broadcast = now
            self._emit(_ENCODED[_CK.DISCOVER], self._broadcast_to, now, "pelotari?", peer="*")
        step = self.config.broadcast_interval
        following = self._next_broadcast + step
        # Keep the phase unless the driver woke us more than an interval late.
        self._next_broadcast = following if following > now else now + step

    def _send_control(self, kind: wire.ControlKind, addr: Address, now: float) -> None:
        self._emit(_ENCODED[kind], addr, now, _LABEL[kind])

    def _emit(
        self, data: bytes, addr: Address, now: float, label: str, *, peer: str | None = None
    ) -> None:
        self._outbox.append((data, addr))
        self.counters.sent += 1
        self._trace(
            now, LAYER, "send", peer=self.name_of(addr) if peer is None else peer,
            size=len(data), attrs={"type": label},
        )  # fmt: skip

    def _drop(self, now: float, addr: Address, reason: str, size: int | None = None) -> None:
        self._trace(
            now, LAYER, "drop", peer=self.name_of(addr), size=size, attrs={"reason": reason}
        )
