"""Fuzzing every wire decoder: only ``DecodeError`` may come out, and allocation stays bounded.

The contract (DESIGN.md, issue "Wire formats"): every decoder raises only
``gossamer.errors.DecodeError`` on malformed input, never another exception, and never
allocates more than a bound passed in. This script checks it with, per decoder:

* **random** inputs: random bytes of random length (0, short, up to 64 KiB, and a few just
  over 1 MiB so that every size bound is crossed), some behind a valid prefix (a magic
  number, a version byte) so that they get past the first check, some drawn from
  "interesting" bytes (0x00, 0x7f, 0x80, 0xff, ...) or, for the text formats, JSON tokens;
* **mutated** inputs: valid encodings made by the codecs' own encoders (a varied corpus),
  hit by one to four of: bit flips, interesting bytes, insertions, deletions, truncations,
  duplicated chunks, splices of two corpus entries, small arithmetic on a byte, and length
  inflation (``0xFFFFFFFF``, ``0x7FFFFFFF``, ``0xFFFF``, over-long VarInts, ... written over
  the format's length fields and over random positions);
* **crafted** inputs (part of the mutated share, for the two encrypted formats): mutations
  made *with the key*, below the cryptography, which blind mutation cannot reach: a Chatter
  message whose gossip or Snappy block was mutated and then re-checksummed and re-encrypted,
  and gossamer envelopes whose authenticated body is a mutated Snappy block.

Each input goes through the decoder and is counted as accepted, ``DecodeError``, an
expected other outcome (``CryptoError`` from ``envelope.unseal``, the correct answer to a
forgery or a replay), or **unexpected**: any other exception, or an accepted result that
fails the target's oracle (round trips, bounds, chunking invariance, and "an envelope never
opens without the key"). Unexpected outcomes are grouped by exception type and the line
that raised it, with the hex of the first few inputs as reproducers. A sample of the inputs
is then decoded again under ``tracemalloc`` for the peak allocation of one call, and the
worker's peak RSS growth is recorded (one fresh process per decoder).

``--count N`` runs N random and N mutated inputs per decoder (default 1,000,000 of each;
``--quick``: 20,000 of each). Decoders run in parallel, one process each
(``--jobs``, default 2). The exit status is 1 if anything unexpected was seen. A full run
writes the ``fuzz`` section of ``docs/benchmarks.md``.

Reproduce one input: ``.venv/bin/python -m bench.fuzz_decoders --replay NAME HEX`` (with
the same ``--seed``: the keys of the encrypted formats come from it).

Run from the repository root: ``.venv/bin/python -m bench.fuzz_decoders [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing
import re
import resource
import struct
import sys
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from random import Random
from typing import Any

import msgpack
import xxhash
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gossamer.errors import CryptoError, DecodeError
from gossamer.trace import jsonl
from gossamer.trace.schema import LAYERS, TraceEvent
from gossamer.wire import (
    a3m,
    chatter,
    envelope,
    etf,
    exon,
    exon_transport,
    framing,
    gateway,
    gateway_cluster,
    isis,
    order_chunks,
    ping,
    prototari,
    queue_commands,
    snappy,
    varint,
    views,
)
from gossamer.wire.keyring import Key, Keyring, derive_session

DEFAULT_COUNT = 1_000_000
QUICK_COUNT = 20_000
#: Reproducers kept per distinct unexpected outcome.
MAX_REPRODUCERS = 3
#: Longest reproducer printed in full (longer ones are cut; ``--replay`` needs the whole).
MAX_REPRODUCER_BYTES = 4096
#: A call may allocate at most this much beyond ``ALLOC_PER_INPUT_BYTE`` per input byte.
ALLOC_FIXED_BUDGET = 4 << 20
ALLOC_PER_INPUT_BYTE = 64
#: Size of the worst-case input that measures allocation per input byte.
WORST_CASE_BYTES = 256 << 10

_INTERESTING_BYTES = bytes((0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xC0, 0xFE, 0xFF, 0x0A, 0x22))
#: Values written over length fields: huge, sign-bit, just-too-big and over-long forms.
_INFLATIONS: tuple[bytes, ...] = (
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\x00\x10\x00\x01",
    b"\xff\xff",
    b"\xff",
    b"\x00",
    b"\xff" * 8,
    b"\xff\xff\xff\xff\x0f",  # VarInt 2**32 - 1
    b"\xff" * 9 + b"\x01",  # VarInt 2**64 - 1: the longest valid one
    b"\x80" * 11,  # a VarInt that never ends
    b"\x80\x80\x80\x80\x10",  # VarInt 2**32
)
_JSON_TOKENS: tuple[bytes, ...] = (
    *(bytes((c,)) for c in b'{}[]:,"'),
    b"null",
    b"true",
    b"false",
    b"0",
    b"-1",
    b"1e308",
    b"1e999",
    b"-0.0",
    b"18446744073709551616",
    b'"op"',
    b'"d"',
    b'"t"',
    b'"ts"',
    b'"v"',
    b'"run"',
    b'"layer"',
    b'"attrs"',
    b'"gossip"',
    b"\\u0000",
    b"\\ud800",
    b"\\",
    b" ",
    b"\n",
    b"\xff",
    b"\xed\xa0\x80",
    "é".encode(),
)


# ---------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True, kw_only=True)
class Harness:
    """What one decoder needs at run time, built inside the worker from the seed.

    ``decode`` takes the fuzz input as bytes. ``check`` is an oracle on accepted inputs:
    it returns a description of what is wrong, or ``None``. ``craft`` makes a key-holding
    mutation from a corpus entry (see the module docstring).
    """

    corpus: list[bytes]
    decode: Callable[[bytes], object]
    check: Callable[[bytes, object, str], str | None] | None = None
    craft: Callable[[Random, bytes], bytes] | None = None
    expected: tuple[type[Exception], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One decoder under test."""

    name: str
    #: Where the decoder is defined, for the report.
    where: str
    build: Callable[[Random], Harness]
    #: Offsets of length fields in a corpus entry, favoured by the inflation mutation.
    length_offsets: tuple[int, ...] = ()
    #: Random inputs also come as JSON token soup.
    text: bool = False
    #: The input of about ``n`` bytes that costs the most memory per byte (nested empty
    #: containers and the like), for formats that build nested values.
    worst: Callable[[int], bytes] | None = None


def _round_trip(encode: Callable[[Any], bytes]) -> Callable[[bytes, object, str], str | None]:
    """Oracle for canonical fixed-layout formats: re-encoding gives the input back."""

    def check(data: bytes, result: object, kind: str) -> str | None:
        again = encode(result)
        return None if again == data else f"re-encodes to {again.hex()}"

    return check


def _re_decode(
    encode: Callable[[Any], bytes], decode: Callable[[bytes], object]
) -> Callable[[bytes, object, str], str | None]:
    """Oracle for formats with several encodings of a value: decode(encode(v)) == v."""

    def check(data: bytes, result: object, kind: str) -> str | None:
        again = decode(encode(result))
        return None if again == result else f"decodes, re-encodes and decodes to {again!r}"

    return check


def _chunks(rng: Random, data: bytes) -> Iterator[bytes]:
    """``data`` cut into random pieces, some empty, some of one byte."""
    pos = 0
    while pos < len(data):
        step = rng.choice((0, 1, 2, 3, 7, 8, 13, 64, 500, 5000))
        yield data[pos : pos + step]
        pos += step


def _seeded_rng(data: bytes) -> Random:
    # Chunk boundaries are a function of the input, so that a reproducer reproduces.
    return Random(zlib.crc32(data) ^ len(data))


def _build_varint(rng: Random) -> Harness:
    values = [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**32 - 1, 2**35, 2**63, 2**64 - 1]
    values += [rng.getrandbits(rng.randint(1, 69)) for _ in range(40)]
    corpus = [varint.encode_uint(v) for v in values]
    corpus += [b"\x80\x00", b"\xff\x80\x00", b"\x80" * 9 + b"\x00"]  # non-minimal, accepted

    def check(data: bytes, result: object, kind: str) -> str | None:
        assert isinstance(result, tuple)
        value, end = result
        if not 0 < end <= min(len(data), varint.MAX_VARINT_BYTES) or value >= 1 << 70:
            return f"returned {result!r}"
        return None

    return Harness(corpus=corpus, decode=varint.decode_uint, check=check)


