"""The original wire of links: a node's frames as the Java A3M's messages.

With ``Transport.EXON`` and the original wire, a :class:`~.node.LinkNode` keeps
everything it has on its own wire, the link state machine (:mod:`~.machine`), credits
(:mod:`~.credit`) and patterns, and :class:`A3MFrames` translates each frame at the edge,
between the node and the Exon transport (:mod:`~.exon_transport`), one A3M message per
Exon message (:mod:`gossamer.wire.a3m`):

- the node's records become A3M messages (:func:`~gossamer.wire.a3m.from_link_message`)
  and back: string tags through a :class:`~gossamer.wire.a3m.TagBook`, int32 clocks,
  the three-message handshake (the node's LINK / LINKACK with metadata / LINKACK
  without is exactly A3M's LINK / LINKREPLY with the map / LINKREPLY without it), the
  error codes and reply codes;
- DATA by pattern: PUSH/PULL and PUB/SUB number their DATA 0, 1, ... per link (the
  node's DATA index on the link) and the receiver here puts them back in that order
  before the node sees them, since Exon delivers out of order (the original does the
  same above Exon); PUB/SUB's payload is the original's topic and content (a gossamer
  publish's topic is the longest prefix the subscriber asked for, the content the
  rest; a received one is delivered as topic + content); REQ/REP carry the bare bytes
  (the original keeps one request per link outstanding, as gossamer's REQ does: the
  request id of gossamer's envelope is kept here and put back on the reply);
  DEALER/ROUTER the original's routed message while routing ids remain, and the bare
  body otherwise, as the original ROUTER sends; a payload that is not a routed message is
  read as a bare body without ids, as the original ROUTER reads what a REQ (or a DEALER's
  application) sent, so DEALER talks with REP and ROUTER with REQ on this wire too;
- SUBSCRIBE / UNSUBSCRIBE become the original's control types 0x7E / 0x7F.

What the original wire cannot say is not sent, and is counted (``unsayable``) and
traced: receipts (TAKEN), custom control types, custom link metadata. There is no HELLO
(Exon names every node by its id). A frame is translated when the node hands it over,
so the order counter is the DATA's index on its link at that moment.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from gossamer._types import Address
from gossamer.errors import DecodeError
from gossamer.proto.link.config import CONTROL_SUBSCRIBE, CONTROL_UNSUBSCRIBE
from gossamer.proto.link.host import TransportHost
from gossamer.proto.link.patterns import pull_envelope, push_envelope
from gossamer.proto.link.records import Peer
from gossamer.wire import a3m, exon
from gossamer.wire.a3m import A3MLimits, TagBook
from gossamer.wire.exon import ControlBody, DataBody, SocketMessage

__all__ = ["ORDERED", "A3MFrames"]

#: Patterns whose DATA carry the original's order counter (its FIFO sockets).
ORDERED = frozenset({"push", "pull", "pub", "sub"})
_REQUEST_REPLY = frozenset({"req", "rep"})
_ROUTED = frozenset({"dealer", "router"})
_HEADER = exon.DATA_HEADER
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class _Inbound:
    """A link incarnation's DATA on their way in: the next order number, and those
    that arrived early."""

    expected: int = 0
    early: dict[int, SocketMessage] = field(default_factory=dict)


class A3MFrames:
    """The node's frames as A3M messages and back (module docstring): the frame codec
    of an :class:`~.exon_transport.ExonTransport` on the original wire."""

    def __init__(self, node: TransportHost, limits: A3MLimits) -> None:
        self.node = node
        self.limits = limits
        self.tags = TagBook()
        #: (peer address, src tag, dst tag, clock) -> DATA waiting for their turn.
        self._inbound: dict[tuple[Address, int, int, int], _Inbound] = {}
        #: (peer address, local tag, peer tag, clock) -> next control order number.
        self._control_order: dict[tuple[Address, int, int, int], int] = {}
        #: REQ: (peer address, local tag, peer tag) -> the request id of our envelope.
        self._request_ids: dict[tuple[Address, int, int], int] = {}

    # -- out -------------------------------------------------------------------------

    def frame_out(self, peer: Peer, frame: bytes, now: float) -> bytes | None:
        """The A3M message for one of the node's frames, or ``None`` (counted, traced)
        when the original wire cannot say it."""
        return self._out(peer, exon.decode(frame, limits=self.node.limits), now)

    def data_out(self, peer: Peer, header: bytes, payload: bytes, now: float) -> bytes | None:
        """The A3M message for one DATA of the node (its header and payload)."""
        _, _, _, _, src, dst, clock = _HEADER.unpack(header)
        return self._out(peer, SocketMessage(src_tag=src, dst_tag=dst, clock=clock,
                                             body=DataBody(payload=payload)), now)

    def _out(self, peer: Peer, msg: SocketMessage, now: float) -> bytes | None:
        try:
            body = msg.body
            if isinstance(body, DataBody):
                msg = self._data_out(peer, msg, body.payload)
            elif isinstance(body, ControlBody):
                msg = self._control_out(peer, msg, body)
            return a3m.encode_message(a3m.from_link_message(msg, self.tags, limits=self.limits),
                                      limits=self.limits)
        except (ValueError, DecodeError) as exc:
            # What the original wire cannot say is not sent, loudly.
            counters = self.node.counters
            counters["unsayable"] = counters.get("unsayable", 0) + 1
            self.node.trace(now, "drop", peer=peer.name,
                            attrs={"reason": f"not on the original wire: {exc}"})
            return None

    def _pattern(self, local_tag: int) -> str:
        return self.node.pattern_of(local_tag) or ""

    def _data_out(self, peer: Peer, msg: SocketMessage, payload: bytes) -> SocketMessage:
        pattern = self._pattern(msg.src_tag)
        link = peer.links.get((msg.src_tag, msg.dst_tag))
        if pattern in _REQUEST_REPLY:
            ids, body = pull_envelope(payload)
            if pattern == "req" and ids:
                self._request_ids[(peer.address, msg.src_tag, msg.dst_tag)] = ids[0]
            payload = body
        elif pattern in _ROUTED:
            ids, body = pull_envelope(payload)
            payload = a3m.encode_routed_or_bare([_signed(i) for i in ids], body,
                                                limits=self.limits)
        elif pattern in ORDERED:
            if link is None:
                raise ValueError("DATA without a link")
            if pattern == "pub":
                topic = max((s for s in link.subs if payload.startswith(s)), key=len,
                            default=b"")
                payload = a3m.encode_published(topic, payload[len(topic):])
            # The node counted this DATA already: its index on the link is the order.
            payload = a3m.join_order(link.sent - 1, payload)
        return SocketMessage(src_tag=msg.src_tag, dst_tag=msg.dst_tag, clock=msg.clock,
                             body=DataBody(payload=payload))

    def _control_out(self, peer: Peer, msg: SocketMessage, body: ControlBody) -> SocketMessage:
        kinds = {CONTROL_SUBSCRIBE: a3m.SUBSCRIBE, CONTROL_UNSUBSCRIBE: a3m.UNSUBSCRIBE}
        kind = kinds.get(body.kind)
        if kind is None:
            raise ValueError(f"control type {body.kind:#x} is gossamer's own")
        key = (peer.address, msg.src_tag, msg.dst_tag, msg.clock)
        if key not in self._control_order:  # a new incarnation: forget the older ones
            for old in [k for k in self._control_order if k[:3] == key[:3]]:
                del self._control_order[old]
        order = self._control_order.get(key, 0)
        self._control_order[key] = order + 1
        payload = a3m.join_order(order, a3m.encode_subscriptions([body.payload],
                                                                 limits=self.limits))
        return SocketMessage(src_tag=msg.src_tag, dst_tag=msg.dst_tag, clock=msg.clock,
                             body=ControlBody(kind=kind, payload=payload))

    # -- in ----------------------------------------------------------------------------

    def frames_in(self, peer: Peer, payload: bytes, now: float) -> list[bytes]:
        """The node's frames for one A3M message from ``peer``: none while a DATA waits
        for its turn, several when it completes a run. A message that does not decode
        is counted (``malformed``) and traced."""
        node = self.node
        try:
            msg = a3m.to_link_message(a3m.decode_message(payload, limits=self.limits),
                                      self.tags, limits=self.limits)
            if isinstance(msg.body, DataBody):
                messages = self._data_in(peer, msg)
            elif isinstance(msg.body, ControlBody):
                messages = self._control_in(msg)
            else:
                messages = [msg]
        except DecodeError as exc:
            node.counters["malformed"] += 1
            node.trace(now, "drop", peer=peer.name, size=len(payload),
                       attrs={"reason": f"malformed: {exc.reason}"})
            return []
        return [exon.encode(each, limits=node.limits) for each in messages]

    def _data_in(self, peer: Peer, msg: SocketMessage) -> list[SocketMessage]:
        assert isinstance(msg.body, DataBody)
        payload = msg.body.payload
        pattern = self._pattern(msg.dst_tag)
        if pattern in _REQUEST_REPLY:
            request = self._request_ids.get((peer.address, msg.dst_tag, msg.src_tag))
            ids = (request,) if pattern == "req" and request is not None else ()
            return [_with(msg, push_envelope(ids, payload))]
        if pattern in _ROUTED:
            hops, body = a3m.read_routed(payload, limits=self.limits)
            if any(not isinstance(h, int) for h in hops):
                raise DecodeError("routing ids naming sockets are not supported")
            try:
                return [_with(msg, push_envelope([h & 0xFFFF_FFFF for h in hops
                                                  if isinstance(h, int)], body))]
            except ValueError as exc:
                raise DecodeError(str(exc)) from None
        if pattern not in ORDERED:
            return [msg]
        order, body = a3m.split_order(payload)
        if pattern == "sub":
            topic, content = a3m.decode_published(body)
            body = topic + content
        key = (peer.address, msg.src_tag, msg.dst_tag, msg.clock)
        inbound = self._inbound.get(key)
        if inbound is None:
            # A new incarnation: forget the drained state of the link's older ones.
            for old in [k for k, v in self._inbound.items() if k[:3] == key[:3] and not v.early]:
                del self._inbound[old]
            inbound = self._inbound[key] = _Inbound()
        room = self._room(peer, msg)
        if not 0 <= order - inbound.expected < room or order in inbound.early:
            raise DecodeError(f"order {order} outside the window of {room} from "
                              f"{inbound.expected}")
        inbound.early[order] = _with(msg, body)
        ready: list[SocketMessage] = []
        while inbound.expected in inbound.early:
            ready.append(inbound.early.pop(inbound.expected))
            inbound.expected += 1
        return ready

    def _room(self, peer: Peer, msg: SocketMessage) -> int:
        """How far ahead an early DATA may be: what the sender may have in flight."""
        link = peer.links.get((msg.dst_tag, msg.src_tag))
        if link is None or link.peer_clock != msg.clock:
            return max(1, self.node.pattern_capacity(msg.dst_tag))
        return max(1, link.inflow.granted_max - link.inflow.received)

    def _control_in(self, msg: SocketMessage) -> list[SocketMessage]:
        assert isinstance(msg.body, ControlBody)
        kinds = {a3m.SUBSCRIBE: CONTROL_SUBSCRIBE, a3m.UNSUBSCRIBE: CONTROL_UNSUBSCRIBE}
        kind = kinds.get(msg.body.kind)
        if kind is None:
            raise DecodeError(f"unknown control type {msg.body.kind:#x}")
        _, rest = a3m.split_order(msg.body.payload)
        topics = a3m.decode_subscriptions(rest, limits=self.limits)
        return [SocketMessage(src_tag=msg.src_tag, dst_tag=msg.dst_tag, clock=msg.clock,
                              body=ControlBody(kind=kind, payload=t)) for t in topics]


def _with(msg: SocketMessage, payload: bytes) -> SocketMessage:
    return SocketMessage(src_tag=msg.src_tag, dst_tag=msg.dst_tag, clock=msg.clock,
                         body=DataBody(payload=payload))


def _signed(value: int) -> int:
    return int(_I32.unpack(value.to_bytes(4, "big"))[0])
