"""The sans-I/O link node: sockets with tags, links, credits and patterns on one address.

A :class:`LinkNode` is one middleware instance (one address) holding any number of
sockets, each identified by a 32-bit tag (notes "Extended Header"). A socket links with
remote sockets (peer address + tag) through the LINK/LINKACK handshake of
:mod:`gossamer.proto.link.machine`, then exchanges DATA under the credit flow control of
:mod:`gossamer.proto.link.credit`, following its pattern (:mod:`~.patterns`).

Transports. The node speaks Exon frames (:mod:`gossamer.wire.exon`) over one of:

- ``UDP``: the node is a ``DatagramCore``; frames ride in a reliable channel
  (:mod:`~.channel`) per peer, so a link delivers each message exactly once per
  incarnation under loss, duplication and reordering;
- ``SIM_STREAM``: the same channel cutting the byte stream into segments, the
  simulator's stand-in for TCP (frames split across segments, in order, reliable);
- ``TCP``: real byte streams owned by a driver; each connection runs a
  :class:`StreamEndpoint` (a ``StreamCore``) bound to the node. The dialing side first
  sends a HELLO carrying its listening address (node-level, see below), so both ends
  name a peer by the address it listens on.

Application interface. Local requests are methods of :class:`LinkSocket` taking
``now``; they never block: a send that finds no credit returns ``False`` and the
driver waits for a :class:`Writable` event; ``take()`` returns ``None`` when nothing is
queued and the driver waits for :class:`Readable`. Output produced by local requests is
batched: call :meth:`LinkNode.flush` (drivers do once per loop iteration) or let
:meth:`LinkNode.next_deadline` (which is "now" while output waits) bring the driver back.

Trace events (``layer=link``, conventions of ``gossamer.analysis.checks.link``):
``link_up`` (``peer``, ``attrs.link``, ``attrs.credits`` = initial send credits),
``link_down`` (``attrs.reason``), ``send`` and ``deliver`` of each DATA (``msg`` =
``<sender>/<tag>#<clock>/<n>``, the same at both ends; ``deliver`` when the application
*takes* it), ``credit`` when a FLOW arrives (``attrs.amount``), and ``drop`` for
anything discarded (stale incarnation, malformed, unroutable, credit violation; with
``attrs.reason``) so that nothing is dropped silently. ``send``/``deliver`` may be
switched off (``NodeConfig.trace_data``) where per-message tracing is too costly.

Node-level messages. The notes reserve middleware protocol ``0x02`` ("nodes") for them,
but the wire codec rejects it, so the one node message gossamer needs, HELLO, is a
custom control frame (type ``0x40``) between tag 0 and tag 0; tag 0 is therefore
reserved and no socket may use it. See ``docs/links.md``.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from gossamer._types import Address, Datagram
from gossamer.errors import ConfigError, DecodeError, LocalProtocolError
from gossamer.proto.link import machine
from gossamer.proto.link.channel import Channel, ChannelConfig, ChannelMode, pull_header
from gossamer.proto.link.credit import InFlow
from gossamer.proto.link.machine import Action, LinkInput, LinkState
from gossamer.proto.link.patterns import (
    ENVELOPE_ROOM,
    Authorizer,
    Pattern,
    decide,
    pattern_for,
    pull_envelope,
    push_envelope,
)
from gossamer.trace.sink import Tracer
from gossamer.wire import exon
from gossamer.wire.exon import (
    NO_CLOCK,
    ControlBody,
    DataBody,
    ErrorBody,
    ErrorCode,
    FlowBody,
    LinkAckBody,
    LinkBody,
    LinkDecision,
    LinkMetadata,
    SocketMessage,
    UnlinkBody,
)

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "CONTROL_HELLO",
    "CONTROL_SUBSCRIBE",
    "CONTROL_TAKEN",
    "CONTROL_UNSUBSCRIBE",
    "Connect",
    "LinkDown",
    "LinkError",
    "LinkNode",
    "LinkSocket",
    "LinkStatistics",
    "LinkUp",
    "Message",
    "NodeConfig",
    "Readable",
    "Receipt",
    "RequestFailed",
    "SocketOptions",
    "SocketStatistics",
    "StreamEndpoint",
    "Transport",
    "Writable",
]

LAYER = "link"

#: Custom control types (Java: types >= 0x33 are custom and bypass flow control).
CONTROL_SUBSCRIBE = 0x33
CONTROL_UNSUBSCRIBE = 0x34
#: Cumulative count of DATA the receiving application took (for receipts).
CONTROL_TAKEN = 0x35
#: Node-level HELLO on a new TCP connection: the dialer's listening address.
CONTROL_HELLO = 0x40

_FIXED = struct.Struct(">HBBI")
_EXT = struct.Struct(">III")
_DATA_HEADER = struct.Struct(">HBBIIII")
_U32 = struct.Struct(">I")
_DATA = int(exon.MessageType.DATA)
_VERSION = exon.VERSION
_SOCKETS = int(exon.Protocol.SOCKETS)
_EXT_SIZE = exon.HEADER_SIZE - exon.FIXED_HEADER_SIZE
_HEADER_SIZE = exon.HEADER_SIZE
_MAX_TAG = (1 << 32) - 1
#: Bytes of DATA queued for one peer after which the driver should write at once
#: instead of at the end of the loop iteration (a sender that never yields would
#: otherwise hold its whole window back; 64 KiB keeps writes large).
URGENT_BYTES = 64 * 1024


#: Internal inputs queued by actions, and the state they are meant for.
_FOLLOWUP_STATE = {
    LinkInput.DRAINED: LinkState.DRAINING,
    LinkInput.GIVE_UP: LinkState.RETRY_WAIT,
    LinkInput.RETRY_TIMER: LinkState.RETRY_WAIT,
}


_CANCELLING = frozenset({LinkState.CANCEL_WAIT, LinkState.CANCEL_DECIDED})
_ESTABLISHED = LinkState.ESTABLISHED


class Transport(Enum):
    UDP = "udp"
    SIM_STREAM = "sim-stream"
    TCP = "tcp"


class LinkError(LocalProtocolError):
    """A request could not be carried out because a link is gone or was refused.

    ``cause`` is the link's reason (e.g. ``refused:incompatible``, ``transport_lost``)."""

    def __init__(self, reason: str, *, cause: str, **fields: Any) -> None:
        super().__init__(reason, cause=cause, **fields)
        self.cause = cause


# ------------------------------------------------------------------ configuration


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketOptions:
    """Per-socket options (Java socket options, reference (c), with the notes' defaults).

    ``capacity`` is the credits granted to each linked peer (0 for sockets that do not
    receive); ``batch`` the fraction of it returned per FLOW. ``retry_*`` shape the
    randomized back-off after a transient refusal (first delay ``retry_base``, doubling
    up to ``retry_max``, each scaled by a uniform factor in [0.5, 1.5]) and
    ``retry_limit`` caps the attempts. ``receipts`` asks peers to report when their
    application takes our messages, so ``send(..., cookie=...)`` can return receipts;
    ``receipt_ratio`` (0: receipts always first) lets a waiting message through after
    that many receipts in a row (notes: "após X recibos ... retornar uma mensagem").
    """

    capacity: int = 100
    batch: float = 0.25
    max_links: int | None = None
    allow_incoming: bool = True
    receipts: bool = False
    receipt_ratio: int = 0
    retry_base: float = 0.05
    retry_max: float = 2.0
    retry_limit: int = 8
    authorize: Authorizer | None = None
    custom: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not -(1 << 31) <= self.capacity < 1 << 31:
            raise ConfigError("capacity must fit in a signed 32-bit integer")
        if not 0.0 < self.batch <= 1.0:
            raise ConfigError("batch must be a fraction in (0, 1]", batch=self.batch)
        if self.max_links is not None and self.max_links < 0:
            raise ConfigError("max_links must be non-negative", max_links=self.max_links)
        if self.receipt_ratio < 0 or self.retry_limit < 0:
            raise ConfigError("receipt_ratio and retry_limit must be non-negative")
        if not 0 < self.retry_base <= self.retry_max:
            raise ConfigError("need 0 < retry_base <= retry_max")
        if "receipts" in self.custom:
            raise ConfigError("the custom metadata key 'receipts' is reserved")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """One node: its name in traces, its address, transport and limits.

    ``names`` maps peer addresses to node names for traces (the simulator's node ids);
    unknown peers are named ``host:port``. ``max_message`` bounds DATA payloads both
    ways: it is part of the receiver's memory bound (links x credits x max message).
    By default it is 64 KiB over streams and whatever fits one datagram over UDP
    (fragmentation is future work in the notes).
    """

    address: Address
    node_id: str | None = None
    transport: Transport = Transport.UDP
    channel: ChannelConfig = field(default_factory=ChannelConfig)
    max_message: int | None = None
    names: Mapping[Address, str] = field(default_factory=dict)
    trace_data: bool = True

    def __post_init__(self) -> None:
        limit = self.message_limit
        if limit < 1:
            raise ConfigError("max_message must be positive", max_message=limit)
        if self.transport is Transport.UDP and limit > self._datagram_room:
            raise ConfigError(
                f"over UDP a message must fit one datagram: max_message <= "
                f"{self._datagram_room} for max_datagram={self.channel.max_datagram}",
                max_message=limit,
            )

    @property
    def _datagram_room(self) -> int:
        return self.channel.max_payload - exon.HEADER_SIZE - ENVELOPE_ROOM

    @property
    def message_limit(self) -> int:
        """The largest DATA payload (application bytes) this node sends or accepts."""
        if self.max_message is not None:
            return self.max_message
        if self.transport is Transport.UDP:
            return self._datagram_room
        return 64 * 1024

    @property
    def name(self) -> str:
        return self.node_id or f"{self.address[0]}:{self.address[1]}"