def _netid(rng: Random) -> chatter.NetID:
    host = ".".join(str(rng.choice((0, 1, 10, 127, 192, 255, rng.randrange(256)))) for _ in "abcd")
    return chatter.NetID(host, rng.choice((0, 29999, 65535, rng.randrange(65536))))


def _gossips(rng: Random, count: int) -> list[chatter.Gossip]:
    gossips = []
    for i in range(count):
        pool = [_netid(rng) for _ in range(rng.choice((1, 2, 5, 40, 130)))]
        sizes = [rng.choice((0, 0, 1, 3, 10, 130)) for _ in range(3)]
        gossips.append(
            chatter.Gossip(
                current=chatter.BroadcastID(rng.choice(pool), rng.choice((0, 5, 200, 2**64 - 1))),
                type_tag=rng.choice((0, 1, 127, chatter.type_tag("hello"), 2**32 - 1)),
                content=rng.randbytes(rng.choice((0, 1, 20, 300))) if i % 3 else b"hello " * i,
                seen=tuple(
                    chatter.BroadcastID(rng.choice(pool), rng.getrandbits(rng.randint(1, 64)))
                    for _ in range(sizes[0])
                ),
                others=tuple(rng.choice(pool) for _ in range(sizes[1])),
                distribution=tuple(rng.choice(pool) for _ in range(sizes[2])),
                payload_netids=tuple(pool[:2]),
            )
        )
    return gossips


def _build_chatter_gossip(rng: Random) -> Harness:
    corpus = [chatter.encode_gossip(g) for g in _gossips(rng, 40)]

    def check(data: bytes, result: object, kind: str) -> str | None:
        assert isinstance(result, chatter.Gossip)
        again = chatter.decode_gossip(chatter.encode_gossip(result))
        if again != result or again.content != result.content:
            return "decode(encode(g)) differs from g"
        return None

    return Harness(corpus=corpus, decode=chatter.decode_gossip, check=check)


def _chatter_wrap(
    key: bytes, padding: bytes, checksum: int, size_field: bytes, block: bytes
) -> bytes:
    """A Chatter message around arbitrary plaintext fields, encrypted under ``key``."""
    plain = padding + checksum.to_bytes(4, "big") + size_field + block
    stream = chatter.keystream(key, len(plain))
    cipher = (int.from_bytes(plain, "big") ^ int.from_bytes(stream, "big")).to_bytes(
        len(plain), "big"
    )
    return b"\xff" + varint.encode_uint(len(cipher)) + cipher


def _build_chatter_message(rng: Random) -> Harness:
    key = chatter.derive_key(rng.randbytes(32))
    gossips = _gossips(rng, 40)
    corpus = [chatter.encode_message(g, key) for g in gossips]
    raw_gossips = [chatter.encode_gossip(g) for g in gossips]

    def craft(rng: Random, seed: bytes) -> bytes:
        gossip = rng.choice(raw_gossips)
        choice = rng.random()
        if choice < 0.5:  # a mutated gossip, correctly wrapped: reaches the gossip decoder
            gossip = _mutate(rng, gossip, raw_gossips, ())
            block = snappy.compress(gossip)
            size_field = varint.encode_uint(len(gossip))
        elif choice < 0.8:  # a mutated Snappy block, the checksum of the original gossip
            block = _mutate(rng, snappy.compress(gossip), [], (0,))
            size_field = varint.encode_uint(len(gossip))
        else:  # an inflated size field or Snappy preamble
            block = snappy.compress(gossip)
            inflated = rng.choice((*_INFLATIONS[8:], varint.encode_uint(len(gossip) + 1)))
            if rng.random() < 0.5:
                size_field = inflated
            else:
                size_field = varint.encode_uint(len(gossip))
                block = inflated + block[len(varint.encode_uint(len(gossip))) :]
        return _chatter_wrap(
            key, rng.randbytes(32), xxhash.xxh32_intdigest(gossip), size_field, block
        )

    return Harness(
        corpus=corpus, decode=lambda data: chatter.decode_message(data, key), craft=craft
    )


_SENDERS = ("n", "node-042", "ñodo-7", "x" * 255, "界" * 85)


def _build_envelope(rng: Random) -> Harness:
    cluster = "fuzz"
    old, new = (
        Key.from_bytes(rng.randbytes(32), key_id=7),
        Key.from_bytes(rng.randbytes(32), key_id=2**32 - 1),
    )
    keyring = Keyring(cluster=cluster, keys=[old, new], primary=old.key_id)
    corpus: list[bytes] = []
    sessions = [
        envelope.SenderSession(sender=sender, epoch=epoch, randbytes=rng.randbytes)
        for sender in _SENDERS
        for epoch in (1, 2**64 - 1)
    ]
    payloads = [b"", b"a", rng.randbytes(100), b"abc" * 300, rng.randbytes(3000), bytes(5000)]
    for index, session in enumerate(sessions):
        if index == len(sessions) // 2:
            keyring.make_primary(new.key_id)
        for seq, payload in enumerate(payloads):
            corpus.append(
                envelope.seal(keyring, session, seq=seq * 3, payload=payload, compress=seq % 2 == 1)
            )
    replay = envelope.ReplayWindows(width=64, max_senders=64)
    # Open the corpus once: afterwards every corpus entry is a replay, so nothing a blind
    # mutation produces may open (the check below), whatever bytes it ends up with.
    for sealed in corpus:
        envelope.unseal(keyring, sealed, replay=replay)

    # Crafted inputs hold the key: authentic envelopes whose body is a mutated Snappy block
    # (flag bit 0 set), so that decompression of authenticated garbage is exercised.
    crafter = _CraftedEnvelopes(keyring=keyring, key=new, cluster=cluster, rng=rng)
    compressed = [bytes(snappy.compress(p)) for p in payloads if p]

    def craft(rng: Random, seed: bytes) -> bytes:
        body = rng.choice(compressed)
        return crafter.seal_raw(_mutate(rng, body, compressed, (0,)))

    def decode(data: bytes) -> object:
        return envelope.unseal(keyring, data, replay=replay)

    def check(data: bytes, result: object, kind: str) -> str | None:
        assert isinstance(result, envelope.Opened)
        if kind != "crafted":
            return "an envelope opened that was not sealed with the key (forgery or replay)"
        if len(result.payload) > envelope.DEFAULT_MAX_PAYLOAD:
            return f"payload of {len(result.payload)} bytes opened"
        return None

    return Harness(corpus=corpus, decode=decode, check=check, craft=craft, expected=(CryptoError,))


@dataclass(slots=True, kw_only=True)
class _CraftedEnvelopes:
    """Seals arbitrary bodies with the compressed flag, as a key holder could."""

    keyring: Keyring
    key: Key
    cluster: str
    rng: Random
    seq: int = 0
    ident: bytes = b""
    aead: AESGCM | None = None

    def seal_raw(self, body: bytes) -> bytes:
        if self.aead is None:
            sender = b"crafter"
            self.ident = (
                bytes((len(sender),)) + sender + (1).to_bytes(8, "big") + self.rng.randbytes(16)
            )
            self.aead = AESGCM(derive_session(self.key, cluster=self.cluster, ident=self.ident))
        self.seq += 1
        seq = self.seq.to_bytes(8, "big")
        header = struct.pack(">BBI", envelope.VERSION, envelope.FLAG_COMPRESSED, self.key.key_id)
        header += self.ident + seq
        return header + self.aead.encrypt(self.ident[-4:] + seq, body, header)


def _build_prototari(rng: Random) -> Harness:
    corpus = [prototari.encode(prototari.ControlMessage(kind=k)) for k in prototari.ControlKind]
    corpus += [
        prototari.encode(prototari.DataMessage(payload=rng.randbytes(n))) for n in (0, 1, 9, 100)
    ]
    return Harness(corpus=corpus, decode=prototari.decode, check=_round_trip(prototari.encode))


