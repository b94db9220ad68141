"""Chatter's encryption: the key rule and the fixed AES-256-CTR keystream (§4).

Key and IV are fixed, so every message is XORed with the same keystream from the same
counter. A :class:`KeyState` keeps AES-CTR contexts that are rewound with
``reset_nonce`` rather than created per message (creating one costs more than
encrypting 4 KB with it); a codec keeps one per key. Also
measured, and slower above ~100 bytes: XOR with a cached keystream through
``int.from_bytes`` (~0.65 ns per byte per conversion).

Security: this format has no integrity and a fixed IV (a many-time pad, §12). Use it
only to talk to Chatter; gossamer's own envelope is elsewhere.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from gossamer.errors import ConfigError

__all__ = [
    "IV",
    "IV_AFTER_PADDING",
    "KEY_SIZE",
    "PADDING_SIZE",
    "KeyState",
    "derive_key",
    "keystream",
]

#: The fixed AES-CTR initial counter block (§4).
IV = b"-- ScaleSmall --"
#: AES-256 key size; ``derive_key`` produces keys of exactly this length.
KEY_SIZE = 32
#: Random bytes at the start of the plaintext; the decoder ignores them (§5).
PADDING_SIZE = 32
#: Keystream byte 32 starts counter block IV + 2: where the plaintext after the padding is.
IV_AFTER_PADDING = (int.from_bytes(IV, "big") + PADDING_SIZE // 16).to_bytes(16, "big")
#: Chatter's public filler for short keys (§4). Used only to *complete* a configured key,
#: never as a key by itself.
_KEY_FILL = b"01234567890123456789012345678901"
_CONTEXT_POOL_MAX = 8


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


def _checked_key(key: object) -> bytes:
    if key is None or len(key) == 0:  # type: ignore[arg-type]
        raise ConfigError("no Chatter key given: gossamer has no default key")
    if not isinstance(key, bytes | bytearray | memoryview):
        raise ConfigError(f"a Chatter key must be bytes, not {type(key).__name__}")
    raw = bytes(key)
    if len(raw) != KEY_SIZE:
        raise ConfigError(
            f"a Chatter key must be {KEY_SIZE} bytes (apply derive_key to a configured key)",
            length=len(raw),
        )
    return raw


class KeyState:
    """What one key needs, kept across messages: AES-CTR contexts to rewind and reuse.

    Creating an AES context costs more than encrypting 4 KB with it, and every Chatter
    message starts at the same counter, so contexts are rewound with ``reset_nonce``
    (cryptography >= 43) instead of being created per message. A small pool, taken and
    returned with atomic ``list.pop``/``append``, keeps threads from sharing one.
    ``ConfigError`` for a key that is not 32 bytes (see :func:`derive_key`).
    """

    __slots__ = ("algorithm", "pool", "rewindable")

    def __init__(self, key: bytes) -> None:
        self.algorithm = algorithms.AES(_checked_key(key))
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


def keystream(key: bytes, n: int) -> bytes:
    """The first ``n`` bytes of the keystream that every message under ``key`` uses (§4)."""
    return KeyState(key).xor(IV, bytes(n))
