"""The TCP transport of a link node: real byte streams owned by a driver.

Each connection runs a :class:`StreamEndpoint` (a ``StreamCore``) bound to the node's
:class:`TcpTransport`. A dialed connection starts with our HELLO (a node-level control
frame carrying our listening address); an accepted one waits for the peer's, so both
ends name a peer by the address it listens on. Output for a peer collects in its
``out`` buffer and leaves through its first connection.
"""

from __future__ import annotations

from gossamer._types import Address
from gossamer.errors import DecodeError
from gossamer.proto.link.config import CONTROL_HELLO, URGENT_BYTES
from gossamer.proto.link.events import Connect, Event
from gossamer.proto.link.host import TransportHost
from gossamer.proto.link.records import Peer
from gossamer.proto.link.transport import LinkTransport
from gossamer.wire import exon
from gossamer.wire.exon import NO_CLOCK, ControlBody, SocketMessage

__all__ = ["StreamEndpoint", "TcpTransport"]


class TcpTransport(LinkTransport):
    """A node's TCP connections: which endpoint carries each peer's output."""

    def __init__(self, node: TransportHost) -> None:
        self.node = node
        #: The connections with each peer; the first one sends.
        self._endpoints: dict[Address, list[StreamEndpoint]] = {}

    def send_frame(self, peer: Peer, frame: bytes) -> None:
        if not self._endpoints.get(peer.address) and not peer.out:
            self.node.post(Connect(peer=peer.address))
        peer.out += frame

    def send_data(self, peer: Peer, header: bytes, payload: bytes) -> None:
        out = peer.out
        out += header
        out += payload
        if len(out) >= URGENT_BYTES:
            self.node.urgent = True

    def endpoint(self, peer: Address | None) -> StreamEndpoint:
        """A ``StreamCore`` for a connection we dialed to ``peer``, or accepted (``None``)."""
        return StreamEndpoint(self.node, self, peer)

    def attach(self, endpoint: StreamEndpoint, address: Address) -> Peer:
        """``endpoint`` now carries the node at ``address``."""
        node = self.node
        peer = node.peer(address)
        self._endpoints.setdefault(address, []).append(endpoint)
        if peer.out:
            node.dirty[address] = peer
        return peer

    def detach(self, endpoint: StreamEndpoint, reason: str, now: float) -> None:
        """``endpoint`` is gone: every link with its peer goes down with ``reason``."""
        peer = endpoint.peer
        endpoints = None if peer is None else self._endpoints.get(peer.address)
        if peer is None or endpoints is None or endpoint not in endpoints:
            return
        endpoints.remove(endpoint)
        # Either direction of the pair may have lost bytes with this connection: every
        # link with the peer goes down, loudly (the application may link again).
        for other in endpoints:
            other.closing = True
        endpoints.clear()
        peer.out.clear()
        peer.frames.reset()
        self.node.transport_lost(peer, reason, now)

    def take_output(self, endpoint: StreamEndpoint) -> bytes:
        """The bytes ``endpoint`` should write now: its peer's output, if it sends it."""
        peer = endpoint.peer
        if peer is None or self._sender(peer) is not endpoint:
            return b""
        if not peer.out:
            return b""
        data = bytes(peer.out)
        peer.out.clear()
        return data

    def dirty_endpoints(self) -> list[StreamEndpoint]:
        """The sending endpoints that have bytes waiting (drivers flush them)."""
        node = self.node
        dirty, node.dirty = node.dirty, {}
        sending = [(self._sender(peer), peer) for peer in dirty.values()]
        return [endpoint for endpoint, peer in sending if endpoint is not None and peer.out]

    def _sender(self, peer: Peer) -> StreamEndpoint | None:
        endpoints = self._endpoints.get(peer.address)
        return endpoints[0] if endpoints else None


class StreamEndpoint:
    """The ``StreamCore`` of one TCP connection of a TCP-transport link node.

    A dialed connection starts with our HELLO; an accepted one waits for the peer's
    HELLO (the first frame, nothing else is accepted before it) to learn the peer's
    listening address. Events are the node's; the node keeps the timers, so the
    endpoint has no deadline of its own.
    """

    def __init__(
        self, node: TransportHost, transport: TcpTransport, peer: Address | None
    ) -> None:
        self.node = node
        self.transport = transport
        self.peer: Peer | None = None
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
            self.peer = transport.attach(self, peer)

    def receive_data(self, data: bytes, now: float) -> None:
        node = self.node
        if not data:
            self.abort("transport_lost", now)
        elif not self.closing:
            if self.peer is None:
                data = self._hello(data, now)
            if self.peer is not None and not node.receive_frames(self.peer, data, now):
                self.abort("framing_lost", now)
        if node.wakeup is not None:
            node.wakeup()

    def abort(self, reason: str, now: float) -> None:
        """This connection is gone (or never came up): the peer's links go down with
        ``reason``."""
        self.closing = True
        self.transport.detach(self, reason, now)

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
            self.node.trace(now, "drop", attrs={"reason": f"bad HELLO: {exc}"})
            return b""
        rest = bytes(self._hello_buf[length:])
        self._hello_buf.clear()
        self.peer = self.transport.attach(self, address)
        return rest

    def data_to_send(self) -> bytes:
        if self._greeting:
            greeting, self._greeting = self._greeting, b""
            return greeting + self.transport.take_output(self)
        return self.transport.take_output(self)

    def events_received(self) -> list[Event]:
        return self.node.events_received()

    def handle_timer(self, now: float) -> None:
        return None

    def next_deadline(self) -> float | None:
        return None
