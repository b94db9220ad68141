"""Wire format of the Exon/A3M socket middleware: links, credits, data.

The layout follows the message structure of the design notes
(``exon-middleware-notes.pt.md`` "Message structure"): a fixed header, an extended
header that depends on the middleware-level protocol, and a payload. All integers are
big-endian.

Fixed header (8 bytes)::

    0         2          3        4                    8
    +---------+----------+--------+--------------------+
    | version | protocol |  type  |  remaining length  |
    |  u16    |   u8     |   u8   |        u32         |
    +---------+----------+--------+--------------------+

``version`` is 1; ``protocol`` is 0x01 (sockets; 0x02 "nodes" is reserved by the notes
and rejected here); ``remaining length`` counts every byte after the fixed header and
must match exactly.

Socket extended header (12 bytes)::

    8           12          16          20
    +-----------+-----------+-----------+
    |  src tag  |  dst tag  |   clock   |
    |    u32    |    u32    |    u32    |
    +-----------+-----------+-----------+

``clock`` is the sender's incarnation number of the link (the "clock id" of the Java
implementation, reference (c) "Clock ids"): every link a socket creates gets a new
clock, and a receiver ignores messages that carry a stale one. :data:`NO_CLOCK` marks a
message sent on behalf of a socket that does not exist (a "socket not found" ERROR).

Bodies, by type (spec table "Message Types"; CONTROL from the Java code)::

    ERROR   0x01  code u8 | dest_clock u32 | text (UTF-8, rest, optional)
    DATA    0x02  payload (rest)
    LINK    0x03  metadata
    LINKACK 0x04  decision i8 | dest_clock u32 | has_metadata u8 (0/1) | [metadata]
    UNLINK  0x05  sent u32         (DATA messages this side sent on the link)
    FLOW    0x06  credits i32      (a credit variation; may be negative)
    CONTROL 0x33..0xFF  payload (rest); custom control types, no credits consumed

    metadata = socket_type u16 | credits i32 | count u8 |
               count x (key_len u8 | key UTF-8 | value_len u16 | value)

``dest_clock`` names the incarnation of the receiver's link that an ERROR or LINKACK is
about, so a late reply to an old LINK cannot be mistaken for a reply to the new one.

The original Java code never implemented this header: it sends one protobuf message per
Exon payload with string tags (reference (c) "Middleware as implemented"). There is no
installed base to be compatible with, so gossamer uses the notes' layout, fixes its
open points (clock ids, LINKACK decision codes, metadata encoding) and documents them in
``docs/wire.md``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer

__all__ = [
    "CONTROL_MIN",
    "DATA_HEADER",
    "DEFAULT_LIMITS",
    "EXTENDED_HEADER_SIZE",
    "FIXED_HEADER",
    "FIXED_HEADER_SIZE",
    "HEADER_SIZE",
    "NO_CLOCK",
    "SOCKET_HEADER",
    "VERSION",
    "Body",
    "ControlBody",
    "DataBody",
    "DataRun",
    "ErrorBody",
    "ErrorCode",
    "ExonLimits",
    "FlowBody",
    "Frame",
    "FrameReader",
    "FrameScanner",
    "LinkAckBody",
    "LinkBody",
    "LinkDecision",
    "LinkMetadata",
    "MessageType",
    "Protocol",
    "SocketMessage",
    "SocketType",
    "UnlinkBody",
    "decode",
    "encode",
    "frame_length",
    "pull_socket_message",
    "push_socket_message",
]

VERSION = 1
FIXED_HEADER_SIZE = 8
EXTENDED_HEADER_SIZE = 12
HEADER_SIZE = FIXED_HEADER_SIZE + EXTENDED_HEADER_SIZE
#: Clock of a socket that does not exist (the Java code uses Integer.MIN_VALUE).
NO_CLOCK = 0xFFFF_FFFF
#: Message types from here up are custom control messages (Java ``MsgType``: below 0x33 reserved).
CONTROL_MIN = 0x33

#: The fixed header: version, protocol, type, remaining length.
FIXED_HEADER = struct.Struct(">HBBI")
#: The socket extended header: source tag, destination tag, clock.
SOCKET_HEADER = struct.Struct(">III")
#: Both headers of a message at once (the DATA fast paths pack and unpack them together).
DATA_HEADER = struct.Struct(">HBBIIII")
_I32 = struct.Struct(">i")
_U32_MAX = (1 << 32) - 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


class Protocol(IntEnum):
    """Middleware-level protocol (notes "Middleware-level protocol")."""

    SOCKETS = 0x01
    NODES = 0x02  # reserved for future use by the notes; not decoded


class MessageType(IntEnum):
    """Socket protocol message types (notes "Message Types"), plus CONTROL."""

    ERROR = 0x01
    DATA = 0x02
    LINK = 0x03
    LINKACK = 0x04
    UNLINK = 0x05
    FLOW = 0x06
    CONTROL = CONTROL_MIN  # stands for the whole range 0x33..0xFF


class ErrorCode(IntEnum):
    """ERROR codes (notes "Errors"; the notes give "invalid format" no number, 0x03 is
    the number of the notes' first version, reference (c))."""

    SOCKET_NOT_FOUND = 0x01
    SOCKET_NOT_LINKED = 0x02
    INVALID_FORMAT = 0x03


class LinkDecision(IntEnum):
    """A socket's LINKACK decision, the Java reply codes (reference (c) "Reply codes").

    Zero accepts; a positive code refuses for now (the requester retries after a random
    timeout); a negative code refuses for good (the requester discards the peer), which is
    the split the notes require between incompatibility and other refusals.
    """

    SUCCESS = 0
    LINK_EXISTS = 1
    TEMPORARILY_UNAVAILABLE = 2
    INCOMPATIBLE = -1
    INCOMING_NOT_ALLOWED = -2
    CANCELED = -3
    CLOSED = -4

    @property
    def fatal(self) -> bool:
        return self < 0


class SocketType(IntEnum):
    """Known socket types (Java ``SocketsTable`` protocol ids). ``socket_type`` on the wire
    is any u16, so applications may define their own above these."""

    PUSH = 1
    PULL = 2
    REQ = 3
    REP = 4
    ROUTER = 5
    DEALER = 6
    PUB = 7
    SUB = 8
    XPUB = 9
    XSUB = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class ExonLimits:
    """Bounds applied by the decoder (and checked by the encoder)."""

    #: Largest whole message, fixed header included.
    max_frame: int = 1 << 20
    #: Largest number of custom metadata entries in a LINK or LINKACK.
    max_custom_entries: int = 32
    #: Largest sum of custom metadata key and value bytes.
    max_custom_bytes: int = 4096
    #: Largest ERROR text in bytes.
    max_error_text: int = 1024


DEFAULT_LIMITS = ExonLimits()


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkMetadata:
    """What a socket tells a peer it wants to link with (notes "Establishing a link")."""

    #: The socket type (:class:`SocketType` or an application-defined u16).
    socket_type: int
    #: Initial credits granted to the peer: the sender's capacity.
    credits: int
    #: Custom metadata for extended link procedures (e.g. authentication).
    custom: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorBody:
    code: ErrorCode
    dest_clock: int
    text: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataBody:
    payload: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkBody:
    metadata: LinkMetadata


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkAckBody:
    decision: LinkDecision
    dest_clock: int
    #: Present when the sender has not sent its metadata yet (it answers a LINK).
    metadata: LinkMetadata | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnlinkBody:
    #: DATA messages this side sent on the link; the peer closes once it delivered as many.
    sent: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowBody:
    #: Credit variation; negative when the receiver shrinks its capacity.
    credits: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlBody:
    #: The message type, 0x33..0xFF.
    kind: int
    payload: bytes


Body = ErrorBody | DataBody | LinkBody | LinkAckBody | UnlinkBody | FlowBody | ControlBody


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketMessage:
    """One message of the socket middleware-level protocol."""

    src_tag: int
    dst_tag: int
    #: The sender's link incarnation (:data:`NO_CLOCK` for a missing socket).
    clock: int
    body: Body

    @property
    def type(self) -> MessageType:
        return _type_of(self.body)


def _type_of(body: Body) -> MessageType:
    if isinstance(body, ErrorBody):
        return MessageType.ERROR
    if isinstance(body, DataBody):
        return MessageType.DATA
    if isinstance(body, LinkBody):
        return MessageType.LINK
    if isinstance(body, LinkAckBody):
        return MessageType.LINKACK
    if isinstance(body, UnlinkBody):
        return MessageType.UNLINK
    if isinstance(body, FlowBody):
        return MessageType.FLOW
    return MessageType.CONTROL


# ---------------------------------------------------------------------------- encoding


def _check_u32(name: str, value: int) -> None:
    if not 0 <= value <= _U32_MAX:
        raise ValueError(f"{name}={value} does not fit in an unsigned 32-bit field")


def _check_i32(name: str, value: int) -> None:
    if not _I32_MIN <= value <= _I32_MAX:
        raise ValueError(f"{name}={value} does not fit in a signed 32-bit field")


def _push_metadata(buf: bytearray, meta: LinkMetadata, limits: ExonLimits) -> None:
    if not 0 <= meta.socket_type <= 0xFFFF:
        raise ValueError(f"socket_type={meta.socket_type} does not fit in 16 bits")
    _check_i32("credits", meta.credits)
    if len(meta.custom) > min(limits.max_custom_entries, 255):
        raise ValueError(f"{len(meta.custom)} custom metadata entries exceed the limit")
    buf += struct.pack(">Hi", meta.socket_type, meta.credits)
    buf.append(len(meta.custom))
    total = 0
    for key, value in meta.custom.items():
        raw_key = key.encode()
        if not 1 <= len(raw_key) <= 255:
            raise ValueError("custom metadata keys must be 1 to 255 bytes of UTF-8")
        if len(value) > 0xFFFF:
            raise ValueError("custom metadata values must be at most 65535 bytes")
        total += len(raw_key) + len(value)
        buf.append(len(raw_key))
        buf += raw_key
        buf += len(value).to_bytes(2, "big")
        buf += value
    if total > limits.max_custom_bytes:
        raise ValueError(f"custom metadata of {total} bytes exceeds {limits.max_custom_bytes}")


def _push_body(buf: bytearray, body: Body, limits: ExonLimits) -> None:
    if isinstance(body, ErrorBody):
        _check_u32("dest_clock", body.dest_clock)
        text = body.text.encode()
        if len(text) > limits.max_error_text:
            raise ValueError(f"error text of {len(text)} bytes exceeds {limits.max_error_text}")
        buf.append(ErrorCode(body.code))
        buf += body.dest_clock.to_bytes(4, "big")
        buf += text
    elif isinstance(body, DataBody | ControlBody):
        buf += body.payload
    elif isinstance(body, LinkBody):
        _push_metadata(buf, body.metadata, limits)
    elif isinstance(body, LinkAckBody):
        _check_u32("dest_clock", body.dest_clock)
        buf += struct.pack(">bI", LinkDecision(body.decision), body.dest_clock)
        if body.metadata is None:
            buf.append(0)
        else:
            buf.append(1)
            _push_metadata(buf, body.metadata, limits)
    elif isinstance(body, UnlinkBody):
        _check_u32("sent", body.sent)
        buf += body.sent.to_bytes(4, "big")
    else:  # FlowBody
        _check_i32("credits", body.credits)
        buf += _I32.pack(body.credits)


def push_socket_message(
    buf: bytearray, msg: SocketMessage, *, limits: ExonLimits = DEFAULT_LIMITS
) -> None:
    """Append ``msg`` to ``buf``. Raises ``ValueError`` for a value that cannot be encoded
    or a message larger than ``limits.max_frame``."""
    _check_u32("src_tag", msg.src_tag)
    _check_u32("dst_tag", msg.dst_tag)
    _check_u32("clock", msg.clock)
    if isinstance(msg.body, ControlBody) and not CONTROL_MIN <= msg.body.kind <= 0xFF:
        raise ValueError(f"control message type {msg.body.kind:#x} is outside 0x33..0xff")
    kind = msg.body.kind if isinstance(msg.body, ControlBody) else msg.type
    start = len(buf)
    buf += bytes(FIXED_HEADER_SIZE)  # patched below once the length is known
    buf += SOCKET_HEADER.pack(msg.src_tag, msg.dst_tag, msg.clock)
    try:
        _push_body(buf, msg.body, limits)
        size = len(buf) - start
        if size > limits.max_frame:
            raise ValueError(f"message of {size} bytes exceeds {limits.max_frame}")
    except ValueError:
        del buf[start:]
        raise
    FIXED_HEADER.pack_into(buf, start, VERSION, Protocol.SOCKETS, kind, size - FIXED_HEADER_SIZE)


def encode(msg: SocketMessage, *, limits: ExonLimits = DEFAULT_LIMITS) -> bytes:
    buf = bytearray()
    push_socket_message(buf, msg, limits=limits)
    return bytes(buf)


# ---------------------------------------------------------------------------- decoding


def _pull_utf8(buf: Buffer, n: int, what: str) -> str:
    start = buf.position
    try:
        return buf.pull_bytes(n, what).decode()
    except UnicodeDecodeError:
        raise DecodeError(f"{what} is not UTF-8", offset=start) from None


def _pull_metadata(buf: Buffer, limits: ExonLimits) -> LinkMetadata:
    socket_type = buf.pull_uint16("socket type")
    credits = _I32.unpack(buf.pull_bytes(4, "credits"))[0]
    count_at = buf.position
    count = buf.pull_uint8("custom metadata count")
    if count > limits.max_custom_entries:
        raise DecodeError(
            f"{count} custom metadata entries exceed {limits.max_custom_entries}", offset=count_at
        )
    custom: dict[str, bytes] = {}
    total = 0
    for _ in range(count):
        key_at = buf.position
        key = _pull_utf8(buf, buf.pull_uint8("metadata key length"), "metadata key")
        if not key:
            raise DecodeError("empty custom metadata key", offset=key_at)
        value = buf.pull_bytes(buf.pull_uint16("metadata value length"), "metadata value")
        total += len(key.encode()) + len(value)
        if total > limits.max_custom_bytes:
            raise DecodeError(
                f"custom metadata exceeds {limits.max_custom_bytes} bytes", offset=key_at
            )
        if key in custom:
            raise DecodeError(f"duplicate custom metadata key {key!r}", offset=key_at)
        custom[key] = value
    return LinkMetadata(socket_type=socket_type, credits=credits, custom=custom)


def _message_type(raw_type: int, offset: int) -> MessageType:
    if raw_type >= CONTROL_MIN:
        return MessageType.CONTROL
    try:
        return MessageType(raw_type)
    except ValueError:
        raise DecodeError(f"unknown socket message type {raw_type:#04x}", offset=offset) from None


def _pull_body(buf: Buffer, kind: MessageType, raw_type: int, limits: ExonLimits) -> Body:
    at = buf.position
    if kind is MessageType.ERROR:
        raw_code = buf.pull_uint8("error code")
        try:
            code = ErrorCode(raw_code)
        except ValueError:
            raise DecodeError(f"unknown error code {raw_code:#04x}", offset=at) from None
        dest_clock = buf.pull_uint32("destination clock")
        if buf.remaining > limits.max_error_text:
            raise DecodeError(
                f"error text of {buf.remaining} bytes exceeds {limits.max_error_text}",
                offset=buf.position,
            )
        text = _pull_utf8(buf, buf.remaining, "error text")
        return ErrorBody(code=code, dest_clock=dest_clock, text=text)
    if kind is MessageType.DATA:
        return DataBody(payload=buf.pull_rest())
    if kind is MessageType.CONTROL:
        return ControlBody(kind=raw_type, payload=buf.pull_rest())
    if kind is MessageType.LINK:
        return LinkBody(metadata=_pull_metadata(buf, limits))
    if kind is MessageType.LINKACK:
        raw_decision = struct.unpack(">b", buf.pull_bytes(1, "decision"))[0]
        try:
            decision = LinkDecision(raw_decision)
        except ValueError:
            raise DecodeError(f"unknown link decision {raw_decision}", offset=at) from None
        dest_clock = buf.pull_uint32("destination clock")
        flag_at = buf.position
        flag = buf.pull_uint8("metadata flag")
        if flag not in (0, 1):
            raise DecodeError(f"metadata flag must be 0 or 1, not {flag}", offset=flag_at)
        metadata = _pull_metadata(buf, limits) if flag else None
        return LinkAckBody(decision=decision, dest_clock=dest_clock, metadata=metadata)
    if kind is MessageType.UNLINK:
        return UnlinkBody(sent=buf.pull_uint32("sent counter"))
    return FlowBody(credits=_I32.unpack(buf.pull_bytes(4, "credits"))[0])


def _check_fixed(
    version: int, protocol: int, remaining: int, limits: ExonLimits, start: int = 0
) -> None:
    if version != VERSION:
        raise DecodeError(f"unsupported middleware version {version}", offset=start)
    if protocol != Protocol.SOCKETS:
        # 0x02 (nodes) is reserved by the notes "for future use": nothing defines it yet.
        raise DecodeError(
            f"unsupported middleware-level protocol {protocol:#04x}", offset=start + 2
        )
    if remaining < EXTENDED_HEADER_SIZE:
        raise DecodeError(
            f"remaining length {remaining} is shorter than the socket header", offset=start + 4
        )
    if FIXED_HEADER_SIZE + remaining > limits.max_frame:
        raise DecodeError(
            f"message of {FIXED_HEADER_SIZE + remaining} bytes exceeds {limits.max_frame}",
            offset=start + 4,
        )


def frame_length(prefix: bytes | bytearray, *, limits: ExonLimits = DEFAULT_LIMITS) -> int | None:
    """Total length of the message that starts ``prefix``, or ``None`` if fewer than 8 bytes
    are known. Validates the fixed header, so a stream that is not Exon fails at once
    instead of waiting for a bogus length. Raises only ``DecodeError``."""
    if len(prefix) < FIXED_HEADER_SIZE:
        return None
    version, protocol, _, remaining = FIXED_HEADER.unpack_from(prefix)
    _check_fixed(version, protocol, remaining, limits)
    return int(FIXED_HEADER_SIZE + remaining)


def pull_socket_message(buf: Buffer, *, limits: ExonLimits = DEFAULT_LIMITS) -> SocketMessage:
    """Read one message from ``buf`` (which may hold more after it). Raises only ``DecodeError``."""
    start = buf.position
    version, protocol, raw_type, remaining = FIXED_HEADER.unpack(buf.pull_bytes(8, "fixed header"))
    _check_fixed(version, protocol, remaining, limits, start)
    kind = _message_type(raw_type, start + 3)
    rest = buf.pull_bytes(remaining, "message after the fixed header")
    # The body is parsed from its own buffer so that it cannot read past the remaining
    # length; its offsets are shifted back to positions in ``buf`` when it fails.
    body_buf = Buffer(rest)
    try:
        src_tag, dst_tag, clock = SOCKET_HEADER.unpack(body_buf.pull_bytes(12, "socket header"))
        body = _pull_body(body_buf, kind, raw_type, limits)
        body_buf.expect_end(f"{kind.name} body")
    except DecodeError as exc:
        base = start + FIXED_HEADER_SIZE
        offset = None if exc.offset is None else base + exc.offset
        raise DecodeError(exc.reason, offset=offset) from None
    return SocketMessage(src_tag=src_tag, dst_tag=dst_tag, clock=clock, body=body)


def decode(data: bytes, *, limits: ExonLimits = DEFAULT_LIMITS) -> SocketMessage:
    """Decode exactly one message (one Exon payload): the remaining length must match."""
    if len(data) > limits.max_frame:
        raise DecodeError(f"message of {len(data)} bytes exceeds {limits.max_frame}")
    length = frame_length(data, limits=limits)
    if length is not None and length != len(data):
        raise DecodeError(
            f"remaining length {length - FIXED_HEADER_SIZE} does not match the "
            f"{len(data) - FIXED_HEADER_SIZE} bytes after the fixed header",
            offset=4,
        )
    buf = Buffer(data)
    return pull_socket_message(buf, limits=limits)


@dataclass(slots=True)
class DataRun:
    """Consecutive DATA messages of one link incarnation (same tags, same clock), in
    stream order: the unit in which a receiver queues DATA without decoding each one.
    Each payload is the message's body; the frame around it was ``HEADER_SIZE`` longer.
    (Made once per run on the hot path, so neither frozen nor keyword-only: a frozen
    dataclass costs several times as much to make.)
    """

    src_tag: int
    dst_tag: int
    clock: int
    payloads: list[bytes]

    def message(self, index: int) -> SocketMessage:
        """Payload ``index`` as the message :func:`decode` returns for its frame."""
        return SocketMessage(
            src_tag=self.src_tag,
            dst_tag=self.dst_tag,
            clock=self.clock,
            body=DataBody(payload=self.payloads[index]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """One frame other than DATA: what it decoded to, a message or the ``DecodeError``
    saying why not (the stream goes on after it), and its size in bytes."""

    decoded: SocketMessage | DecodeError
    size: int


class FrameScanner:
    """The one Exon stream parser: splits a byte stream (coalesced or cut anywhere)
    into :class:`DataRun` and :class:`Frame` items, in order.

    DATA is the hot path of every receiver (docs/performance-baselines.md: the parser is
    where an asyncio receiver spends its time): its frames are checked exactly as
    :func:`decode` checks them, but only cut, not decoded, and consecutive ones of one
    link come out as one :class:`DataRun`. Every other message is decoded by
    :func:`decode`. The fixed header is checked as soon as it is complete, so the
    scanner holds at most one partial frame between calls.

    ``feed`` is a generator: consume it whole before feeding again. When a fixed header
    is bad the stream has lost its framing: the items before it come out, then
    :attr:`lost` says why (and :attr:`unread` how many bytes were left) and the scanner
    yields nothing more until :meth:`reset`.
    """

    __slots__ = ("_buffer", "limits", "lost", "unread")

    def __init__(self, *, limits: ExonLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._buffer = b""
        #: Why the framing was lost.
        self.lost: DecodeError | None = None
        #: Bytes left unread when the framing was lost, from the bad header on.
        self.unread = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete message."""
        return len(self._buffer)

    def reset(self) -> None:
        """Forget buffered bytes and a lost framing (a new stream starts)."""
        self._buffer = b""
        self.lost = None
        self.unread = 0

    def feed(self, data: bytes) -> Iterator[DataRun | Frame]:
        if self.lost is not None:
            return
        if self._buffer:
            view = self._buffer + data
            self._buffer = b""
        else:
            view = data
        size = len(view)
        pos = 0
        limits = self.limits
        max_frame = limits.max_frame
        run: DataRun | None = None
        payloads: list[bytes] = []
        unpack = DATA_HEADER.unpack_from
        header_size, ext_size = HEADER_SIZE, EXTENDED_HEADER_SIZE
        version_ok, sockets, data_kind = VERSION, int(Protocol.SOCKETS), int(MessageType.DATA)
        while size - pos >= FIXED_HEADER_SIZE:
            if size - pos >= header_size:
                version, protocol, kind, remaining, src, dst, clock = unpack(view, pos)
            else:
                version, protocol, kind, remaining = FIXED_HEADER.unpack_from(view, pos)
                src = dst = clock = -1
            end = pos + FIXED_HEADER_SIZE + remaining
            if (
                version != version_ok
                or protocol != sockets
                or remaining < ext_size
                or end - pos > max_frame
            ):
                if run is not None:
                    yield run
                try:
                    _check_fixed(version, protocol, remaining, limits)
                    error = DecodeError("bad frame header")
                except DecodeError as exc:
                    error = exc
                self.lost, self.unread = error, size - pos
                return
            if end > size:
                break
            if kind == data_kind:
                if run is None or src != run.src_tag or dst != run.dst_tag or clock != run.clock:
                    if run is not None:
                        yield run
                    payloads = []
                    run = DataRun(src, dst, clock, payloads)
                payloads.append(view[pos + header_size : end])
                pos = end
                continue
            if run is not None:
                yield run
                run = None
            frame = view[pos:end]
            pos = end
            decoded: SocketMessage | DecodeError
            try:
                decoded = decode(frame, limits=limits)
            except DecodeError as exc:
                decoded = exc
            yield Frame(decoded=decoded, size=len(frame))
        if run is not None:
            yield run
        if pos < size:
            self._buffer = bytes(view[pos:])


class FrameReader:
    """Splits a byte stream (coalesced or split arbitrarily) into messages.

    ``feed(data)`` returns every message completed by ``data``. A length is checked
    against ``limits.max_frame`` as soon as a fixed header is complete, so the reader
    never holds more than one partial frame plus the bytes of one ``feed`` call.

    A ``DecodeError`` means the stream has lost its framing: the caller must close the
    connection. Messages that the failing ``feed`` call had already completed are not
    returned; the link layer above treats a closed connection as losing whatever it had
    not acknowledged anyway.
    """

    __slots__ = ("_scanner",)

    def __init__(self, *, limits: ExonLimits = DEFAULT_LIMITS) -> None:
        self._scanner = FrameScanner(limits=limits)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete message."""
        return self._scanner.buffered

    def feed(self, data: bytes) -> list[SocketMessage]:
        scanner = self._scanner
        messages: list[SocketMessage] = []
        for item in scanner.feed(data):
            if isinstance(item, DataRun):
                messages += (item.message(i) for i in range(len(item.payloads)))
            elif isinstance(item.decoded, SocketMessage):
                messages.append(item.decoded)
            else:
                raise item.decoded
        if scanner.lost is not None:
            raise scanner.lost
        return messages
