"""Chatter's gossip and message codecs (chatter-as-coded.md §1, §3-§6), byte for byte,
bounded, and fast.

A :class:`ChatterCodec` owns what makes it fast, all bounded: the tables it met (every
message of one sender with an unchanged peer set carries the same one), the NetIDs of
those tables, the encoded type tags, and the AES-CTR state of each key
(:mod:`~.crypto`). Whoever encodes or decodes many messages keeps one codec; the
module functions of the same names are for a single message (each makes a new codec).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import xxhash

from gossamer.errors import ConfigError, DecodeError
from gossamer.wire import snappy
from gossamer.wire.buffer import Buffer
from gossamer.wire.chatter.crypto import (
    IV,
    IV_AFTER_PADDING,
    PADDING_SIZE,
    KeyState,
)
from gossamer.wire.chatter.ids import (
    NETID_SIZE,
    U32_LIMIT,
    U64_LIMIT,
    BroadcastID,
    NetID,
    check_uint,
    netid_from_packed,
)
from gossamer.wire.varint import MAX_VARINT_BYTES, decode_uint, encode_uint

__all__ = [
    "DEFAULT_LIMITS",
    "SOM",
    "ChatterCodec",
    "Gossip",
    "Limits",
    "decode_gossip",
    "decode_message",
    "encode_gossip",
    "encode_message",
]

#: Start-of-message byte (§3).
SOM = 0xFF
#: Smallest ciphertext: padding, checksum, a one-byte size and a one-byte Snappy block.
_MIN_CIPHERTEXT = PADDING_SIZE + 4 + 1 + 1
_SMALL = tuple(bytes((i,)) for i in range(128))
# Cache bounds: each cache is cleared when full, so hostile input cannot grow it.
_NETID_CACHE_MAX = 4096
_TABLE_CACHE_MAX = 256
_TAG_CACHE_MAX = 1024
_KEY_CACHE_MAX = 16


def _uint(n: int) -> bytes:
    return _SMALL[n] if n < 128 else encode_uint(n)


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
        check_uint("Gossip.type_tag", self.type_tag, U32_LIMIT)
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



def _varint_at(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Slow path of the decoder's inline VarInt read, with the field named in errors."""
    try:
        return decode_uint(data, pos, max_bytes=MAX_VARINT_BYTES)
    except DecodeError as exc:
        raise DecodeError(f"{what}: {exc.reason}", offset=pos) from None