# ------------------------------------------------------------------ events and results


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkUp:
    """A link is established (both decisions positive)."""

    tag: int
    peer: Address
    peer_tag: int
    #: Credits we may spend on it (the peer's capacity).
    credits: int
    link: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkDown:
    """A link ended, or a link request failed (``established`` says which)."""

    tag: int
    peer: Address
    peer_tag: int
    reason: str
    established: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Readable:
    """Socket ``tag`` has messages or receipts to take (edge: it was empty)."""

    tag: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Writable:
    """Socket ``tag`` may be able to send again (a link gained credit or came up)."""

    tag: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestFailed:
    """A REQ socket's pending request can no longer be answered: its link went down."""

    tag: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Connect:
    """TCP transport: the node needs a connection to ``peer`` (the driver dials)."""

    peer: Address


Event = LinkUp | LinkDown | Readable | Writable | RequestFailed | Connect


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A message taken from a socket, with where it came from."""

    data: bytes
    peer: Address
    peer_tag: int
    #: Request-reply sockets: the envelope ids (REQ request id, DEALER/ROUTER hops).
    envelope: tuple[int, ...] = ()
    #: ROUTER: the id to reply to (``send(..., to=routing_id)``).
    routing_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Receipt:
    """A cookie given to ``send``, returned once the peer application took the message
    (``taken``) or once its fate can no longer be learned (``taken=False``: the link
    went down first)."""

    cookie: Any
    peer: Address
    peer_tag: int
    taken: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkStatistics:
    peer: Address
    peer_tag: int
    state: str
    credits: int
    capacity: int
    sent: int
    received: int
    queued: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketStatistics:
    tag: int
    type: str
    links: tuple[LinkStatistics, ...]
    established: int
    sent: int
    received: int
    taken: int
    queued: int
    queued_bytes: int
    peak_queued_bytes: int
    receipts: int
    dropped: int
    would_block: int


# ------------------------------------------------------------------ internal records


class _Peer:
    """Everything the node keeps about one remote address."""

    __slots__ = (
        "address",
        "channel",
        "endpoints",
        "inbuf",
        "links",
        "name",
        "out",
        "retired",
    )

    def __init__(self, address: Address, name: str) -> None:
        self.address = address
        self.name = name
        #: (local tag, peer tag) -> link, for the DATA fast path.
        self.links: dict[tuple[int, int], _Link] = {}
        self.inbuf = bytearray()
        self.out = bytearray()  # TCP: bytes for the sending endpoint
        self.channel: Channel | None = None
        self.retired: set[int] = set()
        self.endpoints: list[StreamEndpoint] = []


class _Link:
    __slots__ = (
        "attempts",
        "clock",
        "cookies",
        "credits",
        "data_tail",
        "id",
        "inflow",
        "last_refusal",
        "peer",
        "peer_clock",
        "peer_meta",
        "peer_sent",
        "peer_tag",
        "peer_wants_receipts",
        "retry_at",
        "routing_id",
        "sent",
        "socket",
        "state",
        "subs",
        "taken",
        "up",
        "wanted",
    )

    def __init__(self, socket: LinkSocket, peer: _Peer, peer_tag: int, *, wanted: bool) -> None:
        self.socket = socket
        self.peer = peer
        self.peer_tag = peer_tag
        self.state = LinkState.IDLE
        self.wanted = wanted
        self.clock = NO_CLOCK
        self.peer_clock: int | None = None
        self.peer_meta: LinkMetadata | None = None
        self.credits = 0
        self.sent = 0
        self.inflow = InFlow(max(socket.capacity, 0), socket.options.batch)
        self.peer_sent: int | None = None
        self.attempts = 0
        self.retry_at: float | None = None
        self.last_refusal = ""
        self.routing_id = 0
        self.id = ""
        self.up = False
        self.taken = 0
        self.peer_wants_receipts = False
        self.cookies: deque[tuple[int, Any]] = deque()
        self.subs: tuple[bytes, ...] = ()
        self.data_tail = b""


@dataclass(slots=True, kw_only=True)
class _Context:
    """What an input carries into the actions."""

    msg: SocketMessage | None = None
    meta: LinkMetadata | None = None
    clock: int | None = None
    decision: LinkDecision = LinkDecision.SUCCESS
    reason: str = ""
    size: int | None = None


# ------------------------------------------------------------------ the socket


class LinkSocket:
    """One socket of a node: its links, its incoming queue and its pattern.

    Created by :meth:`LinkNode.open_socket`. Every method takes ``now`` and never
    blocks; see the module docstring for how drivers wait.
    """

    def __init__(
        self, node: LinkNode, tag: int, pattern: Pattern, options: SocketOptions, clock: int
    ) -> None:
        self.node = node
        self.tag = tag
        self.pattern = pattern
        self.options = options
        self.capacity = options.capacity if pattern.receives else 0
        self.batch = options.batch
        self.closing = False
        self.closed = False
        self.links: dict[tuple[Address, int], _Link] = {}
        self._ring: list[_Link] = []
        self._rr = 0
        self._clock = clock
        self._queue: deque[tuple[_Link, bytes, int]] = deque()
        self._receipts: deque[Receipt] = deque()
        self._receipt_streak = 0
        self._next_routing = 1
        self._routes: dict[int, _Link] = {}
        # REQ: the link and id of the request awaiting its reply.
        self._is_req = pattern.name == "req"
        # Patterns whose send is plain round robin and whose messages carry no envelope.
        self._round_robin = pattern.name in ("push", "pair")
        self._plain = pattern.receives and not pattern.enveloped
        self._req_link: _Link | None = None
        self._req_id = 0
        self._req_failed: str | None = None
        # REP: where the reply to the request taken last goes.
        self._rep_pending: tuple[_Link, tuple[int, ...]] | None = None
        # SUB: our subscriptions (prefixes), in subscription order.
        self._subs: dict[bytes, None] = {}
        # counters
        self.sent = 0
        self.received = 0
        self.taken = 0
        self.queued_bytes = 0
        self.peak_queued_bytes = 0
        self.dropped = 0
        self.would_block = 0
        self.receipt_count = 0

    # -- linking ------------------------------------------------------------------

    def link(self, peer: Address, peer_tag: int, now: float) -> None:
        """Ask to link with the socket ``peer_tag`` at ``peer``. Completion is a
        ``LinkUp`` (or ``LinkDown`` with the refusal) event. Idempotent while linking."""
        self._check_open()
        _check_tag(peer_tag)
        if (peer, peer_tag) == (self.node.address, self.tag):
            raise LocalProtocolError("a socket cannot link with itself", tag=self.tag)
        node = self.node
        link = self.links.get((peer, peer_tag))
        if link is None:
            link = _Link(self, node._peer(peer), peer_tag, wanted=True)
        link.wanted = True
        link.attempts = 0
        node._input(link, LinkInput.LINK, _Context(), now)

    def unlink(self, peer: Address, peer_tag: int, now: float) -> None:
        """Unlink (or cancel linking). Every DATA already sent either way is still
        delivered before the link closes (``LinkDown`` with reason ``unlinked``)."""
        link = self.links.get((peer, peer_tag))
        if link is None:
            raise LocalProtocolError("no link with that socket", peer=peer, peer_tag=peer_tag)
        link.wanted = False
        self.node._input(link, LinkInput.UNLINK, _Context(reason="cancelled"), now)

    def close(self, now: float) -> None:
        """Refuse new links (fatal ``CLOSED``) and unlink every link. The socket is
        removed once its last link closed (or with :meth:`LinkNode.remove_socket`)."""
        self.closing = True
        for link in list(self.links.values()):
            link.wanted = False
            if link.state is not LinkState.IDLE:
                self.node._input(link, LinkInput.UNLINK, _Context(reason="cancelled"), now)
        self.node._maybe_remove(self)

    @property
    def established(self) -> int:
        return len(self._ring)

    # -- sending ------------------------------------------------------------------

    def send(
        self,
        data: bytes,
        now: float,
        *,
        cookie: Any = None,
        to: int | None = None,
        envelope: tuple[int, ...] = (),
    ) -> bool:
        """Send one message by the socket's pattern; ``False`` when it would block (no
        suitable link has credit). Nothing is queued on ``False``: try again later.

        ``cookie`` (needs ``receipts``) is returned in a :class:`Receipt` by ``take``
        once the peer application took the message. ``to`` is a ROUTER routing id;
        ``envelope`` the ids a DEALER or ROUTER puts in front.
        """
        if self._round_robin and cookie is None and not envelope:
            # The hot path (PUSH, PAIR): checks and round robin inline.
            if self.closing or self.closed:
                self._check_open()
            if len(data) > self.node.max_message:
                self._too_big(data)
            ring = self._ring
            link = ring[self._rr] if self._rr < len(ring) else None
            if link is not None and link.credits > 0:
                self._rr += 1
            else:
                link = self._pick()
                if link is None:
                    self.would_block += 1
                    return False
            node = self.node
            if node._trace_data or not node._tcp:
                node._send_data(link, data, now, None)
                return True
            # _send_data for TCP without traces, inline.
            link.credits -= 1
            link.sent += 1
            self.sent += 1
            peer = link.peer
            out = peer.out
            out += _FIXED.pack(_VERSION, _SOCKETS, _DATA, _EXT_SIZE + len(data))
            out += link.data_tail
            out += data
            if len(out) >= URGENT_BYTES:
                node.urgent = True
            node._dirty[peer.address] = peer
            return True
        self._check_open()
        pattern = self.pattern
        if not pattern.sends:
            raise LocalProtocolError(f"a {pattern.name} socket cannot send", tag=self.tag)
        if cookie is not None and not self.options.receipts:
            raise ConfigError("cookies need the socket option receipts=True")
        if len(data) > self.node.max_message:
            self._too_big(data)
        name = pattern.name
        if name in ("push", "dealer", "pair"):
            link = self._pick()
            if link is None:
                self.would_block += 1
                return False
            payload = push_envelope(envelope, data) if pattern.enveloped else data
            self.node._send_data(link, payload, now, cookie)
            return True
        if name == "req":
            return self._send_request(data, now, cookie)
        if name == "rep":
            return self._send_reply(data, now, cookie)
        if name == "router":
            return self._send_routed(data, now, cookie, to, envelope)
        return self._publish(data, now, cookie)

    def _too_big(self, data: bytes) -> None:
        raise ConfigError(
            f"message of {len(data)} bytes exceeds max_message {self.node.max_message}"
        )

    def _pick(self) -> _Link | None:
        """Round robin over established links, skipping those without credit."""
        ring = self._ring
        count = len(ring)
        start = self._rr
        for i in range(count):
            index = (start + i) % count
            link = ring[index]
            if link.credits > 0:
                self._rr = index + 1
                return link
        return None

    def _send_request(self, data: bytes, now: float, cookie: Any) -> bool:
        if self._req_link is not None:
            raise LocalProtocolError("a REQ socket must receive the reply before sending again")
        link = self._pick()
        if link is None:
            self.would_block += 1
            return False
        self._req_id = (self._req_id + 1) & _MAX_TAG or 1
        self._req_link = link
        self._req_failed = None
        self.node._send_data(link, push_envelope((self._req_id,), data), now, cookie)
        self.node.urgent = True  # the application waits for the answer: no batching
        return True

    def abandon_request(self) -> None:
        """REQ: give up waiting for the pending reply (a late reply is then dropped,
        traced as ``stale_reply``), so that a new request may be sent."""
        self._req_link = None
        self._req_failed = None

    def _send_reply(self, data: bytes, now: float, cookie: Any) -> bool:
        pending = self._rep_pending
        if pending is None:
            raise LocalProtocolError("a REP socket must receive a request before replying")
        link, ids = pending
        if link.state is not LinkState.ESTABLISHED:
            self._rep_pending = None
            raise LinkError("the requester's link is gone", cause="closed")
        if link.credits <= 0:
            self.would_block += 1
            return False
        self._rep_pending = None
        self.node._send_data(link, push_envelope(ids, data), now, cookie)
        self.node.urgent = True  # a requester waits for it: no batching
        return True

    def _send_routed(
        self, data: bytes, now: float, cookie: Any, to: int | None, envelope: tuple[int, ...]
    ) -> bool:
        if to is None:
            raise LocalProtocolError("a ROUTER send needs to=<routing id>")
        link = self._routes.get(to)
        if link is None or link.state is not LinkState.ESTABLISHED:
            raise LinkError(f"no established link with routing id {to}", cause="no_route",
                            routing_id=to)
        if link.credits <= 0:
            self.would_block += 1
            return False
        self.node._send_data(link, push_envelope(envelope, data), now, cookie)
        return True

    def _publish(self, data: bytes, now: float, cookie: Any) -> bool:
        # Synchronized publishing (Java PUB/SUB): a message reaches every matching
        # subscriber or none, so the slowest subscriber sets the pace and nothing is
        # skipped for lack of credit.
        targets = [link for link in self._ring if link.subs and data.startswith(link.subs)]
        if any(link.credits <= 0 for link in targets):
            self.would_block += 1
            return False
        if not targets:
            self.dropped += 1
            self.node._trace(
                now, "drop", size=len(data), attrs={"reason": "no_subscriber", "tag": str(self.tag)}
            )
            return True
        for link in targets:
            self.node._send_data(link, data, now, cookie)
        return True

    # -- subscriptions (SUB) -------------------------------------------------------

    def subscribe(self, prefix: bytes, now: float) -> None:
        """SUB: receive messages that start with ``prefix`` (``b""``: everything)."""
        self._require("sub")
        if prefix in self._subs:
            return
        self._subs[prefix] = None
        for link in self._ring:
            self.node._send_control(link, CONTROL_SUBSCRIBE, prefix)

    def unsubscribe(self, prefix: bytes, now: float) -> None:
        self._require("sub")
        if prefix in self._subs:
            del self._subs[prefix]
            for link in self._ring:
                self.node._send_control(link, CONTROL_UNSUBSCRIBE, prefix)

    # -- receiving -----------------------------------------------------------------

    def take(self, now: float) -> bytes | Receipt | None:
        """The next receipt or message body, or ``None`` if there is none.

        Taking a message is what returns its credit to the sender (in batches)."""
        if self._plain and not self._receipts:
            # The hot path (PULL, SUB, PAIR): no envelope, no receipt waiting.
            queue = self._queue
            if not queue:
                return None
            link, payload, index = queue.popleft()
            self.queued_bytes -= len(payload)
            self.taken += 1
            node = self.node
            if node._trace_data or link.peer_wants_receipts or link.state is not _ESTABLISHED:
                node._taken(link, index, now)
                return payload
            # _taken without traces and receipts: count it, return credits by the batch.
            link.taken += 1
            inflow = link.inflow
            inflow.pending += 1
            if inflow.pending >= inflow.batch:
                node._flow(link, inflow.batch_done(), now)
            return payload
        item = self._take(now)
        if item is None or isinstance(item, Receipt):
            return item
        return item.data

    def take_message(self, now: float) -> Message | Receipt | None:
        """Like :meth:`take`, with the message's origin and envelope."""
        return self._take(now)

    def _take(self, now: float) -> Message | Receipt | None:
        if not self.pattern.receives and not self.options.receipts:
            raise LocalProtocolError(f"a {self.pattern.name} socket cannot receive")
        if self._receipts and (
            not self._queue
            or self.options.receipt_ratio == 0
            or self._receipt_streak < self.options.receipt_ratio
        ):
            self._receipt_streak += 1
            return self._receipts.popleft()
        self._receipt_streak = 0
        if self.pattern.name == "rep" and self._rep_pending is not None:
            raise LocalProtocolError("a REP socket must reply before taking the next request")
        node = self.node
        while self._queue:
            link, payload, index = self._queue.popleft()
            self.queued_bytes -= len(payload)
            self.taken += 1
            node._taken(link, index, now)
            if not self.pattern.enveloped:
                return Message(data=payload, peer=link.peer.address, peer_tag=link.peer_tag)
            try:
                ids, body = pull_envelope(payload)
            except DecodeError as exc:
                self.dropped += 1
                node._trace(now, "drop", peer=link.peer.name, size=len(payload),
                            attrs={"reason": f"malformed envelope: {exc.reason}"})
                continue
            name = self.pattern.name
            if name == "req":
                self._req_link = None
            elif name == "rep":
                self._rep_pending = (link, ids)
            return Message(
                data=body,
                peer=link.peer.address,
                peer_tag=link.peer_tag,
                envelope=ids,
                routing_id=link.routing_id if name == "router" else None,
            )
        return None

    @property
    def readable(self) -> bool:
        return bool(self._queue or self._receipts)

    @property
    def request_failed(self) -> str | None:
        """REQ: why the pending request failed (its link went down), if it did."""
        return self._req_failed

    @property
    def awaiting_reply(self) -> bool:
        return self._req_link is not None

    # -- capacity ------------------------------------------------------------------

    def set_capacity(self, capacity: int, now: float) -> None:
        """New capacity for every link; the difference goes to each sender at once
        (it may be negative: senders then wait until enough messages were taken)."""
        if not self.pattern.receives:
            raise LocalProtocolError(f"a {self.pattern.name} socket has no capacity")
        self.capacity = capacity
        for link in self._ring:
            self.node._flow(link, link.inflow.set_capacity(capacity), now)

    def adjust_capacity(self, delta: int, now: float) -> None:
        self.set_capacity(self.capacity + delta, now)

    def set_batch(self, fraction: float, now: float) -> None:
        """New batch fraction; a pending batch at least as large as the new size is
        returned at once in whole batches."""
        if not 0.0 < fraction <= 1.0:
            raise ConfigError("batch must be a fraction in (0, 1]", batch=fraction)
        self.batch = fraction
        for link in self._ring:
            self.node._flow(link, link.inflow.set_fraction(fraction), now)

    # -- statistics ----------------------------------------------------------------

    def statistics(self) -> SocketStatistics:
        links = tuple(
            LinkStatistics(
                peer=link.peer.address,
                peer_tag=link.peer_tag,
                state=link.state.value,
                credits=link.credits,
                capacity=link.inflow.capacity,
                sent=link.sent,
                received=link.inflow.received,
                queued=link.inflow.received - link.taken,
            )
            for link in self.links.values()
        )
        return SocketStatistics(
            tag=self.tag,
            type=self.pattern.name,
            links=links,
            established=len(self._ring),
            sent=self.sent,
            received=self.received,
            taken=self.taken,
            queued=len(self._queue),
            queued_bytes=self.queued_bytes,
            peak_queued_bytes=self.peak_queued_bytes,
            receipts=self.receipt_count,
            dropped=self.dropped,
            would_block=self.would_block,
        )

    def credits(self, peer: Address, peer_tag: int) -> int:
        """Our send credits on the link with ``peer_tag`` at ``peer``."""
        link = self.links.get((peer, peer_tag))
        if link is None:
            raise LocalProtocolError("no link with that socket", peer=peer, peer_tag=peer_tag)
        return link.credits

    def link_state(self, peer: Address, peer_tag: int) -> LinkState:
        link = self.links.get((peer, peer_tag))
        return LinkState.IDLE if link is None else link.state

    # -- helpers -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closing or self.closed:
            raise LocalProtocolError("the socket is closed", tag=self.tag)

    def _require(self, name: str) -> None:
        if self.pattern.name != name:
            raise LocalProtocolError(f"only a {name} socket can do that", tag=self.tag)

    def _next_clock(self) -> int:
        self._clock = (self._clock + 1) & _MAX_TAG
        if self._clock == NO_CLOCK:
            self._clock = 0
        return self._clock

    def _metadata(self) -> LinkMetadata:
        custom = dict(self.options.custom)
        if self.options.receipts:
            custom["receipts"] = b"1"
        return LinkMetadata(socket_type=self.pattern.kind, credits=self.capacity, custom=custom)

    def _at_limit(self) -> bool:
        limit = self.pattern.link_limit
        if self.options.max_links is not None:
            limit = self.options.max_links if limit is None else min(limit, self.options.max_links)
        if limit is None:
            return False
        live = sum(1 for link in self.links.values() if link.state is not LinkState.IDLE)
        return live >= limit


