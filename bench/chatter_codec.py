"""Chatter codec throughput: gossamer's codec against a naive pipeline, in the same run.

The naive pipeline is what a direct implementation of chatter-as-coded.md §1 does: the
same gossip encoder/decoder, then a new AES-256-CTR ``Cipher`` from ``cryptography`` per
message, ``xxhash`` and cramjam's raw Snappy called directly. gossamer's codec differs in
how it encrypts (Chatter's key and IV are fixed, so it rewinds pooled AES-CTR contexts
instead of creating one per message, and never touches the padding) and in its gossip
codec (inline VarInts, memoised tables, no re-validation of decoded values).

Messages carry a realistic gossip (4 seen ids, 2 remote NetIDs, 8 destinations) and
random (incompressible) user content sized so that the wire message is about 200 B or
4 KB; a text variant shows compressible content. Each figure is the best of several
interleaved rounds, so both pipelines see the same machine noise.

    .venv/bin/python -m bench.chatter_codec [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import time
from collections.abc import Callable
from functools import partial

import cramjam
import xxhash
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from bench._report import machine, table, update_section
from gossamer.errors import DecodeError
from gossamer.wire import chatter, varint
from gossamer.wire.buffer import Buffer
from gossamer.wire.chatter import BroadcastID, Gossip, NetID

KEY = chatter.derive_key("benchmark key, not a default")


def naive_encode_gossip(g: Gossip) -> bytes:
    """The gossip G written field by field, as a first implementation would."""
    index = {netid: i for i, netid in enumerate(g.table)}
    buf = bytearray()
    varint.push_uint(buf, len(g.table))
    for netid in g.table:
        buf += netid.packed
    varint.push_uint(buf, index[g.current.origin])
    varint.push_uint(buf, g.current.seqno)
    varint.push_uint(buf, len(g.seen))
    for bid in g.seen:
        varint.push_uint(buf, index[bid.origin])
        varint.push_uint(buf, bid.seqno)
    for netids in (g.others, g.distribution):
        varint.push_uint(buf, len(netids))
        for netid in netids:
            varint.push_uint(buf, index[netid])
    varint.push_uint(buf, g.type_tag)
    buf += g.content
    return bytes(buf)


def naive_decode_gossip(data: bytes) -> Gossip:
    """The gossip G read field by field from a ``Buffer``, as a first implementation would."""
    buf = Buffer(data)
    table = []
    for _ in range(varint.pull_uint(buf)):
        raw = buf.pull_bytes(6)
        table.append(NetID(".".join(map(str, raw[:4])), int.from_bytes(raw[4:], "big")))
    current = BroadcastID(table[varint.pull_uint(buf)], varint.pull_uint(buf))
    seen = [
        BroadcastID(table[varint.pull_uint(buf)], varint.pull_uint(buf))
        for _ in range(varint.pull_uint(buf))
    ]
    others = [table[varint.pull_uint(buf)] for _ in range(varint.pull_uint(buf))]
    distribution = [table[varint.pull_uint(buf)] for _ in range(varint.pull_uint(buf))]
    return Gossip(
        current=current,
        seen=tuple(seen),
        others=tuple(others),
        distribution=tuple(distribution),
        type_tag=varint.pull_uint(buf),
        content=buf.pull_rest(),
        payload_netids=tuple(table),
    )


def naive_encode(g: Gossip, key: bytes, encode_gossip: Callable[[Gossip], bytes]) -> bytes:
    """Chatter's encoder, step by step, with a new cipher per message."""
    gossip = encode_gossip(g)
    block = bytes(cramjam.snappy.compress_raw(gossip))
    plaintext = (
        os.urandom(32)
        + xxhash.xxh32_intdigest(gossip).to_bytes(4, "big")
        + varint.encode_uint(len(gossip))
        + block
    )
    encryptor = Cipher(algorithms.AES(key), modes.CTR(chatter.IV)).encryptor()
    ciphertext = encryptor.update(plaintext) + encryptor.finalize()
    return b"\xff" + varint.encode_uint(len(ciphertext)) + ciphertext


def naive_decode(data: bytes, key: bytes, decode_gossip: Callable[[bytes], Gossip]) -> Gossip:
    """Chatter's decoder, step by step, with a new cipher per message."""
    size, pos = varint.decode_uint(data, 1)
    if data[0] != 0xFF or size != len(data) - pos:
        raise DecodeError("bad header")
    decryptor = Cipher(algorithms.AES(key), modes.CTR(chatter.IV)).decryptor()
    plaintext = decryptor.update(data[pos:]) + decryptor.finalize()
    checksum = int.from_bytes(plaintext[32:36], "big")
    _, at = varint.decode_uint(plaintext, 36)
    gossip = bytes(cramjam.snappy.decompress_raw(plaintext[at:]))
    if xxhash.xxh32_intdigest(gossip) != checksum:
        raise DecodeError("checksum mismatch")
    return decode_gossip(gossip)