class ChatterCodec:
    """Encodes and decodes gossips and messages, keeping what recurs between them.

    Not shared between threads without care: the caches are plain dicts (each
    operation on them is atomic, so sharing costs hits, never correctness), and each
    key's AES-CTR contexts are pooled per thread of use (:class:`~.crypto.KeyState`).
    """

    __slots__ = ("_decoded_tags", "_keys", "_netids", "_tables", "_tags")

    def __init__(self) -> None:
        # A table's wire bytes -> (NetIDs, entry -> index), for tables with one-byte
        # references; shared by encoder and decoder.
        self._tables: dict[bytes, tuple[tuple[NetID, ...], dict[bytes, int]]] = {}
        # Decoded NetIDs are immutable values that recur in every message of a group.
        self._netids: dict[bytes, NetID] = {}
        # Encoded type tags (five bytes each, and few per application).
        self._tags: dict[int, bytes] = {}
        # Decoded five-byte type tags by their exact encoding. A five-byte slice equal
        # to a key *is* that VarInt (four continuation bytes, then a final one).
        self._decoded_tags: dict[bytes, int] = {}
        # The AES-CTR state of each key met (see ``_key``).
        self._keys: dict[bytes, KeyState] = {}

    # -- gossip ----------------------------------------------------------------------

    def push_gossip(self, buf: bytearray, g: Gossip, *, limits: Limits = DEFAULT_LIMITS) -> None:
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
            cached = self._tables.get(raw_table)
            if cached is None:
                cached = self._remember_table(raw_table, table, packed)
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
        tags = self._tags
        tag = tags.get(g.type_tag)
        if tag is None:
            tag = tags[g.type_tag] = encode_uint(g.type_tag)
            if len(tags) > _TAG_CACHE_MAX:
                tags.clear()
        buf += tag
        buf += g.content
        if len(buf) - start > limits.max_gossip_size:
            del buf[start:]
            raise ValueError("encoded gossip is larger than max_gossip_size")


    def encode_gossip(self, g: Gossip, *, limits: Limits = DEFAULT_LIMITS) -> bytes:
        """The uncompressed gossip G of ``g``, exactly as Chatter's ``encode_gossip`` writes it."""
        buf = bytearray()
        self.push_gossip(buf, g, limits=limits)
        return bytes(buf)


    def pull_gossip(self, buf: Buffer, *, limits: Limits = DEFAULT_LIMITS) -> Gossip:
        """Read one gossip G from ``buf``. The user content runs to the end, so this consumes
        the rest of ``buf``. Raises only ``DecodeError``."""
        return self._decode_gossip(buf.pull_rest(), limits)


    def decode_gossip(
        self, data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS
    ) -> Gossip:
        """Decode an uncompressed gossip G. Raises only ``DecodeError``."""
        return self._decode_gossip(data if type(data) is bytes else bytes(data), limits)


    def _remember_table(
        self, raw: bytes, table: tuple[NetID, ...], entries: list[bytes]
    ) -> tuple[tuple[NetID, ...], dict[bytes, int]]:
        cached = (table, dict(zip(entries, range(len(entries)), strict=True)))
        if len(entries) <= 128:
            tables = self._tables
            if len(tables) >= _TABLE_CACHE_MAX:
                tables.clear()
            tables[raw] = cached
        return cached


    def _netid(self, packed: bytes) -> NetID:
        """The NetID of 6 trusted bytes, shared between messages."""
        netids = self._netids
        nid = netids.get(packed)
        if nid is None:
            nid = netid_from_packed(packed)
            if len(netids) >= _NETID_CACHE_MAX:
                netids.clear()
            netids[packed] = nid
        return nid


    def _decode_table(self, data: bytes, pos: int, count: int) -> tuple[NetID, ...]:
        """``count`` 6-byte entries from ``pos``, which the caller checked are present."""
        raw = data[pos : pos + NETID_SIZE * count]
        cached = self._tables.get(raw)
        if cached is not None:
            return cached[0]
        entries = [raw[at : at + NETID_SIZE] for at in range(0, len(raw), NETID_SIZE)]
        # Chatter writes the sorted unique set (§6.1); anything else is not Chatter's.
        if not all(map(bytes.__lt__, entries, itertools.islice(entries, 1, None))):
            raise DecodeError("NetID table is not sorted and unique", offset=pos)
        table = tuple(map(self._netid, entries))
        self._remember_table(raw, table, entries)
        return table



    def _decode_gossip(self, data: bytes, limits: Limits) -> Gossip:
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
            if pos + NETID_SIZE * count > end:
                raise DecodeError("truncated NetID table", offset=pos, entries=count)
            table = self._decode_table(data, pos, count)
            pos += NETID_SIZE * count

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
                        if seqno >= U64_LIMIT:
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
                decoded_tags = self._decoded_tags
                cached_tag = decoded_tags.get(raw_tag)
                if cached_tag is not None:
                    tag = cached_tag
                    pos += 5
                else:
                    tag, after = _varint_at(data, pos, "type tag")
                    if tag >= U32_LIMIT:
                        raise DecodeError("type tag above 32 bits", offset=pos)
                    if after - pos == 5:
                        if len(decoded_tags) >= _TAG_CACHE_MAX:
                            decoded_tags.clear()
                        decoded_tags[raw_tag] = tag
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


    # -- messages --------------------------------------------------------------------

    def push_message(
        self,
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
        buf += self.encode_message(g, key, padding=padding, limits=limits)


    def encode_message(
        self,
        g: Gossip,
        key: bytes,
        *,
        padding: bytes | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> bytes:
        """One complete wire message carrying ``g`` under ``key`` (see ``push_message``)."""
        state = self._keys.get(key) if type(key) is bytes else None
        state = state or self._key(key)
        gossip = bytearray()
        self.push_gossip(gossip, g, limits=limits)
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
            encrypted = state.xor(IV_AFTER_PADDING, head + block)
            return b"".join((header, secrets.token_bytes(PADDING_SIZE), encrypted))
        if not isinstance(padding, bytes) or len(padding) != PADDING_SIZE:
            raise ValueError(f"padding must be {PADDING_SIZE} bytes")
        return header + state.xor(IV, padding + head + block)


    def pull_message(self, buf: Buffer, key: bytes, *, limits: Limits = DEFAULT_LIMITS) -> Gossip:
        """Read one message that fills the rest of ``buf`` (see ``decode_message``)."""
        state = self._keys.get(key) if type(key) is bytes else None
        state = state or self._key(key)
        return self._decode_message(buf.pull_rest(), state, limits)


    def decode_message(
        self, data: bytes | bytearray | memoryview, key: bytes, *, limits: Limits = DEFAULT_LIMITS
    ) -> Gossip:
        """Decode exactly one wire message under the derived 32-byte ``key``.

        ``data`` must be one whole message: a datagram, or one message cut from a stream.
        Raises ``DecodeError`` on any malformed input (bad SOM, short, size mismatch,
        coalesced or truncated, corrupt, wrong key) and ``ConfigError`` on a missing or
        malformed key.
        """
        state = self._keys.get(key) if type(key) is bytes else None
        state = state or self._key(key)
        return self._decode_message(data if type(data) is bytes else bytes(data), state, limits)


    def _key(self, key: bytes) -> KeyState:
        """A new key's state (``ConfigError`` for a missing or malformed key), kept for
        the next message; at most ``_KEY_CACHE_MAX`` keys, forgotten all at once when full."""
        state = KeyState(key)
        keys = self._keys
        if len(keys) >= _KEY_CACHE_MAX:
            keys.clear()
        keys[bytes(key)] = state
        return state

    def _decode_message(self, data: bytes, state: KeyState, limits: Limits) -> Gossip:
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
        tail = state.xor(IV_AFTER_PADDING, data[pos + PADDING_SIZE :])
        checksum = int.from_bytes(tail[:4], "big")
        declared = tail[4]
        snappy_at = 5
        if declared >= 0x80:
            declared, snappy_at = _varint_at(tail, 4, "uncompressed size")
        where = pos + PADDING_SIZE + snappy_at
        if declared > limits.max_gossip_size:
            raise DecodeError(
                "uncompressed size above max_gossip_size (or wrong key)", offset=where
            )
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
        return self._decode_gossip(gossip, limits)


# -- one message at a time (a new codec each; keep a ChatterCodec for many) -----------


def encode_gossip(g: Gossip, *, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """:meth:`ChatterCodec.encode_gossip` for one gossip."""
    return ChatterCodec().encode_gossip(g, limits=limits)


def decode_gossip(
    data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS
) -> Gossip:
    """:meth:`ChatterCodec.decode_gossip` for one gossip."""
    return ChatterCodec().decode_gossip(data, limits=limits)


def encode_message(
    g: Gossip,
    key: bytes,
    *,
    padding: bytes | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> bytes:
    """:meth:`ChatterCodec.encode_message` for one message."""
    return ChatterCodec().encode_message(g, key, padding=padding, limits=limits)


def decode_message(
    data: bytes | bytearray | memoryview, key: bytes, *, limits: Limits = DEFAULT_LIMITS
) -> Gossip:
    """:meth:`ChatterCodec.decode_message` for one message."""
    return ChatterCodec().decode_message(data, key, limits=limits)
