"""A bounded codec for the subset of the Erlang External Term Format that JSON-like
data needs (used by the 신경 gateway's ``encoding=etf``).

Supported tags (Erlang "External Term Format" chapter of the ERTS user's guide):

=====  =====================  =====================================================
tag    name                   Python value
=====  =====================  =====================================================
97     SMALL_INTEGER_EXT      ``int``
98     INTEGER_EXT            ``int`` (signed 32-bit)
110    SMALL_BIG_EXT          ``int`` (at most ``max_big_bytes`` magnitude bytes)
111    LARGE_BIG_EXT          ``int`` (same bound)
70     NEW_FLOAT_EXT          ``float`` (IEEE 754 double; NaN and infinities rejected,
                              as ``binary_to_term`` does)
99     FLOAT_EXT              ``float`` (old 31-byte text form; decode only)
118    ATOM_UTF8_EXT          :class:`Atom`, or ``None``/``True``/``False`` for the atoms
119    SMALL_ATOM_UTF8_EXT    ``nil``/``true``/``false`` (Elixir's conventions)
100    ATOM_EXT               same (Latin-1, deprecated; decode only)
115    SMALL_ATOM_EXT         same (Latin-1, deprecated; decode only)
109    BINARY_EXT             ``bytes``
107    STRING_EXT             ``list[int]`` (it *is* a list of bytes in Erlang)
106    NIL_EXT                ``[]``
108    LIST_EXT               ``list`` (proper lists only)
104    SMALL_TUPLE_EXT        ``tuple``
105    LARGE_TUPLE_EXT        ``tuple``
116    MAP_EXT                ``dict`` (keys must be hashable in Python; duplicates rejected)
80     compressed term        zlib, decompressed only up to its declared size, which must
                              itself be within ``max_size``
=====  =====================  =====================================================

Every other tag (pids, ports, references, funs, bit binaries, ...) is a
``DecodeError``. Counts are checked against the bytes left before anything is
allocated, and nesting is bounded by ``max_depth``, so a hostile term cannot make the
decoder allocate more than a small multiple of its input or overflow the stack. That
multiple is large for tiny terms (an empty list is one byte of input and about 64 bytes of
Python objects), so the number of terms is bounded too: at most ``max_elements`` terms
(every integer, atom, binary, list, tuple, map, and each element of a STRING_EXT counts
one), checked before each container is allocated. See ``docs/wire.md`` for the figures.

Encoding maps ``None``/``True``/``False`` to the atoms ``nil``/``true``/``false``,
:class:`Atom` to an atom, ``str`` and ``bytes`` to binaries, ``int`` to the smallest
integer form, ``float`` to NEW_FLOAT_EXT, ``list`` to a list, ``tuple`` to a tuple and
``dict`` to a map: what Elixir's ``:erlang.term_to_binary`` produces for the same data.
Atoms are written as SMALL_ATOM_UTF8_EXT / ATOM_UTF8_EXT, the form OTP 26 and later
emit (and every OTP since R16 reads).
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass
from typing import TypeAlias

from gossamer.errors import ConfigError, DecodeError
from gossamer.wire.buffer import Buffer

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ELEMENTS",
    "DEFAULT_MAX_SIZE",
    "VERSION",
    "Atom",
    "Term",
    "decode",
    "encode",
    "pull_term",
    "push_term",
]

#: The version byte that starts every external term.
VERSION = 131
DEFAULT_MAX_SIZE = 1 << 20
DEFAULT_MAX_DEPTH = 64
#: Magnitude bytes of a big integer: 64 bytes is a 512-bit number, far beyond JSON's needs.
DEFAULT_MAX_BIG_BYTES = 64
#: Terms decoded from one input (containers and scalars alike). A term costs up to about
#: 200 bytes of Python objects (an empty map), so this bounds a decode to about 13 MiB
#: whatever the input size, while JSON-like messages of a megabyte rarely hold a tenth of it.
DEFAULT_MAX_ELEMENTS = 1 << 16
#: ``max_depth`` is capped so that the recursive decoder stays far from Python's stack limit.
MAX_DEPTH_LIMIT = 200
#: Erlang's own limit on atom length, in characters.
MAX_ATOM_CHARS = 255

NEW_FLOAT_EXT = 70
COMPRESSED = 80
SMALL_INTEGER_EXT = 97
INTEGER_EXT = 98
FLOAT_EXT = 99
ATOM_EXT = 100
SMALL_TUPLE_EXT = 104
LARGE_TUPLE_EXT = 105
NIL_EXT = 106
STRING_EXT = 107
LIST_EXT = 108
BINARY_EXT = 109
SMALL_BIG_EXT = 110
LARGE_BIG_EXT = 111
SMALL_ATOM_EXT = 115
MAP_EXT = 116
ATOM_UTF8_EXT = 118
SMALL_ATOM_UTF8_EXT = 119

_F64 = struct.Struct(">d")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Atom:
    """An Erlang atom other than ``nil``, ``true`` and ``false`` (which map to Python's
    ``None``, ``True`` and ``False``)."""

    name: str

    def __post_init__(self) -> None:
        if len(self.name) > MAX_ATOM_CHARS:
            raise ValueError(f"atoms are at most {MAX_ATOM_CHARS} characters")


Term: TypeAlias = (
    "bool | int | float | Atom | bytes | str"
    " | list[Term] | tuple[Term, ...] | dict[Term, Term] | None"
)

_SPECIAL_ATOMS: dict[str, bool | None] = {"nil": None, "true": True, "false": False}


# ---------------------------------------------------------------------------- encoding


def _push_atom(buf: bytearray, name: str) -> None:
    raw = name.encode()
    if len(raw) <= 255:
        buf.append(SMALL_ATOM_UTF8_EXT)
        buf.append(len(raw))
    else:
        buf.append(ATOM_UTF8_EXT)
        buf += len(raw).to_bytes(2, "big")
    buf += raw


def _push_int(buf: bytearray, value: int) -> None:
    if 0 <= value <= 255:
        buf.append(SMALL_INTEGER_EXT)
        buf.append(value)
    elif -(1 << 31) <= value < (1 << 31):
        buf.append(INTEGER_EXT)
        buf += _I32.pack(value)
    else:
        magnitude = abs(value)
        raw = magnitude.to_bytes((magnitude.bit_length() + 7) // 8, "little")
        if len(raw) <= 255:
            buf.append(SMALL_BIG_EXT)
            buf.append(len(raw))
        else:
            buf.append(LARGE_BIG_EXT)
            buf += len(raw).to_bytes(4, "big")
        buf.append(1 if value < 0 else 0)
        buf += raw


def _push(buf: bytearray, value: object, depth: int, max_depth: int) -> None:
    if depth > max_depth:
        raise ValueError(f"term nested deeper than {max_depth}")
    if value is None:
        _push_atom(buf, "nil")
    elif value is True:
        _push_atom(buf, "true")
    elif value is False:
        _push_atom(buf, "false")
    elif isinstance(value, int):
        _push_int(buf, value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("Erlang has no NaN or infinite floats")
        buf.append(NEW_FLOAT_EXT)
        buf += _F64.pack(value)
    elif isinstance(value, Atom):
        _push_atom(buf, value.name)
    elif isinstance(value, str | bytes | bytearray):
        raw = value.encode() if isinstance(value, str) else bytes(value)
        buf.append(BINARY_EXT)
        buf += len(raw).to_bytes(4, "big")
        buf += raw
    elif isinstance(value, list):
        if not value:
            buf.append(NIL_EXT)
            return
        buf.append(LIST_EXT)
        buf += len(value).to_bytes(4, "big")
        for item in value:
            _push(buf, item, depth + 1, max_depth)
        buf.append(NIL_EXT)
    elif isinstance(value, tuple):
        if len(value) <= 255:
            buf.append(SMALL_TUPLE_EXT)
            buf.append(len(value))
        else:
            buf.append(LARGE_TUPLE_EXT)
            buf += len(value).to_bytes(4, "big")
        for item in value:
            _push(buf, item, depth + 1, max_depth)
    elif isinstance(value, dict):
        buf.append(MAP_EXT)
        buf += len(value).to_bytes(4, "big")
        for key, item in value.items():
            _push(buf, key, depth + 1, max_depth)
            _push(buf, item, depth + 1, max_depth)
    else:
        raise ValueError(f"cannot encode a {type(value).__name__} as an Erlang term")


def push_term(buf: bytearray, value: object, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Append ``value`` as an external term (version byte included) to ``buf``.

    Raises ``ValueError`` for a value with no Erlang equivalent or nested deeper than
    ``max_depth`` (``buf`` is left unchanged then), ``ConfigError`` for a ``max_depth``
    above :data:`MAX_DEPTH_LIMIT`.
    """
    if not 0 <= max_depth <= MAX_DEPTH_LIMIT:
        raise ConfigError(f"max_depth must be 0..{MAX_DEPTH_LIMIT}", max_depth=max_depth)
    start = len(buf)
    try:
        buf.append(VERSION)
        _push(buf, value, 0, max_depth)
    except ValueError:
        del buf[start:]
        raise


