"""The Exon transport of a link node: each frame the node sends to a peer is one Exon
message (one TOKEN, :mod:`~.exon_core`), as A3M sends each of its messages.

The contract, for the node (and for codecs above it):

- **Exactly once, unordered.** Every frame handed to :meth:`ExonTransport.send_frame`
  or :meth:`~ExonTransport.send_data` reaches the peer's node once, in one
  ``receive_frames`` call of its own, but frames to one peer may arrive in any order
  (like the original: A3M numbers what needs order). Nothing is ever declared lost:
  Exon retransmits until acknowledged, so ``transport_lost`` is never called.
- **One frame per datagram**: a frame longer than
  :meth:`ExonTransport.max_frame` (1400 bytes less the two node ids and 28 bytes of
  headers) is not sent: it is counted (``counters["oversized"]``) and traced as a
  ``drop``; the node's ``max_message`` must leave room for its frame headers.
- **Peers are addresses, Exon nodes are ids.** A peer's node id is the one its
  datagrams carry, or the one :meth:`ExonTransport.register` gave, or else
  :func:`default_node_id` of its address (``"host:port"``), which is what a gossamer
  node on the Exon transport calls itself by default. Frames from node ``x`` go to the
  peer at the address ``x`` last sent from.

Frames are handed to the Exon core when the node flushes (once per driver loop
iteration), after each datagram in, and on each timer.

On the original wire a :class:`FrameCodec` (:class:`~.a3m.A3MFrames`) turns each frame
into the Java A3M's message when the node hands it over, and each message received
into the frames it stands for (none, while it waits for its turn).
"""

from __future__ import annotations

from typing import Protocol

from gossamer._types import Address, Datagram
from gossamer.proto.link.exon_core import ExonCore
from gossamer.proto.link.host import TransportHost
from gossamer.proto.link.records import Peer
from gossamer.proto.link.transport import LinkTransport

__all__ = ["ExonTransport", "FrameCodec", "default_node_id"]


class FrameCodec(Protocol):
    """How frames look inside Exon messages, when not as the node writes them."""

    def frame_out(self, peer: Peer, frame: bytes, now: float) -> bytes | None:
        """The message for one frame (``None``: not sent; the codec said why)."""

    def data_out(self, peer: Peer, header: bytes, payload: bytes, now: float) -> bytes | None:
        """The message for one DATA, given as its header and payload."""

    def frames_in(self, peer: Peer, payload: bytes, now: float) -> list[bytes]:
        """The frames one message from ``peer`` stands for."""


def default_node_id(address: Address) -> str:
    """The Exon node id of a gossamer node at ``address``: ``"host:port"`` (IPv6 hosts
    in brackets)."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ExonTransport(LinkTransport):
    """A link node's frames as Exon messages (see the module docstring).

    ``core`` is the node's Exon endpoint (its id is the node's Exon name); the
    transport owns it: it feeds it the datagrams the driver receives and drains its
    output and deliveries."""

    def __init__(self, node: TransportHost, core: ExonCore,
                 codec: FrameCodec | None = None) -> None:
        self.node = node
        self.core = core
        #: The original wire's translation of frames (``None``: frames as they are).
        self.codec = codec
        self._ids: dict[Address, str] = {}
        self._pending: list[tuple[Peer, bytes]] = []
        self._now = 0.0

    def register(self, node_id: str, address: Address) -> None:
        """The peer at ``address`` is Exon node ``node_id`` (a Java node's id)."""
        self._ids[address] = node_id
        self.core.register(node_id, address)

    def node_id(self, address: Address) -> str:
        """The Exon node id of the peer at ``address``."""
        if address == self.node.address:
            return self.core.node_id
        node_id = self._ids.get(address)
        if node_id is None:
            node_id = self._ids[address] = default_node_id(address)
            self.core.register(node_id, address)
        return node_id

    def max_frame(self, address: Address) -> int:
        """The largest frame one datagram to the peer at ``address`` carries."""
        return self.core.max_message(self.node_id(address))

    # -- the node's interface --------------------------------------------------------

    def send_frame(self, peer: Peer, frame: bytes) -> None:
        if self.codec is not None:
            message = self.codec.frame_out(peer, frame, self._now)
            if message is not None:
                self._pending.append((peer, message))
            return
        self._pending.append((peer, frame))

    def send_data(self, peer: Peer, header: bytes, payload: bytes) -> None:
        if self.codec is not None:
            message = self.codec.data_out(peer, header, payload, self._now)
            if message is not None:
                self._pending.append((peer, message))
            return
        self._pending.append((peer, header + payload))

    def flush(self, now: float) -> None:
        self._drain(now)

    def handle_timer(self, now: float) -> None:
        self._drain(now)
        self.core.handle_timer(now)

    def next_deadline(self, retry: float | None, now: float) -> float | None:
        if self._pending:
            return now
        due = self.core.next_deadline()
        if due is None or (retry is not None and retry < due):
            return retry
        return due

    def datagrams_to_send(self) -> list[Datagram]:
        return self.core.datagrams_to_send()

    # -- datagrams in ----------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        """One datagram from ``addr``: its message, if new, goes to the node."""
        core = self.core
        core.receive_datagram(data, addr, now)
        node = self.node
        for message in core.events_received():
            address = core.addresses.get(message.node, addr)
            self._ids[address] = message.node
            self._deliver(node.peer(address), message.data, now)
        self._drain(now)

    def _deliver(self, peer: Peer, data: bytes, now: float) -> None:
        self._now = now
        if self.codec is None:
            self.node.receive_frames(peer, data, now)
            return
        for frame in self.codec.frames_in(peer, data, now):
            self.node.receive_frames(peer, frame, now)

    # -- frames out ------------------------------------------------------------------

    def _drain(self, now: float) -> None:
        self._now = now
        # The node marks peers dirty after queuing frames; here every queued frame
        # leaves, so there is nothing left to mark.
        self.node.dirty.clear()
        pending, self._pending = self._pending, []
        core = self.core
        for peer, frame in pending:
            node_id = self.node_id(peer.address)
            limit = core.max_message(node_id)
            if len(frame) > limit:
                self.node.counters["oversized"] = self.node.counters.get("oversized", 0) + 1
                self.node.trace(now, "drop", peer=node_id, size=len(frame),
                                attrs={"reason": f"frame exceeds {limit} bytes"})
                continue
            core.send(node_id, frame, now)
        # Frames to this node itself come back at once.
        node = self.node
        for message in core.events_received():
            self._deliver(node.peer(node.address), message.data, now)
