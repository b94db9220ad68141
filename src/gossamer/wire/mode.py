"""The two wire modes every protocol has, chosen the same way everywhere.

- ``sealed`` (the default): the protocol's frames inside gossamer's authenticated envelope
  (``gossamer.wire.envelope``): AES-256-GCM under a group key, sender and sequence bound in,
  replays rejected. Nothing can be read or forged without the key.
- ``original``: the seeds' bytes and the originals' socket habits, to work with the original
  programs (``docs/interop.md``). Plaintext and unauthenticated, as the originals are.

The command line spells it ``--wire sealed|original`` and configuration files ``wire =
"sealed"``; :func:`parse_wire` reads both, and the spellings gossip used before
(``envelope``, ``chatter-compat``) as aliases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from gossamer.errors import ConfigError
from gossamer.wire.keyring import Key, Keyring

__all__ = [
    "DEFAULT_CLUSTER",
    "KEY_ENV",
    "WIRE_CHOICES",
    "Wire",
    "WireMode",
    "parse_key",
    "parse_wire",
]

#: The cluster name bound into envelope keys when none is configured.
DEFAULT_CLUSTER = "gossamer"
#: The environment variable commands and nodes read the group key from (``parse_key``).
KEY_ENV = "GOSSAMER_KEY"


class WireMode(Enum):
    """How a protocol's datagrams and frames look on the wire (module docstring)."""

    SEALED = "sealed"
    ORIGINAL = "original"


#: What ``--wire`` accepts, in the order help texts list them.
WIRE_CHOICES = ("sealed", "original")

_ALIASES = {"envelope": WireMode.SEALED, "chatter-compat": WireMode.ORIGINAL}


def parse_wire(value: str | WireMode, *, setting: str = "wire") -> WireMode:
    """``value`` as a :class:`WireMode`; ``ConfigError`` naming ``setting`` otherwise."""
    if isinstance(value, WireMode):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _ALIASES:
            return _ALIASES[text]
        try:
            return WireMode(text)
        except ValueError:
            pass
    raise ConfigError(f"{setting} must be 'sealed' or 'original'", **{setting: value})


def parse_key(text: bytes) -> bytes:
    """A key as configured (a key file's bytes, ``GOSSAMER_KEY``): 64 hex digits are 32 raw
    bytes; 32 bytes are a raw key; anything else, stripped of surrounding white space, is a
    passphrase (at least 16 bytes, checked when the key is built)."""
    if len(text) == 32:
        return bytes(text)
    stripped = bytes(text).strip()
    if len(stripped) == 64:
        try:
            return bytes.fromhex(stripped.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            pass
    if not stripped:
        raise ConfigError("the key is empty")
    return stripped


@dataclass(frozen=True, slots=True, kw_only=True)
class Wire:
    """A protocol's wire: its mode and, when sealed, the group key.

    There is no default key: sealed mode without ``key`` is a ``ConfigError`` that says how
    to give one. ``key`` follows :meth:`Key.from_secret` (32 raw bytes, or a passphrase of
    at least 16 bytes), bound to ``cluster``; ``key_id`` names it on the wire.
    """

    mode: WireMode = WireMode.SEALED
    key: bytes | None = field(default=None, repr=False)
    cluster: str = DEFAULT_CLUSTER
    key_id: int = 1

    def __post_init__(self) -> None:
        if self.mode is WireMode.SEALED:
            if not self.key:
                raise ConfigError(
                    "sealed mode (the default) needs the group key: give --key-file or "
                    "GOSSAMER_KEY (there is no default key), or --wire original to speak "
                    "the original programs' plaintext"
                )
            self.keyring()  # validate now, not at the first datagram

    @property
    def sealed(self) -> bool:
        return self.mode is WireMode.SEALED

    def keyring(self) -> Keyring:
        """The envelope keyring of the configured key (sealed mode only)."""
        if self.key is None:
            raise ConfigError("the original wire has no key")
        key = Key.from_secret(self.key, key_id=self.key_id, cluster=self.cluster)
        return Keyring(cluster=self.cluster, keys=key)
