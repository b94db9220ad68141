"""The Exon transport as a sans-I/O core: exactly-once, unordered messages between
nodes named by string ids, over datagrams (:mod:`gossamer.wire.exon_transport`).

It follows the Java original (``haslab.eo.EOMiddleware``, mobility fork) so that the
two interoperate:

- **Sender** (a *send record* per destination, made by the first message to it): asks
  for ``slots`` (N, 2500) slots with REQSLOTS; the receiver grants them with SLOTS under
  its receive-record clock ``r``; each message then leaves as one TOKEN in one granted
  slot, retransmitted until an ACK names the slot. At most ``in_transit`` (P, 625)
  TOKENs per destination are unacknowledged; messages beyond wait in the record's
  queue. After each SLOTS the sender asks again to hold N spare slots; when it holds N
  and has nothing queued or in flight, it closes the record (REQSLOTS with ``n = 0``)
  and keeps its clock (``clock``, the original's ``ck``) for the next record.
- **Receiver** (a *receive record* per source, made by the first REQSLOTS): a TOKEN
  whose clock is the record's and whose slot is still free is delivered and its slot
  used; a TOKEN of a used slot is acknowledged again but not delivered (a duplicate).
  TOKENs under another clock are ignored. Delivery is in arrival order, **not** in
  sending order, like the original's.
- **Timers** (the sender's RTT estimate is an EWMA ``0.2 x old + 0.8 x sample`` of
  REQSLOTS-to-SLOTS times starting at 10 ms, sent in milliseconds in each REQSLOTS;
  every timeout is clamped to ``[timeout_min, timeout_max]``, 100 ms to 1 s): REQSLOTS repeats
  after 1.5 x RTT while slots are wanted; a TOKEN is retransmitted after 2 x RTT, then
  after 6 x RTT, doubling from there (the original repeats 6 x RTT; both stop at
  ``timeout_max``); ACKs leave at once (the original's ``maxAcks = 1``); a receive
  record idle for ``probe_after`` (50 s) sends SLOTS with ``n = 0``, which a sender
  without a record answers with a closing REQSLOTS, so abandoned records go away.
- **Node ids**: every datagram names its source and destination; one not addressed to
  this node is dropped (``counters["not_for_me"]``), and the address of its source id
  is updated from every datagram received. :meth:`register` sets an address. A message
  to this node itself is delivered at once, without the network.

Two deliberate differences, both invisible on the wire:

- A new send record numbers its TOKENs from its first granted slot; the original
  numbers them from 0 (its ``Interval(0, 0)``), which its receiver accepts on a fresh
  receive record (slots ``[0, s + n)``) but which, when the closing REQSLOTS of the
  previous record was lost, lands in slots the stale receive record already used: the
  first messages of the new record are acknowledged and never delivered.
  ``original_numbering=True`` restores the original's numbering (to emulate it).
- Against that loss when the sender is the original: a REQSLOTS asking for slots with
  ``l == s`` equal to the record's end comes from a sender with nothing in flight and
  no spare slot, which is what a new send record looks like; the receiver then starts
  a fresh receive record (new clock, slots ``[0, s + n)``), which a sender with nothing
  in flight cannot tell from the old one (``counters["records_renewed"]``;
  ``renew_records=False`` keeps the original's behaviour).

Inputs: :meth:`send`, :meth:`receive_datagram`, :meth:`handle_timer`; outputs:
:meth:`datagrams_to_send`, :meth:`events_received` (:class:`ExonMessage`, one per
message delivered), :meth:`next_deadline`. ``now`` is in seconds.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

from gossamer._types import Address, Datagram
from gossamer.errors import ConfigError, DecodeError, LocalProtocolError, NoRouteError
from gossamer.params import Checked, PositiveCount, PositiveSeconds, check
from gossamer.wire import exon_transport as wire
from gossamer.wire.exon_transport import Ack, ExonDatagram, ReqSlots, Slots, Token

__all__ = ["ExonConfig", "ExonCore", "ExonMessage"]

_I64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ExonConfig(Checked):
    """The original's constants, by default (P, N, the RTT and timeout bounds). Times in
    seconds (the RTT travels in milliseconds)."""

    #: P: unacknowledged TOKENs per destination.
    in_transit: PositiveCount = 625
    #: N: the spare slots a sender keeps asking for.
    slots: PositiveCount = 2500
    #: The RTT estimate of a new send record.
    initial_rtt: PositiveSeconds = 0.010
    #: Bounds of every timeout.
    timeout_min: PositiveSeconds = 0.1
    timeout_max: PositiveSeconds = 1.0
    #: Time without SLOTS sent after which a receive record probes its sender.
    probe_after: PositiveSeconds = 50.0
    #: Number new send records' TOKENs from slot 0, like the original (see the module).
    original_numbering: bool = False
    #: Start a fresh receive record for a REQSLOTS that can only come from a new send
    #: record (see the module).
    renew_records: bool = True

    def __post_init__(self) -> None:
        check(self)  # not super(): a slots dataclass is a copy of the class it was written as
        if self.timeout_min > self.timeout_max:
            raise ConfigError("need timeout_min <= timeout_max")


@dataclass(frozen=True, slots=True)
class ExonMessage:
    """One message delivered: ``data`` from node ``node``."""

    node: str
    data: bytes


class _FreeSlots:
    """The receiver's free slots: disjoint sorted ranges ``[lo, hi)`` (the original's
    sliding bitmap). Used slots split a range; in-order use just moves its start."""

    __slots__ = ("end", "his", "los")

    def __init__(self) -> None:
        self.los: list[int] = []
        self.his: list[int] = []
        self.end = 0

    def __len__(self) -> int:
        return sum(hi - lo for lo, hi in zip(self.los, self.his, strict=True))

    def empty(self) -> bool:
        return not self.los

    def extend_to(self, end: int) -> None:
        if end <= self.end:
            return
        if self.his and self.his[-1] == self.end:
            self.his[-1] = end
        else:
            self.los.append(self.end)
            self.his.append(end)
        self.end = end

    def take(self, slot: int) -> bool:
        """Use ``slot``: True if it was free."""
        i = bisect_right(self.los, slot) - 1
        if i < 0 or slot >= self.his[i]:
            return False
        lo, hi = self.los[i], self.his[i]
        if slot == lo:
            if lo + 1 == hi:
                del self.los[i], self.his[i]
            else:
                self.los[i] = lo + 1
        elif slot == hi - 1:
            self.his[i] = slot
        else:
            self.his[i] = slot
            self.los.insert(i + 1, slot + 1)
            self.his.insert(i + 1, hi)
        return True

    def drop_below(self, limit: int) -> None:
        while self.los and self.his[0] <= limit:
            del self.los[0], self.his[0]
        if self.los and self.los[0] < limit:
            self.los[0] = limit


@dataclass(slots=True)
class _Receive:
    """A receive record (one per sending node): its slots end at ``sck``, its clock is
    ``rck``, and ``last_slots`` is when it last sent SLOTS; ``start`` is the ``s`` of
    the REQSLOTS that opened it (its own closing REQSLOTS names a larger one)."""

    sck: int
    rck: int
    free: _FreeSlots = field(default_factory=_FreeSlots)
    last_slots: float = 0.0
    start: int = 0


@dataclass(slots=True)
class _Token:
    """A TOKEN sent and not yet acknowledged, with its current retransmission timeout."""

    slot: int
    rck: int
    data: bytes
    timeout: float = 0.0


@dataclass(slots=True)
class _Send:
    """A send record (one per destination node): slots granted up to ``sck`` under the
    receiver's clock ``rck``, messages waiting, TOKENs in flight, the RTT estimate."""

    sck: int
    rck: int = 0
    next_slot: int = 0  # the first spare slot (the original's envelopes.from)
    queue: deque[bytes] = field(default_factory=deque)
    #: Unacknowledged TOKENs by slot; slots are taken in increasing order, so the
    #: first key is the smallest.
    tokens: dict[int, _Token] = field(default_factory=dict)
    asked_at: float | None = None  # when the last REQSLOTS left (seconds)
    asking: bool = False  # a REQSLOTS for n > 0 is repeated until SLOTS come
    rtt: float = 0.010
    fresh: bool = True  # no SLOTS yet


