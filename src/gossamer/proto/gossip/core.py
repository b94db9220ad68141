"""The gossip core: Chatter's log-depth distribution tree with the multicast shortcut, fixed.

One ``GossipCore`` is one node, named by its NetID (``my_addr:my_port``; also its trace node
id). It is sans-I/O: the driver feeds it multicast datagrams, the bytes of its TCP
connections and the time, and carries out what it asks for.

**Broadcast** (chatter-as-coded.md §10, in the same order), by ``broadcast`` at the origin
and again by every node that receives a broadcast over TCP, with the list it received:

1. The origin bumps its sequence number: the broadcast is ``origin/seqno``.
2. Multicast first, on the local LAN, with the seen list, up to four "other ids" (one
   random peer from each of four distinct multicast groups) and the distribution list
   (receivers learn from it; they never forward it). The origin always does; a
   forwarding node does when its list holds a peer that reported seeing it (so the
   datagram replaces TCP sends), or when it has not multicast for ``announce_interval``
   (so its LAN keeps seeing it). A datagram that would exceed ``max_multicast_size`` first
   sheds the list, then seen-list entries, and if still too large is not sent (its LAN
   stays on TCP).
3. Remove from the list the peers that reported seeing us on multicast (only if step 2 sent).
4. Group the rest into multicast groups (``PeerDB.domain``, the closure of the seen data).
5. Split the groups into floor(log2 G)+1 chunks of halving size; send each chunk to one
   next hop (a random member) over TCP with the rest of the chunk as its distribution list.
6. Record every destination in the peer database.

**Receive.** Multicast receivers deliver and never forward. TCP receivers acknowledge
(sealed mode), deliver, and run steps 2-6 with the list they got and ``hop + 1``.

**Fixes** over the original, each tested:

- The originator's BroadcastID travels end to end (sealed mode: the gossip's current id
  stays the origin's; the hop's identity is the envelope's authenticated sender), and each
  node delivers each broadcast once (``dedupe.py``; a bounded window per origin).
- TCP framing survives coalesced and split reads (``framing.py``); drivers connect with a
  timeout (``connect_timeout``).
- A next hop that fails (no ACK within ``ack_timeout``, or the driver reports the stream
  failed) has its chunk re-planned through another member (``hops.py``), and is avoided as
  a next hop for ``suspect_time``.
- Only datagrams that arrived on the multicast group count as sightings
  (``receive_datagram(..., multicast=True)``); and a multicast's source address must match
  the sender it claims.
- Multicast datagrams stay within ``max_multicast_size`` (8192 in original-wire mode);
  larger messages go by TCP.

**original-wire mode** speaks Chatter's wire byte for byte, and therefore Chatter's
semantics for the ids: the current id of a message is its sender's own NetID and a fresh
seqno (§9, forwarders re-originate), since Chatter peers record it as the multicast sender.
With no end-to-end id on the wire, duplicates are recognised by a digest of the payload
(``DigestWindow``), broadcasts are named ``chatter:<digest>`` in traces, hop counts are
unknown, and no ACKs are sent (a Chatter sender closes its connection on any inbound data,
§8). Failed next hops are still re-planned when the driver reports the failure.

Outputs: ``datagrams_to_send()`` (multicast), ``streams_to_send()`` (``StreamSend``: bytes for
our outbound connection to a peer, opened by the driver when needed, or for an inbound
connection), ``events_received()`` (``Delivered``), ``next_deadline()``.

Trace events (``layer=gossip``): ``broadcast`` at the origin (``msg`` = ``origin/seqno``,
``seq`` = seqno, ``attrs.dests``), ``send`` (``peer``, ``size``, ``attrs.via`` = ``tcp`` or
``multicast``, ``attrs.hop``), ``recv`` (``peer`` = the hop it came from, ``attrs.hop``,
``attrs.via``), ``deliver`` (once per node and broadcast), ``replan`` (``peer`` = the failed
hop, ``attrs.reason``, ``attrs.next``) and ``drop`` (``attrs.reason``).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gossamer._types import Address, Datagram
from gossamer.errors import (
    ConfigError,
    CryptoError,
    DecodeError,
    LocalProtocolError,
    RemoteProtocolError,
)
from gossamer.proto.gossip.config import GossipConfig
from gossamer.proto.gossip.dedupe import (
    DigestWindow,
    DuplicateWindow,
    Freshness,
    payload_digest,
)
from gossamer.proto.gossip.framing import StreamDecoder, frame_message, stream_decoder
from gossamer.proto.gossip.handlers import HandlerRegistry, MessageHandler
from gossamer.proto.gossip.hops import TERMINAL, HopAction, HopInput, HopState, transition
from gossamer.proto.gossip.messages import (
    AckPayload,
    GossipPayload,
    decode_payload,
    encode_ack,
    gossip_header,
)
from gossamer.proto.gossip.peers import PeerDB, PeerInfo
from gossamer.proto.gossip.planner import NextHop, group_by_domain, next_hop, pick_others, plan
from gossamer.trace.sink import Tracer
from gossamer.wire import chatter as cw
from gossamer.wire import envelope
from gossamer.wire.chatter import BroadcastID, Gossip, Limits, NetID
from gossamer.wire.framing import HEADER_SIZE
from gossamer.wire.keyring import Keyring
from gossamer.wire.mode import WireMode

if TYPE_CHECKING:
    from random import Random

__all__ = ["LAYER", "Delivered", "GossipCore", "GossipCounters", "StreamSend"]

LAYER = "gossip"
#: Sightings an ACK carries at most (an ACK stays a few kB even for a full /24).
_MAX_ACK_SEEN = 256
TCP = "tcp"
MULTICAST = "multicast"
UNICAST = "unicast"


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSend:
    """Bytes for one TCP connection: exactly one of ``peer`` and ``conn`` is set.

    ``peer``: our outbound connection to that NetID (the driver connects first, with
    ``connect_timeout``, and reports ``stream_failed(peer)`` if it cannot). ``conn``: an
    inbound connection, by the id the driver gave it in ``receive_stream``. ``close``: close
    the connection once ``data`` is written (its framing was lost).
    """

    data: bytes
    peer: NetID | None = None
    conn: int | None = None
    close: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivered:
    """A broadcast delivered to this node, once.

    ``msg`` names it in traces; ``origin``/``seqno`` are its BroadcastID (``None`` in
    original-wire mode, whose wire does not carry it). ``sender`` is the hop it came
    from, ``hop`` its distance from the origin (``None`` in compat mode), ``via`` ``tcp``,
    ``multicast`` or ``unicast``. The driver calls ``handler.dispatch(payload)``.
    ``data`` is the payload (``bytes`` for ``bytes_handler``).
    """

    msg: str
    origin: NetID | None
    seqno: int | None
    payload: object
    handler: MessageHandler
    sender: NetID
    hop: int | None
    via: str

    @property
    def data(self) -> object:
        """The payload, as every service's messages name it (``docs/api.md``)."""
        return self.payload