def _check_tag(tag: int) -> None:
    if not 1 <= tag <= _MAX_TAG:
        raise ConfigError("socket tags are 1..2**32-1 (0 is reserved for the node)", tag=tag)


# ------------------------------------------------------------------ the node


class LinkNode:
    """One middleware node (one address): sockets, peers, links. See the module doc."""

    def __init__(self, config: NodeConfig, *, tracer: Tracer, rng: Random) -> None:
        self.config = config
        self.address = config.address
        self.name = config.name
        self._trace_sink = tracer
        self._rng = rng
        self._trace_data = config.trace_data
        # Request-reply payloads carry an envelope in front of the application's bytes.
        self._limits = exon.ExonLimits(
            max_frame=config.message_limit + ENVELOPE_ROOM + exon.HEADER_SIZE
        )
        self.max_message = config.message_limit
        self._max_frame = self._limits.max_frame
        self.sockets: dict[int, LinkSocket] = {}
        self._peers: dict[Address, _Peer] = {}
        self._dirty: dict[Address, _Peer] = {}
        self._outbox: list[Datagram] = []
        self._events: list[Event] = []
        self._readable: dict[int, None] = {}
        self._writable: dict[int, None] = {}
        self._retrying: dict[int, _Link] = {}
        self._followups: list[tuple[_Link, LinkInput, _Context]] = []
        self._in_input = False
        self._now = 0.0
        self._tcp = config.transport is Transport.TCP
        #: Output that should not wait for the end of the loop iteration: credits (a FLOW)
        #: or a large batch of DATA. Drivers check it after local requests, flush, and
        #: clear it; batching all else to one write per iteration.
        self.urgent = False
        #: TCP: called with no arguments after each piece of stream input, so that the
        #: driver flushes the other connections and re-arms the node's timer (one
        #: connection's input may queue output for another, or schedule a retry).
        self.wakeup: Callable[[], None] | None = None
        #: Counters of the node (not per socket).
        self.counters: dict[str, int] = {
            "frames_in": 0,
            "frames_out": 0,
            "malformed": 0,
            "stale": 0,
            "not_found_sent": 0,
            "not_linked_sent": 0,
            "ignored": 0,
            "violations": 0,
            "channel_resets": 0,
        }

    # -- sockets -------------------------------------------------------------------

    def open_socket(
        self, kind: int | str, tag: int, options: SocketOptions | None = None
    ) -> LinkSocket:
        """A new socket of type ``kind`` (number or name) with ``tag`` on this node."""
        _check_tag(tag)
        if tag in self.sockets:
            raise ConfigError(f"tag {tag} is already used on this node", tag=tag)
        pattern = pattern_for(kind)
        # A random first clock: a socket re-created with the same tag (a restart) does
        # not reuse its predecessor's clock ids, so the predecessor's late messages are
        # recognised as stale (the Java code restarted at 0: reference (c) bug 5).
        sock = LinkSocket(self, tag, pattern, options or SocketOptions(), self._rng.getrandbits(32))
        self.sockets[tag] = sock
        return sock

    def socket(self, tag: int) -> LinkSocket:
        try:
            return self.sockets[tag]
        except KeyError:
            raise LocalProtocolError(f"no socket with tag {tag}", tag=tag) from None

    def remove_socket(self, tag: int, now: float) -> None:
        """Remove a socket at once; links still open go down (``socket_closed``).

        Each peer that knows the socket is told with the error it would get on its next
        message anyway, "socket not found" from the missing socket, so that it closes
        its end now (a PULL whose PUSH vanished would otherwise wait forever)."""
        sock = self.sockets.get(tag)
        if sock is None:
            return
        sock.closing = True
        for link in list(sock.links.values()):
            if link.peer_clock is not None:
                self._send(link.peer, SocketMessage(
                    src_tag=tag, dst_tag=link.peer_tag, clock=NO_CLOCK,
                    body=ErrorBody(code=ErrorCode.SOCKET_NOT_FOUND, dest_clock=link.peer_clock),
                ))
            self._close(link, "socket_closed", now)
        sock.closed = True
        self.sockets.pop(tag, None)

    def _maybe_remove(self, sock: LinkSocket) -> None:
        if sock.closing and not sock.links and self.sockets.get(sock.tag) is sock:
            sock.closed = True
            del self.sockets[sock.tag]

    # -- DatagramCore: UDP and simulated streams ---------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self._now = now
        try:
            header, offset = pull_header(data)
        except DecodeError as exc:
            self.counters["malformed"] += 1
            self._trace(now, "drop", peer=self._name(addr), size=len(data),
                        attrs={"reason": f"malformed datagram: {exc.reason}"})
            return
        peer = self._peer(addr)
        channel = peer.channel
        if header.src_session in peer.retired:
            # A channel we gave up on (the peer did not answer for a while): answer
            # from our current session, so that the peer resets its side and its links
            # go down too instead of waiting for us forever.
            self.counters["stale"] += 1
            current = channel or self._new_channel(peer)
            self._outbox.append((current.pure_ack(header.src_session), addr))
            return
        if header.dst_session and (channel is None or header.dst_session != channel.local_session):
            # Meant for a channel of ours that is gone (we restarted or reset it): tell
            # the peer our current session so it resets its side too.
            channel = channel or self._new_channel(peer)
            self.counters["stale"] += 1
            self._outbox.append((channel.pure_ack(header.src_session), addr))
            return
        if channel is None:
            channel = self._new_channel(peer)
        if channel.peer_session is None:
            channel.peer_session = header.src_session
        elif channel.peer_session != header.src_session:
            # The peer's channel is new: it restarted, or gave up on us. Whatever was
            # in flight on the old channel pair is unknowable: the links go down.
            self._reset_channel(peer, "peer_restarted", now)
            channel = self._new_channel(peer)
            channel.peer_session = header.src_session
        for payload in channel.receive(header, data[offset:], now):
            if self._receive_bytes(peer, payload, now):
                continue
            if channel.mode is ChannelMode.STREAM:
                # A simulated stream whose framing broke is closed, like a TCP one.
                self._reset_channel(peer, "framing_lost", now)
                return
            peer.inbuf.clear()  # datagrams hold whole frames: the next one is clean
        self._dirty[peer.address] = peer
        self._pump_channels(now)

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._outbox = self._outbox, []
        return out

    def handle_timer(self, now: float) -> None:
        self._now = now
        for link in [link for link in self._retrying.values() if link.retry_at is not None
                     and link.retry_at <= now]:
            link.retry_at = None
            del self._retrying[id(link)]
            self._input(link, LinkInput.RETRY_TIMER, _Context(), now)
        if self.config.transport is not Transport.TCP:
            for peer in self._peers.values():
                if peer.channel is not None:
                    self._dirty[peer.address] = peer
            self._pump_channels(now)

    def flush(self, now: float) -> None:
        """Put the output of local requests on its way (drivers call this once per
        loop iteration; the simulator's deadline of "now" does the same)."""
        self._now = now
        if self.config.transport is not Transport.TCP:
            self._pump_channels(now)

    def next_deadline(self) -> float | None:
        best: float | None = None
        for link in self._retrying.values():
            if link.retry_at is not None and (best is None or link.retry_at < best):
                best = link.retry_at
        if self.config.transport is Transport.TCP:
            return best
        if self._dirty:
            return self._now
        for peer in self._peers.values():
            if peer.channel is not None:
                due = peer.channel.deadline()
                if due is not None and (best is None or due < best):
                    best = due
        return best

    def events_received(self) -> list[Event]:
        for tag in self._readable:
            self._events.append(Readable(tag=tag))
        for tag in self._writable:
            self._events.append(Writable(tag=tag))
        self._readable.clear()
        self._writable.clear()
        out, self._events = self._events, []
        return out

    def _new_channel(self, peer: _Peer) -> Channel:
        mode = ChannelMode.STREAM if self.config.transport is Transport.SIM_STREAM else (
            ChannelMode.DATAGRAM
        )
        session = 0
        while session == 0 or session in peer.retired:
            session = self._rng.getrandbits(64)
        peer.channel = Channel(
            local_session=session, peer_session=None, config=self.config.channel, mode=mode
        )
        peer.channel.keepalive = bool(peer.links)
        peer.inbuf.clear()
        return peer.channel

    def _reset_channel(self, peer: _Peer, reason: str, now: float) -> None:
        channel = peer.channel
        if channel is not None and channel.peer_session is not None:
            peer.retired.add(channel.peer_session)
        peer.channel = None
        peer.inbuf.clear()
        self.counters["channel_resets"] += 1
        self._transport_lost(peer, reason, now)

    def _pump_channels(self, now: float) -> None:
        dirty, self._dirty = self._dirty, {}
        for peer in dirty.values():
            channel = peer.channel
            if channel is None:
                continue
            datagrams = channel.poll(now)
            if channel.failed:
                self._reset_channel(peer, "peer_unreachable", now)
                continue
            addr = peer.address
            for datagram in datagrams:
                self._outbox.append((datagram, addr))

    # -- TCP streams --------------------------------------------------------------

    def stream_endpoint(self, peer: Address | None = None) -> StreamEndpoint:
        """A ``StreamCore`` for one new TCP connection: ``peer`` is the address we dialed
        (we then say HELLO first), ``None`` for an accepted connection (the peer's HELLO
        names it)."""
        if self.config.transport is not Transport.TCP:
            raise LocalProtocolError("stream endpoints need the TCP transport")
        return StreamEndpoint(self, peer)

    def _attach(self, endpoint: StreamEndpoint, address: Address) -> _Peer:
        peer = self._peer(address)
        peer.endpoints.append(endpoint)
        if peer.out:
            self._dirty[address] = peer
        return peer

    def _detach(self, endpoint: StreamEndpoint, reason: str, now: float) -> None:
        peer = endpoint.peer
        if peer is None or endpoint not in peer.endpoints:
            return
        peer.endpoints.remove(endpoint)
        # Either direction of the pair may have lost bytes with this connection: every
        # link with the peer goes down, loudly (the application may link again).
        for other in list(peer.endpoints):
            other.closing = True
        peer.endpoints.clear()
        peer.out.clear()
        peer.inbuf.clear()
        self._transport_lost(peer, reason, now)

    def _stream_out(self, endpoint: StreamEndpoint) -> bytes:
        peer = endpoint.peer
        if peer is None or not peer.endpoints or peer.endpoints[0] is not endpoint:
            return b""
        if not peer.out:
            return b""
        data = bytes(peer.out)
        peer.out.clear()
        return data

    def dirty_endpoints(self) -> list[StreamEndpoint]:
        """TCP: the sending endpoints that have bytes waiting (drivers flush them)."""
        dirty, self._dirty = self._dirty, {}
        return [peer.endpoints[0] for peer in dirty.values() if peer.endpoints and peer.out]

    # -- frames in --------------------------------------------------------------------

    def _receive_bytes(self, peer: _Peer, data: bytes, now: float) -> bool:
        """Parse frames from a peer's byte stream; False when its framing broke."""
        if peer.inbuf:
            peer.inbuf += data
            view = bytes(peer.inbuf)
            peer.inbuf.clear()
        else:
            view = data
        size = len(view)
        pos = 0
        max_frame = self._max_frame
        links = peer.links
        frames = 0
        # The DATA fast path (performance-baselines.md: the parser is where an asyncio
        # receiver spends its time) takes runs of DATA of one established link, checked
        # exactly as exon.decode checks them, without decoding them: each is queued as
        # (link, payload, index), and the counters are added once per run.
        run: _Link | None = None
        run_src = run_dst = run_clock = -1
        queue: deque[tuple[_Link, bytes, int]] = deque()
        first = room = count = nbytes = 0
        unpack = _DATA_HEADER.unpack_from
        header_size, ext_size, data_kind = _HEADER_SIZE, _EXT_SIZE, _DATA
        while size - pos >= 8:
            if size - pos >= header_size:
                version, protocol, kind, remaining, src, dst, clock = unpack(view, pos)
            else:
                version, protocol, kind, remaining = _FIXED.unpack_from(view, pos)
                src = dst = clock = -1
            end = pos + 8 + remaining
            if (
                version != _VERSION
                or protocol != _SOCKETS
                or remaining < ext_size
                or end - pos > max_frame
            ):
                if run is not None:
                    self._end_run(run, first, count, nbytes)
                # Same checks as exon.frame_length: the stream cannot be re-synchronised.
                try:
                    exon.frame_length(view[pos : pos + 8], limits=self._limits)
                    reason = "bad frame header"
                except DecodeError as exc:
                    reason = exc.reason
                self.counters["malformed"] += 1
                self._trace(now, "drop", peer=peer.name, size=size - pos,
                            attrs={"reason": f"framing lost: {reason}"})
                return False
            if end > size:
                break
            frames += 1
            if kind == data_kind:
                if src != run_src or dst != run_dst or clock != run_clock:
                    if run is not None:
                        self._end_run(run, first, count, nbytes)
                        run = None
                    run_src = run_dst = run_clock = -1
                    link = links.get((dst, src))
                    if (
                        link is not None
                        and link.peer_clock == clock
                        and link.state is _ESTABLISHED
                        and not link.socket._is_req
                    ):
                        run, run_src, run_dst, run_clock = link, src, dst, clock
                        queue = link.socket._queue
                        first = link.inflow.received
                        room = link.inflow.granted_max - first
                        count = nbytes = 0
                if run is not None and count < room:
                    queue.append((run, view[pos + header_size : end], first + count))
                    count += 1
                    nbytes += remaining - ext_size
                    pos = end
                    continue
            if run is not None:
                self._end_run(run, first, count, nbytes)
                run, run_src, run_dst, run_clock = None, -1, -1, -1
            frame = view[pos:end]
            pos = end
            try:
                msg = exon.decode(frame, limits=self._limits)
            except DecodeError as exc:
                self.counters["malformed"] += 1
                self._trace(now, "drop", peer=peer.name, size=len(frame),
                            attrs={"reason": f"malformed: {exc.reason}"})
                continue
            self._handle(peer, msg, len(frame), now)
        if run is not None:
            self._end_run(run, first, count, nbytes)
        self.counters["frames_in"] += frames
        if pos < size:
            peer.inbuf += view[pos:]
        return True

    def _end_run(self, link: _Link, first: int, count: int, nbytes: int) -> None:
        """Account for ``count`` DATA of ``link`` the fast path queued (``nbytes``)."""
        if not count:
            return
        link.inflow.received = first + count
        sock = link.socket
        sock.received += count
        queued = sock.queued_bytes + nbytes
        sock.queued_bytes = queued
        sock.peak_queued_bytes = max(sock.peak_queued_bytes, queued)
        if len(sock._queue) == count and not sock._receipts:
            self._readable[sock.tag] = None  # the queue was empty before this run

    def _handle(self, peer: _Peer, msg: SocketMessage, size: int, now: float) -> None:
        body = msg.body
        if msg.dst_tag == 0:
            self._node_message(peer, msg, now)
            return
        sock = self.sockets.get(msg.dst_tag)
        if sock is None:
            if not isinstance(body, ErrorBody):
                # Notes "Socket Not Found": sent as if by the missing socket.
                self.counters["not_found_sent"] += 1
                self._send(peer, SocketMessage(
                    src_tag=msg.dst_tag, dst_tag=msg.src_tag, clock=NO_CLOCK,
                    body=ErrorBody(code=ErrorCode.SOCKET_NOT_FOUND, dest_clock=msg.clock),
                ))
            else:
                self._stale(now, peer, "error for an unknown socket")
            return
        link = sock.links.get((peer.address, msg.src_tag))
        ctx = _Context(msg=msg, clock=msg.clock, size=size)
        if isinstance(body, LinkBody):
            event = self._classify_link(sock, link, body.metadata, msg.clock, ctx)
            if event is None:
                self._stale(now, peer, "duplicate LINK")
                return
            if link is None:
                link = _Link(sock, peer, msg.src_tag, wanted=False)
        elif isinstance(body, LinkAckBody):
            if link is None or body.dest_clock != link.clock:
                self._stale(now, peer, "LINKACK for another incarnation")
                return
            event = self._classify_ack(sock, link, body, ctx)
        elif isinstance(body, ErrorBody):
            if link is None or body.dest_clock != link.clock:
                self._stale(now, peer, "ERROR for another incarnation")
                return
            if body.code is ErrorCode.SOCKET_NOT_FOUND:
                event, ctx.reason = LinkInput.ERR_NOT_FOUND, "peer_socket_not_found"
            elif body.code is ErrorCode.SOCKET_NOT_LINKED:
                event, ctx.reason = LinkInput.ERR_NOT_LINKED, "peer_not_linked"
            else:
                self._stale(now, peer, f"ERROR {body.code.name}: {body.text}")
                return
        else:
            if link is None:
                link = _Link(sock, peer, msg.src_tag, wanted=False)
            elif link.peer_clock is not None and msg.clock != link.peer_clock:
                self._stale(now, peer, f"{msg.type.name} of another incarnation")
                return
            if isinstance(body, FlowBody):
                event = LinkInput.FLOW
            elif isinstance(body, UnlinkBody):
                event = LinkInput.UNLINK_MSG
            else:
                event = LinkInput.DATA
        self._input(link, event, ctx, now)

    def _classify_link(
        self,
        sock: LinkSocket,
        link: _Link | None,
        meta: LinkMetadata,
        clock: int,
        ctx: _Context,
    ) -> LinkInput | None:
        ctx.meta = meta
        if link is not None and link.state in machine.KNOWS_PEER:
            if clock == link.peer_clock:
                return None
            ctx.decision = LinkDecision.LINK_EXISTS
            return LinkInput.LINK_AGAIN
        fresh = link is None or link.state is LinkState.IDLE
        decision = decide(
            sock.pattern,
            meta,
            closing=sock.closing,
            incoming=link is None or not link.wanted,
            allow_incoming=sock.options.allow_incoming,
            at_limit=fresh and sock._at_limit(),
            authorize=sock.options.authorize,
        )
        ctx.decision = decision
        if decision is LinkDecision.SUCCESS:
            return LinkInput.LINK_ACCEPT
        ctx.reason = f"rejected:{decision.name.lower()}"
        return LinkInput.LINK_REFUSE_FATAL if decision.fatal else LinkInput.LINK_REFUSE_TRANSIENT

    def _classify_ack(
        self, sock: LinkSocket, link: _Link, body: LinkAckBody, ctx: _Context
    ) -> LinkInput:
        peer_decision = body.decision
        if peer_decision is not LinkDecision.SUCCESS:
            ctx.reason = f"refused:{peer_decision.name.lower()}"
            link.last_refusal = ctx.reason
            return LinkInput.ACK_FATAL if peer_decision.fatal else LinkInput.ACK_TRANSIENT
        if body.metadata is not None and link.state in machine.NEEDS_METADATA:
            ctx.meta = body.metadata
            own = decide(
                sock.pattern,
                body.metadata,
                closing=sock.closing,
                authorize=sock.options.authorize,
            )
            ctx.decision = own
            if own is LinkDecision.SUCCESS:
                return LinkInput.ACKMETA_ACCEPT
            ctx.reason = f"rejected:{own.name.lower()}"
            link.last_refusal = ctx.reason
            return (
                LinkInput.ACKMETA_REFUSE_FATAL if own.fatal else LinkInput.ACKMETA_REFUSE_TRANSIENT
            )
        return LinkInput.ACK_OK

    def _node_message(self, peer: _Peer, msg: SocketMessage, now: float) -> None:
        # HELLO is consumed by the StreamEndpoint before frames reach the node; any
        # other node-level message is unknown to this version.
        self._stale(now, peer, f"unexpected node-level {msg.type.name}")

    # -- the state machine ---------------------------------------------------------

    def _input(self, link: _Link, event: LinkInput, ctx: _Context, now: float) -> None:
        """Run ``event`` through the table for ``link``, then any follow-up inputs."""
        self._followups.append((link, event, ctx))
        if self._in_input:
            return
        self._in_input = True
        try:
            while self._followups:
                each, kind, each_ctx = self._followups.pop(0)
                expected = _FOLLOWUP_STATE.get(kind)
                if expected is not None and each.state is not expected:
                    continue  # an earlier follow-up already moved the link on
                self._step(each, kind, each_ctx, now)
        finally:
            self._in_input = False

    def _step(self, link: _Link, event: LinkInput, ctx: _Context, now: float) -> None:
        before = link.state
        transition = machine.step(before, event)
        if before in _CANCELLING and not ctx.reason:
            ctx.reason = "cancelled"  # whatever the peer answers, we gave up first
        sock = link.socket
        link.state = transition.next
        key = (link.peer.address, link.peer_tag)
        if transition.next is not LinkState.IDLE and sock.links.get(key) is not link:
            sock.links[key] = link
            link.peer.links[(sock.tag, link.peer_tag)] = link
            if link.peer.channel is not None:
                link.peer.channel.keepalive = True
        if before is LinkState.ESTABLISHED and transition.next is not LinkState.ESTABLISHED:
            self._leave_ring(link)
        for action in transition.actions:
            self._act(action, link, event, ctx, now)
        if transition.next is LinkState.IDLE and Action.CLOSE not in transition.actions:
            self._forget(link)

    def _act(
        self, action: Action, link: _Link, event: LinkInput, ctx: _Context, now: float
    ) -> None:
        sock = link.socket
        peer = link.peer
        if action is Action.NEW_CLOCK:
            link.clock = sock._next_clock()
            link.peer_clock = None
            link.peer_meta = None
        elif action is Action.SEND_LINK:
            link.inflow = InFlow(sock.capacity, sock.batch)
            self._send(peer, SocketMessage(src_tag=sock.tag, dst_tag=link.peer_tag,
                                           clock=link.clock,
                                           body=LinkBody(metadata=sock._metadata())))
        elif action is Action.STORE_META:
            link.peer_meta = ctx.meta
            link.peer_clock = ctx.clock
        elif action in (Action.SEND_ACK, Action.SEND_ACK_META, Action.SEND_ACK_CANCELED,
                        Action.SEND_ACK_EXISTS):
            self._send_ack(link, action, ctx)
        elif action is Action.STASH_ACK:
            link.peer_clock = ctx.clock
        elif action is Action.ESTABLISH:
            self._establish(link, now)
        elif action is Action.SCHEDULE_RETRY:
            self._schedule_retry(link, ctx, now)
        elif action is Action.CANCEL_RETRY:
            link.retry_at = None
            self._retrying.pop(id(link), None)
        elif action is Action.DELIVER:
            self._deliver_slow(link, ctx, now)
        elif action is Action.APPLY_FLOW:
            assert ctx.msg is not None and isinstance(ctx.msg.body, FlowBody)
            self._credit(link, ctx.msg.body.credits, now)
        elif action is Action.SEND_UNLINK:
            self._send(peer, SocketMessage(src_tag=sock.tag, dst_tag=link.peer_tag,
                                           clock=link.clock, body=UnlinkBody(sent=link.sent)))
        elif action is Action.RECORD_PEER_SENT:
            assert ctx.msg is not None and isinstance(ctx.msg.body, UnlinkBody)
            link.peer_sent = ctx.msg.body.sent
        elif action is Action.CHECK_DRAINED:
            if link.peer_sent is not None and link.inflow.received >= link.peer_sent:
                self._followups.append((link, LinkInput.DRAINED, _Context(reason="unlinked")))
        elif action is Action.SEND_NOT_LINKED:
            self.counters["not_linked_sent"] += 1
            clock = ctx.clock if ctx.clock is not None else NO_CLOCK
            self._send(peer, SocketMessage(
                src_tag=sock.tag, dst_tag=link.peer_tag, clock=NO_CLOCK,
                body=ErrorBody(code=ErrorCode.SOCKET_NOT_LINKED, dest_clock=clock),
            ))
        elif action is Action.IGNORE:
            self.counters["ignored"] += 1
            self._trace(now, "drop", peer=peer.name, size=ctx.size,
                        attrs={"reason": f"{event.value} ignored in {link.state.value}",
                               "tag": str(sock.tag)})
        elif action is Action.CLOSE:
            reason = ctx.reason or event.value
            if event is LinkInput.GIVE_UP:
                reason = f"gave_up:{link.last_refusal or 'unknown'}"
            self._close(link, reason, now)

    def _send_ack(self, link: _Link, action: Action, ctx: _Context) -> None:
        sock = link.socket
        decision = ctx.decision
        metadata: LinkMetadata | None = None
        if action is Action.SEND_ACK_META:
            metadata = sock._metadata()
            link.inflow = InFlow(sock.capacity, sock.batch)
        elif action is Action.SEND_ACK_CANCELED:
            decision = LinkDecision.CANCELED
        elif action is Action.SEND_ACK_EXISTS:
            decision = LinkDecision.LINK_EXISTS
        dest = ctx.clock if ctx.clock is not None else NO_CLOCK
        clock = link.clock if link.state is not LinkState.IDLE or decision is LinkDecision.SUCCESS \
            else NO_CLOCK
        if action is Action.SEND_ACK_EXISTS:
            metadata = sock._metadata()
            clock = NO_CLOCK  # the new incarnation is refused: there is no clock for it
        self._send(link.peer, SocketMessage(
            src_tag=sock.tag, dst_tag=link.peer_tag, clock=clock,
            body=LinkAckBody(decision=decision, dest_clock=dest, metadata=metadata),
        ))

    def _establish(self, link: _Link, now: float) -> None:
        sock = link.socket
        meta = link.peer_meta
        assert meta is not None, "a link is established only with the peer's metadata"
        link.credits = meta.credits if sock.pattern.sends else 0
        link.peer_wants_receipts = meta.custom.get("receipts") == b"1"
        link.routing_id = sock._next_routing
        sock._next_routing += 1
        sock._routes[link.routing_id] = link
        mine = f"{self.name}/{sock.tag}#{link.clock}"
        theirs = f"{link.peer.name}/{link.peer_tag}#{link.peer_clock}"
        link.id = "~".join(sorted((mine, theirs)))
        link.data_tail = _EXT.pack(sock.tag, link.peer_tag, link.clock)
        link.up = True
        if link.state is LinkState.ESTABLISHED:
            sock._ring.append(link)
        self._events.append(LinkUp(tag=sock.tag, peer=link.peer.address,
                                   peer_tag=link.peer_tag, credits=link.credits, link=link.id))
        self._trace(now, "link_up", peer=link.peer.name,
                    attrs={"link": link.id, "credits": str(link.credits), "tag": str(sock.tag),
                           "peer_tag": str(link.peer_tag)})
        if link.credits > 0:
            self._writable[sock.tag] = None
        # The capacity advertised in our metadata may have changed while linking.
        if sock.capacity != link.inflow.capacity and link.state is LinkState.ESTABLISHED:
            self._flow(link, link.inflow.set_capacity(sock.capacity), now)
        if sock.pattern.name == "sub" and link.state is LinkState.ESTABLISHED:
            for prefix in sock._subs:
                self._send_control(link, CONTROL_SUBSCRIBE, prefix)

    def _schedule_retry(self, link: _Link, ctx: _Context, now: float) -> None:
        if ctx.reason:
            link.last_refusal = ctx.reason
        opts = link.socket.options
        if not link.wanted or link.attempts >= opts.retry_limit:
            self._followups.append((link, LinkInput.GIVE_UP, _Context()))
            return
        link.attempts += 1
        # Notes footnote 4: random timeouts avoid link request storms.
        base = min(opts.retry_base * 2 ** (link.attempts - 1), opts.retry_max)
        link.retry_at = now + base * self._rng.uniform(0.5, 1.5)
        self._retrying[id(link)] = link

    def _leave_ring(self, link: _Link) -> None:
        ring = link.socket._ring
        if link in ring:
            index = ring.index(link)
            ring.remove(link)
            if index < link.socket._rr:
                link.socket._rr -= 1

    def _forget(self, link: _Link) -> None:
        sock = link.socket
        key = (link.peer.address, link.peer_tag)
        if sock.links.get(key) is link:
            del sock.links[key]
        if link.peer.links.get((sock.tag, link.peer_tag)) is link:
            del link.peer.links[(sock.tag, link.peer_tag)]
            if link.peer.channel is not None and not link.peer.links:
                link.peer.channel.keepalive = False
        if sock._routes.get(link.routing_id) is link:
            del sock._routes[link.routing_id]
        self._retrying.pop(id(link), None)
        self._leave_ring(link)
        self._maybe_remove(sock)

    def _close(self, link: _Link, reason: str, now: float) -> None:
        sock = link.socket
        registered = sock.links.get((link.peer.address, link.peer_tag)) is link
        was_up = link.up
        link.state = LinkState.IDLE
        self._forget(link)
        if not registered and not was_up and not link.wanted:
            return  # a request we refused: nothing of it was ever reported
        if link.cookies:
            # Nothing is dropped silently: receipts of messages whose fate is unknown.
            for _, cookie in link.cookies:
                self._receipt(sock, Receipt(cookie=cookie, peer=link.peer.address,
                                            peer_tag=link.peer_tag, taken=False))
            link.cookies.clear()
        if sock._req_link is link:
            sock._req_link = None
            sock._req_failed = reason
            self._events.append(RequestFailed(tag=sock.tag, reason=reason))
        self._events.append(LinkDown(tag=sock.tag, peer=link.peer.address,
                                     peer_tag=link.peer_tag, reason=reason, established=was_up))
        attrs = {"reason": reason, "tag": str(sock.tag), "peer_tag": str(link.peer_tag)}
        if link.id:
            attrs["link"] = link.id
        self._trace(now, "link_down", peer=link.peer.name, attrs=attrs)
        self._writable[sock.tag] = None  # a waiting sender must re-check (may fail now)

    def _transport_lost(self, peer: _Peer, reason: str, now: float) -> None:
        for link in list(peer.links.values()):
            self._input(link, LinkInput.TRANSPORT_LOST, _Context(reason=reason), now)

    # -- data ------------------------------------------------------------------------

    def _send_data(self, link: _Link, payload: bytes, now: float, cookie: Any) -> None:
        """One DATA on an established link with credit (callers checked both)."""
        link.credits -= 1
        index = link.sent
        link.sent += 1
        sock = link.socket
        sock.sent += 1
        header = _DATA_HEADER.pack(_VERSION, _SOCKETS, _DATA, _EXT_SIZE + len(payload),
                                   sock.tag, link.peer_tag, link.clock)
        peer = link.peer
        if self._tcp:
            out = peer.out
            out += header
            out += payload
            if len(out) >= URGENT_BYTES:
                self.urgent = True
        else:
            channel = peer.channel
            if channel is None:
                channel = self._new_channel(peer)
            channel.queue_frame(header + payload)
        self._dirty[peer.address] = peer
        if cookie is not None:
            link.cookies.append((index, cookie))
        if self._trace_data:
            self._trace(now, "send", msg=f"{self.name}/{sock.tag}#{link.clock}/{index}",
                        peer=peer.name, size=len(header) + len(payload),
                        attrs={"link": link.id})

    def _data_arrived(self, link: _Link, payload: bytes, now: float) -> None:
        """A DATA on an established (or draining) link: queue it for the application."""
        inflow = link.inflow
        if not inflow.arrived():
            self.counters["violations"] += 1
            link.socket.dropped += 1
            self._trace(now, "drop", peer=link.peer.name, size=len(payload),
                        attrs={"reason": "credit_violation", "link": link.id})
            self._input(link, LinkInput.VIOLATION,
                        _Context(clock=link.peer_clock, reason="credit_violation"), now)
            return
        sock = link.socket
        sock.received += 1
        index = inflow.received - 1
        if sock._is_req and not self._reply_expected(sock, link, payload):
            sock.dropped += 1
            self._trace(now, "drop", peer=link.peer.name, size=len(payload),
                        msg=self._msg_id(link, index),
                        attrs={"reason": "stale_reply", "link": link.id})
            # Discarding is taking: the sender gets its credit back.
            self._taken(link, index, now, False)
            return
        queue = sock._queue
        if not queue and not sock._receipts:
            self._readable[sock.tag] = None
        queue.append((link, payload, index))
        sock.queued_bytes += len(payload)
        sock.peak_queued_bytes = max(sock.peak_queued_bytes, sock.queued_bytes)

    def _reply_expected(self, sock: LinkSocket, link: _Link, payload: bytes) -> bool:
        if sock._req_link is not link:
            return False
        try:
            ids, _ = pull_envelope(payload)
        except DecodeError:
            return False
        return ids == (sock._req_id,)

    def _deliver_slow(self, link: _Link, ctx: _Context, now: float) -> None:
        msg = ctx.msg
        assert msg is not None
        body = msg.body
        if isinstance(body, DataBody):
            self._data_arrived(link, body.payload, now)
        elif isinstance(body, ControlBody):
            self._control(link, body, now)

    def _control(self, link: _Link, body: ControlBody, now: float) -> None:
        sock = link.socket
        if body.kind == CONTROL_SUBSCRIBE and sock.pattern.name == "pub":
            if body.payload not in link.subs:
                link.subs = (*link.subs, body.payload)
        elif body.kind == CONTROL_UNSUBSCRIBE and sock.pattern.name == "pub":
            link.subs = tuple(s for s in link.subs if s != body.payload)
        elif body.kind == CONTROL_TAKEN and len(body.payload) == 4:
            (taken,) = _U32.unpack(body.payload)
            cookies = link.cookies
            while cookies and cookies[0][0] < taken:
                _, cookie = cookies.popleft()
                self._receipt(sock, Receipt(cookie=cookie, peer=link.peer.address,
                                            peer_tag=link.peer_tag, taken=True))
        else:
            sock.dropped += 1
            self._trace(now, "drop", peer=link.peer.name,
                        attrs={"reason": f"unknown control {body.kind:#x}", "link": link.id})

    def _receipt(self, sock: LinkSocket, receipt: Receipt) -> None:
        if not sock._queue and not sock._receipts:
            self._readable[sock.tag] = None
        sock._receipts.append(receipt)
        sock.receipt_count += 1

    def _taken(self, link: _Link, index: int, now: float, trace: bool = True) -> None:
        """The application took (or the pattern discarded) message ``index`` of ``link``."""
        if trace and self._trace_data:
            self._trace(now, "deliver", msg=self._msg_id(link, index), peer=link.peer.name,
                        attrs={"link": link.id})
        link.taken += 1
        if link.state is not LinkState.ESTABLISHED:
            return  # an ending link needs no credit back
        variation = link.inflow.taken()
        if variation:
            self._flow(link, variation, now)
        if link.peer_wants_receipts:
            self._send_control(link, CONTROL_TAKEN, _U32.pack(link.taken & _MAX_TAG))

    def _msg_id(self, link: _Link, index: int) -> str:
        return f"{link.peer.name}/{link.peer_tag}#{link.peer_clock}/{index}"

    def _flow(self, link: _Link, variation: int, now: float) -> None:
        if not variation or link.state is not LinkState.ESTABLISHED:
            return
        # Credits waited for by a sender must not wait behind the receiving
        # application's loop: the driver writes them at once.
        self.urgent = True
        self._send(link.peer, SocketMessage(src_tag=link.socket.tag, dst_tag=link.peer_tag,
                                            clock=link.clock, body=FlowBody(credits=variation)))

    def _credit(self, link: _Link, variation: int, now: float) -> None:
        before = link.credits
        link.credits = before + variation
        self._trace(now, "credit", peer=link.peer.name,
                    attrs={"amount": str(variation), "link": link.id,
                           "credits": str(link.credits)})
        if before <= 0 < link.credits:
            self._writable[link.socket.tag] = None

    def _send_control(self, link: _Link, kind: int, payload: bytes) -> None:
        self._send(link.peer, SocketMessage(src_tag=link.socket.tag, dst_tag=link.peer_tag,
                                            clock=link.clock,
                                            body=ControlBody(kind=kind, payload=payload)))

    # -- frames out -------------------------------------------------------------------

    def _send(self, peer: _Peer, msg: SocketMessage) -> None:
        frame = exon.encode(msg, limits=self._limits)
        self.counters["frames_out"] += 1
        if self.config.transport is Transport.TCP:
            if not peer.endpoints and not peer.out:
                self._events.append(Connect(peer=peer.address))
            peer.out += frame
        else:
            channel = peer.channel or self._new_channel(peer)
            channel.queue_frame(frame)
        self._dirty[peer.address] = peer

    # -- helpers ------------------------------------------------------------------------

    def _peer(self, address: Address) -> _Peer:
        peer = self._peers.get(address)
        if peer is None:
            peer = _Peer(address, self._name(address))
            self._peers[address] = peer
        return peer

    def _name(self, address: Address) -> str:
        name = self.config.names.get(address)
        return name if name is not None else f"{address[0]}:{address[1]}"

    def _stale(self, now: float, peer: _Peer, reason: str) -> None:
        self.counters["stale"] += 1
        self._trace(now, "drop", peer=peer.name, attrs={"reason": f"stale: {reason}"})

    def _trace(
        self,
        now: float,
        kind: str,
        *,
        msg: str | None = None,
        peer: str | None = None,
        size: int | None = None,
        attrs: Mapping[str, str] | None = None,
    ) -> None:
        self._trace_sink(now, LAYER, kind, msg=msg, peer=peer, size=size, attrs=attrs)

    # -- introspection for tests and statistics -------------------------------------

    def peers(self) -> list[Address]:
        return list(self._peers)

    def channel(self, peer: Address) -> Channel | None:
        found = self._peers.get(peer)
        return None if found is None else found.channel

    def links(self) -> Iterable[tuple[int, Address, int, LinkState]]:
        for sock in self.sockets.values():
            for (addr, peer_tag), link in sock.links.items():
                yield sock.tag, addr, peer_tag, link.state