def _u32(rng: Random) -> int:
    return rng.choice((0, 1, 2, 2**31, 2**32 - 1, rng.getrandbits(32)))


def _build_isis(rng: Random) -> Harness:
    messages: list[isis.IsisMessage] = []
    for _ in range(5):
        messages += [
            isis.DataMessage(sender=_u32(rng), msg_id=_u32(rng), data=rng.randbytes(4)),
            isis.DataMessage(
                sender=_u32(rng),
                msg_id=_u32(rng),
                data=rng.randbytes(rng.choice((0, 1, 100, isis.MAX_DATA_SIZE))),
            ),
            isis.AckMessage(
                sender=_u32(rng), msg_id=_u32(rng), proposed_seq=_u32(rng), proposer=_u32(rng)
            ),
            isis.SeqMessage(
                sender=_u32(rng),
                msg_id=_u32(rng),
                final_seq=_u32(rng),
                final_seq_proposer=_u32(rng),
            ),
            isis.SeqAckMessage(sender=_u32(rng), msg_id=_u32(rng), ack_sender=_u32(rng)),
            isis.MarkerMessage(sender=_u32(rng)),
            isis.SnapshotMarker(sender=_u32(rng), snapshot_id=_u32(rng)),
        ]
    corpus = [isis.encode(m) for m in messages]
    return Harness(corpus=corpus, decode=isis.decode, check=_round_trip(isis.encode))


def _metadata(rng: Random) -> exon.LinkMetadata:
    custom = {
        f"k{i}-é"[: rng.randint(1, 5)] + str(i): rng.randbytes(rng.choice((0, 3, 200)))
        for i in range(rng.choice((0, 1, 5)))
    }
    return exon.LinkMetadata(
        socket_type=rng.choice((1, 8, 0xFFFF)),
        credits=rng.choice((0, 100, -(2**31))),
        custom=custom,
    )


def _exon_messages(rng: Random) -> list[exon.SocketMessage]:
    bodies: list[exon.Body] = [
        exon.ErrorBody(code=exon.ErrorCode.SOCKET_NOT_FOUND, dest_clock=exon.NO_CLOCK),
        exon.ErrorBody(code=exon.ErrorCode.INVALID_FORMAT, dest_clock=3, text="bad ñ"),
        exon.DataBody(payload=b""),
        exon.DataBody(payload=rng.randbytes(300)),
        exon.LinkBody(metadata=_metadata(rng)),
        exon.LinkBody(metadata=_metadata(rng)),
        exon.LinkAckBody(decision=exon.LinkDecision.SUCCESS, dest_clock=9, metadata=_metadata(rng)),
        exon.LinkAckBody(decision=exon.LinkDecision.CLOSED, dest_clock=0),
        exon.UnlinkBody(sent=2**32 - 1),
        exon.FlowBody(credits=-25),
        exon.ControlBody(kind=0x33, payload=b"ctl"),
        exon.ControlBody(kind=0xFF, payload=b""),
    ]
    return [
        exon.SocketMessage(src_tag=_u32(rng), dst_tag=_u32(rng), clock=_u32(rng), body=body)
        for body in bodies
    ]


def _build_exon(rng: Random) -> Harness:
    corpus = [exon.encode(m) for m in _exon_messages(rng) + _exon_messages(rng)]
    return Harness(corpus=corpus, decode=exon.decode, check=_round_trip(exon.encode))


def _a3m_link_messages(rng: Random) -> list[exon.SocketMessage]:
    """Link records the original wire can say (no custom metadata, no error text)."""
    meta = exon.LinkMetadata(socket_type=rng.choice((1, 4, 8)), credits=rng.choice((0, 250)))
    bodies: list[exon.Body] = [
        exon.ErrorBody(code=exon.ErrorCode.SOCKET_NOT_FOUND, dest_clock=rng.choice((0, 7))),
        exon.ErrorBody(code=exon.ErrorCode.SOCKET_NOT_LINKED, dest_clock=exon.NO_CLOCK),
        exon.DataBody(payload=a3m.join_order(rng.randint(0, 9), rng.randbytes(40))),
        exon.LinkBody(metadata=meta),
        exon.LinkAckBody(decision=exon.LinkDecision.SUCCESS, dest_clock=9, metadata=meta),
        exon.LinkAckBody(decision=exon.LinkDecision.CLOSED, dest_clock=2**32 - 2),
        exon.UnlinkBody(sent=rng.randint(0, 300)),
        exon.FlowBody(credits=-25),
        exon.ControlBody(kind=a3m.SUBSCRIBE, payload=a3m.join_order(
            0, a3m.encode_subscriptions([b"sport/", b""]))),
    ]
    return [exon.SocketMessage(src_tag=rng.randint(1, 2**31), dst_tag=rng.randint(1, 2**31),
                               clock=rng.randint(0, 2**31 - 1), body=body) for body in bodies]


def _build_a3m(rng: Random) -> Harness:
    """A3M's messages, through the decoder and the translation to link records. The
    oracle translates back with the tag book the decoding filled, and again."""

    def decode(data: bytes) -> tuple[a3m.TagBook, exon.SocketMessage]:
        book = a3m.TagBook()
        return book, a3m.to_link_message(a3m.decode_message(data), book)

    def check(data: bytes, result: object, kind: str) -> str | None:
        assert isinstance(result, tuple)
        book, msg = result
        again = a3m.to_link_message(
            a3m.decode_message(a3m.encode_message(a3m.from_link_message(msg, book))), book
        )
        return None if again == msg else f"translates back and again to {again!r}"

    book = a3m.TagBook()
    corpus = [
        a3m.encode_message(a3m.from_link_message(m, book))
        for m in _a3m_link_messages(rng) + _a3m_link_messages(rng)
    ]
    return Harness(corpus=corpus, decode=decode, check=check)


#: The pattern payloads of the original wire, by the first byte of a fuzz input.
_A3M_PAYLOADS: tuple[tuple[Callable[[bytes], Any], Callable[[Any], bytes]], ...] = (
    (a3m.decode_published, lambda v: a3m.encode_published(*v)),
    (a3m.decode_subscriptions, a3m.encode_subscriptions),
    (a3m.decode_routed, lambda v: a3m.encode_routed(*v)),
    (a3m.decode_fields, a3m.encode_fields),
)


def _build_a3m_payloads(rng: Random) -> Harness:
    def decode(data: bytes) -> tuple[int, Any]:
        if not data:
            raise DecodeError("empty")
        which = data[0] % len(_A3M_PAYLOADS)
        return which, _A3M_PAYLOADS[which][0](data[1:])

    def encode(result: tuple[int, Any]) -> bytes:
        which, value = result
        return bytes((which,)) + _A3M_PAYLOADS[which][1](value)

    corpus = [
        b"\x00" + a3m.encode_published(b"sport/", rng.randbytes(20)),
        b"\x00" + a3m.encode_published(b"", b""),
        b"\x01" + a3m.encode_subscriptions([b"a", b"bc", rng.randbytes(5)]),
        b"\x01" + a3m.encode_subscriptions([]),
        b"\x02" + a3m.encode_routed([1, -5, 2**31 - 1], rng.randbytes(30)),
        b"\x02" + a3m.encode_routed([], b""),
        b"\x03" + a3m.encode_fields({"protocolId": 4, "credits": 250, "code": "1",
                                     "x": 0.5, "ok": True}),
    ]

    def check(data: bytes, result: object, kind: str) -> str | None:
        # Compared encoded: a map may hold a NaN, which equals nothing.
        once = encode(result)  # type: ignore[arg-type]
        again = encode(decode(once))
        return None if again == once else f"re-encodes to {once.hex()}, then {again.hex()}"

    return Harness(corpus=corpus, decode=decode, check=check)


def _exon_id(rng: Random) -> str:
    return rng.choice(("a", "node-1", "127.0.0.1:7001", "n\u00f3", "x" * exon_transport.MAX_ID))


def _i64(rng: Random) -> int:
    return rng.choice((0, 1, 2500, 2**31, 2**63 - 1, rng.getrandbits(63)))


