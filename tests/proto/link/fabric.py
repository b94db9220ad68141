"""A deterministic in-memory fabric of TCP-transport link nodes, frame by frame.

Each ordered pair of nodes gets one simulated connection: the dialer's
``StreamEndpoint`` feeds the acceptor's, and back. Bytes are cut into whole frames
(``exon.FrameReader``) so that a test can hold frames back, drop them on purpose
(to build a scenario, not to simulate loss) or release them later in any order,
which is how the handshake scenarios of the notes and of the Java suite
(``LinkingAndUnlinkingTests``: "capture or hold messages to force reordering")
are reproduced. Time only moves when the test says so (``advance``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from gossamer._types import Address
from gossamer.proto.link import (
    Connect,
    Event,
    LinkConfig,
    LinkNode,
    LinkSocket,
    SocketOptions,
    StreamEndpoint,
    Transport,
)
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire import exon
from gossamer.wire.exon import SocketMessage

Hold = Callable[[Address, Address, SocketMessage], bool]


@dataclass
class _Pipe:
    src: Address
    dst: Address
    sender: StreamEndpoint
    receiver: StreamEndpoint
    reader: exon.FrameReader = field(default_factory=exon.FrameReader)
    held: list[SocketMessage] = field(default_factory=list)


class Fabric:
    """Nodes ``a``, ``b``, ... at 10.0.0.1:7000, 10.0.0.2:7000, ..."""

    def __init__(self, names: str = "ab", *, seed: int = 1, trace_data: bool = True) -> None:
        self.now = 0.0
        self.sink = MemorySink()
        self.addr: dict[str, Address] = {}
        self.nodes: dict[str, LinkNode] = {}
        self.events: dict[str, list[Event]] = {}
        self.pipes: dict[tuple[Address, Address], _Pipe] = {}
        self.hold: Hold | None = None
        self.delivered: list[tuple[Address, Address, SocketMessage]] = []
        rng = random.Random(seed)
        names_by_addr = {(f"10.0.0.{i + 1}", 7000): n for i, n in enumerate(names)}
        for i, name in enumerate(names):
            address = (f"10.0.0.{i + 1}", 7000)
            self.addr[name] = address
            self.events[name] = []
            self.nodes[name] = LinkNode(
                LinkConfig(
                    address=address,
                    node_id=name,
                    transport=Transport.TCP,
                    names=names_by_addr,
                    trace_data=trace_data,
                ),
                tracer=Tracer(self.sink, run="t", node=name),
                rng=random.Random(rng.getrandbits(64)),
            )
        self._by_addr = {a: n for n, a in self.addr.items()}

    def socket(self, node: str, kind: str, tag: int, **options: object) -> LinkSocket:
        return self.nodes[node].open_socket(kind, tag, SocketOptions(**options))  # type: ignore[arg-type]

    # -- moving frames ---------------------------------------------------------------

    def _collect_events(self) -> None:
        for name, node in self.nodes.items():
            for event in node.events_received():
                self.events[name].append(event)
                if isinstance(event, Connect):
                    self._connect(node.address, event.peer)

    def _connect(self, src: Address, dst: Address) -> None:
        if (src, dst) in self.pipes:
            return
        dialer = self.nodes[self._by_addr[src]].stream_endpoint(dst)
        acceptor = self.nodes[self._by_addr[dst]].stream_endpoint(None)
        self.pipes[(src, dst)] = _Pipe(src, dst, dialer, acceptor)
        self.pipes[(dst, src)] = _Pipe(dst, src, acceptor, dialer)

    def run(self, *, limit: int = 100_000) -> int:
        """Move frames until nothing moves; returns how many were delivered."""
        moved = 0
        for _ in range(limit):
            self._collect_events()
            progress = False
            for pipe in list(self.pipes.values()):
                data = pipe.sender.data_to_send()
                if not data:
                    continue
                for msg in pipe.reader.feed(data):
                    progress = True
                    if msg.dst_tag and self.hold is not None and self.hold(pipe.src, pipe.dst, msg):
                        pipe.held.append(msg)
                        continue
                    self._deliver(pipe, msg)
                    moved += 1
            if not progress:
                self._collect_events()
                return moved
        raise AssertionError("the fabric did not settle")

    def _deliver(self, pipe: _Pipe, msg: SocketMessage) -> None:
        self.delivered.append((pipe.src, pipe.dst, msg))
        pipe.receiver.receive_data(exon.encode(msg), self.now)

    def held(self, src: str, dst: str) -> list[SocketMessage]:
        return self.pipes[(self.addr[src], self.addr[dst])].held

    def release(
        self,
        src: str,
        dst: str,
        *,
        order: Callable[[list[SocketMessage]], list[SocketMessage]] | None = None,
    ) -> None:
        """Deliver the frames held from ``src`` to ``dst`` (in ``order``), then settle."""
        pipe = self.pipes[(self.addr[src], self.addr[dst])]
        held, pipe.held = pipe.held, []
        for msg in order(held) if order else held:
            self._deliver(pipe, msg)
        self.run()

    def release_all(self) -> None:
        """Deliver every held frame, on every connection, before anything answers."""
        for pipe in self.pipes.values():
            held, pipe.held = pipe.held, []
            for msg in held:
                self._deliver(pipe, msg)
        self.run()

    def discard(self, src: str, dst: str) -> list[SocketMessage]:
        pipe = self.pipes[(self.addr[src], self.addr[dst])]
        held, pipe.held = pipe.held, []
        return held

    def inject(self, src: str, dst: str, msg: SocketMessage) -> None:
        """Deliver a hand-made frame as if ``src`` sent it (e.g. a stale incarnation)."""
        self._connect(self.addr[src], self.addr[dst])
        self.run()  # a new connection says HELLO first
        self._deliver(self.pipes[(self.addr[src], self.addr[dst])], msg)
        self.run()

    def advance(self, seconds: float) -> None:
        """Move time on, firing the nodes' timers (retries) as they fall due."""
        end = self.now + seconds
        while True:
            due = [
                (d, n)
                for n, node in self.nodes.items()
                if (d := node.next_deadline()) is not None and d <= end
            ]
            if not due:
                break
            when, name = min(due)
            self.now = max(self.now, when)
            self.nodes[name].handle_timer(self.now)
            self.run()
        self.now = end

    def break_connection(self, a: str, b: str) -> None:
        """Both directions of the a-b connection end (as a reset would)."""
        for key in ((self.addr[a], self.addr[b]), (self.addr[b], self.addr[a])):
            pipe = self.pipes.pop(key, None)
            if pipe is not None:
                pipe.receiver.receive_data(b"", self.now)
        self.run()

    # -- reading results --------------------------------------------------------------

    def of(self, name: str, kind: type) -> list:  # type: ignore[type-arg]
        return [e for e in self.events[name] if isinstance(e, kind)]

    def trace(self, kind: str, node: str | None = None) -> list:  # type: ignore[type-arg]
        return [
            e
            for e in self.sink.events
            if e.layer == "link" and e.kind == kind and (node is None or e.node == node)
        ]

    def types(self, src: str, dst: str) -> list[str]:
        """Names of the frames delivered from ``src`` to ``dst``, in order."""
        a, b = self.addr[src], self.addr[dst]
        return [m.type.name for s, d, m in self.delivered if s == a and d == b and m.dst_tag]