@dataclass(slots=True)
class GossipCounters:
    """What the core did; for tests, the simulator's summaries and benchmarks."""

    broadcasts: int = 0
    delivered: int = 0
    duplicates: int = 0
    #: Datagrams or frames the envelope's replay window refused (repeated copies, replays).
    duplicate_datagrams: int = 0
    too_old: int = 0
    received: int = 0
    tcp_sent: int = 0
    tcp_bytes: int = 0
    multicast_sent: int = 0
    multicast_bytes: int = 0
    multicast_skipped: int = 0
    seen_trimmed: int = 0
    acks_sent: int = 0
    ack_bytes: int = 0
    acks_received: int = 0
    late_acks: int = 0
    unexpected_acks: int = 0
    replanned: int = 0
    lost_leaves: int = 0
    dropped: int = 0


class _IndexMap(Mapping[int, NetID]):
    """A message's NetID table as the ``index -> NetID`` map ``decode_with`` takes."""

    __slots__ = ("_table",)

    def __init__(self, table: tuple[NetID, ...]) -> None:
        self._table = table

    def __getitem__(self, index: int) -> NetID:
        if not isinstance(index, int) or not 0 <= index < len(self._table):
            raise KeyError(index)
        return self._table[index]

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self._table)))

    def __len__(self) -> int:
        return len(self._table)


@dataclass(slots=True, kw_only=True)
class _Send:
    """One node's share of one broadcast: what every message it sends for it carries."""

    msg: str
    current: BroadcastID
    handler: MessageHandler
    payload: object
    #: The payload bytes when they do not depend on the table (no NetIDs in the payload).
    content: bytes | None
    payload_netids: tuple[NetID, ...]
    #: Hop count of the messages we send (None in original-wire mode).
    hop: int | None
    origin_is_us: bool


@dataclass(slots=True, kw_only=True)
class _Pending:
    state: HopState
    deadline: float
    head: NetID
    rest: tuple[tuple[NetID, ...], ...]
    send: _Send


@dataclass(slots=True)
class _Outbox:
    datagrams: list[Datagram] = field(default_factory=list)
    streams: list[StreamSend] = field(default_factory=list)
    events: list[Delivered] = field(default_factory=list)


