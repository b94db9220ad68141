"""Chatter's wire format: golden vectors, round trips, damaged input, keys and limits.

Vectors: shared/vectors/chatter/{netid,type_tags,gossip,messages}.json, produced by the
real Chatter 0.0.14 code (chatter-as-coded.md §14). VarInt vectors are in test_varint.py.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from pathlib import Path
from typing import Any

import cramjam
import pytest
import xxhash
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import ConfigError, DecodeError
from gossamer.wire import chatter, snappy, varint
from gossamer.wire.buffer import Buffer
from gossamer.wire.chatter import BroadcastID, Gossip, Limits, NetID, crypto

# Golden vectors copied from shared/vectors/chatter (produced by the real Chatter code).
VECTORS = Path(__file__).resolve().parent / "vectors" / "chatter"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return data


NETIDS = load("netid.json")
TAGS = load("type_tags.json")
GOSSIPS = load("gossip.json")["gossips"]
MESSAGES_FILE = load("messages.json")
MESSAGES = MESSAGES_FILE["messages"]

KEY = chatter.derive_key("a test key that nobody else uses")


def nid(text: str) -> NetID:
    return NetID.parse(text)


def bid(spec: dict[str, Any]) -> BroadcastID:
    return BroadcastID(nid(spec["origin"]), spec["seqno"])


def payload_netids(payload: dict[str, Any]) -> list[NetID]:
    """The NetIDs a vector's payload refers to (its ``extract_netids`` result)."""
    if payload["type"] == "broadcast_id":
        return [nid(payload["origin"])]
    return [nid(text) for text in payload.get("netids", [])]


def payload_content(payload: dict[str, Any], table: tuple[NetID, ...]) -> bytes:
    """Encode a vector's payload the way its Chatter handler did, against ``table``."""
    if payload["type"] == "broadcast_id":  # BroadcastID.encode_with: index, seqno
        origin = table.index(nid(payload["origin"]))
        return varint.encode_uint(origin) + varint.encode_uint(payload["seqno"])
    if payload["type"] == "peer_list":  # a NetID list: count, then indexes
        refs = [table.index(nid(text)) for text in payload["netids"]]
        return varint.encode_uint(len(refs)) + b"".join(map(varint.encode_uint, refs))
    return bytes.fromhex(payload.get("text_hex", ""))


def gossip_of(spec: dict[str, Any]) -> Gossip:
    """The Gossip that a vector's ``gossip`` structure describes."""
    payload = spec["payload"]
    fields: dict[str, Any] = {
        "current": bid(spec["current_id"]),
        "seen": [bid(s) for s in spec["seen_ids"]],
        "others": [nid(t) for t in spec["other_ids"]],
        "distribution": [nid(t) for t in spec["distribution_list"]],
        "type_tag": chatter.type_tag(payload["type"]),
        "payload_netids": payload_netids(payload),
    }
    without_content = Gossip(**fields)
    return Gossip(**fields, content=payload_content(payload, without_content.table))


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("entry", NETIDS["entries"], ids=lambda e: e["netid"])
def test_netid_entry_vectors(entry: dict[str, str]) -> None:
    netid = nid(entry["netid"])
    assert netid.packed.hex() == entry["hex"]
    assert NetID.unpack(bytes.fromhex(entry["hex"])) == netid
    assert str(netid) == entry["netid"]


def test_netid_table_is_sorted_unique_by_octets_then_port() -> None:
    example = NETIDS["table_example"]
    given_order = [nid(t) for t in example["input_order"]]
    g = Gossip(
        current=BroadcastID(given_order[0], 1),
        type_tag=0,
        content=b"x",
        payload_netids=(*given_order, *given_order[:2]),  # duplicates collapse
    )
    assert [str(n) for n in g.table] == example["sorted_order"]
    assert chatter.encode_gossip(g).startswith(bytes.fromhex(example["table_hex"]))


def test_empty_table_cannot_carry_a_gossip() -> None:
    # Table "00" (netid.json) leaves the current BroadcastID nothing to refer to.
    assert varint.encode_uint(0).hex() == NETIDS["empty_table_hex"]
    with pytest.raises(DecodeError, match="past the NetID table"):
        chatter.decode_gossip(
            bytes.fromhex(NETIDS["empty_table_hex"]) + b"\x00\x01\x00\x00\x00\x00"
        )