def _build_exon_transport(rng: Random) -> Harness:
    et = exon_transport
    corpus = []
    for _ in range(4):
        src, dst = _exon_id(rng), _exon_id(rng)
        bodies: list[et.Body] = [
            et.ReqSlots(_i64(rng), _i64(rng), _i64(rng), rng.choice((0.0, 10.0, rng.random()))),
            et.Slots(_i64(rng), _i64(rng), _i64(rng)),
            et.Token(_i64(rng), _i64(rng), rng.randbytes(rng.choice((0, 1, 100)))),
            et.Token(_i64(rng), _i64(rng), rng.randbytes(et.max_payload(src, dst))),
            et.Ack(_i64(rng), tuple(_i64(rng) for _ in range(rng.choice((1, 1, 3))))),
        ]
        corpus += [et.encode(et.ExonDatagram(src, dst, body)) for body in bodies]
    return Harness(corpus=corpus, decode=et.decode, check=_round_trip(et.encode))


_EXON_STREAM_LIMITS = exon.ExonLimits(max_frame=4096)


def _build_exon_stream(rng: Random) -> Harness:
    frames = [exon.encode(m) for m in _exon_messages(rng)]
    corpus = [b"".join(rng.sample(frames, rng.randint(1, 5))) for _ in range(40)]

    def feed(data: bytes, chunked: bool) -> tuple[list[exon.SocketMessage], int]:
        """The messages of ``data`` and the most the reader ever held buffered."""
        reader = exon.FrameReader(limits=_EXON_STREAM_LIMITS)
        messages: list[exon.SocketMessage] = []
        most = 0
        pieces = _chunks(_seeded_rng(data), data) if chunked else iter((data,))
        for piece in pieces:
            messages += reader.feed(piece)
            most = max(most, reader.buffered)
        return messages, most

    def check(data: bytes, result: object, kind: str) -> str | None:
        assert isinstance(result, tuple)
        messages, most = result
        if most >= _EXON_STREAM_LIMITS.max_frame:
            return f"the reader held {most} bytes, more than one frame"
        try:
            whole, _ = feed(data, chunked=False)
        except DecodeError as exc:
            return f"fed whole, the stream fails ({exc}); fed in chunks, it does not"
        return None if whole == messages else "fed whole and in chunks, the messages differ"

    return Harness(corpus=corpus, decode=lambda data: feed(data, chunked=True), check=check)


_FRAME_BOUND = 4096


def _build_framing(rng: Random) -> Harness:
    corpus = [
        framing.encode_frames(
            [
                rng.randbytes(rng.choice((0, 1, 10, 300, _FRAME_BOUND)))
                for _ in range(rng.randint(1, 4))
            ],
            max_size=_FRAME_BOUND,
        )
        for _ in range(40)
    ]

    def feed(data: bytes, chunked: bool) -> tuple[list[bytes], int]:
        """The frames of ``data`` and the most the decoder ever held buffered."""
        decoder = framing.FrameDecoder(max_size=_FRAME_BOUND)
        frames: list[bytes] = []
        most = 0
        pieces = _chunks(_seeded_rng(data), data) if chunked else iter((data,))
        for piece in pieces:
            frames += decoder.feed(piece)
            most = max(most, decoder.buffered)
        decoder.close()
        return frames, most

    def check(data: bytes, result: object, kind: str) -> str | None:
        assert isinstance(result, tuple)
        frames, most = result
        if most >= framing.HEADER_SIZE + _FRAME_BOUND:
            return f"the decoder held {most} bytes, more than one frame"
        try:
            whole, _ = feed(data, chunked=False)
        except DecodeError as exc:
            return f"fed whole, the stream fails ({exc}); fed in chunks, it does not"
        return None if whole == frames else "fed whole and in chunks, the frames differ"

    return Harness(corpus=corpus, decode=lambda data: feed(data, chunked=True), check=check)


_SNAPPY_BOUND = 65_536


def _build_snappy(rng: Random) -> Harness:
    texts = [
        b"",
        b"a",
        b"abc" * 1000,
        rng.randbytes(500),
        bytes(_SNAPPY_BOUND),
        b"hello world " * 50,
    ]
    corpus = [snappy.compress(t) for t in texts]

    def check(data: bytes, result: object, kind: str) -> str | None:
        assert isinstance(result, bytes)
        return f"inflated to {len(result)} bytes" if len(result) > _SNAPPY_BOUND else None

    return Harness(
        corpus=corpus,
        decode=lambda data: snappy.decompress(data, max_size=_SNAPPY_BOUND),
        check=check,
    )


def _terms(rng: Random) -> list[object]:
    return [
        None,
        True,
        False,
        0,
        255,
        256,
        -1,
        2**31 - 1,
        -(2**31),
        2**31,
        2**64,
        -(2**100),
        1.5,
        -0.0,
        1e308,
        "",
        "text ñ 界",
        b"\x00\xff",
        [],
        [1, 2, 3],
        [[[]]],
        (1, "a"),
        tuple(range(300)),
        {"a": 1, "b": [None, True]},
        {1: 2, (1, 2): {}},
        etf.Atom("ok"),
        etf.Atom("é" * 100),
        [{"nested": [{"deep": (1.25, etf.Atom("x"))}]}],
        {"op": 4, "d": {"payload": rng.randbytes(50), "list": list(range(20))}},
        list(range(200)),
        "x" * 300,
    ]


def _build_etf(rng: Random) -> Harness:
    corpus = [etf.encode(t) for t in _terms(rng)]
    inner = etf.encode({"compressed": list(range(100)), "text": "abc" * 100})[1:]
    corpus += [
        bytes((131, 80)) + len(inner).to_bytes(4, "big") + zlib.compress(inner),
        bytes((131, 99)) + b"%.20e" % 3.25 + bytes(31 - len(b"%.20e" % 3.25)),
        bytes((131, 100, 0, 4)) + "néé".encode("latin-1") + b"x",  # ATOM_EXT, Latin-1
        bytes((131, 115, 4)) + b"true",  # SMALL_ATOM_EXT
        bytes((131, 107, 0, 3)) + b"abc",  # STRING_EXT
        bytes((131, 111, 0, 0, 0, 2, 1, 0xFF, 0xFF)),  # LARGE_BIG_EXT
        bytes((131, 105, 0, 0, 0, 1, 97, 1)),  # LARGE_TUPLE_EXT
    ]
    return Harness(corpus=corpus, decode=etf.decode, check=_re_decode(etf.encode, etf.decode))


