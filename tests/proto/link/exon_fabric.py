"""An in-memory Exon between gossamer link nodes on the original wire and emulated A3M
nodes (:mod:`.a3m_original`), in simulated time.

It gives what Exon guarantees, message by message: every payload is delivered exactly
once, in no particular order. Datagram loss is what it costs: a payload needs three
datagrams to get through (REQSLOTS, SLOTS, TOKEN), each lost with probability ``loss``,
and each loss costs a retransmission timeout (Exon's, clamped to [100 ms, 1000 ms]), so
a lossy fabric delivers late and reordered, never twice and never not at all.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from gossamer._types import Address
from gossamer.proto.link import Event, LinkConfig, LinkNode, LinkSocket, SocketOptions, Transport
from gossamer.trace.sink import MemorySink, Tracer

from .a3m_original import OriginalNode


class ExonFabric:
    def __init__(self, *, loss: float = 0.0, seed: int = 1) -> None:
        self.now = 0.0
        self.loss = loss
        self.rng = random.Random(seed)
        self.sink = MemorySink()
        self.gossamer: dict[str, LinkNode] = {}
        self.originals: dict[str, OriginalNode] = {}
        self.events: dict[str, list[Event]] = {}
        self.addr: dict[str, Address] = {}
        self._queue: list[tuple[float, int, str, str, bytes]] = []
        self._seq = 0
        #: (from, to, payload) of every payload, in the order sent.
        self.sent: list[tuple[str, str, bytes]] = []
        self.lost_datagrams = 0
        #: (from, to, payload) of every payload, in the order delivered.
        self.delivered: list[tuple[str, str, bytes]] = []

    # -- nodes -------------------------------------------------------------------------

    def _address(self, name: str) -> Address:
        address = (f"10.0.0.{len(self.addr) + 1}", 7000)
        self.addr[name] = address
        return address

    def gossamer_node(self, name: str) -> LinkNode:
        node = LinkNode(LinkConfig(address=self._address(name), node_id=name,
                                   transport=Transport.EXON),
                        tracer=Tracer(self.sink, run="t", node=name),
                        rng=random.Random(self.rng.getrandbits(64)))
        self.gossamer[name] = node
        self.events[name] = []
        return node

    def original_node(self, name: str) -> OriginalNode:
        self._address(name)
        node = OriginalNode(name)
        self.originals[name] = node
        return node

    def socket(self, name: str, kind: str, tag: str, **options: object) -> LinkSocket:
        """A gossamer socket whose A3M tag is ``tag``."""
        node = self.gossamer[name]
        number = node.exon.tags.number(tag) if node.exon else 0
        assert node.exon is not None
        node.exon.tags.register(number, tag)
        for other, address in self.addr.items():
            node.exon.register(other, address)
        return node.open_socket(kind, number, SocketOptions(**options))  # type: ignore[arg-type]

    # -- moving payloads -------------------------------------------------------------------

    def _post(self, src: str, dst: str, payload: bytes) -> None:
        self.sent.append((src, dst, payload))
        delay = self.rng.uniform(0.0001, 0.002)
        for _ in range(3):  # REQSLOTS, SLOTS, TOKEN: each retransmitted until through
            while self.rng.random() < self.loss:
                self.lost_datagrams += 1
                delay += self.rng.uniform(0.1, 0.2)
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay, self._seq, src, dst, payload))

    def _pump(self) -> None:
        for name, node in self.gossamer.items():
            node.flush(self.now)
            assert node.exon is not None
            for out in node.exon.messages_to_send():
                self._post(name, out.node_id, out.payload)
            self.events[name] += node.events_received()
        for name, orig in self.originals.items():
            outbox, orig.outbox = orig.outbox, []
            for dst, payload in outbox:
                self._post(name, dst, payload)

    def step(self) -> bool:
        """Deliver the next payload or fire the next timer; False when nothing is left."""
        self._pump()
        deadlines = [d for d in (n.next_deadline() for n in self.gossamer.values())
                     if d is not None]
        retries = [lk.retry_at for o in self.originals.values() for s in o.sockets.values()
                   for lk in s.links.values() if lk.retry_at is not None]
        due_timer = min(deadlines + retries, default=None)
        due_msg = self._queue[0][0] if self._queue else None
        if due_timer is None and due_msg is None:
            return False
        if due_msg is not None and (due_timer is None or due_msg <= due_timer):
            at, _, src, dst, payload = heapq.heappop(self._queue)
            self.now = max(self.now, at)
            self.delivered.append((src, dst, payload))
            if dst in self.gossamer:
                node = self.gossamer[dst]
                assert node.exon is not None
                node.exon.receive_message(src, self.addr[src], payload, self.now)
            elif dst in self.originals:
                self.originals[dst].receive(src, payload, self.now)
        else:
            assert due_timer is not None
            self.now = max(self.now, due_timer)
            for node in self.gossamer.values():
                node.handle_timer(self.now)
            for orig in self.originals.values():
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
