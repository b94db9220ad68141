"""Chatter VarInt against the golden vectors (vectors/chatter/varint.json) and properties."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.wire import varint
from gossamer.wire.buffer import Buffer

# Golden vectors copied from shared/vectors/chatter (produced by the real Chatter code).
VECTORS = Path(__file__).resolve().parent / "vectors" / "chatter" / "varint.json"
DATA: dict[str, Any] = json.loads(VECTORS.read_text())
DECODE_OK = [case for case in DATA["decode"] if case["result"] == "ok"]
DECODE_BAD = [case for case in DATA["decode"] if case["result"] != "ok"]


@pytest.mark.parametrize("case", DATA["encode"], ids=lambda c: c["value_str"])
def test_encode_matches_vector(case: dict[str, Any]) -> None:
    value = int(case["value_str"])
    encoded = varint.encode_uint(value)
    assert encoded.hex() == case["hex"]
    assert len(encoded) == case["length"]


@pytest.mark.parametrize("case", DATA["encode"], ids=lambda c: c["value_str"])
def test_decode_of_encode_vector(case: dict[str, Any]) -> None:
    data = bytes.fromhex(case["hex"])
    assert varint.decode_uint(data) == (int(case["value_str"]), len(data))
    buf = Buffer(data)
    assert varint.pull_uint(buf) == int(case["value_str"])
    assert buf.eof()


def test_128_is_two_bytes_the_code_rule_not_the_docs() -> None:
    # specs/chatter.md says "< 128 -> one byte, > 128 -> continue"; the code uses >= 128.
    assert varint.encode_uint(127) == b"\x7f"
    assert varint.encode_uint(128) == b"\x80\x01"


def test_negative_is_refused() -> None:
    assert DATA["encode_negative"]["value"] == -1
    with pytest.raises(ValueError, match="negative"):
        varint.encode_uint(-1)


@pytest.mark.parametrize("case", DECODE_OK, ids=lambda c: c["note"])
def test_decode_vectors(case: dict[str, Any]) -> None:
    data = bytes.fromhex(case["input_hex"])
    width = len(data) - len(bytes.fromhex(case["remainder_hex"]))
    # gossamer bounds VarInts (10 bytes by default); allow the longest vector explicitly.
    value, end = varint.decode_uint(data, max_bytes=max(width, 1))
    assert value == int(case["value_str"])
    assert data[end:].hex() == case["remainder_hex"]


def test_decode_is_bounded_by_default() -> None:
    # Chatter decodes 2**77 from 12 bytes (a bignum); gossamer refuses more than 10 bytes.
    data = bytes.fromhex("808080808080808080808001")
    with pytest.raises(DecodeError, match="longer than 10 bytes"):
        varint.decode_uint(data)
    with pytest.raises(DecodeError, match="longer than"):
        varint.pull_uint(Buffer(data))
    assert varint.decode_uint(bytes.fromhex("ffffffffffffffffff01")) == (2**64 - 1, 10)


@pytest.mark.parametrize("case", DECODE_BAD, ids=lambda c: c["note"])
def test_truncated_or_empty_is_a_decode_error(case: dict[str, Any]) -> None:
    # Chatter returns a bare integer or raises FunctionClauseError here (§2).
    data = bytes.fromhex(case["input_hex"])
    with pytest.raises(DecodeError, match="truncated"):
        varint.decode_uint(data)
    with pytest.raises(DecodeError, match="truncated"):
        varint.pull_uint(Buffer(data))


def test_decode_at_offset_and_offset_outside() -> None:
    assert varint.decode_uint(b"\xaa\xac\x02\xbb", 1) == (300, 3)
    with pytest.raises(DecodeError, match="offset"):
        varint.decode_uint(b"\x01", 2)


@given(st.integers(min_value=0, max_value=2**70 - 1))
def test_round_trip(value: int) -> None:
    encoded = varint.encode_uint(value)
    assert varint.decode_uint(encoded + b"tail") == (value, len(encoded))
    buf = bytearray(b"x")
    varint.push_uint(buf, value)
    assert bytes(buf[1:]) == encoded
    # Minimal: only the last byte lacks the continuation bit, and it is not zero unless
    # the value is zero.
    assert all(b & 0x80 for b in encoded[:-1])
    assert encoded[-1] < 0x80
    assert encoded[-1] != 0 or value == 0


@given(st.binary(max_size=16), st.integers(min_value=1, max_value=12))
def test_random_bytes_raise_only_decode_error(data: bytes, max_bytes: int) -> None:
    try:
        value, end = varint.decode_uint(data, max_bytes=max_bytes)
    except DecodeError:
        return
    assert 1 <= end <= min(len(data), max_bytes)
    assert value < 1 << (7 * end)
