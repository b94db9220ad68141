"""Datagrams between gossamer link nodes on the original wire and emulated A3M nodes
(:mod:`gossamer.testing.a3m_original`), in simulated time, through real Exon cores.

Every node runs an :class:`~gossamer.proto.link.exon_core.ExonCore` (the gossamer
nodes inside their ``ExonTransport``; the emulated originals with the original's slot
numbering and without gossamer's record renewal), so messages travel as Exon does:
REQSLOTS, SLOTS, TOKEN, ACK, retransmitted until acknowledged, delivered exactly once
and in no particular order. The fabric drops each datagram with probability ``loss``
and delays each by 0.1-2 ms (independently, so datagrams overtake each other).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from gossamer._types import Address
from gossamer.proto.link import Event, LinkConfig, LinkNode, LinkSocket, SocketOptions, Transport
from gossamer.proto.link.exon_core import ExonConfig, ExonCore, ExonMessage
from gossamer.testing.a3m_original import OriginalNode
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire.mode import WireMode

#: The emulated originals' Exon: the Java node's numbering and record handling.
ORIGINAL_EXON = ExonConfig(original_numbering=True, renew_records=False)


class ExonFabric:
    def __init__(self, *, loss: float = 0.0, seed: int = 1) -> None:
        self.now = 0.0
        self.loss = loss
        self.rng = random.Random(seed)
        self.sink = MemorySink()
        self.gossamer: dict[str, LinkNode] = {}
        self.originals: dict[str, tuple[OriginalNode, ExonCore]] = {}
        self.events: dict[str, list[Event]] = {}
        self.addr: dict[str, Address] = {}
        self._by_addr: dict[Address, str] = {}
        self._queue: list[tuple[float, int, Address, Address, bytes]] = []
        self._seq = 0
        #: (from, to, A3M message) of every message handed to Exon, in sending order.
        self.sent: list[tuple[str, str, bytes]] = []
        #: (from, to, A3M message) of every message Exon delivered, in delivery order.
        self.delivered: list[tuple[str, str, bytes]] = []
        self.lost_datagrams = 0
        self.datagrams = 0

    # -- nodes -------------------------------------------------------------------------

    def _address(self, name: str) -> Address:
        address = (f"10.0.0.{len(self.addr) + 1}", 7000)
        self.addr[name] = address
        self._by_addr[address] = name
        return address

    def gossamer_node(self, name: str) -> LinkNode:
        node = LinkNode(LinkConfig(address=self._address(name), node_id=name,
                                   transport=Transport.EXON, wire=WireMode.ORIGINAL),
                        tracer=Tracer(self.sink, run="t", node=name),
                        rng=random.Random(self.rng.getrandbits(64)))
        self.gossamer[name] = node
        self.events[name] = []
        assert node.exon is not None
        core = node.exon.core
        send, events = core.send, core.events_received

        def recording_send(node_id: str, data: bytes, now: float) -> None:
            self.sent.append((name, node_id, data))
            send(node_id, data, now)

        def recording_events() -> list[ExonMessage]:
            out = events()
            self.delivered += [(m.node, name, m.data) for m in out]
            return out

        core.send = recording_send  # type: ignore[method-assign]
        core.events_received = recording_events  # type: ignore[method-assign]
        return node

    def original_node(self, name: str) -> OriginalNode:
        self._address(name)
        node = OriginalNode(name)
        self.originals[name] = (node, ExonCore(name, ORIGINAL_EXON))
        return node

    def tag(self, name: str, tag: str) -> int:
        """The number gossamer node ``name`` knows the A3M tag ``tag`` by."""
        a3m = self.gossamer[name].a3m
        assert a3m is not None
        return a3m.tags.tag(tag)

    def socket(self, name: str, kind: str, tag: str, **options: object) -> LinkSocket:
        """A gossamer socket whose A3M tag is ``tag``."""
        node = self.gossamer[name]
        assert node.exon is not None
        for other, address in self.addr.items():
            node.exon.register(other, address)
        return node.open_socket(kind, self.tag(name, tag), SocketOptions(**options))  # type: ignore[arg-type]

    # -- moving datagrams ------------------------------------------------------------------

    def _post(self, src: Address, dst: Address, datagram: bytes) -> None:
        self.datagrams += 1
        if self.rng.random() < self.loss:
            self.lost_datagrams += 1
            return
        self._seq += 1
        heapq.heappush(self._queue, (self.now + self.rng.uniform(0.0001, 0.002), self._seq,
                                     src, dst, datagram))

    def _pump(self) -> None:
        for name, node in self.gossamer.items():
            node.flush(self.now)
            for datagram, dst in node.datagrams_to_send():
                self._post(self.addr[name], dst, datagram)
            self.events[name] += node.events_received()
        for name, (orig, core) in self.originals.items():
            outbox, orig.outbox = orig.outbox, []
            for dst_node, payload in outbox:
                self.sent.append((name, dst_node, payload))
                core.register(dst_node, self.addr[dst_node])
                core.send(dst_node, payload, self.now)
            for datagram, dst in core.datagrams_to_send():
                self._post(self.addr[name], dst, datagram)

    def _deadline(self) -> float | None:
        due = [d for d in (n.next_deadline() for n in self.gossamer.values()) if d is not None]
        for orig, core in self.originals.values():
            due += [d for d in (core.next_deadline(), orig.next_deadline()) if d is not None]
        return min(due, default=None)

    def step(self) -> bool:
        """Deliver the next datagram or fire the next timer; False when nothing is left."""
        self._pump()
        due_timer = self._deadline()
        due_datagram = self._queue[0][0] if self._queue else None
        if due_timer is None and due_datagram is None:
            return False
        if due_datagram is not None and (due_timer is None or due_datagram <= due_timer):
            at, _, src, dst, datagram = heapq.heappop(self._queue)
            self.now = max(self.now, at)
            name = self._by_addr[dst]
            if name in self.gossamer:
                self.gossamer[name].receive_datagram(datagram, src, self.now)
            else:
                orig, core = self.originals[name]
                core.receive_datagram(datagram, src, self.now)
                for message in core.events_received():
                    self.delivered.append((message.node, name, message.data))
                    orig.receive(message.node, message.data, self.now)
        else:
            assert due_timer is not None
            self.now = max(self.now, due_timer)
            for node in self.gossamer.values():
                node.handle_timer(self.now)
            for orig, core in self.originals.values():
                core.handle_timer(self.now)
                orig.handle_timer(self.now)
        self._pump()
        return True

    def run(self, until: Callable[[], bool], app: Callable[[], None] = lambda: None,
            *, limit: float = 600.0) -> None:
        """Step (calling ``app`` between steps) until ``until()``; fail past ``limit`` s."""
        app()
        while not until():
            assert self.now < limit, f"not done after {limit} simulated seconds"
            if not self.step():
                app()
                self._pump()
                assert self._queue or until(), "nothing left to do, and not done"
                continue
            app()
