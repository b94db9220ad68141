"""What a link node and its sockets are configured with, and the numbers the link
protocol fixes: socket tags, its custom control types, when output is urgent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from gossamer._types import Address
from gossamer.errors import ConfigError
from gossamer.proto.backoff import AROUND, Backoff
from gossamer.proto.link.channel import ChannelConfig
from gossamer.proto.link.exon_core import ExonConfig
from gossamer.proto.link.patterns import ENVELOPE_ROOM, Authorizer
from gossamer.wire import exon
from gossamer.wire.mode import WireMode

__all__ = [
    "CONTROL_HELLO",
    "CONTROL_SUBSCRIBE",
    "CONTROL_TAKEN",
    "CONTROL_UNSUBSCRIBE",
    "EXON_MESSAGE_ROOM",
    "LAYER",
    "MAX_TAG",
    "URGENT_BYTES",
    "LinkConfig",
    "SocketOptions",
    "Transport",
    "check_tag",
]

#: The trace layer of every link event.
LAYER = "link"

#: Custom control types (Java: types >= 0x33 are custom and bypass flow control).
CONTROL_SUBSCRIBE = 0x33
CONTROL_UNSUBSCRIBE = 0x34
#: Cumulative count of DATA the receiving application took (for receipts).
CONTROL_TAKEN = 0x35
#: Node-level HELLO on a new TCP connection: the dialer's listening address.
CONTROL_HELLO = 0x40

#: The largest socket tag (tags, clocks and counters are u32 on the wire).
MAX_TAG = (1 << 32) - 1
#: Bytes of DATA queued for one peer after which the driver should write at once
#: instead of at the end of the loop iteration (a sender that never yields would
#: otherwise hold its whole window back; 64 KiB keeps writes large).
URGENT_BYTES = 64 * 1024
#: The largest DATA payload over Exon: its 1400-byte datagram less its own header (two
#: node ids), the A3M message around the payload (two tags, type, clock) and the
#: pattern's framing (order counter, topic), with room for ids and tags of 64 bytes each.
EXON_MESSAGE_ROOM = 1024


class Transport(Enum):
    """How a node's frames travel: see ``udp`` and ``tcp`` beside this."""

    UDP = "udp"
    TCP = "tcp"
    #: The original wire: A3M's messages over Exon (``a3m``; the node id is ``node_id``).
    EXON = "exon"


def check_tag(tag: int) -> None:
    """Raise ``ConfigError`` unless ``tag`` may name a socket (tag 0 is the node's)."""
    if not 1 <= tag <= MAX_TAG:
        raise ConfigError("socket tags are 1..2**32-1 (0 is reserved for the node)", tag=tag)


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketOptions:
    """Per-socket options (Java socket options, reference (c), with the notes' defaults).

    ``capacity`` is the credits granted to each linked peer (0 for sockets that do not
    receive); ``batch`` the fraction of it returned per FLOW. ``retry_*`` shape the
    randomized back-off after a transient refusal (first delay ``retry_base``, doubling
    up to ``retry_max``, each scaled by a uniform factor in [0.5, 1.5]: the shared
    :class:`~gossamer.proto.backoff.Backoff` with the ``AROUND`` spread) and
    ``retry_limit`` caps the attempts. ``receipts`` asks peers to report when their
    application takes our messages, so ``send(..., cookie=...)`` can return receipts;
    ``receipt_ratio`` (0: receipts always first) lets a waiting message through after
    that many receipts in a row (notes: "após X recibos ... retornar uma mensagem").
    """

    capacity: int = 100
    batch: float = 0.25
    max_links: int | None = None
    allow_incoming: bool = True
    receipts: bool = False
    receipt_ratio: int = 0
    retry_base: float = 0.05
    retry_max: float = 2.0
    retry_limit: int = 8
    authorize: Authorizer | None = None
    custom: Mapping[str, bytes] = field(default_factory=dict)
    #: The retry schedule that ``retry_base`` and ``retry_max`` describe.
    retry_backoff: Backoff = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            backoff = Backoff(base=self.retry_base, maximum=self.retry_max, spread=AROUND)
        except ConfigError as exc:
            raise ConfigError("need 0 < retry_base <= retry_max", retry_base=self.retry_base,
                              retry_max=self.retry_max) from exc
        object.__setattr__(self, "retry_backoff", backoff)
        if not -(1 << 31) <= self.capacity < 1 << 31:
            raise ConfigError("capacity must fit in a signed 32-bit integer")
        if not 0.0 < self.batch <= 1.0:
            raise ConfigError("batch must be a fraction in (0, 1]", batch=self.batch)
        if self.max_links is not None and self.max_links < 0:
            raise ConfigError("max_links must be non-negative", max_links=self.max_links)
        if self.receipt_ratio < 0 or self.retry_limit < 0:
            raise ConfigError("receipt_ratio and retry_limit must be non-negative")
        if "receipts" in self.custom:
            raise ConfigError("the custom metadata key 'receipts' is reserved")


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkConfig:
    """One node: its name in traces, its address, transport and limits.

    ``names`` maps peer addresses to node names for traces (the simulator's node ids);
    unknown peers are named ``host:port``. ``max_message`` bounds DATA payloads both
    ways: it is part of the receiver's memory bound (links x credits x max message).
    By default it is 64 KiB over streams and whatever fits one datagram over UDP
    (fragmentation is future work in the notes).
    """

    address: Address
    node_id: str | None = None
    transport: Transport = Transport.UDP
    channel: ChannelConfig = field(default_factory=ChannelConfig)
    max_message: int | None = None
    names: Mapping[Address, str] = field(default_factory=dict)
    trace_data: bool = True
    #: The wire mode. It changes the node only over Exon, where ``ORIGINAL`` speaks the
    #: Java A3M's messages (:mod:`~.a3m`) and ``SEALED`` carries the node's own frames;
    #: over TCP and UDP the frames are the node's in both modes (the driver seals them).
    wire: WireMode = WireMode.SEALED
    #: Exon only: the Exon core's constants (the original's by default).
    exon: ExonConfig = field(default_factory=ExonConfig)

    def __post_init__(self) -> None:
        limit = self.message_limit
        if limit < 1:
            raise ConfigError("max_message must be positive", max_message=limit)
        if self.transport is Transport.EXON and not self.node_id:
            raise ConfigError("Exon names every node: give node_id")
        if self.transport is Transport.EXON and limit > EXON_MESSAGE_ROOM:
            raise ConfigError(f"over Exon a message must fit one datagram: max_message <= "
                              f"{EXON_MESSAGE_ROOM}", max_message=limit)
        if self.transport is Transport.UDP and limit > self._datagram_room:
            raise ConfigError(
                f"over UDP a message must fit one datagram: max_message <= "
                f"{self._datagram_room} for max_datagram={self.channel.max_datagram}",
                max_message=limit,
            )

    @property
    def _datagram_room(self) -> int:
        return self.channel.max_payload - exon.HEADER_SIZE - ENVELOPE_ROOM

    @property
    def message_limit(self) -> int:
        """The largest DATA payload (application bytes) this node sends or accepts."""
        if self.max_message is not None:
            return self.max_message
        if self.transport is Transport.UDP:
            return self._datagram_room
        if self.transport is Transport.EXON:
            return EXON_MESSAGE_ROOM
        return 64 * 1024

    @property
    def name(self) -> str:
        return self.node_id or f"{self.address[0]}:{self.address[1]}"

    def peer_name(self, address: Address) -> str:
        """How traces name the node at ``address``."""
        name = self.names.get(address)
        return name if name is not None else f"{address[0]}:{address[1]}"