@pytest.mark.parametrize(
    "host", ["10.0.0", "10.0.0.256", "010.0.0.1", "10.0.0.-1", "a.b.c.d", "::1", "1.2.3.4 "]
)
def test_netid_refuses_non_canonical_ipv4(host: str) -> None:
    with pytest.raises(ValueError, match="IPv4"):
        NetID(host, 1)


@pytest.mark.parametrize("port", [-1, 65536])
def test_netid_refuses_bad_port(port: int) -> None:
    with pytest.raises(ValueError, match="port"):
        NetID("1.2.3.4", port)


def test_netid_unpack_wrong_length() -> None:
    with pytest.raises(DecodeError, match="6 bytes"):
        NetID.unpack(b"\x01\x02\x03")


def test_values_refuse_out_of_range_numbers() -> None:
    origin = nid("10.0.0.1:1")
    with pytest.raises(ValueError, match="seqno"):
        BroadcastID(origin, 2**64)
    with pytest.raises(ValueError, match="type_tag"):
        Gossip(current=BroadcastID(origin, 1), type_tag=2**32)
    with pytest.raises(TypeError, match="distribution"):
        Gossip(current=BroadcastID(origin, 1), type_tag=1, distribution=("10.0.0.1:1",))  # type: ignore[arg-type]


@pytest.mark.parametrize("tag", TAGS["tags"], ids=lambda t: t["atom"])
def test_type_tag_vectors(tag: dict[str, Any]) -> None:
    value = chatter.type_tag(tag["hashed_string"])
    assert value == tag["xxh32_seed0"]
    assert value.to_bytes(4, "big").hex() == tag["xxh32_hex"]
    assert varint.encode_uint(value).hex() == tag["varint_hex"]


# --------------------------------------------------------------------------- gossip


@pytest.mark.parametrize("vector", GOSSIPS, ids=lambda v: v["name"])
def test_gossip_vector_decodes_to_its_structure(vector: dict[str, Any]) -> None:
    encoded = bytes.fromhex(vector["encoded_hex"])
    assert len(encoded) == vector["encoded_length"]
    decoded = chatter.decode_gossip(encoded)
    expected = gossip_of(vector["gossip"])
    assert decoded == expected
    assert [str(n) for n in decoded.table] == vector["netid_table"]
    assert decoded.type_tag == chatter.type_tag(vector["type_tag_string"])
    assert decoded.content.hex() == vector["fields_hex"]["user_content"]
    assert xxhash.xxh32_intdigest(encoded) == vector["xxh32_of_encoded"]


@pytest.mark.parametrize("vector", GOSSIPS, ids=lambda v: v["name"])
def test_gossip_vector_encodes_byte_for_byte(vector: dict[str, Any]) -> None:
    g = gossip_of(vector["gossip"])
    encoded = chatter.encode_gossip(g)
    assert encoded.hex() == vector["encoded_hex"]
    fields = vector["fields_hex"]
    assert encoded.hex() == "".join(
        fields[k]
        for k in (
            "netid_table",
            "current_broadcast_id",
            "seen_broadcast_ids",
            "remote_netids",
            "distribution_list",
            "payload_type_tag",
            "user_content",
        )
    )
    # Re-encoding what was decoded gives the same bytes (the table is the wire's).
    assert chatter.encode_gossip(chatter.decode_gossip(encoded)) == encoded


@pytest.mark.parametrize("vector", GOSSIPS, ids=lambda v: v["name"])
def test_gossip_vector_snappy_block(vector: dict[str, Any]) -> None:
    encoded = bytes.fromhex(vector["encoded_hex"])
    block = bytes.fromhex(vector["snappy_raw_hex"])
    # Any raw Snappy encoder interoperates; cramjam also reproduces snappy 1.1.1's bytes.
    assert snappy.decompress(block, max_size=len(encoded)) == encoded
    assert snappy.compress(encoded) == block


def test_zero_length_content_decodes() -> None:
    # Chatter's handler layer raises on it (§6.4); the codec leaves that to the caller.
    (vector,) = [v for v in GOSSIPS if v["name"] == "zero_length_payload"]
    assert vector["decode"]["result"] == "raised"
    decoded = chatter.decode_gossip(bytes.fromhex(vector["encoded_hex"]))
    assert decoded.content == b""
    assert decoded.type_tag == chatter.type_tag("empty")


