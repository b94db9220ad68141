"""What a link node keeps about each remote address (:class:`Peer`) and each link
(:class:`Link`), and what an input carries into the state machine's actions
(:class:`Context`).

These are plain records shared by the node, its sockets and its transports; the rules
that change them live with their owners: a socket keeps its ring, routes and queue
(``socket``), the node drives the state machine (``node``), a transport keeps a peer's
channel (``udp``) or connections (``tcp``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gossamer._types import Address
from gossamer.proto.link.credit import InFlow
from gossamer.proto.link.machine import LinkState
from gossamer.wire.exon import (
    NO_CLOCK,
    ExonLimits,
    FrameScanner,
    LinkDecision,
    LinkMetadata,
    SocketMessage,
)

if TYPE_CHECKING:
    from gossamer.proto.link.channel import Channel
    from gossamer.proto.link.socket import LinkSocket

__all__ = ["Context", "Link", "Peer"]


class Peer:
    """Everything the node keeps about one remote address."""

    __slots__ = (
        "address",
        "channel",
        "frames",
        "links",
        "name",
        "out",
        "retired",
    )

    def __init__(self, address: Address, name: str, limits: ExonLimits) -> None:
        self.address = address
        self.name = name
        #: (local tag, peer tag) -> link, for the DATA fast path.
        self.links: dict[tuple[int, int], Link] = {}
        #: The peer's incoming byte stream, cut into frames.
        self.frames = FrameScanner(limits=limits)
        #: TCP: bytes for the sending connection.
        self.out = bytearray()
        #: UDP and simulated streams: the reliable channel, and the peer sessions retired.
        self.channel: Channel | None = None
        self.retired: set[int] = set()


class Link:
    """One link of a local socket with a remote socket, in one incarnation at a time."""

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

    def __init__(self, socket: LinkSocket, peer: Peer, peer_tag: int, *, wanted: bool) -> None:
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
        #: PUB: the peer's subscriptions (prefixes).
        self.subs: tuple[bytes, ...] = ()
        #: The socket header of our DATA on this link, packed once when it comes up.
        self.data_tail = b""


@dataclass(slots=True, kw_only=True)
class Context:
    """What an input carries into the actions."""

    msg: SocketMessage | None = None
    meta: LinkMetadata | None = None
    clock: int | None = None
    decision: LinkDecision = LinkDecision.SUCCESS
    reason: str = ""
    size: int | None = None
