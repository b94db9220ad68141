"""The bounded Erlang External Term Format codec."""

from __future__ import annotations

import math
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import ConfigError, DecodeError
from gossamer.wire import etf
from gossamer.wire.buffer import Buffer
from gossamer.wire.etf import Atom

atoms = st.text(min_size=1, max_size=20).filter(lambda s: s not in ("nil", "true", "false"))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=False, allow_infinity=False),
    atoms.map(Atom),
    st.binary(max_size=20),
)
# Map keys: binaries and atoms only, as in gateway packets (Python would merge 1, 1.0
# and True into one key, which Erlang keeps apart).
keys = st.binary(max_size=8) | atoms.map(Atom)
terms = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=20,
)


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


# Exact bytes of :erlang.term_to_binary/1 for the same data (ERTS user's guide, "External
# Term Format"; atoms as OTP 26+ writes them, SMALL_ATOM_UTF8_EXT).
@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (1, b"\x83a\x01"),
        (255, b"\x83a\xff"),
        (256, b"\x83b\x00\x00\x01\x00"),
        (-1, b"\x83b\xff\xff\xff\xff"),
        (2**31, b"\x83n\x04\x00\x00\x00\x00\x80"),
        (-(2**31) - 1, b"\x83n\x04\x01\x01\x00\x00\x80"),
        (1.5, b"\x83F" + struct.pack(">d", 1.5)),
        (None, b"\x83w\x03nil"),
        (True, b"\x83w\x04true"),
        (False, b"\x83w\x05false"),
        (Atom("ok"), b"\x83w\x02ok"),
        (b"ab", b"\x83m" + u32(2) + b"ab"),
        ("é", b"\x83m" + u32(2) + "é".encode()),
        ([], b"\x83j"),
        ([b"a"], b"\x83l" + u32(1) + b"m" + u32(1) + b"aj"),
        ((1, 2), b"\x83h\x02a\x01a\x02"),
        ({b"a": 1}, b"\x83t" + u32(1) + b"m" + u32(1) + b"aa\x01"),
        ({Atom("op"): 0}, b"\x83t" + u32(1) + b"w\x02opa\x00"),
    ],
)
def test_exact_bytes(value: object, wire: bytes) -> None:
    assert etf.encode(value) == wire
    expected = value.encode() if isinstance(value, str) else value
    assert etf.decode(wire) == expected


@pytest.mark.parametrize(
    ("wire", "value"),
    [
        # Older OTP releases write atoms as ATOM_EXT (Latin-1), and small-int lists as
        # STRING_EXT: term_to_binary([1, 2]) is 131,107,0,2,1,2.
        (b"\x83d\x00\x04true", True),
        (b"\x83d\x00\x03nil", None),
        (b"\x83s\x02ok", Atom("ok")),
        (b"\x83s\x01\xe9", Atom("é")),
        (b"\x83v\x00\x02ok", Atom("ok")),
        (b"\x83k\x00\x02\x01\x02", [1, 2]),
        (b"\x83o" + u32(1) + b"\x01\x05", -5),
        (b"\x83c" + b"1.50000000000000000000e+00".ljust(31, b"\x00"), 1.5),
        (b"\x83i" + u32(2) + b"a\x01a\x02", (1, 2)),
    ],
)
def test_decodes_the_older_and_alternative_forms(wire: bytes, value: object) -> None:
    assert etf.decode(wire) == value


def test_compressed_terms_are_inflated_within_their_declared_size() -> None:
    # term_to_binary(T, [compressed]): 131, 80, uncompressed size, zlib(T without 131).
    inner = etf.encode([b"x" * 100] * 10)[1:]
    wire = b"\x83P" + u32(len(inner)) + zlib.compress(inner)
    assert etf.decode(wire) == [b"x" * 100] * 10
    with pytest.raises(DecodeError, match="inflates to"):
        etf.decode(wire, max_size=len(inner) - 1)
    lying = b"\x83P" + u32(len(inner) - 1) + zlib.compress(inner)
    with pytest.raises(DecodeError, match="exactly its declared size"):
        etf.decode(lying)
    with pytest.raises(DecodeError, match="bad zlib"):
        etf.decode(b"\x83P" + u32(5) + b"not zlib")
    trailing = etf.encode([1])[1:] + b"\x00"
    with pytest.raises(DecodeError, match="in compressed term: 1 trailing"):
        etf.decode(b"\x83P" + u32(len(trailing)) + zlib.compress(trailing))


def test_a_zlib_bomb_costs_at_most_the_declared_size() -> None:
    bomb = zlib.compress(b"\x00" * (50 << 20))  # 50 MiB of zeros in ~50 KB
    with pytest.raises(DecodeError, match="exactly its declared size"):
        etf.decode(b"\x83P" + u32(1000) + bomb)


@given(terms)
def test_round_trip(value: etf.Term) -> None:
    assert etf.decode(etf.encode(value)) == value


@given(st.binary(max_size=80))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    try:
        value = etf.decode(data)
    except DecodeError:
        return
    assert data[0] == etf.VERSION
    assert etf.decode(etf.encode(value)) == value


@given(st.binary(max_size=80))
def test_random_terms_after_the_version_byte_raise_only_decode_error(data: bytes) -> None:
    try:
        value = etf.decode(b"\x83" + data)
    except DecodeError:
        return
    assert etf.decode(etf.encode(value)) == value


