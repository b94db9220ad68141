"""Chatter's wire format (the original wire, ``--wire original``), byte for byte, bounded, and fast.

The format as the real code (Chatter 0.0.13-0.0.15) writes it, chatter-as-coded.md §1::

    message = 0xFF | VarInt(len(C)) | C
    C       = AES-256-CTR(key, IV = "-- ScaleSmall --", P)
    P       = padding[32] | XXH32_BE(G)[4] | VarInt(len(G)) | SnappyRaw(G)
    G       = NetIDTable | current BroadcastID | seen list | remote list | distribution list
              | VarInt(type tag) | user content (no length prefix, runs to the end)

Where the Chatter docs (specs/chatter.md) and the code disagree, this module follows the
code (§11): the checksum comes *before* the size, it is XXH32 (seed 0) of the
*uncompressed* gossip, the VarInt continues while ``v >= 128``, Snappy is the raw block
format, and the NetID table is the sorted unique set of every NetID in the gossip plus
the NetIDs that the payload refers to.

Deliberate differences from Chatter (none changes a byte that Chatter would send):

* No default key. A missing or empty key is a ``ConfigError``; Chatter silently falls
  back to a public string (§4, §12.6). ``derive_key`` applies Chatter's pad/chop rule to a
  configured key; ``encode_message``/``decode_message`` take the derived 32-byte key.
* Everything is bounded by ``Limits`` and checked before any allocation it would drive:
  message size, the Snappy preamble (refused *before* decompressing, §12.7), table size,
  list lengths, VarInt length (10 bytes), seqnos (64 bits) and type tags (32 bits).
* Malformed input raises ``DecodeError`` with a reason, never anything else.
* Stricter than Chatter on input Chatter itself never produces: the uncompressed-size
  field must match (Chatter ignores it, §5), and the NetID table must be sorted and
  unique (Chatter always writes it so, §6.1). Zero-length user content decodes (Chatter's
  handler layer raises on it, §6.4); deciding whether it is acceptable is the caller's job.

Security: this format has no integrity and a fixed IV (a many-time pad, §12). Use it
only to talk to Chatter; gossamer's own envelope is elsewhere.

Speed: key and IV are fixed, so every message is XORed with the same keystream from the
same counter. Each key keeps AES-CTR contexts that are rewound with ``reset_nonce`` rather
than created per message (creating one costs more than encrypting 4 KB with it), the
decoder never decrypts the padding it ignores, and the encoder never encrypts random
padding (a uniformly random ciphertext decrypts to uniformly random padding under a
fixed keystream). Also measured, and slower above ~100 bytes: XOR with a cached keystream
through ``int.from_bytes`` (~0.65 ns per byte per conversion). Tables, which recur in
every message of a sender, are memoised, and so are NetIDs and five-byte type tags (all
caches are bounded). See ``bench/chatter_codec.py``.
"""

from __future__ import annotations

import functools
import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import xxhash
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from gossamer.errors import ConfigError, DecodeError
from gossamer.wire import snappy
from gossamer.wire.buffer import Buffer
from gossamer.wire.varint import MAX_VARINT_BYTES, decode_uint, encode_uint

__all__ = [
    "DEFAULT_LIMITS",
    "IV",
    "KEY_SIZE",
    "PADDING_SIZE",
    "SOM",
    "BroadcastID",
    "Gossip",
    "Limits",
    "NetID",
    "decode_gossip",
    "decode_message",
    "derive_key",
    "encode_gossip",
    "encode_message",
    "keystream",
    "pull_gossip",
    "pull_message",
    "push_gossip",
    "push_message",
    "type_tag",
]

#: Start-of-message byte (§3).
SOM = 0xFF
#: The fixed AES-CTR initial counter block (§4).
IV = b"-- ScaleSmall --"
#: AES-256 key size; ``derive_key`` produces keys of exactly this length.
KEY_SIZE = 32
#: Random bytes at the start of the plaintext; the decoder ignores them (§5).
PADDING_SIZE = 32
#: Chatter's public filler for short keys (§4). Used only to *complete* a configured key,
#: never as a key by itself.
_KEY_FILL = b"01234567890123456789012345678901"
#: Smallest ciphertext: padding, checksum, a one-byte size and a one-byte Snappy block.
_MIN_CIPHERTEXT = PADDING_SIZE + 4 + 1 + 1
_U32_LIMIT = 1 << 32
_U64_LIMIT = 1 << 64
_NETID_SIZE = 6