# ------------------------------------------------------------------ TCP endpoint


class StreamEndpoint:
    """The ``StreamCore`` of one TCP connection of a TCP-transport :class:`LinkNode`.

    A dialed connection starts with our HELLO; an accepted one waits for the peer's
    HELLO (the first frame, nothing else is accepted before it) to learn the peer's
    listening address. Events are the node's; the node keeps the timers, so the
    endpoint has no deadline of its own.
    """

    def __init__(self, node: LinkNode, peer: Address | None) -> None:
        self.node = node
        self.peer: _Peer | None = None
        #: True once this side will send nothing more (framing broke, peer gone).
        self.closing = False
        self._hello_buf = bytearray()
        self._greeting = b""
        if peer is not None:
            host, port = node.address
            self._greeting = exon.encode(SocketMessage(
                src_tag=0, dst_tag=0, clock=NO_CLOCK,
                body=ControlBody(kind=CONTROL_HELLO, payload=f"{host}:{port}".encode()),
            ))
            self.peer = node._attach(self, peer)

    def receive_data(self, data: bytes, now: float) -> None:
        node = self.node
        node._now = now
        if not data:
            self.abort("transport_lost", now)
        elif not self.closing:
            if self.peer is None:
                data = self._hello(data, now)
            if self.peer is not None and not node._receive_bytes(self.peer, data, now):
                self.abort("framing_lost", now)
        if node.wakeup is not None:
            node.wakeup()

    def abort(self, reason: str, now: float) -> None:
        """This connection is gone (or never came up): the peer's links go down with
        ``reason``."""
        self.closing = True
        self.node._detach(self, reason, now)

    def _hello(self, data: bytes, now: float) -> bytes:
        self._hello_buf += data
        try:
            length = exon.frame_length(self._hello_buf[: exon.FIXED_HEADER_SIZE])
            if length is None or len(self._hello_buf) < length:
                return b""
            msg = exon.decode(bytes(self._hello_buf[:length]))
            body = msg.body
            if not (isinstance(body, ControlBody) and body.kind == CONTROL_HELLO
                    and msg.dst_tag == 0):
                raise DecodeError("the first frame of a connection must be HELLO")
            host, _, port = body.payload.decode().rpartition(":")
            address = (host, int(port))
        except (DecodeError, UnicodeDecodeError, ValueError) as exc:
            self.closing = True
            self.node.counters["malformed"] += 1
            self.node._trace(now, "drop", attrs={"reason": f"bad HELLO: {exc}"})
            return b""
        rest = bytes(self._hello_buf[length:])
        self._hello_buf.clear()
        self.peer = self.node._attach(self, address)
        return rest

    def data_to_send(self) -> bytes:
        if self._greeting:
            greeting, self._greeting = self._greeting, b""
            return greeting + self.node._stream_out(self)
        return self.node._stream_out(self)

    def events_received(self) -> list[Event]:
        return self.node.events_received()

    def handle_timer(self, now: float) -> None:
        return None

    def next_deadline(self) -> float | None:
        return None

