"""What a link node tells its driver and application: events, taken messages,
receipts and statistics. A request a link can no longer carry raises
:class:`gossamer.errors.LinkError`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gossamer._types import Address

__all__ = [
    "Connect",
    "Event",
    "LinkDown",
    "LinkEvent",
    "LinkStatistics",
    "LinkUp",
    "Message",
    "Readable",
    "Receipt",
    "RequestFailed",
    "SocketEvent",
    "SocketStatistics",
    "Writable",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketEvent:
    """Something happened to the local socket ``tag``."""

    tag: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkEvent(SocketEvent):
    """Something happened to the link of socket ``tag`` with socket ``peer_tag`` at
    ``peer``."""

    peer: Address
    peer_tag: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkUp(LinkEvent):
    """A link is established (both decisions positive)."""

    #: Credits we may spend on it (the peer's capacity).
    credits: int
    link: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkDown(LinkEvent):
    """A link ended, or a link request failed (``established`` says which)."""

    reason: str
    established: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Readable(SocketEvent):
    """Socket ``tag`` has messages or receipts to take (edge: it was empty)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Writable(SocketEvent):
    """Socket ``tag`` may be able to send again (a link gained credit or came up)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestFailed(SocketEvent):
    """A REQ socket's pending request can no longer be answered: its link went down."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Connect:
    """TCP transport: the node needs a connection to ``peer`` (the driver dials)."""

    peer: Address


Event = LinkUp | LinkDown | Readable | Writable | RequestFailed | Connect


@dataclass(slots=True)
class Message:
    """A message taken from a socket: its ``data``, and its ``sender`` (the address of
    the peer node) with the sending socket's ``peer_tag``.

    Not frozen: a frozen dataclass's ``__init__`` (``object.__setattr__`` per field)
    costs about five times a plain one's (0.78 against 0.15 us), on the hot path of
    every receive; treat it as read-only all the same.
    """

    data: bytes
    sender: Address
    peer_tag: int
    #: Request-reply sockets: the envelope ids (REQ request id, DEALER/ROUTER hops).
    envelope: tuple[int, ...] = ()
    #: ROUTER: the id to reply to (``send(..., to=routing_id)``).
    routing_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Receipt:
    """A cookie given to ``send``, returned once the peer application took the message
    (``taken``) or once its fate can no longer be learned (``taken=False``: the link
    went down first)."""

    cookie: Any
    peer: Address
    peer_tag: int
    taken: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkStatistics:
    peer: Address
    peer_tag: int
    state: str
    credits: int
    capacity: int
    sent: int
    received: int
    queued: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketStatistics:
    tag: int
    type: str
    links: tuple[LinkStatistics, ...]
    established: int
    sent: int
    received: int
    taken: int
    queued: int
    queued_bytes: int
    peak_queued_bytes: int
    receipts: int
    dropped: int
    would_block: int