def test_payload_netids_enter_the_table_and_shift_indexes() -> None:
    (vector,) = [v for v in GOSSIPS if v["name"] == "payload_with_netids"]
    decoded = chatter.decode_gossip(bytes.fromhex(vector["encoded_hex"]))
    # The content is "3 NetIDs: table[2], table[1], table[0]" in the payload's order.
    assert decoded.content == bytes([3, 2, 1, 0])
    assert [decoded.table[i] for i in decoded.content[1:]] == [
        nid(t) for t in vector["gossip"]["payload"]["netids"]
    ]
    without = dataclasses.replace(decoded, payload_netids=())
    assert nid("10.0.0.3:29999") not in without.table


def test_large_table_uses_two_byte_indexes() -> None:
    # Like the reference's vector large_130_netids_seqno_300 (count "83 01"): here the
    # table has 130 entries, "82 01".
    peers = [NetID(f"10.0.{i // 256}.{i % 256}", 29999) for i in range(130)]
    g = Gossip(
        current=BroadcastID(peers[0], 300), type_tag=1, content=b"x", distribution=tuple(peers)
    )
    encoded = chatter.encode_gossip(g)
    assert encoded[:2] == b"\x82\x01"
    after_table = encoded[2 + 6 * 130 :]
    assert after_table[:3] == b"\x00\xac\x02"  # index 0, seqno 300
    dist = after_table[5:]
    assert dist[:2] == b"\x82\x01"  # 130 entries
    assert dist[2 + 127 : 2 + 130] == b"\x7f\x80\x01"  # index 127 is 1 byte, 128 is 2
    assert chatter.decode_gossip(encoded) == g


def test_non_minimal_varints_are_accepted() -> None:
    (vector,) = [v for v in GOSSIPS if v["name"] == "minimal"]
    encoded = bytes.fromhex(vector["encoded_hex"])
    # current BroadcastID "00 01" rewritten as "80 00 81 00": same values, longer forms.
    stretched = encoded[:7] + b"\x80\x00\x81\x00" + encoded[9:]
    assert chatter.decode_gossip(stretched) == chatter.decode_gossip(encoded)


def test_unsorted_or_duplicate_table_is_refused() -> None:
    a, b = nid("10.0.0.1:1").packed, nid("10.0.0.2:1").packed
    rest = b"\x00\x01\x00\x00\x00\x05x"
    assert chatter.decode_gossip(b"\x02" + a + b + rest).table == (
        nid("10.0.0.1:1"),
        nid("10.0.0.2:1"),
    )
    for table in (b + a, a + a):
        with pytest.raises(DecodeError, match="sorted and unique"):
            chatter.decode_gossip(b"\x02" + table + rest)


def test_gossip_reference_out_of_table() -> None:
    a = nid("10.0.0.1:1").packed
    cases = {
        "current origin": b"\x01" + a + b"\x01\x01\x00\x00\x00\x05",
        "seen origin": b"\x01" + a + b"\x00\x01\x01\x05\x01\x00\x00\x05",
        "remote NetIDs": b"\x01" + a + b"\x00\x01\x00\x01\x01\x00\x05",
        "distribution list": b"\x01" + a + b"\x00\x01\x00\x00\x01\x03\x05",
    }
    for what, data in cases.items():
        with pytest.raises(DecodeError, match=f"{what} refers past the NetID table"):
            chatter.decode_gossip(data)


def test_gossip_truncated_anywhere() -> None:
    (vector,) = [v for v in GOSSIPS if v["name"] == "several_netids_and_seen_ids"]
    encoded = bytes.fromhex(vector["encoded_hex"])
    tag_end = len(encoded) - len(bytes.fromhex(vector["fields_hex"]["user_content"]))
    for cut in range(tag_end):
        with pytest.raises(DecodeError):
            chatter.decode_gossip(encoded[:cut])