class GossipCore:
    """Sans-I/O Chatter node. See the module docstring for the protocol.

    ``handlers``: the payload types this node can send and deliver. ``rng``: all random
    choices (planning, other ids, envelope session ids unless ``randbytes`` is given).
    ``epoch``: the envelope session epoch; it must grow across restarts of this node
    (drivers pass wall-clock microseconds, the simulator the incarnation).

    ``codec`` (the Chatter codec's caches: tables, NetIDs, tags, key state) and ``keyring``
    (the envelope keys, default ``config.keyring()``, and the session ciphers derived from
    them) hold only what a pure function of the key and the bytes gives: nodes of one
    process with the same key may share them, which changes no output. The simulator does,
    so that ten thousand nodes do not keep ten thousand copies of every cipher they meet.
    """

    def __init__(
        self,
        config: GossipConfig,
        *,
        tracer: Tracer,
        rng: Random,
        handlers: HandlerRegistry | Iterable[MessageHandler] = (),
        epoch: int = 0,
        randbytes: Callable[[int], bytes] | None = None,
        codec: cw.ChatterCodec | None = None,
        keyring: Keyring | None = None,
    ) -> None:
        self.config = config
        self.own = config.netid
        self.node_id = str(self.own)
        self.handlers = (
            handlers if isinstance(handlers, HandlerRegistry) else HandlerRegistry(handlers)
        )
        self.counters = GossipCounters()
        #: Input refused, by reason (the ``drop`` trace events' ``attrs.reason``).
        self.rejected: Counter[str] = Counter()
        self.peers_db = PeerDB(
            self.own,
            max_peers=config.max_peers,
            peer_ttl=config.peer_ttl,
            seen_ttl=config.seen_ttl,
            max_seen=config.max_seen,
            max_witnesses=config.max_witnesses,
        )
        self._trace = tracer
        self._rng = rng
        self._compat = config.wire is WireMode.ORIGINAL
        self._group_label = f"{config.multicast_addr}:{config.multicast_port}"
        self._udp_limits = Limits(max_message_size=65_536)
        self._chatter = cw.ChatterCodec() if codec is None else codec
        self._tcp_limits = Limits(
            max_message_size=config.max_message_size, max_gossip_size=config.max_message_size
        )
        self._seqno = config.first_seqno - 1
        if self._compat:
            self._chatter_key = config.chatter_key()
            self._digests = DigestWindow(ttl=config.seen_ttl)
        else:
            self._keyring = config.keyring() if keyring is None else keyring
            self._session = envelope.SenderSession(
                sender=self.node_id, epoch=epoch, randbytes=randbytes or rng.randbytes
            )
            self._replay = envelope.ReplayWindows()
            self._env_seq = 0
        self._window = DuplicateWindow(
            width=config.dedupe_window, max_origins=config.max_origins, ttl=config.origin_ttl
        )
        self._out = _Outbox()
        self._pending: dict[tuple[NetID, int], _Pending] = {}
        self._deadlines: list[tuple[float, int, tuple[NetID, int]]] = []
        self._tick = itertools.count()
        self._hold_ids = itertools.count(1)
        self._inbound: dict[int, StreamDecoder] = {}
        self._replies: dict[NetID, StreamDecoder] = {}
        self._last_multicast = float("-inf")
        self._next_sweep = 0.0
        #: Later copies of multicast datagrams: (due, tiebreak, bytes).
        self._later: list[tuple[float, int, bytes]] = []
        assert config.multicast_copies is not None  # set by GossipConfig
        self.copies: int = config.multicast_copies

    # -- the application's side ---------------------------------------------------------

    def register(self, handler: MessageHandler) -> None:
        """Register a payload type (``HandlerRegistry.add``)."""
        self.handlers.add(handler)

    def peers(self, now: float) -> list[PeerInfo]:
        """What the peer database knows, one entry per live peer."""
        return self.peers_db.peers(now)

    def broadcast(self, destinations: Iterable[NetID | str], payload: object, now: float) -> str:
        """Broadcast ``payload`` to ``destinations``; return the broadcast's trace id.

        ``destinations`` are NetIDs or ``"ip:port"`` strings; this node and repeats are
        left out, and an empty list still multicasts on the LAN. Raises
        ``LocalProtocolError`` when no handler carries ``payload`` and ``ConfigError`` for
        a malformed destination.
        """
        handler = self.handlers.for_payload(payload)
        dests = self._normalise(destinations)
        self._seqno += 1
        current = BroadcastID(self.own, self._seqno)
        netids = _unique(handler.extract_netids(payload))
        content = None if netids else handler.encode_with(payload, {})
        if self._compat:
            digest = self._digest(handler, payload, content, netids)
            msg = f"chatter:{digest.hex()}"
            self._digests.check(digest, now)
        else:
            msg = f"{self.own}/{self._seqno}"
            self._window.check(self.own.packed, self._seqno, now)
        self.counters.broadcasts += 1
        self._trace(
            now,
            LAYER,
            "broadcast",
            msg=msg,
            seq=self._seqno,
            attrs={
                "dests": ",".join(str(d) for d in dests),
                "type": handler.name,
            },
        )
        send = _Send(
            msg=msg,
            current=current,
            handler=handler,
            payload=payload,
            content=content,
            payload_netids=netids,
            hop=None if self._compat else 1,
            origin_is_us=True,
        )
        self._distribute(send, dests, now)
        return msg

    # -- inputs ------------------------------------------------------------------------

    def receive_datagram(
        self, data: bytes, addr: Address, now: float, *, multicast: bool = False
    ) -> None:
        """A UDP datagram arrived from ``addr``.

        ``multicast`` must be true only for datagrams that arrived on the multicast group
        (the driver knows: its socket is bound to the group address). Others are delivered
        but are not sightings: a unicast datagram to the multicast port does not prove that
        the sender's multicast reaches us (chatter-as-coded.md §8, §12 item 5).
        """
        self._maybe_sweep(now)
        via = MULTICAST if multicast else UNICAST
        opened = self._open_gossip(data, via, now)
        if opened is None:
            return
        sender, _seq, message = opened
        if multicast and addr[0] != sender.host:
            self._drop(
                now,
                "multicast source is not the claimed sender",
                peer=sender,
                size=len(data),
                via=via,
            )
            return
        self._handle(sender, message, via, len(data), now, conn=None, env_seq=None)

    def receive_stream(self, conn: int, data: bytes, now: float) -> None:
        """Bytes from the inbound TCP connection ``conn`` (``b""``: the peer closed it)."""
        self._maybe_sweep(now)
        decoder = self._inbound.get(conn)
        if not data:
            if decoder is not None:
                del self._inbound[conn]
                if decoder.buffered:
                    self._drop(
                        now, "connection closed inside a message", via=TCP, size=decoder.buffered
                    )
            return
        if decoder is None:
            decoder = self._inbound[conn] = stream_decoder(
                chatter=self._compat, max_size=self.config.max_message_size
            )
        try:
            frames = decoder.feed(data)
        except DecodeError as exc:
            frames = []
            self._lost_framing(conn, exc, now)
        for frame in frames:
            self._receive_tcp(frame, conn, now)
        if decoder.failed is not None and conn in self._inbound:
            self._lost_framing(conn, decoder.failed, now)

    def receive_reply(self, peer: NetID, data: bytes, now: float) -> None:
        """Bytes arriving on our outbound connection to ``peer`` (``b""``: it closed).

        Only ACKs travel this way (sealed mode); a Chatter peer sends nothing back.
        """
        decoder = self._replies.get(peer)
        if not data:
            self._replies.pop(peer, None)
            return
        if self._compat:
            self._drop(
                now,
                "data on an outbound original-wire connection",
                peer=peer,
                size=len(data),
                via=TCP,
            )
            return
        if decoder is None:
            decoder = self._replies[peer] = stream_decoder(
                chatter=False, max_size=self.config.max_message_size
            )
        try:
            frames = decoder.feed(data)
        except DecodeError as exc:
            self._replies.pop(peer, None)
            self._drop(now, f"reply framing: {exc.reason}", peer=peer, via=TCP)
            return
        for frame in frames:
            opened = self._open(frame, TCP, now)
            if opened is None:
                continue
            sender, _seq, message = opened
            if not isinstance(message, AckPayload) or sender != peer:
                self._drop(
                    now, "reply is not an ACK from that peer", peer=peer, size=len(frame), via=TCP
                )
                continue
            self.counters.acks_received += 1
            self.peers_db.clear_suspect(peer)
            # The next hop's multicast group: what it hears (see messages.py, ACK).
            self.peers_db.reported_seen(peer, [BroadcastID(n, 0) for n in message.seen], now)
            self._hop_input((peer, message.seq), HopInput.ACK, now)
        if decoder.failed is not None:
            self._replies.pop(peer, None)

    def stream_failed(self, peer: NetID, now: float) -> None:
        """The driver could not connect to ``peer`` or its connection broke: every chunk
        handed to it and not yet acknowledged is re-planned."""
        self._replies.pop(peer, None)
        self.peers_db.mark_failed(peer, now, self.config.suspect_time)
        for key in [k for k, p in self._pending.items() if p.head == peer]:
            self._hop_input(key, HopInput.STREAM_FAILED, now)

    def handle_timer(self, now: float) -> None:
        """Send due multicast copies; re-plan hops whose ACK is overdue, and forget the ones
        kept long enough."""
        later = self._later
        while later and later[0][0] <= now:
            _, _, data = heapq.heappop(later)
            self._out.datagrams.append((data, self.config.group))
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            deadline, _, key = heapq.heappop(deadlines)
            pending = self._pending.get(key)
            if pending is not None and pending.deadline == deadline:
                self._hop_input(key, HopInput.TIMEOUT, now)

    # -- outputs -----------------------------------------------------------------------

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._out.datagrams = self._out.datagrams, []
        return out

    def streams_to_send(self) -> list[StreamSend]:
        out, self._out.streams = self._out.streams, []
        return out

    def events_received(self) -> list[Delivered]:
        out, self._out.events = self._out.events, []
        return out

    def next_deadline(self) -> float | None:
        deadlines = self._deadlines
        first = self._later[0][0] if self._later else None
        while deadlines:
            deadline, _, key = deadlines[0]
            pending = self._pending.get(key)
            if pending is not None and pending.deadline == deadline:
                return deadline if first is None else min(first, deadline)
            heapq.heappop(deadlines)
        return first

    @property
    def pending_hops(self) -> int:
        """TCP hops sent and not yet settled (for tests and summaries)."""
        return len(self._pending)

    # -- receiving ---------------------------------------------------------------------

    def _open(
        self, data: bytes, via: str, now: float
    ) -> tuple[NetID, int | None, GossipPayload | AckPayload] | None:
        """Authenticate and decode one message; ``None`` (traced drop) if it is bad."""
        limits = self._tcp_limits if via == TCP else self._udp_limits
        if self._compat:
            try:
                gossip = self._chatter.decode_message(data, self._chatter_key, limits=limits)
            except DecodeError as exc:
                self._drop(now, exc.reason, size=len(data), via=via)
                return None
            # Chatter's wire has no hop count; the 1 here is never used in compat mode.
            return gossip.current.origin, None, GossipPayload(hop=1, groups=(), gossip=gossip)
        try:
            opened = envelope.unseal(
                self._keyring, data, replay=self._replay, max_payload=self.config.max_message_size
            )
        except DecodeError as exc:
            self._drop(now, exc.reason, size=len(data), via=via)
            return None
        except CryptoError as exc:
            kind = exc.fields.get("kind", "crypto")
            if kind == "duplicate":
                # Mostly our peers' second multicast copies: counted, not traced (a trace
                # event per receiver per copy would double the trace of every broadcast).
                self.counters.duplicate_datagrams += 1
                return None
            self._drop(now, f"envelope rejected: {kind}", size=len(data), via=via)
            return None
        try:
            sender = NetID.parse(opened.sender)
        except (ValueError, TypeError):
            self._drop(now, "envelope sender is not a NetID", size=len(data), via=via)
            return None
        if sender == self.own:
            self._drop(now, "our own message", size=len(data), via=via)
            return None
        try:
            message = decode_payload(opened.payload, limits=limits, codec=self._chatter)
        except DecodeError as exc:
            self._drop(now, exc.reason, peer=sender, size=len(data), via=via)
            return None
        return sender, opened.seq, message

    def _open_gossip(
        self, data: bytes, via: str, now: float
    ) -> tuple[NetID, int | None, GossipPayload] | None:
        """``_open`` for what only gossip may arrive on: a datagram or an inbound
        connection. An ACK belongs on the connection we opened to the peer we gave a chunk
        (``receive_reply``); anywhere else it is a traced drop (``None``)."""
        opened = self._open(data, via, now)
        if opened is None:
            return None
        sender, seq, message = opened
        if isinstance(message, AckPayload):
            where = "on an inbound connection" if via == TCP else "outside a TCP connection"
            self._drop(now, f"ACK {where}", peer=sender, size=len(data), via=via)
            return None
        return sender, seq, message

    def _receive_tcp(self, frame: bytes, conn: int, now: float) -> None:
        opened = self._open_gossip(frame, TCP, now)
        if opened is None:
            return
        sender, env_seq, message = opened
        # Bytes on the wire, as the sender's trace counts them: the frame's prefix included.
        size = len(frame) if self._compat else len(frame) + HEADER_SIZE
        self._handle(sender, message, TCP, size, now, conn=conn, env_seq=env_seq)

    def _handle(
        self,
        sender: NetID,
        message: GossipPayload,
        via: str,
        size: int,
        now: float,
        *,
        conn: int | None,
        env_seq: int | None,
    ) -> None:
        gossip = message.gossip
        current = gossip.current
        if self._compat and sender == self.own:
            self._drop(now, "our own message", size=size, via=via)
            return
        db = self.peers_db
        db.clear_suspect(sender)
        # The peer database, as the FAQ says: sender, seen list, other ids and distribution
        # list (Chatter's UDP path skipped the list, §9). Only a datagram that came by
        # multicast is a sighting (fix of §8).
        if via == MULTICAST:
            db.heard_on_multicast(sender, current.seqno if current.origin == sender else 0, now)
        db.reported_seen(sender, gossip.seen, now)
        db.add(gossip.others, now)
        db.add((sender,), now)
        db.add(gossip.distribution, now)
        if message.groups:
            db.link(_split(gossip.distribution, message.groups), now)
        try:
            handler = self.handlers.for_tag(gossip.type_tag)
            payload = handler.decode_with(gossip.content, _IndexMap(gossip.table))
        except (RemoteProtocolError, DecodeError) as exc:
            # No ACK: the sender re-plans the chunk through a member that can read it.
            self._drop(now, exc.reason, peer=sender, size=size, via=via)
            return
        netids = _unique(handler.extract_netids(payload))
        if self._compat:
            content = None if netids else gossip.content
            digest = self._digest(handler, payload, content, netids)
            msg = f"chatter:{digest.hex()}"
            fresh = self._digests.check(digest, now)
            origin: NetID | None = None
            seqno: int | None = None
            hop: int | None = None
        else:
            msg = f"{current.origin}/{current.seqno}"
            fresh = self._window.check(current.origin.packed, current.seqno, now)
            origin, seqno, hop = current.origin, current.seqno, message.hop
        self.counters.received += 1
        attrs = {"via": via} if hop is None else {"via": via, "hop": str(hop)}
        self._trace(now, LAYER, "recv", msg=msg, peer=str(sender), size=size, attrs=attrs)
        if conn is not None and env_seq is not None:
            self._ack(conn, env_seq, now)
        if fresh is Freshness.NEW:
            self.counters.delivered += 1
            self._trace(
                now,
                LAYER,
                "deliver",
                msg=msg,
                peer=str(sender),
                seq=seqno,
                attrs={**attrs, "type": handler.name},
            )
            self._out.events.append(
                Delivered(
                    msg=msg,
                    origin=origin,
                    seqno=seqno,
                    payload=payload,
                    handler=handler,
                    sender=sender,
                    hop=hop,
                    via=via,
                )
            )
        elif fresh is Freshness.DUPLICATE:
            self.counters.duplicates += 1
        else:
            self.counters.too_old += 1
            return
        if via != TCP:
            return  # multicast receivers only deliver (§10)
        # Every TCP copy's list is forwarded, even for a broadcast already delivered: the
        # list is a distinct share of the work (a re-planned chunk, say). Lists only shrink
        # along a path and never hold their receiver, so this cannot loop.
        if self._compat:
            self._seqno += 1
            forward_current = BroadcastID(self.own, self._seqno)
        else:
            forward_current = current
        send = _Send(
            msg=msg,
            current=forward_current,
            handler=handler,
            payload=payload,
            content=None if netids else gossip.content,
            payload_netids=netids,
            hop=None if hop is None else hop + 1,
            origin_is_us=False,
        )
        own = self.own.packed
        dests = [netid for netid in gossip.distribution if netid.packed != own]
        self._distribute(send, dests, now)

    def _ack(self, conn: int, env_seq: int, now: float) -> None:
        seen = [bid.origin for bid in self.peers_db.seen_list(now)[:_MAX_ACK_SEEN]]
        self._env_seq += 1
        sealed = envelope.seal(
            self._keyring, self._session, seq=self._env_seq, payload=encode_ack(env_seq, seen)
        )
        data = frame_message(sealed, chatter=False, max_size=self.config.max_message_size)
        self.counters.acks_sent += 1
        self.counters.ack_bytes += len(data)
        self._out.streams.append(StreamSend(conn=conn, data=data))

    def _lost_framing(self, conn: int, exc: DecodeError, now: float) -> None:
        self._inbound.pop(conn, None)
        self._drop(now, f"stream framing lost: {exc.reason}", via=TCP)
        self._out.streams.append(StreamSend(conn=conn, data=b"", close=True))

    # -- sending -----------------------------------------------------------------------

    def _distribute(self, send: _Send, dests: list[NetID], now: float) -> None:
        """Steps 2-6 of the module docstring for one node's share of one broadcast."""
        db = self.peers_db
        seen = db.seen_list(now)
        others = pick_others(db.candidates(), db.domain, self._rng, self.config.max_others)
        everyone = dests
        if self.config.multicast:
            seen_us = db.seen_us(now)
            useful = any(netid.packed in seen_us for netid in dests)
            due = now - self._last_multicast >= self.config.announce_interval
            if (send.origin_is_us or useful or due) and self._multicast(
                send, seen, others, group_by_domain(dests, db.domain), now
            ):
                dests = [netid for netid in dests if netid.packed not in seen_us]
        groups = group_by_domain(dests, db.domain)
        for hop in plan(groups, self._rng, suspect=lambda n: db.is_suspect(n, now)):
            self._send_hop(send, hop, seen, others, now)
        db.add(everyone, now)

    def _gossip(
        self,
        send: _Send,
        seen_list: Sequence[BroadcastID],
        other_ids: Sequence[NetID],
        dist: Sequence[NetID],
    ) -> Gossip:
        seen, others, distribution = tuple(seen_list), tuple(other_ids), tuple(dist)
        if send.content is not None:
            return Gossip(
                current=send.current,
                type_tag=send.handler.tag,
                content=send.content,
                seen=seen,
                others=others,
                distribution=distribution,
            )
        # The payload refers to NetIDs by table index: encode it against this message's table.
        draft = Gossip(
            current=send.current,
            type_tag=send.handler.tag,
            seen=seen,
            others=others,
            distribution=distribution,
            payload_netids=send.payload_netids,
        )
        id_map = {netid: index for index, netid in enumerate(draft.table)}
        return Gossip(
            current=send.current,
            type_tag=send.handler.tag,
            content=send.handler.encode_with(send.payload, id_map),
            seen=seen,
            others=others,
            distribution=distribution,
            payload_netids=send.payload_netids,
        )

    def _seal(self, body: bytes) -> bytes:
        self._env_seq += 1
        return envelope.seal(
            self._keyring,
            self._session,
            seq=self._env_seq,
            payload=body,
            max_payload=self.config.max_message_size,
        )

    def _multicast(
        self,
        send: _Send,
        seen: list[BroadcastID],
        others: list[NetID],
        groups: list[list[NetID]],
        now: float,
    ) -> bool:
        """Multicast ``send`` on the LAN if it fits; True when sent.

        Like Chatter's, the datagram carries the distribution list (multicast receivers do
        not forward it, but they learn the peers in it) and, in sealed mode, how this node
        groups it: one datagram teaches a whole LAN what this node knows of the other
        subnets. What does not fit in ``max_multicast_size`` goes, half at a time: first the
        list's last groups, then the oldest sightings.
        """
        limit = self.config.max_multicast_size
        listed: list[NetID] = [netid for group in groups for netid in group]
        sizes = tuple(len(group) for group in groups) if len(groups) > 1 else ()
        trimmed = seen
        while True:
            gossip = self._gossip(send, trimmed, others, listed)
            if self._compat:
                try:
                    data = self._chatter.encode_message(
                        gossip, self._chatter_key, limits=self._udp_limits
                    )
                except ValueError:
                    data = b""
                size = len(data) if data else limit + 1
            else:
                body = gossip_header(send.hop or 1, sizes) + self._chatter.encode_gossip(gossip)
                size = len(body) + envelope.overhead(self.node_id)
            if size <= limit:
                break
            if listed:
                # Keep the first half of the list (whole groups where possible): receivers
                # learn less at a time, but they still learn.
                half = len(listed) // 2
                kept: list[list[NetID]] = []
                count = 0
                for group in groups:
                    if count + len(group) > half:
                        if not kept:
                            kept.append(group[:half])
                        break
                    kept.append(group)
                    count += len(group)
                groups = [group for group in kept if group]
                listed = [netid for group in groups for netid in group]
                sizes = tuple(len(group) for group in groups) if len(groups) > 1 else ()
                continue
            if not trimmed:
                # Even without a seen list the payload is too large for a datagram: the LAN
                # peers stay on the TCP list.
                self.counters.multicast_skipped += 1
                self._drop(now, "too large for a multicast datagram", size=size, via=MULTICAST)
                return False
            # Shed the oldest sightings: the datagram must fit (§8), and a shorter seen list
            # only delays what peers learn.
            trimmed = trimmed[: len(trimmed) // 2]
            self.counters.seen_trimmed += 1
        if not self._compat:
            data = self._seal(body)
        copies = self.copies
        self._out.datagrams.append((data, self.config.group))
        for k in range(1, copies):
            # Later copies a little later: losses on a LAN come in bursts.
            due = now + k * self.config.multicast_spacing
            heapq.heappush(self._later, (due, next(self._tick), data))
        self._last_multicast = now
        self.counters.multicast_sent += 1
        self.counters.multicast_bytes += len(data) * copies
        attrs = {"via": MULTICAST}
        if send.hop is not None:
            attrs["hop"] = str(send.hop)
        if copies > 1:
            attrs["copies"] = str(copies)
        self._trace(
            now, LAYER, "send", msg=send.msg, peer=self._group_label, size=len(data), attrs=attrs
        )
        return True

    def _send_hop(
        self,
        send: _Send,
        hop: NextHop,
        seen: list[BroadcastID],
        others: list[NetID],
        now: float,
    ) -> None:
        members = hop.members
        gossip = self._gossip(send, seen, others, members)
        try:
            if self._compat:
                data = self._chatter.encode_message(
                    gossip, self._chatter_key, limits=self._tcp_limits
                )
                key = (hop.head, next(self._hold_ids))
                state = HopState.HELD
            else:
                sizes = tuple(len(group) for group in hop.rest) if len(hop.rest) > 1 else ()
                body = gossip_header(send.hop or 1, sizes) + self._chatter.encode_gossip(
                    gossip, limits=self._tcp_limits
                )
                data = frame_message(
                    self._seal(body), chatter=False, max_size=self.config.max_message_size
                )
                key = (hop.head, self._env_seq)
                state = HopState.AWAITING_ACK
        except (ValueError, LocalProtocolError) as exc:
            self._drop(now, f"cannot send: {exc}", peer=hop.head, via=TCP)
            return
        self._out.streams.append(StreamSend(peer=hop.head, data=data))
        self.counters.tcp_sent += 1
        self.counters.tcp_bytes += len(data)
        attrs = {"via": TCP, "list": str(len(members))}
        if send.hop is not None:
            attrs["hop"] = str(send.hop)
        self._trace(
            now, LAYER, "send", msg=send.msg, peer=str(hop.head), size=len(data), attrs=attrs
        )
        deadline = now + self.config.ack_timeout
        self._pending[key] = _Pending(
            state=state, deadline=deadline, head=hop.head, rest=hop.rest, send=send
        )
        heapq.heappush(self._deadlines, (deadline, next(self._tick), key))

    def _hop_input(self, key: tuple[NetID, int], event: HopInput, now: float) -> None:
        pending = self._pending.get(key)
        if pending is None:
            if event is HopInput.ACK:
                self.counters.unexpected_acks += 1
            return
        state, action = transition(pending.state, event)
        if state in TERMINAL:
            del self._pending[key]
        elif state is not pending.state:
            # A new state keeps the entry ack_timeout longer (REPLANNED: to spot late ACKs).
            pending.state = state
            pending.deadline = now + self.config.ack_timeout
            heapq.heappush(self._deadlines, (pending.deadline, next(self._tick), key))
        if action is HopAction.LATE_ACK:
            self.counters.late_acks += 1
        elif action is HopAction.UNEXPECTED_ACK:
            self.counters.unexpected_acks += 1
        elif action is HopAction.REPLAN:
            self._replan(pending, event, now)

    def _replan(self, pending: _Pending, event: HopInput, now: float) -> None:
        """The head of a chunk failed: hand the chunk to another member of it."""
        db = self.peers_db
        db.mark_failed(pending.head, now, self.config.suspect_time)
        self.counters.replanned += 1
        hop = (
            next_hop(pending.rest, self._rng, suspect=lambda n: db.is_suspect(n, now))
            if pending.rest
            else None
        )
        self._trace(
            now,
            LAYER,
            "replan",
            msg=pending.send.msg,
            peer=str(pending.head),
            attrs={"reason": event.value, "next": "" if hop is None else str(hop.head)},
        )
        if hop is None:
            # No member of the chunk is left to carry it.
            self.counters.lost_leaves += 1
            return
        self._send_hop(
            pending.send,
            hop,
            db.seen_list(now),
            pick_others(db.candidates(), db.domain, self._rng, self.config.max_others),
            now,
        )

    # -- helpers -----------------------------------------------------------------------

    def _normalise(self, destinations: Iterable[NetID | str]) -> list[NetID]:
        out: dict[NetID, None] = {}
        for dest in destinations:
            netid = dest if isinstance(dest, NetID) else _parse_netid(dest)
            if netid != self.own:
                out[netid] = None
        return list(out)

    def _digest(
        self,
        handler: MessageHandler,
        payload: object,
        content: bytes | None,
        netids: tuple[NetID, ...],
    ) -> bytes:
        """The compat-mode name of a payload: independent of the message's NetID table."""
        if content is not None:
            return payload_digest(handler.tag, content)
        canonical = tuple(sorted(netids, key=lambda n: n.packed))
        body = handler.encode_with(payload, {n: i for i, n in enumerate(canonical)})
        return payload_digest(handler.tag, b"".join(n.packed for n in canonical) + body)

    def _drop(
        self,
        now: float,
        reason: str,
        *,
        peer: NetID | None = None,
        size: int | None = None,
        via: str | None = None,
    ) -> None:
        self.counters.dropped += 1
        self.rejected[reason] += 1
        attrs = {"reason": reason}
        if via is not None:
            attrs["via"] = via
        self._trace(
            now, LAYER, "drop", peer=None if peer is None else str(peer), size=size, attrs=attrs
        )

    def _maybe_sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._next_sweep = now + min(self.config.seen_ttl, self.config.peer_ttl) / 8
        self.peers_db.sweep(now)
        self._window.sweep(now)
        if self._compat:
            self._digests.sweep(now)


def _unique(netids: Iterable[NetID]) -> tuple[NetID, ...]:
    return tuple(dict.fromkeys(netids))


def _split(items: Sequence[NetID], sizes: Sequence[int]) -> list[Sequence[NetID]]:
    out = []
    start = 0
    for size in sizes:
        out.append(items[start : start + size])
        start += size
    return out


def _parse_netid(text: str) -> NetID:
    try:
        return NetID.parse(text)
    except (ValueError, TypeError):
        raise ConfigError("a destination must be a NetID or 'ip:port'", destination=text) from None
