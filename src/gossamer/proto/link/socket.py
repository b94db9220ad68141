"""A socket of a link node: its links, its incoming queue and its pattern.

The application's side is the methods without a leading underscore that take ``now``
(``link``, ``send``, ``take``, ...); they never block. The node's side is the small
interface under "for the node" below: the node queues what arrives (``queue_message``,
``queue_run``, ``queue_receipt``) and tells the socket when a link comes up or goes
(``link_up``, ``forget``, ``link_lost``); the socket keeps its round robin ring, its
ROUTER routes and its REQ/REP state to itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import repeat
from typing import Any

from gossamer._types import Address
from gossamer.errors import ConfigError, DecodeError, LinkError, LocalProtocolError
from gossamer.proto.link.config import (
    CONTROL_SUBSCRIBE,
    CONTROL_UNSUBSCRIBE,
    MAX_TAG,
    URGENT_BYTES,
    SocketOptions,
    check_tag,
)
from gossamer.proto.link.events import LinkStatistics, Message, Receipt, SocketStatistics
from gossamer.proto.link.host import SocketHost
from gossamer.proto.link.machine import LinkInput, LinkState
from gossamer.proto.link.patterns import Pattern, pull_envelope, push_envelope
from gossamer.proto.link.records import Context, Link
from gossamer.wire.exon import (
    EXTENDED_HEADER_SIZE,
    FIXED_HEADER,
    NO_CLOCK,
    VERSION,
    LinkMetadata,
    MessageType,
    Protocol,
)

__all__ = ["LinkSocket"]

_ESTABLISHED = LinkState.ESTABLISHED
_PACK_FIXED = FIXED_HEADER.pack
_SOCKETS, _DATA = int(Protocol.SOCKETS), int(MessageType.DATA)


class LinkSocket:
    """One socket of a node: its links, its incoming queue and its pattern.

    Created by :meth:`LinkNode.open_socket`, which is the socket's ``node`` (what the
    socket asks of it is :class:`~.host.SocketHost`). Every method takes ``now`` and
    never blocks; see :mod:`gossamer.proto.link.node` for how drivers wait.
    """

    def __init__(
        self, node: SocketHost, tag: int, pattern: Pattern, options: SocketOptions, clock: int
    ) -> None:
        self.node = node
        self.tag = tag
        self.pattern = pattern
        self.options = options
        self.capacity = options.capacity if pattern.receives else 0
        self.batch = options.batch
        self.closing = False
        self.closed = False
        self.links: dict[tuple[Address, int], Link] = {}
        #: Incoming DATA (link, payload, index on the link), filled by the node.
        self.queue: deque[tuple[Link, bytes, int]] = deque()
        #: Receipts waiting to be taken, filled by the node.
        self.receipts: deque[Receipt] = deque()
        #: REQ sockets check every reply; the node's fast path leaves them alone.
        self.is_req = pattern.name == "req"
        self._ring: list[Link] = []
        self._rr = 0
        self._clock = clock
        self._receipt_streak = 0
        self._next_routing = 1
        self._routes: dict[int, Link] = {}
        # Patterns whose send is plain round robin and whose messages carry no envelope.
        self._round_robin = pattern.name in ("push", "pair")
        self._plain = pattern.receives and not pattern.enveloped
        # REQ: the link and id of the request awaiting its reply.
        self._req_link: Link | None = None
        self._req_id = 0
        self._req_failed: str | None = None
        # REP: where the reply to the request taken last goes.
        self._rep_pending: tuple[Link, tuple[int, ...]] | None = None
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
        check_tag(peer_tag)
        if (peer, peer_tag) == (self.node.address, self.tag):
            raise LocalProtocolError("a socket cannot link with itself", tag=self.tag)
        node = self.node
        link = self.links.get((peer, peer_tag))
        if link is None:
            link = Link(self, node.peer(peer), peer_tag, wanted=True)
        link.wanted = True
        link.attempts = 0
        node.input(link, LinkInput.LINK, Context(), now)

    def unlink(self, peer: Address, peer_tag: int, now: float) -> None:
        """Unlink (or cancel linking). Every DATA already sent either way is still
        delivered before the link closes (``LinkDown`` with reason ``unlinked``)."""
        link = self.links.get((peer, peer_tag))
        if link is None:
            raise LocalProtocolError("no link with that socket", peer=peer, peer_tag=peer_tag)
        link.wanted = False
        self.node.input(link, LinkInput.UNLINK, Context(reason="cancelled"), now)

    def close(self, now: float) -> None:
        """Refuse new links (fatal ``CLOSED``) and unlink every link. The socket is
        removed once its last link closed (or with :meth:`LinkNode.remove_socket`)."""
        self.closing = True
        for link in list(self.links.values()):
            link.wanted = False
            if link.state is not LinkState.IDLE:
                self.node.input(link, LinkInput.UNLINK, Context(reason="cancelled"), now)
        self.node.remove_if_closed(self)

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
            if not node.direct_data:
                node.send_data(link, data, now, None)
                return True
            # node.send_data over TCP without traces, inline.
            link.credits -= 1
            link.sent += 1
            self.sent += 1
            peer = link.peer
            out = peer.out
            out += _PACK_FIXED(VERSION, _SOCKETS, _DATA, EXTENDED_HEADER_SIZE + len(data))
            out += link.data_tail
            out += data
            if len(out) >= URGENT_BYTES:
                node.urgent = True
            node.dirty[peer.address] = peer
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
            self.node.send_data(link, payload, now, cookie)
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

    def _pick(self) -> Link | None:
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
        self._req_id = (self._req_id + 1) & MAX_TAG or 1
        self._req_link = link
        self._req_failed = None
        self.node.send_data(link, push_envelope((self._req_id,), data), now, cookie)
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
        self.node.send_data(link, push_envelope(ids, data), now, cookie)
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
        self.node.send_data(link, push_envelope(envelope, data), now, cookie)
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
            self.node.trace(
                now, "drop", size=len(data), attrs={"reason": "no_subscriber", "tag": str(self.tag)}
            )
            return True
        for link in targets:
            self.node.send_data(link, data, now, cookie)
        return True

    # -- subscriptions (SUB) -------------------------------------------------------

    def subscribe(self, prefix: bytes, now: float) -> None:
        """SUB: receive messages that start with ``prefix`` (``b""``: everything)."""
        self._require("sub")
        if prefix in self._subs:
            return
        self._subs[prefix] = None
        for link in self._ring:
            self.node.send_control(link, CONTROL_SUBSCRIBE, prefix)

    def unsubscribe(self, prefix: bytes, now: float) -> None:
        self._require("sub")
        if prefix in self._subs:
            del self._subs[prefix]
            for link in self._ring:
                self.node.send_control(link, CONTROL_UNSUBSCRIBE, prefix)

    @property
    def subscriptions(self) -> Iterable[bytes]:
        """SUB: our prefixes, in subscription order (sent to each new link)."""
        return self._subs.keys()

    # -- receiving -----------------------------------------------------------------

    def take(self, now: float) -> bytes | Receipt | None:
        """The next receipt or message body, or ``None`` if there is none.

        Taking a message is what returns its credit to the sender (in batches)."""
        if self._plain and not self.receipts:
            entry = self._take_plain(now)
            return None if entry is None else entry[1]
        item = self._take(now)
        if item is None or isinstance(item, Receipt):
            return item
        return item.data

    def take_message(self, now: float) -> Message | Receipt | None:
        """Like :meth:`take`, with the message's sender and envelope."""
        if self._plain and not self.receipts:
            entry = self._take_plain(now)
            if entry is None:
                return None
            link, payload, _ = entry
            return Message(payload, link.peer.address, link.peer_tag)
        return self._take(now)

    def _take_plain(self, now: float) -> tuple[Link, bytes, int] | None:
        """The hot path of :meth:`take` and :meth:`take_message` (PULL, SUB, PAIR: no
        envelope, no receipt waiting): the queue's next entry, its credit accounted."""
        queue = self.queue
        if not queue:
            return None
        entry = queue.popleft()
        link, payload, index = entry
        self.queued_bytes -= len(payload)
        self.taken += 1
        node = self.node
        if node.trace_data or link.peer_wants_receipts or link.state is not _ESTABLISHED:
            node.taken(link, index, now)
            return entry
        # node.taken without traces and receipts: count it, return credits by the batch.
        link.taken += 1
        inflow = link.inflow
        inflow.pending += 1
        if inflow.pending >= inflow.batch:
            node.flow(link, inflow.batch_done(), now)
        return entry

    def _take(self, now: float) -> Message | Receipt | None:
        if not self.pattern.receives and not self.options.receipts:
            raise LocalProtocolError(f"a {self.pattern.name} socket cannot receive")
        if self.receipts and (
            not self.queue
            or self.options.receipt_ratio == 0
            or self._receipt_streak < self.options.receipt_ratio
        ):
            self._receipt_streak += 1
            return self.receipts.popleft()
        self._receipt_streak = 0
        if self.pattern.name == "rep" and self._rep_pending is not None:
            raise LocalProtocolError("a REP socket must reply before taking the next request")
        node = self.node
        while self.queue:
            link, payload, index = self.queue.popleft()
            self.queued_bytes -= len(payload)
            self.taken += 1
            node.taken(link, index, now)
            if not self.pattern.enveloped:
                return Message(payload, link.peer.address, link.peer_tag)
            try:
                ids, body = pull_envelope(payload)
            except DecodeError as exc:
                self.dropped += 1
                node.trace(now, "drop", peer=link.peer.name, size=len(payload),
                           attrs={"reason": f"malformed envelope: {exc.reason}"})
                continue
            name = self.pattern.name
            if name == "req":
                self._req_link = None
            elif name == "rep":
                self._rep_pending = (link, ids)
            return Message(
                data=body,
                sender=link.peer.address,
                peer_tag=link.peer_tag,
                envelope=ids,
                routing_id=link.routing_id if name == "router" else None,
            )
        return None

    @property
    def readable(self) -> bool:
        return bool(self.queue or self.receipts)

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
            self.node.flow(link, link.inflow.set_capacity(capacity), now)

    def adjust_capacity(self, delta: int, now: float) -> None:
        self.set_capacity(self.capacity + delta, now)

    def set_batch(self, fraction: float, now: float) -> None:
        """New batch fraction; a pending batch at least as large as the new size is
        returned at once in whole batches."""
        if not 0.0 < fraction <= 1.0:
            raise ConfigError("batch must be a fraction in (0, 1]", batch=fraction)
        self.batch = fraction
        for link in self._ring:
            self.node.flow(link, link.inflow.set_fraction(fraction), now)

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
            queued=len(self.queue),
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

    # -- for the node ----------------------------------------------------------------

    def next_clock(self) -> int:
        """The clock of this socket's next link incarnation."""
        self._clock = (self._clock + 1) & MAX_TAG
        # NO_CLOCK means "no socket"; so does 0x80000000 on the original wire (INT32_MIN).
        if self._clock in (NO_CLOCK, 1 << 31):
            self._clock = (self._clock + 1) & MAX_TAG
        return self._clock

    def metadata(self) -> LinkMetadata:
        """What this socket tells a peer in LINK and LINKACK."""
        custom = dict(self.options.custom)
        if self.options.receipts:
            custom["receipts"] = b"1"
        return LinkMetadata(socket_type=self.pattern.kind, credits=self.capacity, custom=custom)

    def at_limit(self) -> bool:
        """True when the pattern or ``max_links`` allows no further link."""
        limit = self.pattern.link_limit
        if self.options.max_links is not None:
            limit = self.options.max_links if limit is None else min(limit, self.options.max_links)
        if limit is None:
            return False
        live = sum(1 for link in self.links.values() if link.state is not LinkState.IDLE)
        return live >= limit

    def link_up(self, link: Link) -> None:
        """``link`` came up: give it a routing id and, once established, a place in
        the round robin ring."""
        link.routing_id = self._next_routing
        self._next_routing += 1
        self._routes[link.routing_id] = link
        if link.state is LinkState.ESTABLISHED:
            self._ring.append(link)

    def leave_ring(self, link: Link) -> None:
        """``link`` is no longer established: no message goes to it from now on."""
        ring = self._ring
        if link in ring:
            index = ring.index(link)
            ring.remove(link)
            if index < self._rr:
                self._rr -= 1

    def forget(self, link: Link) -> None:
        """``link`` is gone (idle): drop it from the links, routes and ring."""
        key = (link.peer.address, link.peer_tag)
        if self.links.get(key) is link:
            del self.links[key]
        if self._routes.get(link.routing_id) is link:
            del self._routes[link.routing_id]
        self.leave_ring(link)

    def link_lost(self, link: Link, reason: str) -> bool:
        """``link`` closed with ``reason``: True when it carried our pending request
        (a REQ socket then reports ``reason`` as :attr:`request_failed`)."""
        if self._req_link is not link:
            return False
        self._req_link = None
        self._req_failed = reason
        return True

    def expects_reply(self, link: Link, payload: bytes) -> bool:
        """REQ: whether ``payload`` from ``link`` answers the pending request."""
        if self._req_link is not link:
            return False
        try:
            ids, _ = pull_envelope(payload)
        except DecodeError:
            return False
        return ids == (self._req_id,)

    def queue_message(self, link: Link, payload: bytes, index: int) -> bool:
        """Queue DATA ``index`` of ``link``; True when the socket became readable."""
        queue = self.queue
        readable = not queue and not self.receipts
        queue.append((link, payload, index))
        self.queued_bytes += len(payload)
        self.peak_queued_bytes = max(self.peak_queued_bytes, self.queued_bytes)
        return readable

    def queue_run(self, link: Link, payloads: list[bytes], first: int) -> bool:
        """Queue DATA ``first``, ``first + 1``, ... of ``link``, which the node checked
        (established, within credit) and counted as received on the link; True when
        the socket became readable."""
        queue = self.queue
        readable = not queue and not self.receipts
        count = len(payloads)
        queue.extend(zip(repeat(link), payloads, range(first, first + count)))
        self.received += count
        queued = self.queued_bytes + sum(map(len, payloads))
        self.queued_bytes = queued
        self.peak_queued_bytes = max(self.peak_queued_bytes, queued)
        return readable

    def queue_receipt(self, receipt: Receipt) -> bool:
        """Queue ``receipt``; True when the socket became readable."""
        readable = not self.queue and not self.receipts
        self.receipts.append(receipt)
        self.receipt_count += 1
        return readable

    # -- helpers -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closing or self.closed:
            raise LocalProtocolError("the socket is closed", tag=self.tag)

    def _require(self, name: str) -> None:
        if self.pattern.name != name:
            raise LocalProtocolError(f"only a {name} socket can do that", tag=self.tag)
