"""The A3M original's messages: the wire of links in ``--wire original`` mode.

The Java A3M middleware never used the notes' fixed header (:mod:`gossamer.wire.exon`):
each Exon payload is one protobuf message (schema ``a3m.proto`` beside this module,
``docs/wire.md`` "A3M")::

    Envelope { string src_tag = 1; string dst_tag = 2; bytes kind = 3 (one byte);
               int32 clock = 4; bytes body = 5; }

Types: ERROR 1, LINK 2, LINKREPLY 3, UNLINK 4, FLOW 5, DATA 6; 0x33 and up are custom
control types (PUB/SUB's SUBSCRIBE 0x7E and UNSUBSCRIBE 0x7F among them). Bodies:

- LINK: a ``Fields`` map ``{protocolId: int32, credits: int32}``;
- LINKREPLY: ``{replyCode: int32, destClockId: int32}`` plus LINK's two entries when the
  sender has not sent its metadata yet (the second message of the three-way handshake;
  the third carries none);
- ERROR: ``{code: string (the code's decimal digits), destClockId: int32}``, with codes
  SOCK_NFOUND 1, SOCK_NAVAIL 2, SOCK_NLINKED 3; an ERROR for a missing socket carries
  the envelope clock ``INT32_MIN``;
- FLOW: a signed 4-byte credit variation; UNLINK: a 4-byte count of DATA sent;
- DATA: by pattern. PUSH/PULL and PUB/SUB put a 4-byte order counter (0, 1, ... per link)
  in front (:func:`split_order`), since Exon delivers out of order; PUB/SUB's payload is
  ``topic length u32 | topic | content length u32 | content`` (:func:`decode_published`);
  SUBSCRIBE/UNSUBSCRIBE carry their own order counter and ``count u32 | (length u32 |
  topic)...``; REQ/REP send the raw bytes; DEALER/ROUTER a protobuf ``Routed`` (the
  original's ``RRMsg``).

:func:`to_link_message` and :func:`from_link_message` translate between an
:class:`A3MMessage` and gossamer's link records (:class:`gossamer.wire.exon.SocketMessage`),
whose meaning is the same: string tags become 32-bit tags through a :class:`TagBook`,
int32 clocks become u32 ones (``INT32_MIN`` is :data:`~gossamer.wire.exon.NO_CLOCK`).

Decoders raise only ``DecodeError``; encoders raise ``ValueError`` for what a decoder
would refuse.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message as ProtobufMessage
from google.protobuf.unknown_fields import UnknownFieldSet

from gossamer.errors import DecodeError
from gossamer.wire import a3m_pb2, exon

__all__ = [
    "CONTROL_MIN",
    "DEFAULT_LIMITS",
    "MISSING_CLOCK",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "A3MError",
    "A3MLimits",
    "A3MMessage",
    "A3MType",
    "FieldValue",
    "TagBook",
    "decode_fields",
    "decode_message",
    "decode_published",
    "decode_routed",
    "decode_subscriptions",
    "encode_fields",
    "encode_message",
    "encode_published",
    "encode_routed",
    "encode_routed_or_bare",
    "encode_subscriptions",
    "from_link_message",
    "join_order",
    "read_routed",
    "split_order",
    "to_link_message",
]

#: The clock of a message sent on behalf of a missing socket (Java ``Integer.MIN_VALUE``).
MISSING_CLOCK = -(1 << 31)
#: Types from here up are custom control messages (no credits).
CONTROL_MIN = 0x33
#: PUB/SUB's control types (Java ``Byte.MAX_VALUE - 1`` and ``Byte.MAX_VALUE``).
SUBSCRIBE = 0x7E
UNSUBSCRIBE = 0x7F

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


class A3MType(IntEnum):
    """Message types of the Java ``MsgType``."""

    ERROR = 0x01
    LINK = 0x02
    LINKREPLY = 0x03
    UNLINK = 0x04
    FLOW = 0x05
    DATA = 0x06


class A3MError(IntEnum):
    """ERROR codes of the Java ``ErrorType``."""

    SOCK_NFOUND = 0x01
    SOCK_NAVAIL = 0x02
    SOCK_NLINKED = 0x03


@dataclass(frozen=True, slots=True, kw_only=True)
class A3MLimits:
    """Bounds applied by the decoders (and checked by the encoders): the largest whole
    message (one Exon payload: Exon's datagrams are at most 1400 bytes), the longest tag
    in bytes of UTF-8, and the most entries of a ``Fields`` map, topics of a subscription
    message and routing ids of a ``Routed`` message."""

    max_message: int = 1400
    max_tag: int = 255
    max_fields: int = 16
    max_topics: int = 64
    max_hops: int = 16


DEFAULT_LIMITS = A3MLimits()

#: What a ``Fields`` entry holds (an int is an int32 entry).
FieldValue = int | float | str | bool


@dataclass(frozen=True, slots=True, kw_only=True)
class A3MMessage:
    """One A3M message: the envelope of every Exon payload A3M sends."""

    src_tag: str
    dst_tag: str
    #: The message type (:class:`A3MType`, or a custom control type >= 0x33).
    kind: int
    #: The sender's link incarnation (int32; :data:`MISSING_CLOCK` for a missing socket).
    clock: int
    body: bytes = b""


# ---------------------------------------------------------------------------- protobuf


def _parse(message: ProtobufMessage, data: bytes, what: str) -> None:
    """Parse ``data`` into ``message`` strictly: no unknown fields. Raises ``DecodeError``."""
    try:
        message.ParseFromString(data)
    except ProtobufDecodeError as exc:
        raise DecodeError(f"{what} is not a valid protobuf message: {exc}") from None
    except (ValueError, TypeError, RuntimeError) as exc:  # e.g. strings that are not UTF-8
        raise DecodeError(f"{what} does not parse: {exc}") from None
    if len(UnknownFieldSet(message)):
        raise DecodeError(f"{what} has fields A3M does not define")


def _check_tag(name: str, value: str, limits: A3MLimits) -> None:
    size = len(value.encode())
    if not 1 <= size <= limits.max_tag:
        raise ValueError(f"{name} must be 1 to {limits.max_tag} bytes of UTF-8, not {size}")


def _check_i32(name: str, value: int) -> None:
    if not _I32_MIN <= value <= _I32_MAX:
        raise ValueError(f"{name}={value} does not fit in a signed 32-bit field")


def encode_message(msg: A3MMessage, *, limits: A3MLimits = DEFAULT_LIMITS) -> bytes:
    """The Exon payload of ``msg``."""
    _check_tag("src_tag", msg.src_tag, limits)
    _check_tag("dst_tag", msg.dst_tag, limits)
    _check_i32("clock", msg.clock)
    if not 1 <= msg.kind <= 0xFF:
        raise ValueError(f"message type {msg.kind} is not one byte")
    data = a3m_pb2.Envelope(
        src_tag=msg.src_tag, dst_tag=msg.dst_tag, kind=bytes((msg.kind,)), clock=msg.clock,
        body=msg.body,
    ).SerializeToString()
    if len(data) > limits.max_message:
        raise ValueError(f"message of {len(data)} bytes exceeds {limits.max_message}")
    return data


def decode_message(data: bytes, *, limits: A3MLimits = DEFAULT_LIMITS) -> A3MMessage:
    """One Exon payload as an A3M message. Raises only ``DecodeError``.

    Refused: more than ``limits.max_message`` bytes, anything protobuf refuses, unknown
    fields, an empty or overlong tag (the original ignores messages without both tags),
    a type that is not exactly one byte, or type 0 and the reserved types 0x07..0x32.
    """
    if len(data) > limits.max_message:
        raise DecodeError(f"message of {len(data)} bytes exceeds {limits.max_message}")
    envelope = a3m_pb2.Envelope()
    _parse(envelope, data, "message")
    for name, tag in (("source tag", envelope.src_tag), ("destination tag", envelope.dst_tag)):
        size = len(tag.encode())
        if not 1 <= size <= limits.max_tag:
            raise DecodeError(f"{name} of {size} bytes (must be 1 to {limits.max_tag})")
    if len(envelope.kind) != 1:
        raise DecodeError(f"message type of {len(envelope.kind)} bytes (must be one)")
    kind = envelope.kind[0]
    if kind < CONTROL_MIN and kind not in A3MType._value2member_map_:
        raise DecodeError(f"unknown message type {kind:#04x}")
    return A3MMessage(src_tag=envelope.src_tag, dst_tag=envelope.dst_tag, kind=kind,
                      clock=envelope.clock, body=envelope.body)


def encode_fields(fields: Mapping[str, FieldValue], *, limits: A3MLimits = DEFAULT_LIMITS) -> bytes:
    """A ``Fields`` map. ``bool`` entries are bools, ``int`` ones int32, ``float`` ones
    doubles, ``str`` ones strings."""
    if len(fields) > limits.max_fields:
        raise ValueError(f"{len(fields)} fields exceed {limits.max_fields}")
    out = a3m_pb2.Fields()
    for key, value in fields.items():
        entry = out.entries[key]
        if isinstance(value, bool):
            entry.bool_value = value
        elif isinstance(value, int):
            _check_i32(key, value)
            entry.int32_value = value
        elif isinstance(value, float):
            entry.double_value = value
        elif isinstance(value, str):
            entry.string_value = value
        else:
            raise TypeError(f"field {key!r} has a value of type {type(value).__name__}")
    # Deterministic: the same map always encodes to the same bytes.
    return out.SerializeToString(deterministic=True)


def decode_fields(body: bytes, *, limits: A3MLimits = DEFAULT_LIMITS) -> dict[str, FieldValue]:
    """A ``Fields`` map. Raises only ``DecodeError`` (also for an entry without a value)."""
    fields = a3m_pb2.Fields()
    _parse(fields, body, "field map")
    if len(fields.entries) > limits.max_fields:
        raise DecodeError(f"{len(fields.entries)} fields exceed {limits.max_fields}")
    out: dict[str, FieldValue] = {}
    for key, value in fields.entries.items():
        which = value.WhichOneof("value")
        if which is None:
            raise DecodeError(f"field {key!r} has no value")
        if len(UnknownFieldSet(value)):
            raise DecodeError(f"field {key!r} has fields A3M does not define")
        got: FieldValue = getattr(value, which)
        out[key] = got
    return out


def _int_field(fields: Mapping[str, FieldValue], key: str, what: str) -> int:
    value = fields.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(f"{what} needs the int32 field {key!r}")
    return value


# ---------------------------------------------------------------------------- bodies


def split_order(body: bytes) -> tuple[int, bytes]:
    """A FIFO pattern's payload (PUSH/PULL, PUB/SUB): the order counter and the rest."""
    if len(body) < 4:
        raise DecodeError(f"payload of {len(body)} bytes has no 4-byte order counter")
    return _U32.unpack_from(body)[0], body[4:]


def join_order(order: int, body: bytes) -> bytes:
    """``order`` (0, 1, ... per link; wraps like the original's int) in front of ``body``."""
    return _U32.pack(order & 0xFFFF_FFFF) + body


def encode_published(topic: bytes, content: bytes) -> bytes:
    """PUB/SUB's DATA payload (after the order counter)."""
    return _U32.pack(len(topic)) + topic + _U32.pack(len(content)) + content


def _pull_sized(body: bytes, at: int, what: str) -> tuple[bytes, int]:
    if len(body) - at < 4:
        raise DecodeError(f"{what} length is cut short", offset=at)
    size = _U32.unpack_from(body, at)[0]
    end = at + 4 + size
    if size > len(body) - at - 4:
        raise DecodeError(f"{what} of {size} bytes, {len(body) - at - 4} present", offset=at)
    return body[at + 4 : end], end


def decode_published(body: bytes) -> tuple[bytes, bytes]:
    """PUB/SUB's DATA payload: ``(topic, content)``. Raises only ``DecodeError``."""
    topic, at = _pull_sized(body, 0, "topic")
    content, at = _pull_sized(body, at, "content")
    if at != len(body):
        raise DecodeError(f"{len(body) - at} bytes after the content", offset=at)
    return topic, content


def encode_subscriptions(topics: Sequence[bytes], *, limits: A3MLimits = DEFAULT_LIMITS) -> bytes:
    """SUBSCRIBE/UNSUBSCRIBE's payload (after the order counter)."""
    if len(topics) > limits.max_topics:
        raise ValueError(f"{len(topics)} topics exceed {limits.max_topics}")
    return _U32.pack(len(topics)) + b"".join(_U32.pack(len(t)) + t for t in topics)


def decode_subscriptions(
    body: bytes, *, limits: A3MLimits = DEFAULT_LIMITS
) -> tuple[bytes, ...]:
    """SUBSCRIBE/UNSUBSCRIBE's topics. Raises only ``DecodeError``."""
    if len(body) < 4:
        raise DecodeError("subscription message without a topic count")
    count = _U32.unpack_from(body)[0]
    if count > limits.max_topics:
        raise DecodeError(f"{count} topics exceed {limits.max_topics}", offset=0)
    topics: list[bytes] = []
    at = 4
    for _ in range(count):
        topic, at = _pull_sized(body, at, "topic")
        topics.append(topic)
    if at != len(body):
        raise DecodeError(f"{len(body) - at} bytes after the topics", offset=at)
    return tuple(topics)


def encode_routed(
    hops: Sequence[int | tuple[str, str]], body: bytes, *, limits: A3MLimits = DEFAULT_LIMITS
) -> bytes:
    """DEALER/ROUTER's payload: routing ids stacked before ``body``, each an int32 clock
    id or a socket's ``(node, tag)``."""
    if len(hops) > limits.max_hops:
        raise ValueError(f"{len(hops)} routing ids exceed {limits.max_hops}")
    routed = a3m_pb2.Routed(body=body)
    for hop in hops:
        if isinstance(hop, tuple):
            routed.hops.add(socket=a3m_pb2.SocketName(node=hop[0], tag=hop[1]))
        else:
            _check_i32("routing id", hop)
            routed.hops.add(clock=hop)
    return routed.SerializeToString()


Hops = tuple[int | tuple[str, str], ...]


def encode_routed_or_bare(
    hops: Sequence[int | tuple[str, str]], body: bytes, *, limits: A3MLimits = DEFAULT_LIMITS
) -> bytes:
    """What the original ROUTER sends once it took the destination off: the routed
    message while routing ids remain, else the bare body (what a REQ expects, and what
    a DEALER's application sends when it adds no ids)."""
    return encode_routed(hops, body, limits=limits) if hops else body


def read_routed(data: bytes, *, limits: A3MLimits = DEFAULT_LIMITS) -> tuple[Hops, bytes]:
    """DEALER/ROUTER's payload as the original ROUTER reads it: a routed message, or,
    when ``data`` does not parse as one, a bare body without routing ids (what a REQ,
    a REP and a DEALER's application send). A routed message that parses but breaks
    the limits raises ``DecodeError``. Unlike the original, which ignores unknown
    fields, a payload with fields a routed message does not define is bare here: the
    original would read many bare payloads as an empty routed message and lose them."""
    routed = a3m_pb2.Routed()
    try:
        _parse(routed, data, "routed message")
    except DecodeError:
        return (), data
    return _hops(routed, limits), routed.body


def decode_routed(data: bytes, *, limits: A3MLimits = DEFAULT_LIMITS) -> tuple[Hops, bytes]:
    """DEALER/ROUTER's payload: the routing ids (an int32 clock id, or a socket's
    ``(node, tag)``) and the body. Raises only ``DecodeError``."""
    routed = a3m_pb2.Routed()
    _parse(routed, data, "routed message")
    return _hops(routed, limits), routed.body


def _hops(routed: a3m_pb2.Routed, limits: A3MLimits) -> Hops:
    if len(routed.hops) > limits.max_hops:
        raise DecodeError(f"{len(routed.hops)} routing ids exceed {limits.max_hops}")
    hops: list[int | tuple[str, str]] = []
    for hop in routed.hops:
        which = hop.WhichOneof("hop")
        if which == "clock":
            hops.append(hop.clock)
        elif which == "socket":
            hops.append((hop.socket.node, hop.socket.tag))
        else:
            raise DecodeError("routing id without a value")
    return tuple(hops)


# ---------------------------------------------------------------------------- tags, clocks


class TagBook:
    """Socket tags both ways: A3M names sockets by strings, gossamer's link records by
    32-bit numbers. A name is its CRC-32 (as ``gossamer.aio.link`` names string tags),
    or the number it was registered with; a number never registered is named by its
    decimal digits. Collisions (two names, one number) are refused."""

    __slots__ = ("_names", "_tags")

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._tags: dict[str, int] = {}

    @staticmethod
    def number(name: str) -> int:
        """The 32-bit tag a name stands for when nobody registered it (never 0)."""
        return zlib.crc32(name.encode()) or 1

    def register(self, tag: int, name: str) -> None:
        """Name ``tag`` ``name``; ``ValueError`` if either already has another partner."""
        if self._names.get(tag, name) != name or self._tags.get(name, tag) != tag:
            raise ValueError(f"tag {tag} and name {name!r} are already taken")
        self._names[tag] = name
        self._tags[name] = tag

    def tag(self, name: str) -> int:
        """The number of the tag named ``name``. Raises ``DecodeError`` on a collision."""
        found = self._tags.get(name)
        if found is not None:
            return found
        number = self.number(name)
        if number in self._names:
            raise DecodeError(f"tag {name!r} collides with {self._names[number]!r}")
        self.register(number, name)
        return number

    def name(self, tag: int) -> str:
        """The name of tag ``tag``."""
        found = self._names.get(tag)
        if found is None:
            found = str(tag)
            self.register(tag, found)
        return found


def _clock_in(clock: int) -> int:
    return exon.NO_CLOCK if clock == MISSING_CLOCK else clock & 0xFFFF_FFFF


def _clock_out(clock: int) -> int:
    if clock == exon.NO_CLOCK:
        return MISSING_CLOCK
    if clock == 1 << 31:
        raise ValueError("clock 0x80000000 is the original's 'missing socket' clock")
    return clock - (1 << 32) if clock >= 1 << 31 else clock


_ERRORS_IN = {A3MError.SOCK_NFOUND: exon.ErrorCode.SOCKET_NOT_FOUND,
              A3MError.SOCK_NLINKED: exon.ErrorCode.SOCKET_NOT_LINKED}
_ERRORS_OUT = {v: k for k, v in _ERRORS_IN.items()}


# ---------------------------------------------------------------------------- translation


def to_link_message(
    msg: A3MMessage, tags: TagBook, *, limits: A3MLimits = DEFAULT_LIMITS
) -> exon.SocketMessage:
    """``msg`` as a gossamer link record. DATA and control bodies are passed as they are
    (their per-pattern layout is the caller's: :func:`split_order` and friends). Raises
    only ``DecodeError``: for a body its type does not allow, and for SOCK_NAVAIL, an
    error code the original defines but never sends."""
    kind = msg.kind
    body: exon.Body
    if kind == A3MType.DATA:
        body = exon.DataBody(payload=msg.body)
    elif kind >= CONTROL_MIN:
        body = exon.ControlBody(kind=kind, payload=msg.body)
    elif kind in (A3MType.FLOW, A3MType.UNLINK):
        if len(msg.body) != 4:
            raise DecodeError(f"{A3MType(kind).name} body of {len(msg.body)} bytes (must be 4)")
        if kind == A3MType.FLOW:
            body = exon.FlowBody(credits=_I32.unpack(msg.body)[0])
        else:
            sent = _I32.unpack(msg.body)[0]
            if sent < 0:
                raise DecodeError(f"UNLINK with a negative count {sent}")
            body = exon.UnlinkBody(sent=sent)
    else:
        fields = decode_fields(msg.body, limits=limits)
        if kind == A3MType.LINK:
            body = exon.LinkBody(metadata=_metadata(fields, "LINK"))
        elif kind == A3MType.LINKREPLY:
            code = _int_field(fields, "replyCode", "LINKREPLY")
            try:
                decision = exon.LinkDecision(code)
            except ValueError:
                raise DecodeError(f"unknown reply code {code}") from None
            dest = _clock_in(_int_field(fields, "destClockId", "LINKREPLY"))
            meta = _metadata(fields, "LINKREPLY") if "protocolId" in fields else None
            body = exon.LinkAckBody(decision=decision, dest_clock=dest, metadata=meta)
        else:  # ERROR
            raw = fields.get("code")
            if not isinstance(raw, str) or not raw.isdigit() or len(raw) > 3:
                raise DecodeError(f"ERROR needs a decimal string code, not {raw!r}")
            code = int(raw)
            if code not in _ERRORS_IN:
                raise DecodeError(f"error code {code} is not one the original sends")
            dest = _clock_in(_int_field(fields, "destClockId", "ERROR"))
            body = exon.ErrorBody(code=_ERRORS_IN[A3MError(code)], dest_clock=dest)
    return exon.SocketMessage(src_tag=tags.tag(msg.src_tag), dst_tag=tags.tag(msg.dst_tag),
                         clock=_clock_in(msg.clock), body=body)


def _metadata(fields: Mapping[str, FieldValue], what: str) -> exon.LinkMetadata:
    protocol = _int_field(fields, "protocolId", what)
    if not 0 <= protocol <= 0xFFFF:
        raise DecodeError(f"{what} with protocol id {protocol}")
    return exon.LinkMetadata(socket_type=protocol, credits=_int_field(fields, "credits", what))


def _meta_fields(meta: exon.LinkMetadata) -> dict[str, FieldValue]:
    if meta.custom:
        raise ValueError("the original wire has no custom link metadata")
    return {"protocolId": meta.socket_type, "credits": meta.credits}


def from_link_message(
    msg: exon.SocketMessage, tags: TagBook, *, limits: A3MLimits = DEFAULT_LIMITS
) -> A3MMessage:
    """A gossamer link record as an A3M message (DATA and control bodies as given).
    Raises ``ValueError`` for what the original wire cannot say: custom metadata, the
    INVALID_FORMAT error (the original never sends errors about format), error text."""
    body = msg.body
    raw: bytes
    kind: int
    if isinstance(body, exon.DataBody):
        kind, raw = A3MType.DATA, body.payload
    elif isinstance(body, exon.ControlBody):
        kind, raw = body.kind, body.payload
    elif isinstance(body, exon.FlowBody):
        _check_i32("credits", body.credits)
        kind, raw = A3MType.FLOW, _I32.pack(body.credits)
    elif isinstance(body, exon.UnlinkBody):
        _check_i32("sent", body.sent)
        kind, raw = A3MType.UNLINK, _I32.pack(body.sent)
    elif isinstance(body, exon.LinkBody):
        kind, raw = A3MType.LINK, encode_fields(_meta_fields(body.metadata), limits=limits)
    elif isinstance(body, exon.LinkAckBody):
        fields = {} if body.metadata is None else _meta_fields(body.metadata)
        fields["destClockId"] = _clock_out(body.dest_clock)
        fields["replyCode"] = int(body.decision)
        kind, raw = A3MType.LINKREPLY, encode_fields(fields, limits=limits)
    else:
        code = _ERRORS_OUT.get(body.code)
        if code is None or body.text:
            raise ValueError(f"the original wire has no ERROR {body.code.name} with text")
        fields = {"code": str(int(code)), "destClockId": _clock_out(body.dest_clock)}
        kind, raw = A3MType.ERROR, encode_fields(fields, limits=limits)
    return A3MMessage(src_tag=tags.name(msg.src_tag), dst_tag=tags.name(msg.dst_tag),
                      kind=int(kind), clock=_clock_out(msg.clock), body=raw)
