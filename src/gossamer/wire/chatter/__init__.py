"""Chatter's wire format (the original wire, ``--wire original``), byte for byte, bounded, and fast.

The format as the real code (Chatter 0.0.13-0.0.15) writes it, chatter-as-coded.md §1::

    message = 0xFF | VarInt(len(C)) | C
    C       = AES-256-CTR(key, IV = "-- ScaleSmall --", P)
    P       = padding[32] | XXH32_BE(G)[4] | VarInt(len(G)) | SnappyRaw(G)
    G       = NetIDTable | current BroadcastID | seen list | remote list | distribution list
              | VarInt(type tag) | user content (no length prefix, runs to the end)

In three modules: ``ids`` (NetID, BroadcastID, type tags), ``crypto`` (the key rule and
the keystream) and ``codec`` (:class:`ChatterCodec`, which keeps the caches that make it
fast, and the gossip and message formats). There is no module state: what is cached is
owned by a codec.

Where the Chatter docs (specs/chatter.md) and the code disagree, this package follows
the code (§11): the checksum comes *before* the size, it is XXH32 (seed 0) of the
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

Speed: the decoder never decrypts the padding it ignores, and the encoder never
encrypts random padding (a uniformly random ciphertext decrypts to uniformly random
padding under a fixed keystream); see :mod:`~.crypto` for the keystream and
:mod:`~.codec` for what a codec remembers. See ``bench/chatter_codec.py``.
"""

from gossamer.wire.chatter.codec import (
    DEFAULT_LIMITS,
    SOM,
    ChatterCodec,
    Gossip,
    Limits,
    decode_gossip,
    decode_message,
    encode_gossip,
    encode_message,
)
from gossamer.wire.chatter.crypto import IV, KEY_SIZE, PADDING_SIZE, derive_key, keystream
from gossamer.wire.chatter.ids import BroadcastID, NetID, type_tag

__all__ = [
    "DEFAULT_LIMITS",
    "IV",
    "KEY_SIZE",
    "PADDING_SIZE",
    "SOM",
    "BroadcastID",
    "ChatterCodec",
    "Gossip",
    "Limits",
    "NetID",
    "decode_gossip",
    "decode_message",
    "derive_key",
    "encode_gossip",
    "encode_message",
    "keystream",
    "type_tag",
]