def test_gossip_limits() -> None:
    (vector,) = [v for v in GOSSIPS if v["name"] == "several_netids_and_seen_ids"]
    encoded = bytes.fromhex(vector["encoded_hex"])
    g = chatter.decode_gossip(encoded)
    with pytest.raises(DecodeError, match="max_table_entries"):
        chatter.decode_gossip(encoded, limits=Limits(max_table_entries=4))
    with pytest.raises(DecodeError, match="seen list length"):
        chatter.decode_gossip(encoded, limits=Limits(max_list_length=2))
    with pytest.raises(DecodeError, match="max_gossip_size"):
        chatter.decode_gossip(encoded, limits=Limits(max_gossip_size=len(encoded) - 1))
    with pytest.raises(ValueError, match="max_table_entries"):
        chatter.encode_gossip(g, limits=Limits(max_table_entries=4))
    with pytest.raises(ValueError, match="max_list_length"):
        chatter.encode_gossip(g, limits=Limits(max_list_length=3))
    with pytest.raises(ValueError, match="max_gossip_size"):
        chatter.encode_gossip(g, limits=Limits(max_gossip_size=len(encoded) - 1))
    # A list count claiming more entries than bytes left is refused before any loop.
    with pytest.raises(DecodeError, match="distribution list length"):
        chatter.decode_gossip(encoded[:-12] + b"\x7f" + encoded[-11:])


def test_pull_and_push_gossip() -> None:
    (vector,) = [v for v in GOSSIPS if v["name"] == "upstream_unit_test"]
    encoded = bytes.fromhex(vector["encoded_hex"])
    codec = chatter.ChatterCodec()
    buf = Buffer(b"head" + encoded, offset=4)
    g = codec.pull_gossip(buf)
    assert buf.eof()
    out = bytearray(b"head")
    codec.push_gossip(out, g)
    assert bytes(out) == b"head" + encoded


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize(
    "case", MESSAGES_FILE["key_derivation"], ids=lambda c: str(c["configured"])[:20]
)
def test_key_derivation_vectors(case: dict[str, Any]) -> None:
    if case["configured"] is None:
        # Chatter falls back to a public key here; gossamer refuses (no default key).
        with pytest.raises(ConfigError, match="no default key"):
            chatter.derive_key(case["configured"])  # type: ignore[arg-type]  # None on purpose
        return
    assert chatter.derive_key(case["configured"]).hex() == case["effective_key_hex"]
    assert chatter.derive_key(case["configured"].encode()).hex() == case["effective_key_hex"]


@pytest.mark.parametrize("missing", [b"", "", None])
def test_missing_key_is_a_config_error(missing: Any) -> None:
    g = chatter.decode_gossip(bytes.fromhex(GOSSIPS[0]["encoded_hex"]))
    message = chatter.encode_message(g, KEY)
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ConfigError, match="no default key"):
        chatter.derive_key(missing)
    with pytest.raises(ConfigError, match="no default key"):
        chatter.encode_message(g, missing)
    with pytest.raises(ConfigError, match="no default key"):
        chatter.decode_message(message, missing)


@pytest.mark.parametrize("key", [b"secret", b"x" * 33, "01234567890123456789012345678901"])
def test_underived_key_is_a_config_error(key: Any) -> None:
    g = chatter.decode_gossip(bytes.fromhex(GOSSIPS[0]["encoded_hex"]))
    with pytest.raises(ConfigError, match=r"32 bytes|must be bytes"):
        chatter.encode_message(g, key)


def test_keystream_vector_and_independent_aes() -> None:
    vector = MESSAGES_FILE["keystream_first_64_bytes_default_key"]
    key = vector["key_ascii"].encode()
    assert vector["iv_ascii"].encode() == chatter.IV
    assert chatter.keystream(key, 64).hex() == vector["keystream_hex"]
    # And the same from a fresh, independent AES-CTR context.
    fresh = Cipher(algorithms.AES(key), modes.CTR(chatter.IV)).encryptor().update(bytes(5000))
    assert chatter.keystream(key, 5000) == fresh


def test_keystream_without_reset_nonce_matches() -> None:
    # cryptography < 43 has no CipherContext.reset_nonce; the codec then creates a
    # context per message. Both ways must give the same bytes.
    rewound = crypto.KeyState(KEY)
    fresh = crypto.KeyState(KEY)
    fresh.rewindable = False
    fresh.pool.clear()
    data = bytes(range(256)) * 20
    for counter in (chatter.IV, crypto.IV_AFTER_PADDING):
        for size in (0, 1, 17, 200, 5000):
            assert rewound.xor(counter, data[:size]) == fresh.xor(counter, data[:size])
    assert not fresh.pool
    assert fresh.xor(chatter.IV, bytes(64)) == chatter.keystream(KEY, 64)