def encode(value: object, *, max_depth: int = DEFAULT_MAX_DEPTH) -> bytes:
    buf = bytearray()
    push_term(buf, value, max_depth=max_depth)
    return bytes(buf)


# ---------------------------------------------------------------------------- decoding


class _Decoder:
    __slots__ = ("buf", "left", "max_big_bytes", "max_depth", "max_elements")

    def __init__(self, buf: Buffer, max_depth: int, max_big_bytes: int, max_elements: int) -> None:
        self.buf = buf
        self.max_depth = max_depth
        self.max_big_bytes = max_big_bytes
        self.max_elements = max_elements
        self.left = max_elements  # terms that may still be decoded

    def too_many(self, at: int) -> DecodeError:
        return DecodeError(
            f"more than max_elements={self.max_elements} terms",
            offset=at,
            max_elements=self.max_elements,
        )

    def count(self, n: int, unit: int, what: str, at: int) -> int:
        # Every element takes at least ``unit`` bytes: a count that cannot fit in the
        # bytes left is malformed, and checking it first bounds every allocation. Each
        # element is also a term, so more than the terms left is over max_elements.
        if n * unit > self.buf.remaining:
            raise DecodeError(f"{what} of {n} cannot fit in {self.buf.remaining} bytes", offset=at)
        if n * unit > self.left:
            raise self.too_many(at)
        return n

    def atom(self, raw: bytes, encoding: str, at: int) -> bool | Atom | None:
        try:
            name = raw.decode(encoding)
        except UnicodeDecodeError:
            raise DecodeError("atom is not valid UTF-8", offset=at) from None
        if len(name) > MAX_ATOM_CHARS:
            raise DecodeError(f"atom longer than {MAX_ATOM_CHARS} characters", offset=at)
        if name in _SPECIAL_ATOMS:
            return _SPECIAL_ATOMS[name]
        return Atom(name)

    def term(self, depth: int) -> Term:
        buf = self.buf
        at = buf.position
        if depth > self.max_depth:
            raise DecodeError(f"term nested deeper than {self.max_depth}", offset=at)
        self.left -= 1
        if self.left < 0:
            raise self.too_many(at)
        tag = buf.pull_uint8("tag")
        if tag == SMALL_INTEGER_EXT:
            return buf.pull_uint8("small integer")
        if tag == INTEGER_EXT:
            return int(_I32.unpack(buf.pull_bytes(4, "integer"))[0])
        if tag in (SMALL_BIG_EXT, LARGE_BIG_EXT):
            n = (
                buf.pull_uint8("big length")
                if tag == SMALL_BIG_EXT
                else buf.pull_uint32("big length")
            )
            if n > self.max_big_bytes:
                raise DecodeError(
                    f"big integer of {n} bytes exceeds {self.max_big_bytes}", offset=at
                )
            sign = buf.pull_uint8("big sign")
            if sign > 1:
                raise DecodeError(f"big integer sign byte must be 0 or 1, not {sign}", offset=at)
            magnitude = int.from_bytes(buf.pull_bytes(n, "big digits"), "little")
            return -magnitude if sign else magnitude
        if tag == NEW_FLOAT_EXT:
            value = float(_F64.unpack(buf.pull_bytes(8, "float"))[0])
            if not math.isfinite(value):
                raise DecodeError("NaN or infinite float", offset=at)
            return value
        if tag == FLOAT_EXT:
            text = buf.pull_bytes(31, "float text").split(b"\0", 1)[0]
            try:
                value = float(text.decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                raise DecodeError("malformed FLOAT_EXT text", offset=at) from None
            if not math.isfinite(value):
                raise DecodeError("NaN or infinite float", offset=at)
            return value
        if tag in (SMALL_ATOM_UTF8_EXT, SMALL_ATOM_EXT):
            raw = buf.pull_bytes(buf.pull_uint8("atom length"), "atom")
            return self.atom(raw, "utf-8" if tag == SMALL_ATOM_UTF8_EXT else "latin-1", at)
        if tag in (ATOM_UTF8_EXT, ATOM_EXT):
            raw = buf.pull_bytes(buf.pull_uint16("atom length"), "atom")
            return self.atom(raw, "utf-8" if tag == ATOM_UTF8_EXT else "latin-1", at)
        if tag == BINARY_EXT:
            return buf.pull_bytes(buf.pull_uint32("binary length"), "binary")
        if tag == STRING_EXT:
            n = self.count(buf.pull_uint16("string length"), 1, "string", at)
            self.left -= n
            return list(buf.pull_bytes(n, "string"))
        if tag == NIL_EXT:
            return []
        if tag == LIST_EXT:
            n = self.count(buf.pull_uint32("list length"), 1, "list", at)
            items = [self.term(depth + 1) for _ in range(n)]
            tail_at = buf.position
            if buf.pull_uint8("list tail") != NIL_EXT:
                raise DecodeError("improper list (tail is not [])", offset=tail_at)
            return items
        if tag in (SMALL_TUPLE_EXT, LARGE_TUPLE_EXT):
            raw_n = buf.pull_uint8("arity") if tag == SMALL_TUPLE_EXT else buf.pull_uint32("arity")
            n = self.count(raw_n, 1, "tuple", at)
            return tuple(self.term(depth + 1) for _ in range(n))
        if tag == MAP_EXT:
            n = self.count(buf.pull_uint32("map arity"), 2, "map", at)
            result: dict[Term, Term] = {}
            for _ in range(n):
                key_at = buf.position
                key = self.term(depth + 1)
                item = self.term(depth + 1)
                try:
                    if key in result:
                        raise DecodeError("duplicate map key", offset=key_at)
                    result[key] = item
                except TypeError:
                    raise DecodeError(
                        "map key is a list or map, which has no Python dict equivalent",
                        offset=key_at,
                    ) from None
            return result
        raise DecodeError(f"unsupported external term tag {tag}", offset=at)


def pull_term(
    buf: Buffer,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_big_bytes: int = DEFAULT_MAX_BIG_BYTES,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Term:
    """Read one external term (version byte first) from ``buf``. Raises only ``DecodeError``.

    A compressed term is inflated only when its declared size is at most ``max_size``,
    and never beyond that size, so a zlib bomb costs at most ``max_size`` bytes. At most
    ``max_elements`` terms are decoded (nested ones included); more is a ``DecodeError``
    whose ``max_elements`` field names the limit.
    """
    if not 0 <= max_depth <= MAX_DEPTH_LIMIT:
        raise ConfigError(f"max_depth must be 0..{MAX_DEPTH_LIMIT}", max_depth=max_depth)
    if max_elements < 1:
        raise ConfigError("max_elements must be at least 1", max_elements=max_elements)
    start = buf.position
    version = buf.pull_uint8("version")
    if version != VERSION:
        raise DecodeError(
            f"not an external term (version byte {version}, expected 131)", offset=start
        )
    tag_at = buf.position
    if buf.pull_uint8("tag") != COMPRESSED:
        buf.position = tag_at
        return _Decoder(buf, max_depth, max_big_bytes, max_elements).term(0)
    size = buf.pull_uint32("uncompressed size")
    if size > max_size:
        raise DecodeError(
            f"compressed term inflates to {size} bytes, over {max_size}", offset=tag_at
        )
    inflater = zlib.decompressobj()
    try:
        # ``max_length`` caps the output: a zlib bomb yields at most ``size`` bytes.
        inner = inflater.decompress(buf.pull_rest(), size)
    except zlib.error as exc:
        raise DecodeError(f"bad zlib stream: {exc}", offset=tag_at + 5) from None
    if len(inner) != size or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise DecodeError(
            "compressed term does not inflate to exactly its declared size", offset=tag_at + 5
        )
    inner_buf = Buffer(inner)
    try:
        term = _Decoder(inner_buf, max_depth, max_big_bytes, max_elements).term(0)
        inner_buf.expect_end("compressed term")
    except DecodeError as exc:
        # Offsets inside the inflated bytes mean nothing in the input; say where they are.
        raise DecodeError(f"in compressed term: {exc.reason}", offset=tag_at + 5) from None
    return term


def decode(
    data: bytes,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_big_bytes: int = DEFAULT_MAX_BIG_BYTES,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Term:
    """Decode exactly one external term; trailing bytes are malformed. The limits are those
    of :func:`pull_term`."""
    if len(data) > max_size:
        raise DecodeError(f"term of {len(data)} bytes exceeds {max_size}")
    buf = Buffer(data)
    term = pull_term(
        buf,
        max_size=max_size,
        max_depth=max_depth,
        max_big_bytes=max_big_bytes,
        max_elements=max_elements,
    )
    buf.expect_end("external term")
    return term