def _json_values(rng: Random, depth: int = 0) -> object:
    choice = rng.randrange(10 if depth < 4 else 6)
    if choice == 0:
        return rng.choice((None, True, False))
    if choice == 1:
        return rng.choice((0, -1, 2**63 - 1, -(2**63), 2**64 - 1, rng.getrandbits(40)))
    if choice == 2:
        return rng.choice((0.5, -1e300, 3.0, 1e-300))
    if choice in (3, 4, 5):
        return rng.choice(("", "hello", 'ñ 界 \n "quoted"', "\u0000", "a" * 100))
    if choice in (6, 7):
        return [_json_values(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f"key{i}": _json_values(rng, depth + 1) for i in range(rng.randint(0, 4))}


def _packets(rng: Random) -> list[gateway.Packet]:
    packets = [
        gateway.Packet(op=gateway.Op.HELLO, d={"heartbeat_interval": 45000}, ts=1_700_000_000_000),
        gateway.Packet(op=gateway.Op.HEARTBEAT, d=None),
        gateway.Packet(op=gateway.Op.DISPATCH, d={"nonce": None, "payload": [1, 2]}, t="SEND"),
    ]
    packets += [
        gateway.Packet(
            op=rng.choice(list(gateway.Op)),
            d=_json_values(rng),
            t=rng.choice((None, "SEND", "QUEUE", "ñ")),
            ts=rng.choice((None, 0, 2**63 - 1)),
        )
        for _ in range(40)
    ]
    return packets


def _build_gateway(encoding: gateway.Encoding) -> Callable[[Random], Harness]:
    def build(rng: Random) -> Harness:
        def as_bytes(packet: gateway.Packet, enc: gateway.Encoding) -> bytes:
            out = gateway.encode_packet(packet, enc)
            return out.encode() if isinstance(out, str) else out

        corpus = [as_bytes(p, encoding) for p in _packets(rng)]
        if encoding == "json":
            corpus += [b'{"op":1}', b'{"op": 5, "d": 3, "extra": [1]}', b' {"op":0,"t":null} ']

        def decode(data: bytes) -> object:
            # JSON arrives in text frames: undecodable bytes become lone surrogates, which
            # is what a str can hold that UTF-8 cannot.
            frame = data.decode("utf-8", "surrogateescape") if encoding == "json" else data
            return gateway.decode_packet(frame, encoding)

        def check(data: bytes, result: object, kind: str) -> str | None:
            # The module's promise: whatever decodes re-encodes in every encoding.
            assert isinstance(result, gateway.Packet)
            for other in gateway.ENCODINGS:
                frame = gateway.encode_packet(result, other)
                again = gateway.decode_packet(frame, other)
                if again != result:
                    return f"re-encoded as {other}, decodes to {again!r}"
            return None

        return Harness(corpus=corpus, decode=decode, check=check)

    return build


def _build_ping(rng: Random) -> Harness:
    corpus = [
        ping.encode(ping.PingMessage(type=kind, seq=_u32(rng), sender=sender))
        for kind in ping.PingType
        for sender in ("a", "node-1", "界" * 85, "x" * 255)
    ]
    return Harness(corpus=corpus, decode=ping.decode, check=_round_trip(ping.encode))


def _build_gateway_cluster(rng: Random) -> Harness:
    client = ["app", "c1", False, "json", "10.0.0.9", True, False, {"k": ["integer", 1]}]
    reroute = ["app", "c0", {"application": "app", "ops": []}, 1]
    records: list[gateway_cluster.Record] = [
        ["S"], ["J", client], ["E"], ["L", "app", "c1"], ["M", "app", "c1", {"k": ["string", "v"]}],
        ["D", "n1/7", "SEND", {"nonce": None, "payload": [1, 2]}, [["app", "c1"]], reroute],
        ["D", None, "BROADCAST", {"payload": "x"}, [["app", "c1"], ["app", "c2"]], None],
        ["U", "SEND", {"payload": 1}, reroute], ["A", _u32(rng), _u32(rng), False], ["R"],
    ]
    header = gateway_cluster.Header(
        "n1", rng.getrandbits(64), rng.getrandbits(64), rng.getrandbits(64), 1 + _u32(rng), 1
    )
    corpus = [gateway_cluster.encode_batch(header, [r]) for r in records]
    corpus.append(gateway_cluster.encode_batch(header, records))
    corpus.append(gateway_cluster.encode_batch(header._replace(seq=0), [["A", 1, 2, True]]))

    def decode(data: bytes) -> object:
        return gateway_cluster.decode_batch(data, max_size=1 << 20)

    def encode(result: Any) -> bytes:
        return gateway_cluster.encode_batch(*result)

    return Harness(corpus=corpus, decode=decode, check=_re_decode(encode, decode))


def _gateway_cluster_worst(n: int) -> bytes:
    """A batch of as many empty-identity deliveries as fit: nested lists, each decoded."""
    delivery = ["D", None, "SEND", {}, [[]] * (n // 2), None]
    packed: bytes = msgpack.packb([gateway_cluster.VERSION, "n", 1, 0, 1, 1, 1, [delivery]])
    return packed


def _build_queue_commands(rng: Random) -> Harness:
    target = {"application": "app", "ops": [{"path": "/k", "op": "$eq", "to": {"value": 1}}]}
    commands: list[queue_commands.Command] = [
        queue_commands.Push(queue="jobs", message_id=f"n1#{_u32(rng)}/7", nonce="x",
                            target=target, payload={"a": [1, 2.5, None]}, node="n1#3",
                            app="app", client="c1"),
        queue_commands.Request(queue="jobs", node="n2#1", app="app", client="c2",
                               restricted=False, metadata={"k": ["integer", 1],
                                                           "v": ["version", "1.2.3"]},
                               count=1 + _u32(rng) % 1000, session=f"s{_u32(rng)}"),
        queue_commands.Cancel(queue="jobs", node="n2#1", app="app", client="c2"),
        queue_commands.Ack(queue="jobs", message_id="n1#3/7", node="n2#1", app="app",
                           client="c2"),
        queue_commands.Expire(message_id="n1#3/7", attempt=1 + _u32(rng)),
        queue_commands.ClientGone(node="n2#1", app="app", client="c2", session="s1"),
        queue_commands.Replay(queue="jobs", ids=("a", "b")),
        queue_commands.Replay(queue="jobs", ids=None),
    ]
    corpus = [queue_commands.encode(c) for c in commands]

    def check(data: bytes, result: object, kind: str) -> str | None:
        # Bytes, not values, are compared: a NaN in a payload is not equal to itself.
        once = queue_commands.encode(result)  # type: ignore[arg-type]
        again = queue_commands.encode(queue_commands.decode(once))
        return None if again == once else f"re-encodes to {again.hex()}, not {once.hex()}"

    return Harness(corpus=corpus, decode=queue_commands.decode, check=check)


def _build_queue_report(rng: Random) -> Harness:
    corpus = [
        queue_commands.encode_report(
            queue_commands.Report(member=f"n{i}#{_u32(rng)}", position=_u32(rng),
                                  chain=f"{rng.getrandbits(64):016x}")
        )
        for i in range(4)
    ]

    def encode(result: Any) -> bytes:
        return queue_commands.encode_report(result)

    # msgpack has several encodings of a number: decode(encode(report)) is the oracle.
    return Harness(corpus=corpus, decode=queue_commands.decode_report,
                   check=_re_decode(encode, queue_commands.decode_report))


def _build_order_chunks(rng: Random) -> Harness:
    command = rng.randbytes(1 + rng.randrange(2000))
    corpus = order_chunks.split(f"n1#{_u32(rng)}/{_u32(rng)}", command)

    def check(data: bytes, result: object, _where: str) -> str | None:
        assert isinstance(result, order_chunks.Chunk)
        again = order_chunks.split(result.key, result.data)
        if result.total == 1 and again != [data]:
            return "a one-chunk command does not encode back to its bytes"
        return None

    return Harness(corpus=corpus, decode=order_chunks.decode, check=check)


def _queue_commands_worst(n: int) -> bytes:
    """A Replay naming as many one-character ids as fit: a long list, each checked."""
    packed: bytes = msgpack.packb(
        [queue_commands.VERSION, "L", "q", ["a"] * (n // 2)], use_bin_type=True
    )
    return packed


def _build_views(rng: Random) -> Harness:
    ballot = views.Ballot(round=_u32(rng), name="n1")
    members = tuple(
        views.MemberRecord(name=name, incarnation=rng.getrandbits(64), host="10.0.0.1", port=7300)
        for name in ("a", "界" * 85, "x" * 255)
    )
    bodies: list[dict[str, Any]] = [
        {"type": views.ViewsType.PREPARE, "ballot": ballot},
        {"type": views.ViewsType.PROMISE, "ballot": ballot},
        {"type": views.ViewsType.PROMISE, "ballot": ballot, "accepted": ballot, "members": members},
        {"type": views.ViewsType.PROPOSE, "ballot": ballot, "members": members},
        {"type": views.ViewsType.NACK, "ballot": ballot},
        {"type": views.ViewsType.CHANGE, "members": members[:1], "joins": members[1:]},
        {
            "type": views.ViewsType.INSTALL,
            "new_view": 7,
            "members": members,
            "installer": "a",
            "agreed": ("a", "b"),
            "state": rng.randbytes(rng.randint(0, 64)),
        },
        {"type": views.ViewsType.EXCLUDED, "new_view": 9},
        {"type": views.ViewsType.STATUS},
    ]
    corpus = [
        views.encode(views.ViewsMessage(view=rng.getrandbits(64), sender="n2", incarnation=3, **b))
        for b in bodies
    ]
    return Harness(corpus=corpus, decode=views.decode, check=_round_trip(views.encode))


def _build_jsonl(rng: Random) -> Harness:
    events = [
        TraceEvent(
            run="run-1",
            node=rng.choice(("n1", "ñ", "")),
            t=rng.choice((0.0, 1.5, 1e9)),
            layer=rng.choice(LAYERS),
            kind=rng.choice(("send", "deliver", "drop")),
            msg=rng.choice((None, "m-1")),
            peer=rng.choice((None, "n2")),
            seq=rng.choice((None, 0, 2**63 - 1)),
            size=rng.choice((None, 200)),
            attrs=rng.choice(({}, {"reason": "x", "é": "界"})),
        )
        for _ in range(30)
    ]
    corpus = [jsonl.encode_event(e) for e in events]
    return Harness(
        corpus=corpus,
        decode=jsonl.decode_event,
        check=_re_decode(jsonl.encode_event, jsonl.decode_event),
    )


def _etf_empty_lists(n: int) -> bytes:
    """An external term: a list of about ``n`` empty lists, one byte each."""
    return bytes((etf.VERSION, 108)) + n.to_bytes(4, "big") + bytes((106,)) * (n + 1)


def _gateway_worst(encoding: gateway.Encoding) -> Callable[[int], bytes]:
    def build(n: int) -> bytes:
        if encoding == "json":
            return ('{"op":1,"d":[' + ",".join(["[]"] * (n // 3)) + "]}").encode()
        if encoding == "msgpack":
            packed: bytes = msgpack.packb({"op": 1, "d": [[]] * n})
            return packed
        # {op: 1, d: [[], [], ...]} with atom keys, as the server sends it.
        head = bytes((etf.VERSION, 116, 0, 0, 0, 2, 119, 2)) + b"op" + bytes((97, 1, 119, 1))
        return head + b"d" + _etf_empty_lists(n)[1:]

    return build


def _gossip_worst(n: int) -> bytes:
    """A gossip whose seen list has as many two-byte entries as the limits allow."""
    count = min(n // 2, chatter.DEFAULT_LIMITS.max_list_length)
    netid = bytes((1, 10, 0, 0, 1, 0x75, 0x2F))
    return netid + b"\x00\x00" + varint.encode_uint(count) + b"\x00\x00" * count + b"\x00\x00\x00"


def _jsonl_worst(n: int) -> bytes:
    """A trace line whose attrs object has as many short entries as fit in ``n`` bytes."""
    attrs = ",".join(f'"{i:x}":""' for i in range(n // 8))
    head = '{"v":1,"run":"r","node":"n","t":0,"layer":"demo","kind":"k","attrs":{'
    return (head + attrs + "}}").encode()


#: Every decoder, costliest first so that the parallel run balances.
TARGETS: tuple[Target, ...] = (
    Target(name="a3m.decode_message", where="wire/a3m.py", build=_build_a3m,
           length_offsets=(1, 7)),
    Target(name="a3m.payloads", where="wire/a3m.py", build=_build_a3m_payloads,
           length_offsets=(1, 4)),
    Target(
        name="envelope.unseal", where="wire/envelope.py", build=_build_envelope, length_offsets=(6,)
    ),
    Target(
        name="gateway.decode_packet[json]",
        where="wire/gateway.py",
        build=_build_gateway("json"),
        text=True,
        worst=_gateway_worst("json"),
    ),
    Target(
        name="gateway.decode_packet[msgpack]",
        where="wire/gateway.py",
        build=_build_gateway("msgpack"),
        length_offsets=(0, 1),
        worst=_gateway_worst("msgpack"),
    ),
    Target(
        name="gateway.decode_packet[etf]",
        where="wire/gateway.py",
        build=_build_gateway("etf"),
        length_offsets=(2,),
        worst=_gateway_worst("etf"),
    ),
    Target(
        name="chatter.decode_message",
        where="wire/chatter.py",
        build=_build_chatter_message,
        length_offsets=(1,),
    ),
    Target(
        name="chatter.decode_gossip",
        where="wire/chatter.py",
        build=_build_chatter_gossip,
        length_offsets=(0,),
        worst=_gossip_worst,
    ),
    Target(
        name="etf.decode",
        where="wire/etf.py",
        build=_build_etf,
        length_offsets=(2, 3),
        worst=_etf_empty_lists,
    ),
    Target(
        name="exon.FrameReader", where="wire/exon.py", build=_build_exon_stream, length_offsets=(4,)
    ),
    Target(
        name="exon.decode", where="wire/exon.py", build=_build_exon, length_offsets=(4, 20, 26, 27)
    ),
    Target(
        name="framing.FrameDecoder",
        where="wire/framing.py",
        build=_build_framing,
        length_offsets=(0,),
    ),
    Target(
        name="trace.jsonl.decode_event",
        where="trace/jsonl.py",
        build=_build_jsonl,
        text=True,
        worst=_jsonl_worst,
    ),
    Target(
        name="snappy.decompress", where="wire/snappy.py", build=_build_snappy, length_offsets=(0,)
    ),
    Target(
        name="exon_transport.decode",
        where="wire/exon_transport.py",
        build=_build_exon_transport,
        length_offsets=(0, 2),
    ),
    Target(name="isis.decode", where="wire/isis.py", build=_build_isis, length_offsets=(0,)),
    Target(name="ping.decode", where="wire/ping.py", build=_build_ping, length_offsets=(8,)),
    Target(name="prototari.decode", where="wire/prototari.py", build=_build_prototari),
    Target(name="views.decode", where="wire/views.py", build=_build_views, length_offsets=(12,)),
    Target(
        name="gateway_cluster.decode_batch",
        where="wire/gateway_cluster.py",
        build=_build_gateway_cluster,
        length_offsets=(0, 1),
        worst=_gateway_cluster_worst,
    ),
    Target(
        name="queue_commands.decode",
        where="wire/queue_commands.py",
        build=_build_queue_commands,
        length_offsets=(0, 1),
        worst=_queue_commands_worst,
    ),
    Target(
        name="queue_commands.decode_report",
        where="wire/queue_commands.py",
        build=_build_queue_report,
        length_offsets=(0, 2),
    ),
    Target(
        name="order_chunks.decode",
        where="wire/order_chunks.py",
        build=_build_order_chunks,
        length_offsets=(4, 6, 8),
    ),
    Target(
        name="varint.decode_uint", where="wire/varint.py", build=_build_varint, length_offsets=(0,)
    ),
)
_BY_NAME = {t.name: t for t in TARGETS}


# ---------------------------------------------------------------------------- inputs


def _random_length(rng: Random) -> int:
    r = rng.random()
    if r < 0.03:
        return 0
    if r < 0.80:
        return rng.randint(1, 64)
    if r < 0.985:
        return rng.randint(65, 4096)
    if r < 0.9995:
        return rng.randint(4097, 70_000)
    return rng.randint(1 << 20, (1 << 20) + 64)  # just over every default 1 MiB bound


def _random_input(rng: Random, corpus: list[bytes], text: bool) -> bytes:
    n = _random_length(rng)
    r = rng.random()
    if r < 0.45 or not corpus:
        return rng.randbytes(n)
    if r < 0.75:  # behind a valid prefix: past the magic and version checks
        seed = rng.choice(corpus)
        return seed[: rng.randint(1, min(len(seed), 12) or 1)] + rng.randbytes(n)
    if text and r < 0.9:
        parts: list[bytes] = []
        size = 0
        while size < n:
            part = rng.choice(_JSON_TOKENS)
            parts.append(part)
            size += len(part)
        return b"".join(parts)
    return bytes(rng.choice(_INTERESTING_BYTES) for _ in range(min(n, 4096)))


def _mutate(rng: Random, data: bytes, corpus: list[bytes], offsets: tuple[int, ...]) -> bytes:
    """``data`` after one to four random mutations (see the module docstring)."""
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        size = len(buf)
        at = rng.randrange(size + 1)
        op = rng.randrange(10)
        if op == 0 and size:  # bit flips
            for _ in range(rng.randint(1, 3)):
                buf[rng.randrange(size)] ^= 1 << rng.randrange(8)
        elif op == 1 and size:
            buf[rng.randrange(size)] = rng.choice(_INTERESTING_BYTES)
        elif op == 2:
            buf[at:at] = rng.randbytes(rng.choice((1, 1, 2, 4, 16, 100)))
        elif op == 3 and size:
            del buf[at : at + rng.choice((1, 1, 2, 4, 16, 100))]
        elif op == 4:
            del buf[at:]
        elif op == 5 and corpus:
            other = rng.choice(corpus)
            buf = buf[:at] + other[rng.randrange(len(other) + 1) :]
        elif op == 6 and size:
            start = rng.randrange(size)
            buf[at:at] = buf[start : start + rng.choice((1, 4, 16, 256))] * rng.choice((1, 2, 50))
        elif op == 7 and size:  # small arithmetic on a byte: off-by-one lengths
            pos = rng.randrange(size)
            buf[pos] = (buf[pos] + rng.choice((-2, -1, 1, 2))) & 0xFF
        else:  # length inflation, at a known length field or anywhere
            pos = rng.choice(offsets) if offsets and rng.random() < 0.6 else at
            value = rng.choice(_INFLATIONS)
            buf[pos : pos + len(value)] = value
    return bytes(buf)


def _inputs(
    rng: Random, target: Target, harness: Harness, count: int
) -> Iterator[tuple[str, bytes]]:
    """``count`` random and ``count`` mutated inputs, alternately; where the target can
    craft inputs, a fifth of the mutated ones are crafted instead."""
    corpus = harness.corpus
    for index in range(2 * count):
        if index % 2 == 0:
            yield "random", _random_input(rng, corpus, target.text)
            continue
        seed = rng.choice(corpus)
        if harness.craft is not None and rng.random() < 0.2:
            yield "crafted", harness.craft(rng, seed)
            continue
        data = _mutate(rng, seed, corpus, target.length_offsets)
        while data == seed:  # an unchanged input is not a mutation
            data = _mutate(rng, seed, corpus, target.length_offsets)
        yield "mutated", data


# ---------------------------------------------------------------------------- running


@dataclass(slots=True, kw_only=True)
class Finding:
    """One distinct unexpected outcome: an exception type raised at one line, or an
    oracle failure."""

    kind: str
    message: str
    where: str
    count: int = 0
    reproducers: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class Stats:
    """What fuzzing one decoder found."""

    name: str
    where: str
    tried: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    accepted: int = 0
    accepted_by_kind: dict[str, int] = field(default_factory=dict)
    decode_errors: int = 0
    expected_other: int = 0
    findings: dict[str, Finding] = field(default_factory=dict)
    seconds: float = 0.0
    slowest_us: float = 0.0
    slowest_size: int = 0
    mem_sampled: int = 0
    peak_alloc: int = 0
    peak_alloc_size: int = 0
    over_budget: int = 0
    rss_growth_kib: int = 0
    cpu_seconds: float = 0.0
    #: Bytes allocated per input byte by the target's worst-case input (0 if it has none).
    worst_per_byte: float = 0.0
    worst_size: int = 0

    @property
    def unexpected(self) -> int:
        return sum(f.count for f in self.findings.values())

    @property
    def rejected(self) -> int:
        return self.decode_errors + self.expected_other


def _raise_site(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "?"
    path = tb.tb_frame.f_code.co_filename
    short = path.split("/site-packages/")[-1].split("/src/")[-1]
    return f"{short}:{tb.tb_lineno}"


def _record(stats: Stats, key: str, finding: Finding, data: bytes) -> None:
    known = stats.findings.setdefault(key, finding)
    known.count += 1
    if len(known.reproducers) < MAX_REPRODUCERS:
        shown = data[:MAX_REPRODUCER_BYTES].hex()
        if len(data) > MAX_REPRODUCER_BYTES:
            shown += f"... ({len(data)} bytes in all)"
        known.reproducers.append(shown)


def _classify(stats: Stats, harness: Harness, kind: str, data: bytes) -> None:
    """Decode ``data`` once and count the outcome."""
    try:
        result = harness.decode(data)
    except DecodeError:
        stats.decode_errors += 1
        return
    except Exception as exc:
        if harness.expected and isinstance(exc, harness.expected):
            stats.expected_other += 1
            return
        name = type(exc).__qualname__
        site = _raise_site(exc)
        _record(
            stats,
            f"{name}@{site}",
            Finding(kind=name, message=str(exc)[:300], where=site),
            data,
        )
        return
    stats.accepted += 1
    stats.accepted_by_kind[kind] = stats.accepted_by_kind.get(kind, 0) + 1
    if harness.check is None:
        return
    try:
        problem = harness.check(data, result, kind)
    except Exception as exc:
        problem = f"the oracle raised {type(exc).__qualname__}: {exc}"
    if problem is not None:
        _record(
            stats,
            # One finding per kind of failure, whatever the values in its text.
            "oracle:" + re.sub(r"[0-9a-f]{6,}|\d+", "#", problem)[:80],
            Finding(kind="oracle", message=problem[:300], where="accepted input"),
            data,
        )


def fuzz_target(
    name: str, *, count: int, seed: int, mem_sample: int, worst_bytes: int = WORST_CASE_BYTES
) -> Stats:
    """Fuzz one decoder with ``count`` random and ``count`` mutated inputs and return what
    was seen. Deterministic for a given ``seed``, except the stateful envelope harness."""
    target = _BY_NAME[name]
    harness = target.build(Random(f"{seed}/{name}/setup"))
    stats = Stats(name=name, where=target.where)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    cpu_started = time.process_time()
    clock = time.thread_time  # CPU time of this thread: a busy neighbour does not count
    for kind, data in _inputs(Random(f"{seed}/{name}"), target, harness, count):
        stats.tried += 1
        stats.by_kind[kind] = stats.by_kind.get(kind, 0) + 1
        t0 = clock()
        _classify(stats, harness, kind, data)
        elapsed = clock() - t0
        if elapsed * 1e6 > stats.slowest_us:
            stats.slowest_us = elapsed * 1e6
            stats.slowest_size = len(data)
    stats.seconds = time.perf_counter() - started
    stats.cpu_seconds = time.process_time() - cpu_started
    _measure_memory(stats, target, harness, mem_sample, seed)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stats.rss_growth_kib = rss_after - rss_before
    if target.worst is not None and mem_sample > 0:  # after the RSS figure: it is one input
        data = target.worst(worst_bytes)
        stats.worst_size = len(data)
        stats.worst_per_byte = _peak_allocation(harness, data) / len(data)
    return stats


def _peak_allocation(harness: Harness, data: bytes) -> int:
    """Peak bytes allocated by one decode of ``data`` (whatever its outcome)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with contextlib.suppress(Exception):
            harness.decode(data)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _measure_memory(stats: Stats, target: Target, harness: Harness, sample: int, seed: int) -> None:
    """Peak Python allocation of one call, over ``sample`` fresh inputs (tracemalloc).

    tracemalloc sees what Python allocates, which includes every buffer a decoder returns
    or copies; memory a C or Rust extension keeps privately shows in the RSS figure.
    """
    if sample <= 0:
        return
    gc.collect()
    tracemalloc.start()
    try:
        inputs = _inputs(Random(f"{seed}/{target.name}/memory"), target, harness, sample)
        for _kind, data in inputs:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            # Outcomes are counted by the main loop; only the allocation matters here.
            with contextlib.suppress(Exception):
                harness.decode(data)
            peak = tracemalloc.get_traced_memory()[1] - base
            stats.mem_sampled += 1
            if peak > stats.peak_alloc:
                stats.peak_alloc, stats.peak_alloc_size = peak, len(data)
            if peak > ALLOC_FIXED_BUDGET + ALLOC_PER_INPUT_BYTE * len(data):
                stats.over_budget += 1
                _record(
                    stats,
                    "memory",
                    Finding(
                        kind="allocation",
                        message=f"one call allocated {peak} bytes for {len(data)} input bytes",
                        where="tracemalloc",
                    ),
                    data,
                )
    finally:
        tracemalloc.stop()


def _worker(job: tuple[str, int, int, int, int]) -> Stats:
    name, count, seed, mem_sample, worst_bytes = job
    return fuzz_target(name, count=count, seed=seed, mem_sample=mem_sample, worst_bytes=worst_bytes)


def run(
    names: list[str] | None = None,
    *,
    count: int,
    seed: int = 0,
    jobs: int = 1,
    mem_sample: int | None = None,
    worst_bytes: int = WORST_CASE_BYTES,
    progress: Callable[[Stats], None] | None = None,
) -> list[Stats]:
    """Fuzz the named decoders (all by default); ``jobs > 1`` runs them in parallel, each in
    a fresh process. Returns one ``Stats`` per decoder, in ``TARGETS`` order."""
    names = [t.name for t in TARGETS] if names is None else names
    unknown = [n for n in names if n not in _BY_NAME]
    if unknown:
        raise SystemExit(f"unknown decoders {unknown}; known: {sorted(_BY_NAME)}")
    sample = max(50, min(count // 50, 5000)) if mem_sample is None else mem_sample
    work = [(name, count, seed, sample, worst_bytes) for name in names]
    results: list[Stats] = []
    if jobs <= 1:
        for job in work:
            results.append(_worker(job))
            if progress:
                progress(results[-1])
    else:
        context = multiprocessing.get_context("fork")
        with context.Pool(processes=jobs, maxtasksperchild=1) as pool:
            for stats in pool.imap_unordered(_worker, work):
                results.append(stats)
                if progress:
                    progress(stats)
    order = {name: i for i, name in enumerate(names)}
    return sorted(results, key=lambda s: order[s.name])


# ---------------------------------------------------------------------------- report


def _kib(n: int) -> str:
    return f"{n / 1024:,.0f} KiB" if n < 10 << 20 else f"{n / (1 << 20):,.1f} MiB"


def summary_table(results: list[Stats]) -> str:
    from bench._report import table

    rows: list[list[object]] = []
    for s in results:
        mutated = s.accepted_by_kind.get("mutated", 0)
        crafted = s.accepted_by_kind.get("crafted", 0)
        accepted = f"{s.accepted:,} ({mutated:,}" + (f" + {crafted:,} crafted)" if crafted else ")")
        rows.append(
            [
                f"`{s.name}`",
                f"{s.tried:,}",
                accepted,
                f"{s.decode_errors:,}",
                f"{s.expected_other:,}" if s.expected_other else "",
                f"**{s.unexpected:,}**",
                f"{_kib(s.peak_alloc)} ({s.peak_alloc_size:,} B in)",
                f"{s.rss_growth_kib / 1024:,.1f} MiB",
                f"{s.slowest_us / 1000:,.1f} ms ({s.slowest_size:,} B)",
                f"{s.worst_per_byte:,.0f}" if s.worst_size else "",
                f"{s.cpu_seconds:,.0f}",
            ]
        )
    return table(
        [
            "decoder",
            "inputs",
            "accepted (mutated)",
            "DecodeError",
            "CryptoError",
            "unexpected",
            "peak alloc/call (input)",
            "RSS growth",
            "slowest call (input)",
            "worst case (B per input B)",
            "CPU s",
        ],
        rows,
    )


def findings_text(results: list[Stats]) -> str:
    lines = []
    for s in results:
        for f in s.findings.values():
            lines.append(f"- `{s.name}`: {f.count} x {f.kind} at {f.where}: {f.message}")
            lines += [f"  - input `{hexed}`" for hexed in f.reproducers]
    return "\n".join(lines)


def markdown(results: list[Stats], *, count: int, seed: int, wall: float) -> str:
    from bench._report import machine

    total = sum(s.tried for s in results)
    unexpected = sum(s.unexpected for s in results)
    verdict = (
        "**Only `DecodeError` came out** (and `CryptoError` from `envelope.unseal`, its answer "
        "to forgeries and replays), every oracle held, and no call exceeded the allocation budget."
        if not unexpected
        else f"**{unexpected:,} unexpected outcomes**, listed below the table."
    )
    text = f"""## fuzz

Every wire decoder fed {count:,} random inputs (random bytes of random length) and {count:,}
mutated ones (valid encodings from the codecs' own encoders after bit flips, insertions, deletions,
truncations, splices and length-field inflation; for Chatter messages and envelopes a
fifth of the mutated ones are *crafted* with the key, below the cryptography). Seed {seed},
{total:,} inputs in {wall / 60:,.1f} min of wall time on 2 cores, {machine()}.

{verdict}

{summary_table(results)}

*Accepted* counts inputs that decoded (in brackets, how many of them were mutated, and
crafted: the fuzzer gets past the first checks). Accepted inputs also pass an oracle:
canonical formats re-encode to the same bytes (ISIS, ping, Prototari, Exon frames and
datagrams), the others decode, re-encode and decode to the same value (gossip, ETF, trace
lines; gateway packets in all three encodings), stream readers give the same messages fed
whole or in random chunks and never buffer more than one frame, and a blindly mutated
envelope never opens (every corpus envelope was opened once before, so an identical one is
a replay).
*Peak alloc/call* is the largest Python allocation of one call (tracemalloc, over a sample
of the inputs, with the size of that input); the budget is 4 MiB + 64 bytes per input byte.
*Worst case* is what one hostile input of about 256 KiB built to maximise memory (nested
empty containers, the longest seen list the limits allow, many short attributes) costs in
Python objects per input byte: not a leak, but a multiple to keep in mind when choosing
`max_size` (a 1 MiB gateway frame of empty lists costs about 128 MiB while it is decoded).
*RSS growth* is the worker's peak resident memory growth over the whole run. *Slowest
call* (CPU time) shows that no input makes a decoder crawl; *CPU s* is the worker's CPU
time for all its inputs.
"""
    if unexpected:
        text += "\nUnexpected outcomes:\n\n" + findings_text(results) + "\n"
    text += (
        "\nRe-run: `.venv/bin/python -m bench.fuzz_decoders` (`--quick` for 20,000 of each, "
        "`--replay NAME HEX` to replay one input).\n"
    )
    return text


def replay(name: str, hexed: str, seed: int) -> int:
    """Decode one input and show the outcome (with the traceback of an unexpected one)."""
    target = _BY_NAME[name]
    harness = target.build(Random(f"{seed}/{name}/setup"))
    data = bytes.fromhex(hexed)
    try:
        result = harness.decode(data)
    except DecodeError as exc:
        print(f"DecodeError: {exc}")
        return 0
    except Exception as exc:
        if harness.expected and isinstance(exc, harness.expected):
            print(f"{type(exc).__name__} (expected): {exc}")
            return 0
        import traceback

        traceback.print_exc()
        return 1
    print(f"accepted: {result!r}"[:2000])
    problem = harness.check(data, result, "mutated") if harness.check else None
    if problem:
        print(f"oracle: {problem}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--count", type=int, default=None, help="random and mutated inputs per decoder (each)"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"--count {QUICK_COUNT:,}, and no document update"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="parallel processes")
    parser.add_argument("--only", action="append", help="fuzz only this decoder (repeatable)")
    parser.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    parser.add_argument("--replay", nargs=2, metavar=("NAME", "HEX"))
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay[0], args.replay[1], args.seed)
    count = args.count or (QUICK_COUNT if args.quick else DEFAULT_COUNT)

    def progress(stats: Stats) -> None:
        print(
            f"{stats.name:32} {stats.tried:>9,} inputs  accepted {stats.accepted:>9,}  "
            f"DecodeError {stats.decode_errors:>9,}  other {stats.expected_other:>7,}  "
            f"UNEXPECTED {stats.unexpected:,}  {stats.seconds:,.0f} s",
            file=sys.stderr,
            flush=True,
        )

    started = time.perf_counter()
    results = run(args.only, count=count, seed=args.seed, jobs=args.jobs, progress=progress)
    wall = time.perf_counter() - started
    text = markdown(results, count=count, seed=args.seed, wall=wall)
    print(text)
    if not (args.quick or args.no_doc or args.only):
        from bench._report import update_section

        update_section("fuzz", text)
    return 1 if any(s.unexpected for s in results) else 0


if __name__ == "__main__":
    sys.exit(main())