# --------------------------------------------------------------------------- values


def _pack_ipv4(host: str) -> bytes:
    """The four octets of a canonical dotted IPv4 address; ``ValueError`` otherwise."""
    if not isinstance(host, str):
        raise TypeError(f"NetID host must be a str, not {type(host).__name__}")
    parts = host.split(".")
    if len(parts) != 4:
        raise ValueError(f"NetID host {host!r} is not a dotted IPv4 address")
    octets = bytearray()
    for part in parts:
        # Canonical form only (no leading zeros, no sign, ASCII digits), so that equal
        # addresses compare equal as NetIDs.
        if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
            raise ValueError(f"NetID host {host!r} is not a canonical dotted IPv4 address")
        value = int(part)
        if value > 255:
            raise ValueError(f"NetID host {host!r} is not an IPv4 address (octet above 255)")
        octets.append(value)
    return bytes(octets)


def _check_uint(name: str, value: object, limit: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 0 <= value < limit:
        raise ValueError(f"{name} must be in [0, {limit}), got {value}")
    return value


@dataclass(frozen=True, slots=True)
class NetID:
    """An IPv4 transport address as Chatter names a node: dotted ``host`` and ``port``.

    On the wire it is 6 bytes, the four octets then the big-endian port (§6.1);
    ``packed`` holds them. Raises ``ValueError``/``TypeError`` for a host that is not a
    canonical dotted IPv4 address or a port outside 0-65535 (IPv6 is not in the format).
    """

    host: str
    port: int
    packed: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        octets = _pack_ipv4(self.host)
        port = _check_uint("NetID port", self.port, 1 << 16)
        object.__setattr__(self, "packed", octets + port.to_bytes(2, "big"))

    @classmethod
    def parse(cls, text: str) -> NetID:
        """``NetID.parse("10.0.0.1:29999")``: the ``host:port`` form used in the vectors."""
        host, sep, port = text.rpartition(":")
        if not sep or not (port.isascii() and port.isdigit()):
            raise ValueError(f"{text!r} is not host:port")
        return cls(host, int(port))

    @classmethod
    def unpack(cls, packed: bytes) -> NetID:
        """The NetID of a 6-byte wire entry. Raises ``DecodeError`` on a wrong length."""
        if len(packed) != _NETID_SIZE:
            raise DecodeError(f"a NetID entry is 6 bytes, got {len(packed)}")
        return _netid_from_packed(bytes(packed))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


# Decoded NetIDs are immutable values that recur in every message of a group, so the
# decoder shares them. Bounded: cleared when full, so hostile input cannot grow it.
_NETID_CACHE: dict[bytes, NetID] = {}
_NETID_CACHE_MAX = 4096


def _netid_from_packed(packed: bytes) -> NetID:
    """Build a NetID from 6 trusted bytes without re-validating (every value is valid)."""
    nid = _NETID_CACHE.get(packed)
    if nid is None:
        nid = object.__new__(NetID)
        object.__setattr__(nid, "host", "%d.%d.%d.%d" % tuple(packed[:4]))  # noqa: UP031
        object.__setattr__(nid, "port", (packed[4] << 8) | packed[5])
        object.__setattr__(nid, "packed", packed)
        if len(_NETID_CACHE) >= _NETID_CACHE_MAX:
            _NETID_CACHE.clear()
        _NETID_CACHE[packed] = nid
    return nid


@dataclass(frozen=True, slots=True)
class BroadcastID:
    """A broadcast's origin and its sequence number (§6.2); seqno is 0 to 2**64-1.

    Chatter's seqno is an unbounded VarInt; gossamer bounds it to 64 bits.
    """

    origin: NetID
    seqno: int

    def __post_init__(self) -> None:
        if not isinstance(self.origin, NetID):
            raise TypeError(f"BroadcastID origin must be a NetID, not {type(self.origin).__name__}")
        _check_uint("BroadcastID seqno", self.seqno, _U64_LIMIT)


# Decoded values are built without re-running validation the decoder already did.
# Writing through the slot descriptors skips the frozen ``__setattr__`` (and is about a
# quarter cheaper than ``object.__setattr__``); nothing else may use these.
_new_object = object.__new__
_set_bid_origin: Callable[[BroadcastID, NetID], None] = vars(BroadcastID)["origin"].__set__
_set_bid_seqno: Callable[[BroadcastID, int], None] = vars(BroadcastID)["seqno"].__set__


def _sorted_table(netids: dict[bytes, NetID]) -> tuple[NetID, ...]:
    # Chatter: Enum.uniq |> Enum.sort in Erlang term order of {:net_id, {a,b,c,d}, port},
    # which is the bytewise order of the 6-byte entries (§6.1).
    return tuple(netids[key] for key in sorted(netids))


@dataclass(frozen=True, slots=True, kw_only=True)
class Gossip:
    """One Chatter gossip G: the broadcast metadata plus a typed, opaque user payload.

    * ``current``: who sends this message, and its seqno.
    * ``seen``: BroadcastIDs the sender has heard on UDP multicast.
    * ``others``: "remote NetIDs", a few peers from other multicast groups.
    * ``distribution``: who this message must still reach (order has no meaning).
    * ``type_tag``: ``type_tag(name)`` of the payload type, 0 to 2**32-1.
    * ``content``: the user content bytes, as the payload's encoder produced them. They
      may refer to NetIDs by their index in ``table``.
    * ``payload_netids``: NetIDs the content refers to, so that they enter the table.
      On decode it is the whole table, since the wire does not say which entries the
      content uses. It takes no part in equality: ``table`` does.
    * ``table``: computed, the sorted unique NetID set, in wire order (§6.1).

    Lists may be given as any iterable; they are stored as tuples. Raises ``TypeError``
    or ``ValueError`` for values that cannot be encoded.
    """

    current: BroadcastID
    type_tag: int
    content: bytes = b""
    seen: tuple[BroadcastID, ...] = ()
    others: tuple[NetID, ...] = ()
    distribution: tuple[NetID, ...] = ()
    payload_netids: tuple[NetID, ...] = field(default=(), compare=False)
    table: tuple[NetID, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.current, BroadcastID):
            raise TypeError("Gossip.current must be a BroadcastID")
        _check_uint("Gossip.type_tag", self.type_tag, _U32_LIMIT)
        content: object = self.content
        if not isinstance(content, bytes):
            if not isinstance(content, bytearray | memoryview):
                raise TypeError("Gossip.content must be bytes")
            object.__setattr__(self, "content", bytes(content))
        netids: dict[bytes, NetID] = {self.current.origin.packed: self.current.origin}
        for name, kind in (
            ("seen", BroadcastID),
            ("others", NetID),
            ("distribution", NetID),
            ("payload_netids", NetID),
        ):
            items = tuple(getattr(self, name))
            for item in items:
                if not isinstance(item, kind):
                    raise TypeError(
                        f"Gossip.{name} holds a {type(item).__name__}, not a {kind.__name__}"
                    )
                nid = item.origin if isinstance(item, BroadcastID) else item
                netids[nid.packed] = nid
            object.__setattr__(self, name, items)
        object.__setattr__(self, "table", _sorted_table(netids))


_GOSSIP_SETTERS: tuple[Callable[[Gossip, object], None], ...] = tuple(
    vars(Gossip)[name].__set__
    for name in (
        "current",
        "type_tag",
        "content",
        "seen",
        "others",
        "distribution",
        "payload_netids",
        "table",
    )
)


def _new_gossip(
    *,
    current: BroadcastID,
    type_tag: int,
    content: bytes,
    seen: tuple[BroadcastID, ...],
    others: tuple[NetID, ...],
    distribution: tuple[NetID, ...],
    table: tuple[NetID, ...],
) -> Gossip:
    """Build a Gossip from decoded parts without recomputing what the decoder checked."""
    gossip: Gossip = _new_object(Gossip)
    set_current, set_tag, set_content, set_seen, set_others, set_dist, set_pn, set_table = (
        _GOSSIP_SETTERS
    )
    set_current(gossip, current)
    set_tag(gossip, type_tag)
    set_content(gossip, content)
    set_seen(gossip, seen)
    set_others(gossip, others)
    set_dist(gossip, distribution)
    set_pn(gossip, table)
    set_table(gossip, table)
    return gossip


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Bounds on what a decoder accepts (and an encoder produces).

    The defaults fit UDP (one datagram is one message, at most 65,507 bytes) and clusters
    of thousands of nodes; raise them for large TCP messages.
    """

    max_message_size: int = 65_536
    max_gossip_size: int = 1 << 20
    max_table_entries: int = 16_384
    max_list_length: int = 16_384

    def __post_init__(self) -> None:
        for name in ("max_message_size", "max_gossip_size", "max_table_entries", "max_list_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"Limits.{name} must be a positive int", value=value)


DEFAULT_LIMITS = Limits()


# --------------------------------------------------------------------------- keys


def derive_key(key: bytes | str) -> bytes:
    """Chatter's key rule (§4): exactly 32 bytes as is; otherwise ``(key + FILL)[:32]``.

    A ``str`` is taken as UTF-8. Longer keys are chopped; shorter ones are completed with
    Chatter's public filler ``"0123...8901"`` (weak, but it is what Chatter peers use).
    Unlike Chatter there is no default: a missing or empty key raises ``ConfigError``.
    """
    if key is None or len(key) == 0:
        raise ConfigError(
            "no Chatter key configured: gossamer has no default key "
            "(Chatter's public fallback would let anyone read and forge messages)"
        )
    raw = key.encode() if isinstance(key, str) else bytes(key)
    if len(raw) == KEY_SIZE:
        return raw
    return (raw + _KEY_FILL)[:KEY_SIZE]


_KEY_CACHE_MAX = 16
_CONTEXT_POOL_MAX = 8
# Keystream byte 32 starts counter block IV + 2: where the plaintext after the padding is.
_IV_AFTER_PADDING = (int.from_bytes(IV, "big") + PADDING_SIZE // 16).to_bytes(16, "big")


class _KeyState:
    """What one key needs, kept across messages: AES-CTR contexts to rewind and reuse.

    Creating an AES context costs more than encrypting 4 KB with it, and every Chatter
    message starts at the same counter, so contexts are rewound with ``reset_nonce``
    (cryptography >= 43) instead of being created per message. A small pool, taken and
    returned with atomic ``list.pop``/``append``, keeps threads from sharing one.
    """

    __slots__ = ("algorithm", "pool", "rewindable")

    def __init__(self, key: bytes) -> None:
        self.algorithm = algorithms.AES(key)
        context = Cipher(self.algorithm, modes.CTR(IV)).encryptor()
        self.rewindable = hasattr(context, "reset_nonce")
        self.pool = [context] if self.rewindable else []

    def xor(self, counter: bytes, data: bytes | memoryview) -> bytes:
        """``data`` XOR the keystream that starts at counter block ``counter``."""
        pool = self.pool
        try:
            context = pool.pop()
        except IndexError:  # not rewindable, first use, or other threads hold the rest
            context = Cipher(self.algorithm, modes.CTR(counter)).encryptor()
        else:
            context.reset_nonce(counter)
        out = context.update(data)
        if self.rewindable and len(pool) < _CONTEXT_POOL_MAX:
            pool.append(context)
        return out


_KEY_CACHE: dict[bytes, _KeyState] = {}


def _key_state(key: bytes) -> _KeyState:
    state = _KEY_CACHE.get(key) if type(key) is bytes else None
    if state is not None:
        return state
    if key is None or len(key) == 0:
        raise ConfigError("no Chatter key given: gossamer has no default key")
    if not isinstance(key, bytes | bytearray | memoryview):
        raise ConfigError(f"a Chatter key must be bytes, not {type(key).__name__}")
    key = bytes(key)
    if len(key) != KEY_SIZE:
        raise ConfigError(
            f"a Chatter key must be {KEY_SIZE} bytes (apply derive_key to a configured key)",
            length=len(key),
        )
    state = _KeyState(key)
    if len(_KEY_CACHE) >= _KEY_CACHE_MAX:
        _KEY_CACHE.clear()
    _KEY_CACHE[key] = state
    return state


def keystream(key: bytes, n: int) -> bytes:
    """The first ``n`` bytes of the keystream that every message under ``key`` uses (§4)."""
    return _key_state(key).xor(IV, bytes(n))


@functools.lru_cache(maxsize=1024)
def type_tag(name: str) -> int:
    """The payload type tag of ``name``: XXH32, seed 0, of its UTF-8 bytes (§6.3).

    Chatter hashes ``Atom.to_string`` of the payload's first element: ``"hello"`` for
    ``:hello`` and ``"Elixir.Foo"`` for a module atom ``Foo``.
    """
    return int(xxhash.xxh32_intdigest(name.encode()))


# --------------------------------------------------------------------------- gossip

_SMALL = tuple(bytes((i,)) for i in range(128))
# Encoded type tags (five bytes each, and few per application). Bounded.
_TAG_CACHE: dict[int, bytes] = {}


def _uint(n: int) -> bytes:
    return _SMALL[n] if n < 128 else encode_uint(n)


def push_gossip(buf: bytearray, g: Gossip, *, limits: Limits = DEFAULT_LIMITS) -> None:
    """Append the uncompressed gossip G of ``g`` to ``buf`` (§6).

    Raises ``ValueError`` if ``g`` exceeds ``limits`` (a decoder with the same limits
    would refuse it).
    """
    table = g.table
    count = len(table)
    seen, others, distribution = g.seen, g.others, g.distribution
    if count > limits.max_table_entries:
        raise ValueError(f"gossip has {count} NetIDs, above max_table_entries")
    if max(len(seen), len(others), len(distribution)) > limits.max_list_length:
        raise ValueError("a gossip list is longer than max_list_length")
    start = len(buf)
    packed = [netid.packed for netid in table]
    raw_table = b"".join(packed)
    current = g.current
    seqno = current.seqno
    small = _SMALL
    if count <= 128:
        # Every reference is a one-byte VarInt; so is nearly every count and seqno. The
        # VarInts are inlined and the loops spelled out on purpose: both are measurably
        # faster than helper calls or comprehensions on CPython 3.11.
        cached = _TABLE_CACHE.get(raw_table)
        if cached is None:
            cached = _remember_table(raw_table, table, packed)
        index = cached[1]
        buf += small[count] if count < 128 else b"\x80\x01"
        buf += raw_table
        append = buf.append
        append(index[current.origin.packed])
        buf += small[seqno] if seqno < 128 else encode_uint(seqno)
        buf += small[len(seen)] if len(seen) < 128 else encode_uint(len(seen))
        for bid in seen:
            append(index[bid.origin.packed])
            seqno = bid.seqno
            if seqno < 128:
                append(seqno)
            else:
                buf += encode_uint(seqno)
        for netids in (others, distribution):
            buf += small[len(netids)] if len(netids) < 128 else encode_uint(len(netids))
            for netid in netids:
                append(index[netid.packed])
    else:
        encoded = dict(zip(packed, map(encode_uint, range(count)), strict=True))
        buf += encode_uint(count)
        buf += raw_table
        buf += encoded[current.origin.packed]
        buf += _uint(seqno)
        buf += _uint(len(seen))
        for bid in seen:
            buf += encoded[bid.origin.packed]
            buf += _uint(bid.seqno)
        for netids in (others, distribution):
            buf += _uint(len(netids))
            buf += b"".join([encoded[netid.packed] for netid in netids])
    tag = _TAG_CACHE.get(g.type_tag)
    if tag is None:
        tag = _TAG_CACHE[g.type_tag] = encode_uint(g.type_tag)
        if len(_TAG_CACHE) > 1024:
            _TAG_CACHE.clear()
    buf += tag
    buf += g.content
    if len(buf) - start > limits.max_gossip_size:
        del buf[start:]
        raise ValueError("encoded gossip is larger than max_gossip_size")


def encode_gossip(g: Gossip, *, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The uncompressed gossip G of ``g``, exactly as Chatter's ``encode_gossip`` writes it."""
    buf = bytearray()
    push_gossip(buf, g, limits=limits)
    return bytes(buf)


def _varint_at(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Slow path of the decoder's inline VarInt read, with the field named in errors."""
    try:
        return decode_uint(data, pos, max_bytes=MAX_VARINT_BYTES)
    except DecodeError as exc:
        raise DecodeError(f"{what}: {exc.reason}", offset=pos) from None


# Tables recur: every message from one sender with an unchanged peer set carries the same
# one. Encoder and decoder memoise a table's wire bytes -> (NetIDs, entry -> index), for
# tables with one-byte references. Bounded: cleared when full.
_TABLE_CACHE: dict[bytes, tuple[tuple[NetID, ...], dict[bytes, int]]] = {}
_TABLE_CACHE_MAX = 256


def _remember_table(
    raw: bytes, table: tuple[NetID, ...], entries: list[bytes]
) -> tuple[tuple[NetID, ...], dict[bytes, int]]:
    cached = (table, dict(zip(entries, range(len(entries)), strict=True)))
    if len(entries) <= 128:
        if len(_TABLE_CACHE) >= _TABLE_CACHE_MAX:
            _TABLE_CACHE.clear()
        _TABLE_CACHE[raw] = cached
    return cached


def _decode_table(data: bytes, pos: int, count: int) -> tuple[NetID, ...]:
    """``count`` 6-byte entries from ``pos``, which the caller checked are present."""
    raw = data[pos : pos + _NETID_SIZE * count]
    cached = _TABLE_CACHE.get(raw)
    if cached is not None:
        return cached[0]
    entries = [raw[at : at + _NETID_SIZE] for at in range(0, len(raw), _NETID_SIZE)]
    # Chatter writes the sorted unique set (§6.1); anything else is not Chatter's.
    if not all(map(bytes.__lt__, entries, itertools.islice(entries, 1, None))):
        raise DecodeError("NetID table is not sorted and unique", offset=pos)
    table = tuple(map(_netid_from_packed, entries))
    _remember_table(raw, table, entries)
    return table


# Decoded five-byte type tags by their exact encoding. A five-byte slice equal to a key
# *is* that VarInt (four continuation bytes, then a final one), so a hit is exact.
_TAG_DECODE_CACHE: dict[bytes, int] = {}


def _decode_gossip(data: bytes, limits: Limits) -> Gossip:
    """Decode G from ``data`` (bytes). Raises only ``DecodeError``.

    VarInts of one or two bytes (every reference into a table below 128 entries, and
    nearly every count and seqno) are read inline; longer ones go to ``_varint_at``.
    Inlining and spelled-out loops are deliberate: they halve the cost on CPython 3.11.
    An ``IndexError`` anywhere means the input ended early.
    """
    end = len(data)
    if end > limits.max_gossip_size:
        raise DecodeError("gossip larger than max_gossip_size", size=end)
    max_list = limits.max_list_length
    new_bid, set_origin, set_seqno = _new_object, _set_bid_origin, _set_bid_seqno
    pos = 0
    try:
        count = data[0]
        pos = 1
        if count >= 0x80:
            count, pos = _varint_at(data, 0, "NetID table length")
        if count > limits.max_table_entries:
            raise DecodeError("NetID table above max_table_entries", offset=0, entries=count)
        if pos + _NETID_SIZE * count > end:
            raise DecodeError("truncated NetID table", offset=pos, entries=count)
        table = _decode_table(data, pos, count)
        pos += _NETID_SIZE * count

        # The current BroadcastID, then the seen list: n pairs (table index, seqno).
        n = 1
        seen_list: list[BroadcastID] = []
        while True:
            index = data[pos]
            pos += 1
            if index >= 0x80:
                index, pos = _varint_at(data, pos - 1, "BroadcastID origin")
            if index >= count:
                what = "seen origin" if seen_list else "current origin"
                raise DecodeError(f"{what} refers past the NetID table", offset=pos)
            seqno = data[pos]
            pos += 1
            if seqno >= 0x80:
                if data[pos] < 0x80:
                    seqno = (seqno & 0x7F) | (data[pos] << 7)
                    pos += 1
                else:
                    seqno, pos = _varint_at(data, pos - 1, "BroadcastID seqno")
                    if seqno >= _U64_LIMIT:
                        raise DecodeError("seqno above 64 bits", offset=pos)
            bid = new_bid(BroadcastID)
            set_origin(bid, table[index])
            set_seqno(bid, seqno)
            seen_list.append(bid)
            n -= 1
            if n:
                continue
            if len(seen_list) > 1:
                break
            # After the current id: read the seen list's length, and go on if it has any.
            n = data[pos]
            pos += 1
            if n >= 0x80:
                n, pos = _varint_at(data, pos - 1, "seen list length")
            if n > max_list or 2 * n > end - pos:
                raise DecodeError("seen list length exceeds the limit or the input", offset=pos)
            if not n:
                break
        current = seen_list[0]
        seen = tuple(seen_list[1:])

        # Remote NetIDs, then the distribution list: n table references each.
        others: tuple[NetID, ...] = ()
        for what in ("remote NetIDs", "distribution list"):
            n = data[pos]
            pos += 1
            if n >= 0x80:
                n, pos = _varint_at(data, pos - 1, f"{what} length")
            if n > max_list or n > end - pos:
                raise DecodeError(f"{what} length exceeds the limit or the input", offset=pos)
            refs = data[pos : pos + n]
            if not n or (count <= 0x80 and max(refs) < count):
                # Every reference is one byte and inside the table.
                netids = tuple(map(table.__getitem__, refs))
                pos += n
            else:
                items = []
                for _ in range(n):
                    index = data[pos]
                    pos += 1
                    if index >= 0x80:
                        index, pos = _varint_at(data, pos - 1, what)
                    if index >= count:
                        raise DecodeError(f"{what} refers past the NetID table", offset=pos)
                    items.append(table[index])
                netids = tuple(items)
            if what == "remote NetIDs":
                others = netids

        tag = data[pos]
        if tag < 0x80:
            pos += 1
        else:
            raw_tag = data[pos : pos + 5]
            cached_tag = _TAG_DECODE_CACHE.get(raw_tag)
            if cached_tag is not None:
                tag = cached_tag
                pos += 5
            else:
                tag, after = _varint_at(data, pos, "type tag")
                if tag >= _U32_LIMIT:
                    raise DecodeError("type tag above 32 bits", offset=pos)
                if after - pos == 5:
                    if len(_TAG_DECODE_CACHE) >= 1024:
                        _TAG_DECODE_CACHE.clear()
                    _TAG_DECODE_CACHE[raw_tag] = tag
                pos = after
    except IndexError:
        raise DecodeError("truncated gossip", offset=pos) from None
    return _new_gossip(
        current=current,
        type_tag=tag,
        content=data[pos:],
        seen=seen,
        others=others,
        distribution=netids,
        table=table,
    )


def pull_gossip(buf: Buffer, *, limits: Limits = DEFAULT_LIMITS) -> Gossip:
    """Read one gossip G from ``buf``. The user content runs to the end, so this consumes
    the rest of ``buf``. Raises only ``DecodeError``."""
    return _decode_gossip(buf.pull_rest(), limits)


def decode_gossip(
    data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS
) -> Gossip:
    """Decode an uncompressed gossip G. Raises only ``DecodeError``."""
    return _decode_gossip(data if type(data) is bytes else bytes(data), limits)


# --------------------------------------------------------------------------- messages


def push_message(
    buf: bytearray,
    g: Gossip,
    key: bytes,
    *,
    padding: bytes | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    """Append one complete wire message carrying ``g`` under ``key`` to ``buf`` (§1, §3-5).

    ``key`` is the derived 32-byte key (``derive_key``); a missing or malformed key is a
    ``ConfigError``. ``padding`` (32 bytes) is for reproducing a recorded message; by
    default it is random. Raises ``ValueError`` if the message would exceed ``limits``.
    """
    buf += encode_message(g, key, padding=padding, limits=limits)


def encode_message(
    g: Gossip,
    key: bytes,
    *,
    padding: bytes | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> bytes:
    """One complete wire message carrying ``g`` under ``key`` (see ``push_message``)."""
    state = _key_state(key)
    gossip = bytearray()
    push_gossip(gossip, g, limits=limits)
    size = len(gossip)
    # Checksum first, then the size: the code's order, not the docs' (§11.1, §11.2).
    head = xxhash.xxh32_intdigest(gossip).to_bytes(4, "big") + (
        _SMALL[size] if size < 128 else encode_uint(size)
    )
    block = snappy.compress_view(gossip)
    ciphertext_size = PADDING_SIZE + len(head) + block.nbytes
    header = b"\xff" + (
        _SMALL[ciphertext_size] if ciphertext_size < 128 else encode_uint(ciphertext_size)
    )
    if len(header) + ciphertext_size > limits.max_message_size:
        raise ValueError(
            f"message of {len(header) + ciphertext_size} bytes exceeds max_message_size"
        )
    if padding is None:
        # Random ciphertext is random padding: under a fixed keystream, encrypting it
        # would change nothing an observer or the decoder could tell.
        encrypted = state.xor(_IV_AFTER_PADDING, head + block)
        return b"".join((header, secrets.token_bytes(PADDING_SIZE), encrypted))
    if not isinstance(padding, bytes) or len(padding) != PADDING_SIZE:
        raise ValueError(f"padding must be {PADDING_SIZE} bytes")
    return header + state.xor(IV, padding + head + block)


def _decode_message(data: bytes, state: _KeyState, limits: Limits) -> Gossip:
    total = len(data)
    if total > limits.max_message_size:
        raise DecodeError("message larger than max_message_size", size=total)
    if total == 0:
        raise DecodeError("empty message")
    if data[0] != SOM:
        raise DecodeError(f"bad start of message 0x{data[0]:02x}, expected 0xff", offset=0)
    if total > 2 and data[1] < 0x80:
        size, pos = data[1], 2
    else:
        size, pos = _varint_at(data, 1, "encrypted size")
    available = total - pos
    # One datagram or one TCP read is exactly one message (§3): no resynchronisation.
    if size < available:
        raise DecodeError(
            f"size mismatch: {available} bytes follow a header declaring {size}"
            " (coalesced messages or trailing bytes)",
            offset=1,
        )
    if size > available:
        raise DecodeError(
            f"truncated message: header declares {size} bytes, {available} present", offset=1
        )
    if size < _MIN_CIPHERTEXT:
        raise DecodeError(f"message too short: {size} encrypted bytes", offset=1)
    # The padding is ignored (§5), so it is not even decrypted.
    tail = state.xor(_IV_AFTER_PADDING, data[pos + PADDING_SIZE :])
    checksum = int.from_bytes(tail[:4], "big")
    declared = tail[4]
    snappy_at = 5
    if declared >= 0x80:
        declared, snappy_at = _varint_at(tail, 4, "uncompressed size")
    where = pos + PADDING_SIZE + snappy_at
    if declared > limits.max_gossip_size:
        raise DecodeError("uncompressed size above max_gossip_size (or wrong key)", offset=where)
    block = tail[snappy_at:]
    try:
        # Chatter ignores the size field (§5); gossamer checks it, since Chatter's encoder
        # always writes len(G). It bounds the Snappy preamble, which is refused before
        # the decompressor allocates anything (§12.7).
        gossip = snappy.decompress(block, max_size=declared)
        if len(gossip) != declared:
            raise DecodeError("uncompressed size disagrees with the Snappy preamble")
    except DecodeError as exc:
        fields = {k: v for k, v in exc.fields.items() if k != "offset"}
        raise DecodeError(
            f"{exc.reason} (corrupt message or wrong key)", offset=where, **fields
        ) from None
    if xxhash.xxh32_intdigest(gossip) != checksum:
        raise DecodeError(
            "checksum mismatch (corrupt message or wrong key)", offset=pos + PADDING_SIZE
        )
    return _decode_gossip(gossip, limits)


def pull_message(buf: Buffer, key: bytes, *, limits: Limits = DEFAULT_LIMITS) -> Gossip:
    """Read one message that fills the rest of ``buf`` (see ``decode_message``)."""
    state = _key_state(key)
    return _decode_message(buf.pull_rest(), state, limits)


def decode_message(
    data: bytes | bytearray | memoryview, key: bytes, *, limits: Limits = DEFAULT_LIMITS
) -> Gossip:
    """Decode exactly one wire message under the derived 32-byte ``key``.

    ``data`` must be one whole message: a datagram, or one message cut from a stream.
    Raises ``DecodeError`` on any malformed input (bad SOM, short, size mismatch,
    coalesced or truncated, corrupt, wrong key) and ``ConfigError`` on a missing or
    malformed key.
    """
    state = _key_state(key)
    return _decode_message(data if type(data) is bytes else bytes(data), state, limits)
