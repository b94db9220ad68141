"""An emulation of a Java A3M node, message by message, for CI (the original needs a JDK
and its sources, which CI does not have).

Written from the description of the original's behaviour (its link handshake, clocks,
reply and error codes, credits and batches, order counters, per-pattern payloads), not
from its code, and speaking through gossamer's codec of its messages
(:mod:`gossamer.wire.a3m`). What it emulates:

- sockets named by string tags; a clock per link from a counter per socket starting at 0;
- LINK {protocolId, credits}; the receiver creates the link and answers LINKREPLY with
  its metadata, {replyCode, destClockId, protocolId, credits}; the initiator establishes
  and answers LINKREPLY {replyCode, destClockId}; the receiver establishes on it, or on
  a DATA/control message of the peer (implicit establishment);
- refusal checks in the original's order, the *last* failing check winning (its bug);
  non-fatal refusals and SOCK_NFOUND retried every 50 ms, forever (its behaviour);
- messages with another clock ignored; a message to a missing tag answered
  ERROR {code "1", destClockId} with clock INT32_MIN; DATA from an unlinked peer
  answered SOCK_NLINKED;
- credits: the peer's capacity; one per DATA, returned in batches of
  floor(capacity x 0.15) when the application takes messages;
- PUSH/PULL and PUB/SUB: DATA numbered 0, 1, ... per link and reordered by the receiver;
  PUB/SUB's topic/content payload; SUB sends SUBSCRIBE (0x7E, own counter) with all its
  topics when a link comes up; PUB synchronized (all matching subscribers have credit,
  or it waits);
- REQ/REP: bare payloads, one request outstanding, the reply on the request's link;
- ROUTER: a DATA's payload is read as a routed message (protobuf, unknown fields
  ignored, as protobuf-java does) or, when it does not parse, as a bare body; the
  link's clock is put in front of its routing ids and the application receives the
  routed message. Its application sends a routed message: the first id names the link
  (by its clock), and the rest goes out as a routed message while ids remain, else as
  the bare body. DEALER: round robin, the application's bytes as they are;
- UNLINK with the count of DATA sent; a link closes once it delivered the peer's count.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError as ProtobufDecodeError

from gossamer.errors import DecodeError
from gossamer.wire import a3m, a3m_pb2
from gossamer.wire.a3m import A3MMessage, A3MType

_I32 = struct.Struct(">i")
PROTOCOLS = {"push": 1, "pull": 2, "req": 3, "rep": 4, "router": 5, "dealer": 6, "pub": 7,
             "sub": 8}
COMPATIBLE = {1: {2}, 2: {1}, 3: {4, 5}, 4: {3, 6}, 5: {3, 5, 6}, 6: {4, 5, 6}, 7: {8, 10},
              8: {7, 9}}
FIFO = {"push", "pull", "pub", "sub"}
RETRY = 0.05

Send = Callable[[str, bytes], None]


@dataclass
class OLink:
    peer_node: str
    peer_tag: str
    clock: int
    state: str = "linking"  # linking, established, unlinking, closed
    peer_clock: int | None = None
    peer_meta: tuple[int, int] | None = None
    credits: int = 0
    sent: int = 0  # DATA sent
    delivered: int = 0  # DATA delivered to the application
    peer_sent: int | None = None
    batch: int = 0
    next_in: int = 0  # FIFO: next order expected
    early: dict[int, bytes] = field(default_factory=dict)
    ctl_out: int = 0
    subs: set[bytes] = field(default_factory=set)
    initiator: bool = False
    retry_at: float | None = None


class OSocket:
    def __init__(self, node: OriginalNode, tag: str, kind: str, capacity: int) -> None:
        self.node = node
        self.tag = tag
        self.kind = kind
        self.protocol = PROTOCOLS[kind]
        self.capacity = 0 if kind in ("push", "pub") else capacity
        self.batch_size = 0 if self.capacity <= 0 else max(1, int(self.capacity * 0.15))
        self.links: dict[tuple[str, str], OLink] = {}
        self.clock = 0
        self.inbox: deque[tuple[OLink, bytes]] = deque()
        self.rr = 0
        self.topics: list[bytes] = []
        self.waiting_reply: OLink | None = None
        self.reply_to: OLink | None = None
        self.closed = False

    # -- application ------------------------------------------------------------------

    def link(self, peer_node: str, peer_tag: str) -> None:
        link = OLink(peer_node, peer_tag, self._next_clock(), initiator=True)
        self.links[(peer_node, peer_tag)] = link
        self._send_link(link)

    def unlink(self, peer_node: str, peer_tag: str) -> None:
        link = self.links[(peer_node, peer_tag)]
        if link.state == "established":
            link.state = "unlinking"
            self._send(link, A3MType.UNLINK, _I32.pack(link.sent))

    def established(self) -> list[OLink]:
        return [link for link in self.links.values() if link.state == "established"]

    def send(self, data: bytes) -> bool:
        """One message by the pattern; False when it would block (no credit)."""
        if self.kind == "pub":
            targets = [lk for lk in self.established() if any(data.startswith(s) for s in lk.subs)]
            if any(lk.credits <= 0 for lk in targets):
                return False
            for lk in targets:
                topic = max((s for s in lk.subs if data.startswith(s)), key=len)
                self._data(lk, a3m.encode_published(topic, data[len(topic):]))
            return True
        if self.kind == "rep":
            link = self.reply_to
            assert link is not None, "REP must receive before it sends"
            if link.credits <= 0:
                return False
            self.reply_to = None
            self._data(link, data)
            return True
        if self.kind == "router":
            return self._route(data)
        if self.kind == "req":
            assert self.waiting_reply is None, "REQ must receive the reply first"
        ring = self.established()
        for i in range(len(ring)):
            link = ring[(self.rr + i) % len(ring)]
            if link.credits > 0:
                self.rr = (self.rr + i + 1) % max(1, len(ring))
                self._data(link, data)
                if self.kind == "req":
                    self.waiting_reply = link
                return True
        return False

    def receive(self) -> bytes | None:
        """The next message for the application (its credit goes back in batches)."""
        while self.inbox:
            link, payload = self.inbox.popleft()
            if self.kind == "req":
                if link is not self.waiting_reply:
                    continue
                self.waiting_reply = None
            if self.kind == "rep":
                self.reply_to = link
            link.delivered += 1
            self._taken(link)
            self._check_closed(link)
            if self.kind == "sub":
                topic, content = a3m.decode_published(payload)
                return topic + content
            return payload
        return None

    def _route(self, data: bytes) -> bool:
        hops, body = a3m.decode_routed(data)  # the original refuses anything else
        destination, rest = hops[0], hops[1:]
        link = next((lk for lk in self.established() if lk.clock == destination), None)
        if link is None:
            return True  # no such link: silently discarded, as the original does
        if link.credits <= 0:
            return False
        self._data(link, a3m.encode_routed(rest, body) if rest else body)
        return True

    def subscribe(self, topic: bytes) -> None:
        self.topics.append(topic)
        for link in self.established():
            self._control(link, a3m.SUBSCRIBE, [topic])

    # -- internals ----------------------------------------------------------------------

    def _next_clock(self) -> int:
        clock = self.clock
        self.clock += 1
        return clock

    def _meta(self) -> dict[str, a3m.FieldValue]:
        return {"protocolId": self.protocol, "credits": self.capacity}

    def _send(self, link: OLink, kind: int, body: bytes) -> None:
        self.node.emit(link.peer_node, A3MMessage(src_tag=self.tag, dst_tag=link.peer_tag,
                                                  kind=kind, clock=link.clock, body=body))

    def _send_link(self, link: OLink) -> None:
        self._send(link, A3MType.LINK, a3m.encode_fields(self._meta()))

    def _reply(self, link: OLink, code: int, *, meta: bool) -> None:
        fields = self._meta() if meta else {}
        fields.update({"replyCode": code, "destClockId": link.peer_clock or 0})
        self._send(link, A3MType.LINKREPLY, a3m.encode_fields(fields))

    def _data(self, link: OLink, body: bytes) -> None:
        link.credits -= 1
        if self.kind in FIFO:
            body = a3m.join_order(link.sent, body)
        link.sent += 1
        self._send(link, A3MType.DATA, body)

    def _control(self, link: OLink, kind: int, topics: list[bytes]) -> None:
        body = a3m.join_order(link.ctl_out, a3m.encode_subscriptions(topics))
        link.ctl_out += 1
        self._send(link, kind, body)

    def _taken(self, link: OLink) -> None:
        if link.state != "established":
            return
        link.batch += 1
        if link.batch >= self.batch_size:
            self._send(link, A3MType.FLOW, _I32.pack(link.batch))
            link.batch = 0

    def _establish(self, link: OLink) -> None:
        assert link.peer_meta is not None
        link.state = "established"
        link.credits = link.peer_meta[1]
        if self.kind == "sub" and self.topics:
            self._control(link, a3m.SUBSCRIBE, self.topics)

    def _check_closed(self, link: OLink) -> None:
        if link.state == "unlinking" and link.peer_sent is not None \
                and link.delivered + len(link.early) >= link.peer_sent \
                and not any(lk is link for lk, _ in self.inbox):
            link.state = "closed"
            self.links.pop((link.peer_node, link.peer_tag), None)

    def _refusal(self, meta: tuple[int, int]) -> int:
        code = 0  # the original runs every check; the last failure wins (its bug 1)
        if self.closed:
            code = -4
        if meta[0] not in COMPATIBLE.get(self.protocol, set()):
            code = -1
        return code

    # -- messages in ---------------------------------------------------------------------

    def handle(self, src_node: str, msg: A3MMessage, now: float) -> None:
        key = (src_node, msg.src_tag)
        link = self.links.get(key)
        kind = msg.kind
        if kind == A3MType.LINK:
            fields = a3m.decode_fields(msg.body)
            meta = (int(fields["protocolId"]), int(fields["credits"]))
            if link is not None and link.state == "linking" and link.peer_meta is None:
                # Simultaneous LINKs: keep the metadata, answer without ours.
                link.peer_meta, link.peer_clock = meta, msg.clock
                self._reply(link, 0, meta=False)
                return
            if link is not None and link.peer_clock is not None and link.peer_clock < msg.clock:
                stale = OLink(src_node, msg.src_tag, link.clock, peer_clock=msg.clock)
                self._reply(stale, 1, meta=True)  # AC_LINK_EXISTS
                return
            code = self._refusal(meta)
            new = OLink(src_node, msg.src_tag, self._next_clock(), peer_clock=msg.clock,
                        peer_meta=meta)
            self._reply(new, code, meta=True)
            if code == 0:
                self.links[key] = new
            return
        if link is None:
            if kind == A3MType.DATA or kind >= a3m.CONTROL_MIN or kind == A3MType.UNLINK:
                fake = OLink(src_node, msg.src_tag, msg.clock, peer_clock=msg.clock)
                self._send(fake, A3MType.ERROR, a3m.encode_fields(
                    {"code": "3", "destClockId": msg.clock}))
            return
        if kind == A3MType.LINKREPLY:
            fields = a3m.decode_fields(msg.body)
            if fields.get("destClockId") != link.clock or link.state != "linking":
                return  # stale
            code = int(fields["replyCode"])
            if code < 0:
                self.links.pop(key, None)
                return
            if code > 0:
                link.retry_at = now + RETRY
                return
            if "protocolId" in fields:
                link.peer_meta = (int(fields["protocolId"]), int(fields["credits"]))
                link.peer_clock = msg.clock
                own = self._refusal(link.peer_meta)
                self._reply(link, own, meta=False)
                if own != 0:
                    self.links.pop(key, None)
                    return
            elif link.peer_meta is None:
                return  # a reply before the peer's LINK: the emulation keeps nothing
            self._establish(link)
            return
        if kind == A3MType.ERROR:
            fields = a3m.decode_fields(msg.body)
            if fields.get("destClockId") == link.clock and fields.get("code") == "1":
                link.retry_at = now + RETRY  # socket not found: try again, forever
            return
        if msg.clock != link.peer_clock:
            return  # another incarnation
        if link.state == "linking":
            if link.peer_meta is None:
                return
            self._establish(link)  # DATA or control proves the peer's positive reply
        if kind == A3MType.FLOW:
            link.credits += _I32.unpack(msg.body)[0]
        elif kind == A3MType.UNLINK:
            link.peer_sent = _I32.unpack(msg.body)[0]
            if link.state == "established":
                link.state = "unlinking"
                self._send(link, A3MType.UNLINK, _I32.pack(link.sent))
            self._check_closed(link)
        elif kind == A3MType.DATA:
            self._data_in(link, msg.body)
        elif kind in (a3m.SUBSCRIBE, a3m.UNSUBSCRIBE):
            _, rest = a3m.split_order(msg.body)
            topics = a3m.decode_subscriptions(rest)
            if kind == a3m.SUBSCRIBE:
                link.subs.update(topics)
            else:
                link.subs.difference_update(topics)

    def _data_in(self, link: OLink, body: bytes) -> None:
        if self.kind == "router":
            routed = a3m_pb2.Routed()
            try:
                routed.ParseFromString(body)  # unknown fields ignored, as in Java
                hops: list[int | tuple[str, str]] = [
                    h.clock if h.WhichOneof("hop") == "clock" else (h.socket.node, h.socket.tag)
                    for h in routed.hops
                ]
                body = routed.body
            except ProtobufDecodeError:
                hops = []  # a bare payload: a REQ's, or a DEALER application's
            self.inbox.append((link, a3m.encode_routed([link.clock, *hops], body)))
            return
        if self.kind not in FIFO:
            self.inbox.append((link, body))
            return
        order, rest = a3m.split_order(body)
        link.early[order] = rest
        while link.next_in in link.early:
            self.inbox.append((link, link.early.pop(link.next_in)))
            link.next_in += 1

    def retry(self, now: float) -> None:
        for link in list(self.links.values()):
            if link.retry_at is not None and link.retry_at <= now:
                link.retry_at = None
                link.clock = self._next_clock()
                link.peer_clock = link.peer_meta = None
                self._send_link(link)


class OriginalNode:
    """One emulated A3M node: its sockets, and the Exon payloads it sends (``outbox``)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.sockets: dict[str, OSocket] = {}
        self.outbox: list[tuple[str, bytes]] = []
        self.malformed = 0

    def socket(self, kind: str, tag: str, capacity: int = 250) -> OSocket:
        sock = OSocket(self, tag, kind, capacity)
        self.sockets[tag] = sock
        return sock

    def emit(self, dst_node: str, msg: A3MMessage) -> None:
        self.outbox.append((dst_node, a3m.encode_message(msg)))

    def receive(self, src_node: str, payload: bytes, now: float) -> None:
        try:
            msg = a3m.decode_message(payload)
        except DecodeError:
            self.malformed += 1  # the original prints the exception and goes on
            return
        sock = self.sockets.get(msg.dst_tag)
        if sock is None:
            self.outbox.append((src_node, a3m.encode_message(A3MMessage(
                src_tag=msg.dst_tag, dst_tag=msg.src_tag, kind=A3MType.ERROR,
                clock=a3m.MISSING_CLOCK,
                body=a3m.encode_fields({"code": "1", "destClockId": msg.clock})))))
            return
        try:
            sock.handle(src_node, msg, now)
        except (DecodeError, KeyError, ValueError):
            self.malformed += 1

    def next_deadline(self) -> float | None:
        due = [lk.retry_at for s in self.sockets.values() for lk in s.links.values()
               if lk.retry_at is not None]
        return min(due, default=None)

    def handle_timer(self, now: float) -> None:
        for sock in self.sockets.values():
            sock.retry(now)
