"""Wire format of the 신경 (singyeong) websocket gateway: packets in three encodings.

Every websocket message, in both directions, is one packet (singyeong-as-coded §3)::

    {"op": int, "d": any, "t": string | null, "ts": int | null}

``op`` is the opcode (:class:`Op`), ``d`` the payload, ``t`` the event name (dispatch
only, else null) and ``ts`` the sender's clock in milliseconds since the epoch. The
server always sends all four keys; clients may omit ``t``, ``ts`` (and ``d``, which then
reads as null), and unknown keys are ignored, as the reference server does.

Encodings (singyeong-as-coded §2): the ``encoding`` query parameter selects one per
connection. ``json`` travels in websocket **text** frames (``str`` here); ``msgpack``
and ``etf`` (Erlang External Term Format) in **binary** frames (``bytes``). A frame of
the wrong kind is rejected with the server's own text,
``decode: payload: invalid websocket opcode/encoding combo: {binary, json}``.

Values: ``d`` is decoded to, and must be encoded from, the JSON value domain: ``None``,
``bool``, ``int`` (64-bit: signed or unsigned), finite ``float``, ``str``, ``list``
and ``dict`` with ``str`` keys. Whatever arrives in msgpack or ETF is mapped into that
domain (binaries and atoms become strings, as Elixir's Jason would print them), and
anything without a JSON form (msgpack ext types, ETF tuples, non-UTF-8 binaries,
non-string map keys, NaN) is a ``DecodeError``. So any packet decoded from one encoding
can be re-encoded in any other, which is what routing between clients needs. On encode,
``bytes`` and :class:`~gossamer.wire.etf.Atom` values are accepted and written as strings.

ETF keys (checked against the Elixir sources, see ``docs/wire.md``): the server builds
packets from an Elixir struct, so the four envelope keys go out as **atoms**; the Elixir
client reads them as atoms (``payload[:op]``) and reads keys inside ``d`` as
**binaries** (``frame.d["heartbeat_interval"]``); it sends binary keys itself, and the
server converts atom keys to strings on input. gossamer therefore writes atom envelope
keys and binary keys everywhere else, and reads either form anywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal, TypeAlias

import msgpack
import orjson

from gossamer.errors import ConfigError, DecodeError
from gossamer.wire import etf

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ELEMENTS",
    "DEFAULT_MAX_SIZE",
    "ENCODINGS",
    "Encoding",
    "Op",
    "Packet",
    "decode_packet",
    "encode_packet",
    "is_text_encoding",
]

Encoding: TypeAlias = Literal["json", "msgpack", "etf"]
ENCODINGS: tuple[Encoding, ...] = ("json", "msgpack", "etf")

#: The reference server has no frame size limit (§12); gossamer bounds every frame.
DEFAULT_MAX_SIZE = 1 << 20
#: Nesting bound for ``d`` (the envelope itself adds one level).
DEFAULT_MAX_DEPTH = 128
#: Values in one msgpack or ETF frame (containers, their elements and scalars). An empty
#: array or map is one byte of input and 60 to 200 bytes of Python objects, so the frame size
#: alone would let a 1 MiB frame cost 150 MiB; this bounds it to about 13 MiB (docs/wire.md).
DEFAULT_MAX_ELEMENTS = etf.DEFAULT_MAX_ELEMENTS

_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
_UNRECOVERABLE = "decode: payload: unrecoverable"
_BAD_OP = "invalid client op nil"
_ENVELOPE_ATOMS = {name: etf.Atom(name) for name in ("op", "d", "t", "ts")}


class Op(IntEnum):
    """Gateway opcodes (singyeong.md "opcodes"; §3)."""

    HELLO = 0
    IDENTIFY = 1
    READY = 2
    INVALID = 3
    DISPATCH = 4
    HEARTBEAT = 5
    HEARTBEAT_ACK = 6
    GOODBYE = 7
    ERROR = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Packet:
    """One gateway packet. ``d`` holds a JSON-domain value (see the module docstring)."""

    op: Op
    d: Any = None
    #: Event name of a dispatch (``SEND``, ``QUEUE``, ...); ``None`` otherwise.
    t: str | None = None
    #: Milliseconds since the epoch; the server always sets it, clients usually omit it.
    ts: int | None = None


def is_text_encoding(encoding: Encoding) -> bool:
    """True when packets of ``encoding`` travel in text frames (only JSON)."""
    return encoding == "json"


def _check_limits(max_depth: int) -> None:
    # The value walk and the ETF codec recurse once per level: the cap keeps them far
    # from Python's recursion limit.
    if not 1 <= max_depth <= etf.MAX_DEPTH_LIMIT:
        raise ConfigError(f"max_depth must be 1..{etf.MAX_DEPTH_LIMIT}", max_depth=max_depth)


def _check_encoding(encoding: str) -> None:
    if encoding not in ENCODINGS:
        # The reference server refuses the websocket upgrade (HTTP 403) for these (§2);
        # reaching the codec with one is the local caller's mistake.
        raise ConfigError(f"unknown gateway encoding {encoding!r}", encoding=encoding)


# ---------------------------------------------------------------------------- values


class _InvalidValueError(Exception):
    """A value outside the JSON domain; callers turn it into ValueError or DecodeError."""


def _text(value: bytes | etf.Atom, what: str) -> str:
    """A binary as its UTF-8 text and an atom as its name (what Jason prints for them)."""
    if isinstance(value, etf.Atom):
        return value.name
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise _InvalidValueError(f"{what} is not UTF-8 text") from None


def _key(key: object) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | etf.Atom):
        return _text(key, "map key")
    raise _InvalidValueError(f"map key of type {type(key).__name__} is not a string")


def _normalize(value: object, depth: int, max_depth: int) -> Any:
    """Return ``value`` mapped into the JSON domain, or raise ``_InvalidValueError``.

    Binaries become strings and atoms their names (what Jason prints for them); ``nil``,
    ``true`` and ``false`` were already mapped to None/True/False by the ETF decoder.
    """
    if depth > max_depth:
        raise _InvalidValueError(f"nested deeper than {max_depth}")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise _InvalidValueError("integer outside the 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _InvalidValueError("NaN or infinite float")
        return value
    if isinstance(value, bytes | etf.Atom):
        return _text(value, "binary")
    if isinstance(value, list):
        return [_normalize(item, depth + 1, max_depth) for item in value]
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for raw_key, item in value.items():
            key = _key(raw_key)
            if key in result:
                # e.g. the atom :a and the binary "a": Elixir's stringify would keep one
                # silently; an ambiguous packet is refused instead.
                raise _InvalidValueError(f"duplicate map key {key!r}")
            result[key] = _normalize(item, depth + 1, max_depth)
        return result
    raise _InvalidValueError(f"a {type(value).__name__} has no JSON form")


def _may_nest_deeper(text: str, max_depth: int) -> bool:
    # Nesting to depth k needs at least k opening brackets; counting is much cheaper
    # than walking what orjson already validated.
    return text.count("[") + text.count("{") > max_depth


# ---------------------------------------------------------------------------- encoding


def encode_packet(
    packet: Packet, encoding: Encoding, *, max_depth: int = DEFAULT_MAX_DEPTH
) -> str | bytes:
    """Encode ``packet``: a ``str`` (text frame) for JSON, ``bytes`` (binary frame) else.

    All four keys are written, in the order ``op, d, t, ts``, as the reference server
    does. Raises ``ValueError`` when ``d`` is outside the JSON domain or ``ts`` is not an
    int, and ``ConfigError`` for an unknown encoding.
    """
    _check_encoding(encoding)
    _check_limits(max_depth)
    try:
        d = _normalize(packet.d, 1, max_depth)
    except _InvalidValueError as exc:
        raise ValueError(f"d cannot be encoded: {exc}") from None
    if packet.t is not None and not isinstance(packet.t, str):
        raise ValueError("t must be a string or None")
    if packet.ts is not None and not _is_int64(packet.ts):
        raise ValueError("ts must be a 64-bit int or None")
    op = int(Op(packet.op))
    if encoding == "json":
        return orjson.dumps({"op": op, "d": d, "t": packet.t, "ts": packet.ts}).decode()
    if encoding == "msgpack":
        packed: bytes = msgpack.packb(
            {"op": op, "d": d, "t": packet.t, "ts": packet.ts}, use_bin_type=True
        )
        return packed
    atoms = _ENVELOPE_ATOMS
    term = {atoms["op"]: op, atoms["d"]: d, atoms["t"]: packet.t, atoms["ts"]: packet.ts}
    return etf.encode(term, max_depth=max_depth)


# ---------------------------------------------------------------------------- decoding


def _frame_kind(data: object) -> str:
    return "text" if isinstance(data, str) else "binary"


def _jason_style(text: str, exc: orjson.JSONDecodeError) -> str:
    # The reference server answers invalid JSON with Jason's message (§7), e.g.
    # 'unexpected byte at position 1: 0x6E ("n")'. Positions come from orjson and may
    # differ from Jason's by a byte or so.
    pos = exc.pos
    if pos >= len(text.rstrip()):
        return f"unexpected end of input at position {pos}"
    char = text[pos]
    byte = char.encode("utf-8", "surrogatepass")[0]
    return f'unexpected byte at position {pos}: 0x{byte:02X} ("{char}")'


def _load_json(data: str, max_depth: int) -> Any:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg:
            # orjson stops at 1024 levels; that is a bound, not a syntax error.
            raise DecodeError(_UNRECOVERABLE, detail=f"nested deeper than {max_depth}") from None
        raise DecodeError(_jason_style(data, exc), offset=exc.pos, detail=exc.msg) from None
    if _may_nest_deeper(data, max_depth):
        try:
            _normalize(value, 0, max_depth)
        except _InvalidValueError as exc:
            raise DecodeError(_UNRECOVERABLE, detail=str(exc)) from None
    return value


class _TooManyElementsError(Exception):
    pass


def _too_many(max_elements: int) -> DecodeError:
    return DecodeError(
        _UNRECOVERABLE,
        detail=f"more than max_elements={max_elements} values",
        max_elements=max_elements,
    )


def _load_msgpack(data: bytes, max_elements: int) -> Any:
    # Two bounds together cap what a frame can allocate. max_array_len and max_map_len are
    # checked by msgpack against each declared length before it allocates the container;
    # the hooks run as each container completes (innermost first) and count its elements,
    # so the decode stops once more than max_elements values were built in total.
    # (msgpack's defaults bound each length only by the input size.)
    # Every value is counted once, as an element of its container (the top one up front).
    left = max_elements - 1

    def count_list(items: list[Any]) -> list[Any]:
        nonlocal left
        left -= len(items)
        if left < 0:
            raise _TooManyElementsError
        return items

    def count_map(pairs: dict[Any, Any]) -> dict[Any, Any]:
        nonlocal left
        left -= 2 * len(pairs)
        if left < 0:
            raise _TooManyElementsError
        return pairs

    try:
        # The C unpacker's stack is bounded by 1024 levels.
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
            use_list=True,
            max_array_len=max_elements,
            max_map_len=max_elements // 2,
            list_hook=count_list,
            object_hook=count_map,
        )
    except _TooManyElementsError:
        raise _too_many(max_elements) from None
    except ValueError as exc:
        if "exceeds max_" in str(exc):
            raise _too_many(max_elements) from None
        raise DecodeError(_UNRECOVERABLE, detail=f"msgpack: {type(exc).__name__}: {exc}") from None
    except (TypeError, msgpack.ExtraData, msgpack.FormatError) as exc:
        raise DecodeError(_UNRECOVERABLE, detail=f"msgpack: {type(exc).__name__}: {exc}") from None


def _load_etf(data: bytes, max_size: int, max_depth: int, max_elements: int) -> Any:
    try:
        return etf.decode(data, max_size=max_size, max_depth=max_depth, max_elements=max_elements)
    except DecodeError as exc:
        fields = {"max_elements": max_elements} if "max_elements" in exc.fields else {}
        raise DecodeError(
            _UNRECOVERABLE, offset=exc.offset, detail=f"etf: {exc.reason}", **fields
        ) from None


def decode_packet(
    data: str | bytes,
    encoding: Encoding,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Packet:
    """Decode one websocket message received on a connection using ``encoding``.

    ``data`` is a ``str`` for a text frame and ``bytes`` for a binary frame. Raises only
    ``DecodeError`` on bad input (``ConfigError`` for an unknown ``encoding`` or a
    ``max_depth`` outside 1..200), with the
    reason text the reference server sends in its op 8 where it has one (§7):
    ``invalid websocket opcode/encoding combo``, Jason-style JSON errors,
    ``decode: payload: unrecoverable`` and ``invalid client op nil``.

    A msgpack or ETF frame may hold at most ``max_elements`` values, nested ones included
    (more is ``decode: payload: unrecoverable`` with a ``max_elements`` field), so decoding
    a frame allocates a bounded amount whatever tiny values it is made of. JSON frames are
    bounded by ``max_size`` and orjson's own depth limit.
    """
    _check_encoding(encoding)
    _check_limits(max_depth)
    if max_elements < 2:
        raise ConfigError("max_elements must be at least 2", max_elements=max_elements)
    if is_text_encoding(encoding) != isinstance(data, str):
        raise DecodeError(
            "decode: payload: invalid websocket opcode/encoding combo: "
            f"{{{_frame_kind(data)}, {encoding}}}"
        )
    if isinstance(data, str):
        # Bytes on the wire: a character is 1 to 4 UTF-8 bytes.
        if len(data) > max_size or (
            len(data) * 4 > max_size and len(data.encode("utf-8", "surrogatepass")) > max_size
        ):
            raise DecodeError(f"frame exceeds {max_size} bytes")
        raw = _load_json(data, max_depth)
    else:
        if len(data) > max_size:
            raise DecodeError(f"frame of {len(data)} bytes exceeds {max_size}")
        if encoding == "msgpack":
            raw = _load_msgpack(data, max_elements)
        else:
            raw = _load_etf(data, max_size, max_depth, max_elements)
    return _packet_from(raw, max_depth, normalize=encoding != "json")


def _is_int64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and _INT_MIN <= value <= _INT_MAX


def _packet_from(raw: Any, max_depth: int, *, normalize: bool) -> Packet:
    """Build a Packet from a decoded envelope; ``normalize`` maps msgpack/ETF values
    (binaries, atoms) into the JSON domain, which JSON values already are."""
    if not isinstance(raw, dict):
        raise DecodeError(_UNRECOVERABLE, detail="a packet must be a map")
    try:
        if normalize:
            # Atom and binary keys both name a field, as in the server's stringify_keys.
            fields = {_key(key): value for key, value in raw.items()}
            if len(fields) != len(raw):
                raise _InvalidValueError("duplicate envelope key")
            d = _normalize(fields.get("d"), 1, max_depth)
            t = fields.get("t")
            t = t if t is None or isinstance(t, list | dict) else _normalize(t, 1, 1)
        else:
            fields = raw
            d = fields.get("d")
            t = fields.get("t")
    except _InvalidValueError as exc:
        raise DecodeError(_UNRECOVERABLE, detail=str(exc)) from None
    op = fields.get("op")
    # A missing, non-integer or unknown op finds nothing in the server's opcode table,
    # so it answers "invalid client op nil" (§3). Booleans are not opcodes.
    if isinstance(op, int) and not isinstance(op, bool) and op in Op._value2member_map_:
        opcode = Op(op)
    else:
        shown = op if op is None or _is_int64(op) else type(op).__name__
        raise DecodeError(_BAD_OP, op=shown)
    if t is not None and not isinstance(t, str):
        raise DecodeError(_UNRECOVERABLE, detail="t must be a string or null")
    ts = fields.get("ts")
    if ts is not None and not _is_int64(ts):
        raise DecodeError(_UNRECOVERABLE, detail="ts must be a 64-bit integer or null")
    return Packet(op=opcode, d=d, t=t, ts=ts)