@given(terms)
def test_every_truncation_and_trailing_garbage_is_rejected(value: etf.Term) -> None:
    data = etf.encode(value)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            etf.decode(data[:cut])
    with pytest.raises(DecodeError, match="trailing"):
        etf.decode(data + b"j")


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (b"\x82a\x01", "version byte 130"),
        (b"\x83l" + u32(0xFFFFFFFF) + b"j", "list of 4294967295 cannot fit"),
        (b"\x83t" + u32(3) + b"jjjj", "map of 3 cannot fit"),
        (b"\x83i" + u32(100), "tuple of 100 cannot fit"),
        (b"\x83l" + u32(1) + b"a\x01a\x02", "improper list"),
        (b"\x83n\xff\x00" + b"\x01" * 255, "big integer of 255 bytes exceeds 64"),
        (b"\x83n\x01\x02\x01", "sign byte"),
        (b"\x83F" + struct.pack(">d", math.nan), "NaN"),
        (b"\x83F" + struct.pack(">d", math.inf), "infinite"),
        (b"\x83c" + b"nan".ljust(31, b"\x00"), "NaN"),
        (b"\x83c" + b"bogus".ljust(31, b"\x00"), "malformed FLOAT_EXT"),
        (b"\x83w\x02\xff\xfe", "not valid UTF-8"),
        (b"\x83v\x01\x00" + b"a" * 256, "longer than 255"),
        (b"\x83t" + u32(2) + b"m" + u32(1) + b"aa\x01m" + u32(1) + b"aa\x02", "duplicate map key"),
        (b"\x83t" + u32(1) + b"ja\x01", "has no Python dict equivalent"),
        (b"\x83g" + b"\x00" * 20, "unsupported external term tag 103"),
        (b"\x83M" + u32(1) + b"\x08\x01", "unsupported external term tag 77"),
        (b"\x83", "truncated"),
    ],
)
def test_malformed_terms_say_why(wire: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        etf.decode(wire)


def test_depth_and_size_bounds() -> None:
    nested: etf.Term = []
    for _ in range(10):
        nested = [nested]
    wire = etf.encode(nested)
    assert etf.decode(wire, max_depth=10) == nested
    with pytest.raises(DecodeError, match="deeper than 9"):
        etf.decode(wire, max_depth=9)
    with pytest.raises(DecodeError, match="exceeds 5"):
        etf.decode(wire, max_size=5)
    with pytest.raises(ConfigError, match="max_depth"):
        etf.decode(wire, max_depth=10_000)
    with pytest.raises(ConfigError, match="max_depth"):
        etf.encode(nested, max_depth=10_000)
    # A deep hostile term is refused, not a RecursionError.
    with pytest.raises(DecodeError, match="deeper than"):
        etf.decode(b"\x83" + (b"l" + u32(1)) * 5000 + b"j" * 5001)


def test_encoder_refuses_what_erlang_cannot_hold() -> None:
    for bad, reason in [
        (math.nan, "NaN"),
        ({1, 2}, "cannot encode a set"),
        ([[[[1]]]], "deeper than 2"),
    ]:
        with pytest.raises(ValueError, match=reason):
            etf.encode(bad, max_depth=2)
    buf = bytearray(b"keep")
    with pytest.raises(ValueError, match="infinite"):
        etf.push_term(buf, [1, math.inf])
    assert buf == b"keep"
    with pytest.raises(ValueError, match="at most 255"):
        Atom("a" * 256)


def test_long_atoms_and_large_containers_use_the_wide_forms() -> None:
    name = "é" * 200  # 400 UTF-8 bytes: too long for SMALL_ATOM_UTF8_EXT
    assert etf.encode(Atom(name))[1] == etf.ATOM_UTF8_EXT
    assert etf.decode(etf.encode(Atom(name))) == Atom(name)
    big_tuple = tuple(range(300))
    assert etf.encode(big_tuple)[1] == etf.LARGE_TUPLE_EXT
    assert etf.decode(etf.encode(big_tuple)) == big_tuple
    huge = 1 << 3000
    assert etf.encode(huge)[1] == etf.LARGE_BIG_EXT
    assert etf.decode(etf.encode(huge), max_big_bytes=400) == huge


def test_pull_leaves_following_bytes() -> None:
    buf = Buffer(etf.encode(7) + b"rest")
    assert etf.pull_term(buf) == 7
    assert buf.pull_rest() == b"rest"


def test_the_number_of_terms_is_capped() -> None:
    """A megabyte of one-byte terms (1M empty lists, about 130 MiB of Python objects) is
    refused: at once when a count is over the cap, else after max_elements terms."""
    flat = b"\x83l" + (1 << 20).to_bytes(4, "big") + b"j" * (1 << 20) + b"j"
    with pytest.raises(DecodeError, match="max_elements=65536") as excinfo:
        etf.decode(flat, max_size=2 << 20)
    assert excinfo.value.fields["max_elements"] == etf.DEFAULT_MAX_ELEMENTS
    inner = b"l" + (100).to_bytes(4, "big") + b"j" * 100 + b"j"
    nested = b"\x83l" + (10).to_bytes(4, "big") + inner * 10 + b"j"  # 1 + 10 * 101 terms
    assert etf.decode(nested, max_elements=1011) == [[[]] * 100] * 10
    with pytest.raises(DecodeError, match="max_elements=1010"):
        etf.decode(nested, max_elements=1010)
    string = b"\x83k" + (50).to_bytes(2, "big") + b"x" * 50  # STRING_EXT: 1 + 50 terms
    assert etf.decode(string, max_elements=51) == [ord("x")] * 50
    with pytest.raises(DecodeError, match="max_elements"):
        etf.decode(string, max_elements=50)
    with pytest.raises(ConfigError):
        etf.decode(nested, max_elements=0)