def make_gossip(target: int, *, text: bool, rng: random.Random) -> Gossip:
    """A gossip whose Chatter message is about ``target`` bytes on the wire.

    Its metadata is that of the golden vector ``several_netids_and_seen_ids``: 5 NetIDs,
    3 seen ids, 2 remote NetIDs, 4 destinations.
    """
    peer = NetID.parse
    skeleton = Gossip(
        current=BroadcastID(peer("192.168.1.97:29999"), 4),
        seen=(
            BroadcastID(peer("192.168.1.100:29999"), 3),
            BroadcastID(peer("192.168.1.134:29999"), 1),
            BroadcastID(peer("172.16.0.5:29999"), 200),
        ),
        others=(peer("10.1.2.3:4000"), peer("172.16.0.5:29999")),
        distribution=(
            peer("192.168.1.134:29999"),
            peer("172.16.0.5:29999"),
            peer("192.168.1.100:29999"),
            peer("10.1.2.3:4000"),
        ),
        type_tag=chatter.type_tag("hello"),
    )
    overhead = len(chatter.encode_message(skeleton, KEY))
    size = max(1, target - overhead - 2)  # Snappy framing of incompressible content
    if text:
        words = [b"gossip", b"node", b"alpha", b"beta", b"delivered", b"seq", b"12", b"ok"]
        content = b" ".join(rng.choice(words) for _ in range(size))[:size]
    else:
        content = rng.randbytes(size)
    return dataclasses.replace(skeleton, content=content)


def per_call(fn: Callable[[], object], number: int) -> float:
    """Seconds per call of ``fn``, over ``number`` calls."""
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def best_of(fns: list[Callable[[], object]], *, number: int, rounds: int) -> list[float]:
    """Best per-call time of each function, from interleaved rounds."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], per_call(fn, number))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds, for CI")
    args = parser.parse_args(argv)
    number, rounds = (1_000, 3) if args.quick else (10_000, 7)

    rng = random.Random(20160304)
    cases = [
        ("200 B", make_gossip(200, text=False, rng=rng)),
        ("4 KB", make_gossip(4096, text=False, rng=rng)),
        ("4 KB text", make_gossip(4096, text=True, rng=rng)),
    ]
    # gossamer as a long-lived sender or receiver uses it: one codec, kept.
    codec = chatter.ChatterCodec()
    ours_gossip_enc, ours_gossip_dec = codec.encode_gossip, codec.decode_gossip
    rows: list[list[object]] = []
    worst = float("inf")
    for label, g in cases:
        message = codec.encode_message(g, KEY)
        # All pipelines speak the same format: each decodes the others' output.
        assert codec.decode_message(naive_encode(g, KEY, naive_encode_gossip), KEY) == g
        assert naive_decode(message, KEY, naive_decode_gossip) == g
        assert naive_decode(message, KEY, ours_gossip_dec) == g
        benches: list[tuple[str, list[Callable[[], object]]]] = [
            (
                "encode",
                [
                    partial(naive_encode, g, KEY, naive_encode_gossip),
                    partial(naive_encode, g, KEY, ours_gossip_enc),
                    partial(codec.encode_message, g, KEY),
                ],
            ),
            (
                "decode",
                [
                    partial(naive_decode, message, KEY, naive_decode_gossip),
                    partial(naive_decode, message, KEY, ours_gossip_dec),
                    partial(codec.decode_message, message, KEY),
                ],
            ),
        ]
        for direction, fns in benches:
            t_naive, t_crypto, t_ours = best_of(fns, number=number, rounds=rounds)
            if label != "4 KB text":
                worst = min(worst, t_naive / t_ours)
            rows.append(
                [
                    label,
                    len(message),
                    direction,
                    f"{1 / t_naive:,.0f}",
                    f"{1 / t_ours:,.0f}",
                    f"**{t_naive / t_ours:.2f}x**",
                    f"{t_crypto / t_ours:.2f}x",
                ]
            )
            print(
                f"{label:10s} {len(message):5d} B {direction}: naive {t_naive * 1e6:6.2f} us, "
                f"naive crypto only {t_crypto * 1e6:6.2f} us, gossamer {t_ours * 1e6:6.2f} us"
            )

    markdown = "\n".join(
        [
            "## chatter-codec",
            "",
            "Chatter wire messages (`gossamer.wire.chatter`) encoded and decoded per second "
            "by one core. *Naive* is a direct implementation of chatter-as-coded.md §1: a "
            "field-by-field gossip codec over `Buffer` and the public constructors, then a new "
            "AES-256-CTR `Cipher` per message, xxhash and cramjam Snappy called directly. "
            "*Naive crypto only* is that pipeline around gossamer's own gossip codec, so its "
            "column shows what the fixed-keystream handling alone gains: pooled AES-CTR "
            "contexts rewound with `reset_nonce` instead of one new context per message, no "
            "work on the ignored padding, one pass over the bytes.",
            "",
            "Gossip metadata as in the vector `several_netids_and_seen_ids` (5 NetIDs, 3 seen, "
            "2 remote, 4 destinations); the same table recurs in every message, as it does "
            "between one sender's messages. User content is random bytes, except in the text "
            f"row. Best of {rounds} interleaved rounds of {number:,} calls"
            + (" (`--quick`)" if args.quick else "")
            + f"; {machine()}.",
            "",
            table(
                [
                    "message",
                    "bytes",
                    "direction",
                    "naive msg/s",
                    "gossamer msg/s",
                    "vs naive",
                    "vs naive crypto only",
                ],
                rows,
            ),
            "",
            f"Worst ratio against the naive pipeline over the random-content rows: {worst:.2f}x "
            "(goal: 2x). What remains is mostly fixed per-message work both pipelines share: "
            "Snappy (the most in the text row, whose content compresses 3:1), XXH32 over the "
            "gossip, and building or reading the gossip in Python. Also measured and not "
            "used: XOR with a cached keystream through `int.from_bytes` (beaten by a rewound "
            "context above ~100 bytes: two conversions cost ~0.65 ns per byte each).",
            "",
            "Re-run: `.venv/bin/python -m bench.chatter_codec` (`--quick` for a short run).",
        ]
    )
    update_section("chatter-codec", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