class ExonCore:
    """One Exon node named ``node_id`` (see the module docstring for the protocol).

    ``clock`` is the original's ``ck``, persisted by it across restarts in
    ``<id>.eomback``: give a restarted node a clock at least as large as the one it
    ended with (:attr:`clock`) so that its new records do not reuse old numbers."""

    def __init__(self, node_id: str, config: ExonConfig | None = None, *, clock: int = 0) -> None:
        if not 1 <= len(node_id.encode()) <= wire.MAX_ID:
            raise ConfigError(f"a node id is 1 to {wire.MAX_ID} bytes of UTF-8", node_id=node_id)
        self.node_id = node_id
        self.config = config or ExonConfig()
        self.clock = clock
        #: Node id to address, set by :meth:`register` and by every datagram received.
        self.addresses: dict[str, Address] = {}
        self.counters: dict[str, int] = dict.fromkeys(
            ("messages_sent", "tokens_sent", "retransmissions", "delivered", "duplicates",
             "stale", "abandoned", "malformed", "not_for_me", "no_address", "records_renewed",
             "reqslots_sent", "slots_sent", "acks_sent", "datagrams_in"), 0
        )
        self._sends: dict[str, _Send] = {}
        self._receives: dict[str, _Receive] = {}
        self._out: list[Datagram] = []
        self._events: list[ExonMessage] = []
        self._timers: list[tuple[float, int, str, str, int]] = []
        self._timer_seq = 0

    # -- local requests -----------------------------------------------------------------

    def register(self, node_id: str, address: Address) -> None:
        """Where node ``node_id`` is (replaced by the source of its datagrams)."""
        self.addresses[node_id] = address

    def max_message(self, node_id: str) -> int:
        """The largest message to ``node_id`` that fits in one datagram."""
        return wire.max_payload(self.node_id, node_id)

    def send(self, node_id: str, data: bytes, now: float) -> None:
        """Send ``data`` to ``node_id``, exactly once. Raises ``NoRouteError`` when
        ``node_id`` has no known address and ``LocalProtocolError`` when ``data`` does
        not fit in one datagram (:meth:`max_message`)."""
        if node_id == self.node_id:
            self.counters["messages_sent"] += 1
            self.counters["delivered"] += 1
            self._events.append(ExonMessage(node_id, bytes(data)))
            return
        if node_id not in self.addresses:
            raise NoRouteError(f"no address for Exon node {node_id!r}", node=node_id)
        limit = self.max_message(node_id)
        if len(data) > limit:
            raise LocalProtocolError(
                f"message of {len(data)} bytes exceeds {limit}, the most one Exon datagram "
                f"to {node_id!r} carries", size=len(data), limit=limit)
        self.counters["messages_sent"] += 1
        record = self._sends.get(node_id)
        if record is None:
            record = _Send(sck=self.clock, rtt=self.config.initial_rtt)
            record.next_slot = 0 if self.config.original_numbering else self.clock
            record.queue.append(bytes(data))
            self._sends[node_id] = record
            self._request_slots(node_id, record, now)
            return
        record.queue.append(bytes(data))
        self._send_queued(node_id, record, now)

    def pending(self, node_id: str) -> int:
        """Messages to ``node_id`` not yet acknowledged (queued or in flight)."""
        record = self._sends.get(node_id)
        return 0 if record is None else len(record.queue) + len(record.tokens)

    # -- datagrams in -------------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.counters["datagrams_in"] += 1
        try:
            datagram = wire.decode(data)
        except DecodeError:
            self.counters["malformed"] += 1
            return
        if datagram.dst != self.node_id:
            self.counters["not_for_me"] += 1
            return
        src = datagram.src
        self.addresses[src] = addr
        body = datagram.body
        if isinstance(body, Token):
            self._on_token(src, body)
        elif isinstance(body, Ack):
            self._on_ack(src, body, now)
        elif isinstance(body, ReqSlots):
            self._on_reqslots(src, body, now)
        else:
            self._on_slots(src, body, now)

    def _on_token(self, src: str, token: Token) -> None:
        record = self._receives.get(src)
        if record is None or token.r != record.rck:
            self.counters["stale"] += 1
            return
        if record.free.take(token.s):
            self.counters["delivered"] += 1
            self._events.append(ExonMessage(src, token.payload))
        else:
            self.counters["duplicates"] += 1
        self.counters["acks_sent"] += 1
        self._emit(src, Ack(token.r, (token.s,)))

    def _on_ack(self, src: str, ack: Ack, now: float) -> None:
        record = self._sends.get(src)
        if record is None or ack.r != record.rck:
            self.counters["stale"] += 1
            return
        for slot in ack.slots:
            record.tokens.pop(slot, None)
        self._send_queued(src, record, now)

    def _on_reqslots(self, src: str, req: ReqSlots, now: float) -> None:
        if req.s + req.n > _I64_MAX:
            self.counters["malformed"] += 1  # slots no datagram could name
            return
        record = self._receives.get(src)
        if record is not None and req.n == 0 and req.s <= record.start:
            # The close of the sender's previous record, overtaken by the REQSLOTS that
            # opened this one: applied here it would free none of this record's slots
            # and forget the others, so the new record's first TOKENs would be taken
            # for duplicates.
            self.counters["stale"] += 1
            return
        # ``l == s``: nothing in flight and no spare slot. With ``s == sck`` that is a
        # new send record or one that used every slot (renewing costs the latter
        # nothing); with ``s > sck`` only a new one: its clock, which the sender's own
        # receive records advance, has passed the end of the record we hold.
        if (record is not None and req.n > 0 and self.config.renew_records
                and req.l == req.s >= record.sck):
            self.counters["records_renewed"] += 1
            record = None
        if record is None:
            record = _Receive(sck=req.s, rck=self.clock, last_slots=now,
                              start=req.s if req.n > 0 else -1)
            self.clock += 1
            self._receives[src] = record
            self._schedule(now + self.config.probe_after, "probe", src, record.rck)
        if req.n > 0:
            if req.s + req.n > record.sck:
                record.free.extend_to(req.s + req.n)
                record.sck = req.s + req.n
            record.last_slots = now
            self.counters["slots_sent"] += 1
            self._emit(src, Slots(req.s, record.rck, req.n))
        else:
            record.free.drop_below(req.l)
        if record.free.empty():
            del self._receives[src]

    def _on_slots(self, src: str, slots: Slots, now: float) -> None:
        record = self._sends.get(src)
        if record is None:
            # A probe (or a late grant) for a record we closed: we need nothing.
            self.counters["reqslots_sent"] += 1
            self._emit(src, ReqSlots(self.clock, 0, self.clock, 0.0))
            return
        if slots.s != record.sck:
            return  # a grant for an older request
        if slots.s + slots.n > _I64_MAX:
            self.counters["malformed"] += 1  # slots no datagram could name
            return
        if record.asked_at is not None:
            record.rtt = 0.2 * record.rtt + 0.8 * (now - record.asked_at)
        record.rck = slots.r
        record.sck = slots.s + slots.n
        record.fresh = False
        self._send_queued(src, record, now)
        self._request_slots(src, record, now)

    # -- sending ------------------------------------------------------------------------

    def _request_slots(self, dst: str, record: _Send, now: float) -> None:
        spare = record.sck - record.next_slot if not record.fresh else 0
        wanted = self.config.slots + len(record.queue) - spare
        if wanted > 0:
            if record.tokens:
                low = next(iter(record.tokens))
            elif spare:
                low = record.next_slot
            else:
                low = record.sck
            record.asked_at = now
            record.asking = True
            self.counters["reqslots_sent"] += 1
            self._emit(dst, ReqSlots(record.sck, wanted, low, record.rtt * 1000.0))
            self._schedule(now + self._timeout(record.rtt, 1.5), "reqslots", dst, _stamp(now))
            return
        record.asking = False
        if not record.tokens and not record.queue:
            self.counters["reqslots_sent"] += 1
            self._emit(dst, ReqSlots(record.sck, 0, record.sck, record.rtt * 1000.0))
            self.clock = max(self.clock, record.sck)
            del self._sends[dst]

    def _send_queued(self, dst: str, record: _Send, now: float) -> None:
        if record.fresh:
            return
        limit = self.config.in_transit
        while record.queue and record.next_slot < record.sck and len(record.tokens) < limit:
            data = record.queue.popleft()
            slot = record.next_slot
            record.next_slot += 1
            token = _Token(slot, record.rck, data, self._timeout(record.rtt, 2.0))
            record.tokens[slot] = token
            self._send_token(dst, token)
            self._schedule(now + token.timeout, "token", dst, slot)
        if not record.asking and record.sck - record.next_slot < self.config.slots:
            # Spare slots were used: ask for more (the original asks when the first
            # of its N spare slots goes).
            self._request_slots(dst, record, now)

    def _send_token(self, dst: str, token: _Token) -> None:
        address = self.addresses.get(dst)
        if address is None:
            self.counters["no_address"] += 1
            return
        self.counters["tokens_sent"] += 1
        self._out.append(
            (wire.encode_token(self.node_id, dst, token.slot, token.rck, token.data), address)
        )

    def _emit(self, dst: str, body: Ack | ReqSlots | Slots) -> None:
        address = self.addresses.get(dst)
        if address is None:
            self.counters["no_address"] += 1
            return
        self._out.append((wire.encode(ExonDatagram(self.node_id, dst, body)), address))

    def _timeout(self, rtt: float, factor: float) -> float:
        config = self.config
        return min(config.timeout_max, max(config.timeout_min, factor * rtt))

    # -- timers -------------------------------------------------------------------------

    def _schedule(self, due: float, kind: str, node: str, key: int) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (due, self._timer_seq, kind, node, key))

    def next_deadline(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    def handle_timer(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, kind, node, key = heapq.heappop(timers)
            if kind == "token":
                self._token_timer(node, key, now)
            elif kind == "reqslots":
                record = self._sends.get(node)
                if record is not None and record.asked_at is not None \
                        and _stamp(record.asked_at) == key:
                    self._request_slots(node, record, now)
            else:
                self._probe_timer(node, key, now)

    def _token_timer(self, dst: str, slot: int, now: float) -> None:
        record = self._sends.get(dst)
        token = None if record is None else record.tokens.get(slot)
        if record is None or token is None:
            return
        if token.rck != record.rck:
            # The receiver lost its record (it restarted): it ignores this clock, so
            # the TOKEN is never acknowledged. Delivered or not, it is abandoned
            # (the original keeps it, unsent, forever).
            del record.tokens[slot]
            self.counters["abandoned"] += 1
            self._send_queued(dst, record, now)
            return
        if token.timeout < self._timeout(record.rtt, 6.0):
            token.timeout = self._timeout(record.rtt, 6.0)
        else:
            token.timeout = min(self.config.timeout_max, token.timeout * 2)
        self.counters["retransmissions"] += 1
        self._send_token(dst, token)
        self._schedule(now + token.timeout, "token", dst, slot)

    def _probe_timer(self, src: str, rck: int, now: float) -> None:
        record = self._receives.get(src)
        if record is None or record.rck != rck:
            return
        if now - record.last_slots >= self.config.probe_after:
            record.last_slots = now
            self.counters["slots_sent"] += 1
            self._emit(src, Slots(record.sck, record.rck, 0))
        self._schedule(record.last_slots + self.config.probe_after, "probe", src, rck)

    # -- outputs ------------------------------------------------------------------------

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._out = self._out, []
        return out

    def events_received(self) -> list[ExonMessage]:
        out, self._events = self._events, []
        return out


def _stamp(t: float) -> int:
    """A time as an integer key (microseconds) for the REQSLOTS timer."""
    return round(t * 1e6)
