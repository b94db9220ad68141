"""Keys and the keyring of the envelope: validation, derivation, rotation, the cipher cache."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from gossamer.errors import ConfigError
from gossamer.wire.keyring import (
    KEY_SIZE,
    MAX_KEY_ID,
    Key,
    Keyring,
    derive_session,
)

KEY1 = Key.from_bytes(bytes(range(1, 33)), key_id=1)
KEY2 = Key.from_bytes(bytes(range(101, 133)), key_id=2)
PASSPHRASE = "correct horse battery staple, generated"
SESSION = bytes(range(16))
IDENT = b"\x02n1" + (1).to_bytes(8, "big") + SESSION


def hkdf_sha256(ikm: bytes, *, salt: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869, written out with hmac so that the derivations are checked independently."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block = b"", b""
    for counter in range(1, -(-length // 32) + 1):
        block = hmac.new(prk, block + info + bytes((counter,)), hashlib.sha256).digest()
        out += block
    return out[:length]


# --- keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "key_id"),
    [
        (bytes(31), 1),
        (bytes(range(33)), 1),
        (bytes(range(32)), 0),
        (bytes(range(32)), MAX_KEY_ID + 1),
        (bytes(range(32)), True),
        (bytes(32), 1),  # all zero: a placeholder, not a key
        (b"01234567890123456789012345678901", 1),  # Chatter's fallback key
        (b"01234567890123456789012345678912", 1),  # Chatter's dev/test/docs key
    ],
)
def test_unusable_keys_are_refused(secret: bytes, key_id: int) -> None:
    with pytest.raises(ConfigError):
        Key.from_bytes(secret, key_id=key_id)


def test_the_secret_stays_out_of_repr() -> None:
    text = repr(KEY1) + repr(Keyring(cluster="alpha", keys=KEY1))
    assert "key_id=1" in text
    assert KEY1.secret.hex() not in text and repr(KEY1.secret) not in text


def test_passphrase_keys_are_deterministic_and_bound_to_the_cluster() -> None:
    alpha = Key.from_passphrase(PASSPHRASE, key_id=1, cluster="alpha")
    assert alpha == Key.from_passphrase(PASSPHRASE.encode(), key_id=1, cluster="alpha")
    assert len(alpha.secret) == KEY_SIZE
    assert alpha.secret != Key.from_passphrase(PASSPHRASE, key_id=1, cluster="beta").secret
    assert alpha.secret != Key.from_passphrase(PASSPHRASE + "!", key_id=1, cluster="alpha").secret
    # As documented, recomputed with the standard library (and pinned: a change to the
    # derivation would split existing clusters).
    salt = b"gossamer/envelope/v1/passphrase\x00alpha"
    expected = hkdf_sha256(
        PASSPHRASE.encode(), salt=salt, info=b"gossamer/envelope/v1/key", length=32
    )
    assert alpha.secret == expected
    assert expected.hex() == "df0cf18f5e7177e25833d6ecb38715b42403a353b1d9ee5d55a613dcf52263d8"


@pytest.mark.parametrize(
    ("passphrase", "cluster"),
    [
        ("too short", "alpha"),
        ("\ud800" * 20, "alpha"),
        (PASSPHRASE, ""),
        (PASSPHRASE, "x" * 256),
        (PASSPHRASE, "\udc00"),
        (64, "alpha"),  # bytes(64) would be 64 zero bytes
    ],
)
def test_bad_passphrases_and_cluster_names_are_refused(passphrase: object, cluster: str) -> None:
    with pytest.raises(ConfigError):
        Key.from_passphrase(passphrase, key_id=1, cluster=cluster)  # type: ignore[arg-type]


# --- the keyring -----------------------------------------------------------------------------


def test_there_is_no_default_key() -> None:
    with pytest.raises(ConfigError, match="no default key"):
        Keyring(cluster="alpha", keys=[])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"keys": [KEY1, KEY2]},  # which one seals?
        {"keys": [KEY1], "primary": 2},
        {"keys": [KEY1], "cache_size": 0},
        {"keys": [KEY1], "cluster": ""},
    ],
)
def test_bad_keyrings_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Keyring(**{"cluster": "alpha", **kwargs})  # type: ignore[arg-type]


def test_rotation_operations() -> None:
    keyring = Keyring(cluster="alpha", keys=KEY1)
    assert keyring.primary == KEY1 and list(keyring.key_ids) == [1] and len(keyring) == 1
    keyring.install(KEY2)
    keyring.install(KEY2)  # idempotent
    assert keyring.primary == KEY1 and list(keyring.key_ids) == [1, 2] and 2 in keyring
    keyring.make_primary(2)
    assert keyring.primary == KEY2
    with pytest.raises(ConfigError):
        keyring.remove(2)  # the primary cannot go
    keyring.remove(1)
    assert list(keyring.key_ids) == [2] and 1 not in keyring and keyring.get(1) is None
    assert keyring.get(2) == KEY2


@pytest.mark.parametrize(
    "operation",
    [
        lambda k: k.install(Key.from_bytes(bytes(range(50, 82)), key_id=1)),  # id taken
        lambda k: k.make_primary(9),
        lambda k: k.remove(9),
        lambda k: k.install(b"raw bytes are not a Key"),
    ],
)
def test_rotation_mistakes_are_config_errors(operation: object) -> None:
    keyring = Keyring(cluster="alpha", keys=KEY1)
    with pytest.raises(ConfigError):
        operation(keyring)  # type: ignore[operator]
    assert keyring.key_ids == (1,) and keyring.primary == KEY1


# --- session derivation and its cache ----------------------------------------------------------


def test_session_derivation_is_the_documented_hkdf() -> None:
    info = b"\x05alpha" + (1).to_bytes(4, "big") + IDENT
    expected = hkdf_sha256(KEY1.secret, salt=b"gossamer/envelope/v1/session", info=info, length=32)
    assert derive_session(KEY1, cluster="alpha", ident=IDENT) == expected


def test_session_derivation_binds_every_input() -> None:
    base = derive_session(KEY1, cluster="alpha", ident=IDENT)
    assert len(base) == KEY_SIZE
    assert base == derive_session(KEY1, cluster="alpha", ident=IDENT)
    other_id = Key.from_bytes(KEY1.secret, key_id=2)
    variants = [
        derive_session(KEY2, cluster="alpha", ident=IDENT),
        derive_session(other_id, cluster="alpha", ident=IDENT),
        derive_session(KEY1, cluster="beta", ident=IDENT),
        derive_session(KEY1, cluster="alpha", ident=b"\x02n2" + IDENT[3:]),
        derive_session(KEY1, cluster="alpha", ident=b"\x02n1" + (2).to_bytes(8, "big") + SESSION),
        derive_session(KEY1, cluster="alpha", ident=IDENT[:-16] + bytes(16)),  # session id
    ]
    assert len({base, *variants}) == 7


def test_the_length_prefix_keeps_cluster_names_apart() -> None:
    """Without the prefix, cluster "ab" with key id 1 and cluster "a" with key id 0x62000000
    ("b" then zeros) would give the same info bytes once ``ident`` absorbs the last byte."""
    first = Key.from_bytes(KEY1.secret, key_id=1)
    second = Key.from_bytes(KEY1.secret, key_id=0x62000000)
    assert b"ab" + (1).to_bytes(4, "big") + IDENT == b"a" + (0x62000000).to_bytes(4, "big") + (
        b"\x01" + IDENT
    )
    assert derive_session(first, cluster="ab", ident=IDENT) != derive_session(
        second, cluster="a", ident=b"\x01" + IDENT
    )


def test_the_cache_is_filled_only_when_asked_and_is_bounded() -> None:
    keyring = Keyring(cluster="alpha", keys=[KEY1, KEY2], primary=1, cache_size=2)
    idents = [bytes((i,)) * 8 for i in range(3)]

    def cached(ident: bytes, *, remember: bool = False) -> bool:
        found = keyring.session_cipher(1, ident, remember=remember)
        assert found is not None
        return found[1]

    assert not cached(idents[0]) and not cached(idents[0])  # not remembered
    assert not cached(idents[0], remember=True) and cached(idents[0])
    found = keyring.session_cipher(1, idents[1], remember=False)
    assert found is not None
    keyring.remember(1, idents[1], found[0])
    assert cached(idents[1])
    assert not cached(idents[2], remember=True)  # the oldest entry makes room
    assert not cached(idents[0]) and cached(idents[1]) and cached(idents[2])
    assert keyring.session_cipher(9, idents[0], remember=True) is None


def test_removing_a_key_drops_its_cached_ciphers() -> None:
    keyring = Keyring(cluster="alpha", keys=[KEY1, KEY2], primary=2)
    keyring.session_cipher(1, IDENT, remember=True)
    keyring.remove(1)
    assert keyring.session_cipher(1, IDENT, remember=True) is None
    keyring.install(KEY1)
    found = keyring.session_cipher(1, IDENT, remember=True)
    assert found is not None and found[1] is False