def test_no_module_state_caches_belong_to_a_codec() -> None:
    # What the codec remembers lives in a ChatterCodec, never in a module: no module of
    # the package holds a mutable container, so two codecs (or two tests) share nothing.
    import types

    from gossamer.wire.chatter import codec, ids

    for module in (chatter, ids, crypto, codec):
        mutable = sorted(
            name
            for name, value in vars(module).items()
            if not name.startswith("__") and not isinstance(value, types.ModuleType)
            and isinstance(value, dict | list | set | bytearray)
        )
        assert mutable == [], f"{module.__name__} keeps state: {mutable}"
    first, second = chatter.ChatterCodec(), chatter.ChatterCodec()
    g = gossip_of(MESSAGES[0]["gossip"])
    padding = bytes.fromhex(MESSAGES[0]["padding_hex"])
    assert first.encode_message(g, MINIMAL_KEY, padding=padding) == MINIMAL_MESSAGE
    assert second.encode_message(g, MINIMAL_KEY, padding=padding) == MINIMAL_MESSAGE
    assert second.decode_message(MINIMAL_MESSAGE, MINIMAL_KEY) == g


def test_concurrent_threads_share_a_key_safely() -> None:
    # The pooled AES contexts are rewound per message; threads must never share one.
    gossips = [gossip_of(v["gossip"]) for v in MESSAGES]
    errors: list[str] = []

    start = threading.Barrier(4)

    def work(offset: int) -> None:
        start.wait()
        for i in range(1000):
            g = gossips[(i + offset) % len(gossips)]
            try:
                if chatter.decode_message(chatter.encode_message(g, KEY), KEY) != g:
                    errors.append(f"thread {offset} message {i}: wrong gossip")
            except DecodeError as exc:
                errors.append(f"thread {offset} message {i}: {exc}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


# --------------------------------------------------------------------------- messages


@pytest.mark.parametrize("vector", MESSAGES, ids=lambda v: v["name"])
def test_message_vector_decodes_to_its_structure(vector: dict[str, Any]) -> None:
    key = bytes.fromhex(vector["key_hex"])
    assert chatter.derive_key(vector["key_ascii"]) == key
    message = bytes.fromhex(vector["message_hex"])
    assert len(message) == vector["message_length"]
    decoded = chatter.decode_message(message, key)
    assert decoded == gossip_of(vector["gossip"])
    assert vector["real_decode"]["result"] == "ok"
    assert decoded == gossip_of(vector["real_decode"]["gossip"])
    assert chatter.encode_gossip(decoded).hex() == vector["uncompressed_gossip_hex"]


@pytest.mark.parametrize("vector", MESSAGES, ids=lambda v: v["name"])
def test_message_vector_encodes_byte_for_byte(vector: dict[str, Any]) -> None:
    key = bytes.fromhex(vector["key_hex"])
    padding = bytes.fromhex(vector["padding_hex"])
    g = gossip_of(vector["gossip"])
    message = chatter.encode_message(g, key, padding=padding)
    # The uncompressed level: what Chatter checksums and what any Snappy encoder keeps.
    plaintext = bytes(
        a ^ b
        for a, b in zip(
            message[vector["header_length"] :],
            chatter.keystream(key, vector["plaintext_length"]),
            strict=True,
        )
    )
    assert plaintext[:32] == padding
    assert plaintext[32:36].hex() == vector["checksum_hex"]
    size, at = varint.decode_uint(plaintext, 36)
    assert size == vector["uncompressed_size"]
    assert plaintext[36:at].hex() == vector["uncompressed_size_varint_hex"]
    assert (
        snappy.decompress(plaintext[at:], max_size=size).hex() == vector["uncompressed_gossip_hex"]
    )
    # And byte for byte: cramjam's raw Snappy matches snappy 1.1.1 on these vectors.
    assert plaintext.hex() == vector["plaintext_hex"]
    assert message.hex() == vector["message_hex"]
    assert message[vector["header_length"] :].hex() == vector["ciphertext_hex"]


def test_keystream_reuse_is_reproduced() -> None:
    # §12.1: the fixed IV makes every message a many-time pad. Chatter's two encodings
    # of one gossip differ only in the padding; so do gossamer's.
    demo = MESSAGES_FILE["keystream_reuse_demo"]
    a, b = bytes.fromhex(demo["ciphertext_a_hex"]), bytes.fromhex(demo["ciphertext_b_hex"])
    assert bytes(x ^ y for x, y in zip(a, b, strict=True)).hex() == demo["pt_xor_hex"]
    g = gossip_of(MESSAGES[0]["gossip"])
    key = bytes.fromhex(MESSAGES[0]["key_hex"])
    one, two = chatter.encode_message(g, key), chatter.encode_message(g, key)
    assert one[2:34] != two[2:34]  # random padding
    assert one[34:] == two[34:] == a[32:]
    assert chatter.decode_message(one, key) == chatter.decode_message(two, key) == g


def test_keyless_forgery_is_possible_as_documented() -> None:
    # §12.3: no MAC. Knowing the plaintext of "world" is enough to turn it into "WORLD"
    # without the key; gossamer speaks the format as is, so it accepts the forgery too.
    vector = MESSAGES[0]
    message = bytearray(bytes.fromhex(vector["message_hex"]))
    key = bytes.fromhex(vector["key_hex"])
    old_g = bytes.fromhex(vector["uncompressed_gossip_hex"])
    new_g = old_g[:-5] + b"WORLD"
    checksum_at = vector["header_length"] + 32
    delta = (xxhash.xxh32_intdigest(old_g) ^ xxhash.xxh32_intdigest(new_g)).to_bytes(4, "big")
    for i in range(4):
        message[checksum_at + i] ^= delta[i]
    for i in range(1, 6):
        message[-i] ^= old_g[-i] ^ new_g[-i]
    assert chatter.decode_message(bytes(message), key).content == b"WORLD"


# --------------------------------------------------------------------------- damage

MINIMAL = MESSAGES[0]
MINIMAL_MESSAGE = bytes.fromhex(MINIMAL["message_hex"])
MINIMAL_KEY = bytes.fromhex(MINIMAL["key_hex"])


def test_damage_bad_start_of_message() -> None:
    for first in (0x00, 0xFE, 0x7F):
        with pytest.raises(DecodeError, match="bad start of message"):
            chatter.decode_message(bytes([first]) + MINIMAL_MESSAGE[1:], MINIMAL_KEY)


def test_damage_short() -> None:
    with pytest.raises(DecodeError, match="empty message"):
        chatter.decode_message(b"", MINIMAL_KEY)
    with pytest.raises(DecodeError, match="truncated VarInt"):
        chatter.decode_message(b"\xff", MINIMAL_KEY)
    # A self-consistent header over fewer bytes than padding + checksum + size + Snappy.
    for size in (0, 1, 36, 37):
        with pytest.raises(DecodeError, match="too short"):
            chatter.decode_message(b"\xff" + bytes([size]) + bytes(size), MINIMAL_KEY)


def test_damage_size_mismatch() -> None:
    size = MINIMAL["encrypted_size"]
    for wrong in (size - 1, size + 1, 0, 200):
        damaged = b"\xff" + varint.encode_uint(wrong) + MINIMAL_MESSAGE[2:]
        with pytest.raises(DecodeError, match=r"size mismatch|truncated message"):
            chatter.decode_message(damaged, MINIMAL_KEY)


def test_damage_coalesced() -> None:
    with pytest.raises(DecodeError, match="coalesced"):
        chatter.decode_message(MINIMAL_MESSAGE + MINIMAL_MESSAGE, MINIMAL_KEY)
    with pytest.raises(DecodeError, match="coalesced"):
        chatter.decode_message(MINIMAL_MESSAGE + b"\x00", MINIMAL_KEY)


def test_damage_truncated() -> None:
    for cut in range(2, len(MINIMAL_MESSAGE)):
        with pytest.raises(DecodeError, match="truncated message"):
            chatter.decode_message(MINIMAL_MESSAGE[:cut], MINIMAL_KEY)


def _field_ranges(vector: dict[str, Any]) -> dict[str, range]:
    out = {}
    for name, span in vector["layout"].items():
        first, _, last = span.partition("..")
        out[name] = range(int(first), int(last or first) + 1)
    return out


@pytest.mark.parametrize("vector", MESSAGES, ids=lambda v: v["name"])
def test_damage_bit_flips_in_each_field(vector: dict[str, Any]) -> None:
    message = bytes.fromhex(vector["message_hex"])
    key = bytes.fromhex(vector["key_hex"])
    original = chatter.decode_message(message, key)
    ranges = _field_ranges(vector)
    assert sorted(i for r in ranges.values() for i in r) == list(range(len(message)))
    refused: dict[str, int] = dict.fromkeys(ranges, 0)
    for name, positions in ranges.items():
        for pos in positions:
            for bit in range(8):
                damaged = bytearray(message)
                damaged[pos] ^= 1 << bit
                try:
                    decoded = chatter.decode_message(bytes(damaged), key)
                except DecodeError:
                    refused[name] += 1
                    continue
                # Only what changes nothing may pass: the ignored padding (§5), or a
                # Snappy copy offset that points at identical bytes.
                assert name in ("padding", "snappy_raw"), (name, pos, bit)
                assert decoded == original
    flips = {name: 8 * len(r) for name, r in ranges.items()}
    assert refused["padding"] == 0  # no integrity there: Chatter ignores the padding
    for name in ("som", "encrypted_size_varint", "checksum", "uncompressed_size_varint"):
        # Chatter accepts a flipped uncompressed size; gossamer checks it.
        assert refused[name] == flips[name], name
    assert refused["snappy_raw"] >= 0.9 * flips["snappy_raw"]


def test_damage_wrong_key() -> None:
    for vector in MESSAGES:
        message = bytes.fromhex(vector["message_hex"])
        for configured in ("secret", "01234567890123456789012345678900", "another key"):
            key = chatter.derive_key(configured)
            if key.hex() == vector["key_hex"]:
                continue
            with pytest.raises(DecodeError, match="wrong key"):
                chatter.decode_message(message, key)


def test_damage_snappy_preamble_above_bound_is_refused_before_decompressing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*_args: object) -> bytes:
        raise AssertionError("the decompressor must not run on an oversized claim")

    hostile = varint.encode_uint(2**32 - 1) + b"\x00"
    monkeypatch.setattr(cramjam.snappy, "decompress_raw", never)
    with pytest.raises(DecodeError, match="claims more than the decompression bound"):
        snappy.decompress(hostile, max_size=1 << 20)
    with pytest.raises(DecodeError, match="exceeds 32 bits"):
        snappy.decompress(b"\xff\xff\xff\xff\x1f", max_size=1 << 40)
    # Whole messages: the compressible vector (351 bytes of gossip in 93 encrypted bytes)
    # under a 300-byte bound is refused without decompressing.
    (vector,) = [v for v in MESSAGES if v["name"] == "compressible_default_key"]
    message = bytes.fromhex(vector["message_hex"])
    key = bytes.fromhex(vector["key_hex"])
    with pytest.raises(DecodeError, match="max_gossip_size"):
        chatter.decode_message(message, key, limits=Limits(max_gossip_size=300))


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        (b"", "truncated Snappy length preamble"),
        (b"\x80\x80", "truncated Snappy length preamble"),
        (b"\x80\x80\x80\x80\x80\x01", "longer than a varint32"),
        (b"\x05\x10abc", "corrupt Snappy block"),
        (b"\x0a\x09\x01\x00", "corrupt Snappy block"),
    ],
)
def test_snappy_corrupt_blocks(block: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        snappy.decompress(block, max_size=100)


def test_message_limits() -> None:
    g = gossip_of(MESSAGES[0]["gossip"])
    message = chatter.encode_message(g, MINIMAL_KEY)
    with pytest.raises(DecodeError, match="max_message_size"):
        chatter.decode_message(message, MINIMAL_KEY, limits=Limits(max_message_size=62))
    with pytest.raises(ValueError, match="max_message_size"):
        chatter.encode_message(g, MINIMAL_KEY, limits=Limits(max_message_size=62))
    with pytest.raises(ValueError, match="padding"):
        chatter.encode_message(g, MINIMAL_KEY, padding=b"short")
    with pytest.raises(ConfigError):
        Limits(max_message_size=0)


def test_pull_and_push_message() -> None:
    g = gossip_of(MESSAGES[0]["gossip"])
    padding = bytes.fromhex(MESSAGES[0]["padding_hex"])
    codec = chatter.ChatterCodec()
    buf = bytearray(b"x")
    codec.push_message(buf, g, MINIMAL_KEY, padding=padding)
    assert bytes(buf[1:]) == MINIMAL_MESSAGE
    assert codec.pull_message(Buffer(bytes(buf), offset=1), MINIMAL_KEY) == g
    assert chatter.decode_message(bytearray(MINIMAL_MESSAGE), MINIMAL_KEY) == g


# --------------------------------------------------------------------------- properties

octet = st.integers(min_value=0, max_value=255)
netids = st.builds(
    lambda a, b, c, d, port: NetID(f"{a}.{b}.{c}.{d}", port),
    octet,
    octet,
    octet,
    octet,
    st.integers(min_value=0, max_value=65535),
)
seqnos = st.one_of(st.integers(min_value=0, max_value=300), st.integers(0, 2**64 - 1))
broadcast_ids = st.builds(BroadcastID, netids, seqnos)
gossips = st.builds(
    Gossip,
    current=broadcast_ids,
    seen=st.lists(broadcast_ids, max_size=6),
    others=st.lists(netids, max_size=5),
    distribution=st.lists(netids, max_size=12),
    payload_netids=st.lists(netids, max_size=4),
    type_tag=st.integers(min_value=0, max_value=2**32 - 1),
    content=st.one_of(st.binary(max_size=300), st.text(max_size=400).map(str.encode)),
)


@given(gossips)
def test_gossip_round_trip(g: Gossip) -> None:
    encoded = chatter.encode_gossip(g)
    decoded = chatter.decode_gossip(encoded)
    assert decoded == g
    assert decoded.table == g.table
    assert chatter.encode_gossip(decoded) == encoded


def plaintext_padding(message: bytes, key: bytes) -> bytes:
    """The 32 padding bytes of ``message``, decrypted with an independent AES context."""
    _, at = varint.decode_uint(message, 1)
    fresh = Cipher(algorithms.AES(key), modes.CTR(chatter.IV)).decryptor()
    return fresh.update(message[at : at + 32])


@given(gossips, st.binary(min_size=32, max_size=32))
def test_message_round_trip(g: Gossip, padding: bytes) -> None:
    message = chatter.encode_message(g, KEY, padding=padding)
    assert chatter.decode_message(message, KEY) == g
    assert plaintext_padding(message, KEY) == padding
    assert chatter.decode_message(chatter.encode_message(g, KEY), KEY) == g


@given(st.binary(min_size=900, max_size=3000), st.binary(min_size=32, max_size=32))
def test_long_message_round_trip(content: bytes, padding: bytes) -> None:
    # Multi-byte size fields and many counter blocks, from a rewound, pooled context:
    # the whole message must match an independent AES-CTR pass.
    g = Gossip(current=BroadcastID(NetID("10.0.0.1", 1), 1), type_tag=7, content=content)
    message = chatter.encode_message(g, KEY, padding=padding)
    assert chatter.decode_message(message, KEY) == g
    assert plaintext_padding(message, KEY) == padding
    _, at = varint.decode_uint(message, 1)
    plaintext = Cipher(algorithms.AES(KEY), modes.CTR(chatter.IV)).decryptor().update(message[at:])
    gossip = chatter.encode_gossip(g)
    assert plaintext[32:36] == xxhash.xxh32_intdigest(gossip).to_bytes(4, "big")


@given(st.binary(max_size=200))
def test_random_bytes_gossip_raises_only_decode_error(data: bytes) -> None:
    try:
        g = chatter.decode_gossip(data)
    except DecodeError:
        return
    assert chatter.decode_gossip(chatter.encode_gossip(g)) == g


@given(st.binary(max_size=200))
def test_random_bytes_message_raises_only_decode_error(data: bytes) -> None:
    for candidate in (data, b"\xff" + varint.encode_uint(len(data)) + data):
        with pytest.raises(DecodeError):
            chatter.decode_message(candidate, KEY)


@given(gossips, st.data())
def test_mutated_messages_raise_only_decode_error(g: Gossip, data: st.DataObject) -> None:
    message = bytearray(chatter.encode_message(g, KEY))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        pos = data.draw(st.integers(min_value=0, max_value=len(message) - 1))
        message[pos] = data.draw(octet)
    try:
        decoded = chatter.decode_message(bytes(message), KEY)
    except DecodeError:
        return
    # Only changes that change nothing pass: the ignored padding, or a byte rewritten
    # with its own value (an XXH32 collision aside).
    assert decoded == g


@given(gossips, st.data())
def test_mutated_gossip_raises_only_decode_error(g: Gossip, data: st.DataObject) -> None:
    encoded = bytearray(chatter.encode_gossip(g))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        pos = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
        encoded[pos] = data.draw(octet)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded)))
    try:
        decoded = chatter.decode_gossip(bytes(encoded[:cut]))
    except DecodeError:
        return
    assert chatter.decode_gossip(chatter.encode_gossip(decoded)) == decoded
