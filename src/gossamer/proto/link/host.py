"""What a link socket and a transport may ask of the node that holds them.

:class:`~.node.LinkNode` is the one implementation; these protocols are the whole of
what the sockets (:mod:`~.socket`) and the transports (:mod:`~.udp`, :mod:`~.tcp`) use
of it, so that each can be read, and replaced, without the
node's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gossamer._types import Address
from gossamer.proto.link.config import LinkConfig
from gossamer.proto.link.events import Event
from gossamer.proto.link.machine import LinkInput
from gossamer.proto.link.records import Context, Link, Peer
from gossamer.wire.exon import ExonLimits

__all__ = ["NodeServices", "SocketHost", "TransportHost"]


class NodeServices(Protocol):
    """What sockets and transports share: the node's address, its record of each peer,
    the peers with output waiting (``dirty``), and the ``urgent`` flag that asks the
    driver to write before the end of its loop iteration."""

    address: Address
    dirty: dict[Address, Peer]
    urgent: bool

    def peer(self, address: Address) -> Peer:
        """The record of ``address``, made when first met."""

    def trace(self, now: float, kind: str, *, msg: str | None = None, peer: str | None = None,
              size: int | None = None, attrs: Mapping[str, str] | None = None) -> None:
        """One trace event of the link layer."""


class SocketHost(NodeServices, Protocol):
    """What a :class:`~.socket.LinkSocket` asks of its node: to run link inputs through
    the state machine, to send DATA and control messages, and to return credits."""

    #: The largest DATA payload the node sends or accepts.
    max_message: int
    #: Whether ``send`` and ``deliver`` of each DATA are traced.
    trace_data: bool
    #: A socket may write DATA straight into ``Peer.out`` (TCP, no data traces).
    direct_data: bool

    def input(self, link: Link, event: LinkInput, ctx: Context, now: float) -> None:
        """Run ``event`` through the state machine of ``link``."""

    def remove_if_closed(self, sock: Any) -> None:
        """Remove the socket once it is closing and its last link is gone."""

    def send_data(self, link: Link, payload: bytes, now: float, cookie: Any) -> None:
        """One DATA on an established link with credit."""

    def send_control(self, link: Link, kind: int, payload: bytes) -> None:
        """A custom control message on ``link`` (no credit spent)."""

    def taken(self, link: Link, index: int, now: float, trace: bool = True) -> None:
        """The application took message ``index`` of ``link``."""

    def flow(self, link: Link, variation: int, now: float) -> None:
        """Return (or take back) ``variation`` credits to the sender on ``link``."""


class TransportHost(NodeServices, Protocol):
    """What a transport (and a TCP endpoint) asks of its node: to take the bytes that
    arrive from a peer, to take a peer's links down when its transport is lost, and
    to pass events to the driver."""

    config: LinkConfig
    counters: dict[str, int]
    #: The bounds of the node's frames.
    limits: ExonLimits
    #: Every remote address met, in the order met.
    records: dict[Address, Peer]
    wakeup: Callable[[], None] | None

    def receive_frames(self, peer: Peer, data: bytes, now: float) -> bool:
        """Frames from ``peer``; False when its framing broke."""

    def transport_lost(self, peer: Peer, reason: str, now: float) -> None:
        """``peer``'s links go down with ``reason``."""

    def post(self, event: Event) -> None:
        """Queue ``event`` for the driver."""

    def pattern_of(self, tag: int) -> str | None:
        """The pattern name of the local socket ``tag``."""

    def pattern_capacity(self, tag: int) -> int:
        """The capacity of the local socket ``tag``."""

    def events_received(self) -> list[Event]:
        """The events queued for the driver, drained."""
