"""Keys for the gossamer envelope (``gossamer.wire.envelope``): a keyring with rotation.

A :class:`Keyring` holds the cluster name and one or more 32-byte :class:`Key` s, each with a
numeric key id that travels on the wire. One key is *primary*: :func:`envelope.seal` seals with
it. Every installed key opens messages, so keys rotate without downtime (see
``docs/wire.md``):

1. install the new key on every node (``install``): everyone can now open it;
2. make it primary on every node (``make_primary``): everyone now seals with it, and
   messages still in flight under the old key keep opening;
3. remove the old key everywhere (``remove``): messages under it are now rejected.

There is never a default key: a keyring without a key cannot be built, and keys that were
published as defaults by Chatter (chatter-as-coded.md §4, §12 item 6) are refused.

Keys come either raw (:meth:`Key.from_bytes`, 32 bytes, e.g. from ``secrets.token_bytes(32)``)
or from a passphrase through HKDF-SHA256 whose salt contains the cluster name
(:meth:`Key.from_passphrase`). HKDF is a key-derivation function, not a password hash: it does
nothing to slow down guessing, so a passphrase must carry the entropy of a key (a generated
secret of 16 or more random bytes, base64 or hex encoded). A human-memorable passphrase can be
brute-forced offline from one captured datagram.

Per-session keys. The envelope never encrypts with a keyring key directly. For every sender
session it derives a subkey (:func:`derive_session`) from the key, the cluster name, the key
id and the session identity. The keyring keeps a bounded cache of the derived AEAD objects,
because deriving one (an HMAC and an AES key schedule) costs about 3 us while sealing a
200-byte message costs about 0.5 us. The cache is a memo of a pure function: it never changes
what a call returns, and removing a key drops its entries. ``gossamer.wire.envelope`` reads
it directly, and its ``ReplayWindows`` keep each authenticated session's cipher together
with the keyring's ``_token``, which ``remove`` replaces so that those copies stop opening.
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gossamer.errors import ConfigError

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "KEY_SIZE",
    "MAX_KEY_ID",
    "MIN_PASSPHRASE_BYTES",
    "Key",
    "Keyring",
    "derive_session",
]

KEY_SIZE = 32
#: Key ids are u32 on the wire; 0 is reserved so that an all-zero header never names a key.
MAX_KEY_ID = (1 << 32) - 1
#: HKDF does not stretch a passphrase, so it must be long (see the module docstring).
MIN_PASSPHRASE_BYTES = 16
#: Derived session ciphers kept; size it above the number of live peer sessions times keys.
DEFAULT_CACHE_SIZE = 4096

_PASSPHRASE_SALT = b"gossamer/envelope/v1/passphrase\x00"
_PASSPHRASE_INFO = b"gossamer/envelope/v1/key"
_SESSION_SALT = b"gossamer/envelope/v1/session"
_U32 = struct.Struct(">I")

# Keys that are public because Chatter shipped or documented them (chatter-as-coded.md §4):
# the fallback key, the dev/test/docs key, and the all-zero placeholder.
_PUBLIC_KEYS = frozenset(
    {b"01234567890123456789012345678901", b"01234567890123456789012345678912", bytes(32)}
)


def _cluster_bytes(cluster: str) -> bytes:
    if not isinstance(cluster, str):
        raise ConfigError("cluster name must be a str", cluster=cluster)
    try:
        raw = cluster.encode()
    except UnicodeEncodeError:
        raise ConfigError("cluster name is not encodable as UTF-8", cluster=cluster) from None
    if not 1 <= len(raw) <= 255:
        raise ConfigError("cluster name must be 1 to 255 bytes of UTF-8", cluster=cluster)
    return raw


@dataclass(frozen=True, slots=True, kw_only=True)
class Key:
    """One 32-byte AES-256 key and the id that names it on the wire (1 to 2**32 - 1).

    The secret is left out of ``repr`` so that keys do not leak into logs.
    """

    key_id: int
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.key_id, bool) or not isinstance(self.key_id, int):
            raise ConfigError("key id must be an int", key_id=self.key_id)
        if not 1 <= self.key_id <= MAX_KEY_ID:
            raise ConfigError(f"key id must be 1 to {MAX_KEY_ID}", key_id=self.key_id)
        if not isinstance(self.secret, bytes) or len(self.secret) != KEY_SIZE:
            raise ConfigError(f"a key must be exactly {KEY_SIZE} bytes", key_id=self.key_id)
        if self.secret in _PUBLIC_KEYS:
            raise ConfigError(
                "refusing a publicly known key (a Chatter default)", key_id=self.key_id
            )

    @classmethod
    def from_bytes(cls, secret: bytes, *, key_id: int) -> Key:
        """A key taken as is: exactly 32 bytes, e.g. ``secrets.token_bytes(32)``."""
        return cls(key_id=key_id, secret=bytes(secret))

    @classmethod
    def from_secret(cls, secret: bytes, *, key_id: int, cluster: str) -> Key:
        """What a configured key means everywhere: exactly 32 bytes are taken as a raw key
        (:meth:`from_bytes`), anything else as a passphrase (:meth:`from_passphrase`)."""
        if len(secret) == KEY_SIZE:
            return cls.from_bytes(secret, key_id=key_id)
        return cls.from_passphrase(secret, key_id=key_id, cluster=cluster)

    @classmethod
    def from_passphrase(cls, passphrase: str | bytes, *, key_id: int, cluster: str) -> Key:
        """A key derived with HKDF-SHA256 from a high-entropy passphrase.

        The salt is a fixed label followed by the cluster name, so one passphrase gives
        unrelated keys in two clusters. The passphrase must be at least
        ``MIN_PASSPHRASE_BYTES`` bytes; it must be a generated secret, not a memorable one
        (HKDF does not slow down guessing).
        """
        if isinstance(passphrase, bytes | bytearray):
            raw = bytes(passphrase)
        elif isinstance(passphrase, str):
            try:
                raw = passphrase.encode()
            except UnicodeEncodeError:
                raise ConfigError("passphrase is not encodable as UTF-8", key_id=key_id) from None
        else:
            raise ConfigError("a passphrase is a str or bytes", key_id=key_id)
        if len(raw) < MIN_PASSPHRASE_BYTES:
            raise ConfigError(
                f"passphrase must be at least {MIN_PASSPHRASE_BYTES} bytes", key_id=key_id
            )
        hkdf = HKDF(
            algorithm=hashes.SHA256(),
            length=KEY_SIZE,
            salt=_PASSPHRASE_SALT + _cluster_bytes(cluster),
            info=_PASSPHRASE_INFO,
        )
        return cls(key_id=key_id, secret=hkdf.derive(raw))


def _extract(key: Key) -> bytes:
    """HKDF-Extract (RFC 5869 §2.2) of a keyring key, with a fixed label as the salt."""
    return hmac.digest(_SESSION_SALT, key.secret, "sha256")


def _expand(prk: bytes, cluster_raw: bytes, key_id: int, ident: bytes) -> bytes:
    """HKDF-Expand (RFC 5869 §2.3) to one 32-byte block, which is a single HMAC."""
    info = bytes((len(cluster_raw),)) + cluster_raw + _U32.pack(key_id) + ident
    return hmac.digest(prk, info + b"\x01", "sha256")


def derive_session(key: Key, *, cluster: str, ident: bytes) -> bytes:
    """Derive the AES-256-GCM subkey of one sender session under ``key``.

    ``ident`` is the session identity exactly as the envelope header carries it (sender
    length, sender, epoch, 16-byte random session id: see ``gossamer.wire.envelope``). The
    subkey is HKDF-SHA256 with salt ``"gossamer/envelope/v1/session"`` and info the
    length-prefixed cluster name, the u32 key id and ``ident``. Every field that names the
    session is bound in, with unambiguous lengths, so two distinct sessions, key ids or
    clusters never share a subkey (short of an HMAC-SHA256 collision).

    The keyring extracts once per key and expands once per session: HMAC costs about 1.5 us
    here, and every forged datagram that names a made-up session costs one expansion.
    """
    return _expand(_extract(key), _cluster_bytes(cluster), key.key_id, ident)


class Keyring:
    """The cluster name, the installed keys, and which one is primary.

    The caller owns the keyring and passes it to every ``seal``/``unseal`` call; mutate it
    (``install``, ``make_primary``, ``remove``) between calls to rotate keys. ``keys`` must not
    be empty; with more than one key, ``primary`` must name the one to seal with.
    """

    __slots__ = (
        "_cache_size",
        "_ciphers",
        "_cluster",
        "_cluster_raw",
        "_keys",
        "_primary",
        "_prks",
        "_token",
    )

    def __init__(
        self,
        *,
        cluster: str,
        keys: Key | Iterable[Key],
        primary: int | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self._cluster_raw = _cluster_bytes(cluster)
        if cache_size < 1:
            raise ConfigError("cache size must be at least 1", cache_size=cache_size)
        self._cluster = cluster
        self._cache_size = cache_size
        self._keys: dict[int, Key] = {}
        self._prks: dict[int, bytes] = {}  # HKDF-Extract of each key, done once
        # Derived session ciphers, keyed by the u32 key id followed by the session identity:
        # bytes 2 to 31+n of an envelope header, so that unseal looks one up with one slice.
        self._ciphers: dict[bytes, AESGCM] = {}
        # Replaced whenever a key is removed: a cipher memoized elsewhere together with the
        # token it was found under (``ReplayWindows`` does) is valid while the token is the
        # keyring's current one. A fresh object() also tells keyrings apart.
        self._token = object()
        for key in (keys,) if isinstance(keys, Key) else tuple(keys):
            self.install(key)
        if not self._keys:
            raise ConfigError("a keyring needs at least one key: there is no default key")
        if primary is None:
            if len(self._keys) > 1:
                raise ConfigError("several keys given: say which one is primary")
            primary = next(iter(self._keys))
        if primary not in self._keys:
            raise ConfigError("the primary key id is not among the keys", primary=primary)
        self._primary = self._keys[primary]

    @property
    def cluster(self) -> str:
        """The cluster name bound into every session key (it is never sent)."""
        return self._cluster

    @property
    def primary(self) -> Key:
        """The key that ``seal`` uses."""
        return self._primary

    @property
    def key_ids(self) -> tuple[int, ...]:
        """Installed key ids, in installation order."""
        return tuple(self._keys)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        primary = self._primary.key_id
        return f"Keyring(cluster={self._cluster!r}, keys={self.key_ids!r}, primary={primary})"

    def get(self, key_id: int) -> Key | None:
        """The installed key with this id, or ``None``."""
        return self._keys.get(key_id)

    def install(self, key: Key) -> None:
        """Install ``key`` so that messages under it open. It does not become primary.

        Installing the same key again is a no-op; another secret under an installed id is a
        ``ConfigError`` (an id must name one key, or a receiver could not tell them apart).
        """
        if not isinstance(key, Key):
            raise ConfigError("install takes a Key", key=key)
        installed = self._keys.get(key.key_id)
        if installed is not None and installed.secret != key.secret:
            raise ConfigError("another key is installed under this id", key_id=key.key_id)
        if installed is None:
            self._keys[key.key_id] = key
            self._prks[key.key_id] = _extract(key)

    def make_primary(self, key_id: int) -> None:
        """Seal with the installed key ``key_id`` from now on."""
        key = self._keys.get(key_id)
        if key is None:
            raise ConfigError("cannot make a key primary before installing it", key_id=key_id)
        self._primary = key

    def remove(self, key_id: int) -> None:
        """Uninstall ``key_id``: messages under it no longer open. The primary cannot go."""
        key = self._keys.get(key_id)
        if key is None:
            raise ConfigError("no such key installed", key_id=key_id)
        if key is self._primary:
            raise ConfigError(
                "cannot remove the primary key; make another primary first", key_id=key_id
            )
        del self._keys[key_id]
        del self._prks[key_id]
        self._token = object()
        prefix = _U32.pack(key_id)
        for entry in [entry for entry in self._ciphers if entry.startswith(prefix)]:
            del self._ciphers[entry]

    def session_cipher(
        self, key_id: int, ident: bytes, *, remember: bool
    ) -> tuple[AESGCM, bool] | None:
        """The cipher for one session under ``key_id``, and whether it came from the cache.

        ``None`` when no key has that id. With ``remember=False`` a freshly derived cipher is
        not cached: a receiver caches only after the message authenticated (:meth:`remember`),
        so forged datagrams with made-up sessions cannot evict real ones.
        """
        prk = self._prks.get(key_id)
        if prk is None:
            return None
        entry = _U32.pack(key_id) + ident
        cipher = self._ciphers.get(entry)
        if cipher is not None:
            return cipher, True
        cipher = AESGCM(_expand(prk, self._cluster_raw, key_id, ident))
        if remember:
            self._store(entry, cipher)
        return cipher, False

    def remember(self, key_id: int, ident: bytes, cipher: AESGCM) -> None:
        """Cache ``cipher`` (from :meth:`session_cipher`) for the session ``ident``."""
        if key_id in self._keys:
            self._store(_U32.pack(key_id) + ident, cipher)

    def _store(self, entry: bytes, cipher: AESGCM) -> None:
        ciphers = self._ciphers
        if entry not in ciphers and len(ciphers) >= self._cache_size:
            # FIFO eviction: cheap, and an evicted live session only pays one re-derivation.
            del ciphers[next(iter(ciphers))]
        ciphers[entry] = cipher
