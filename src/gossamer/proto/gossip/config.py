"""Configuration of a gossip node: Chatter's settings plus gossamer's fixes and bounds.

Chatter reads six settings (specs/chatter.md, "Configure"): the node's own address and port,
the multicast address, port and TTL, and the key. :meth:`GossipConfig.from_env` reads them
from the same environment variables (``CHATTER_ADDRESS``, ``CHATTER_PORT``,
``CHATTER_MULTICAST_ADDRESS``, ``CHATTER_MULTICAST_PORT``, ``CHATTER_MULTICAST_TTL``,
``CHATTER_KEY``) with Chatter's defaults, and two more of gossamer's: ``CHATTER_WIRE``
(``sealed``, the default, or ``original``: ``gossamer.wire.mode``; the older spellings
``envelope`` and ``chatter-compat`` are still read) and ``CHATTER_CLUSTER``.

Differences from Chatter, on purpose:

- A missing or empty key is a ``ConfigError``. Chatter logs an error and falls back to a
  public key (chatter-as-coded.md §4, §12 item 6).
- ``my_addr`` is required. Chatter falls back to "the first interface with a broadcast
  address", which DESIGN.md forbids outside a namespace.
- Everything the original let grow without bound has a bound here (peers, sightings, the
  duplicate window), and everything that could wait forever has a timeout.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Annotated, Any

from gossamer.addresses import is_ip
from gossamer.errors import ConfigError
from gossamer.params import Bounds, Checked, PositiveCount, PositiveSeconds, check
from gossamer.wire import chatter as chatter_wire
from gossamer.wire.chatter import NetID
from gossamer.wire.keyring import DEFAULT_CACHE_SIZE, Key, Keyring
from gossamer.wire.mode import WireMode, parse_wire

__all__ = ["DEFAULT_MULTICAST_ADDR", "DEFAULT_PORT", "GossipConfig"]

#: Chatter's defaults (specs/chatter.md, "Configure").
DEFAULT_PORT = 29999
DEFAULT_MULTICAST_ADDR = "224.1.1.1"
DEFAULT_MULTICAST_TTL = 4
#: Largest multicast datagram a default-configured Chatter peer receives whole: OTP on
#: Linux truncates every datagram to 8192 bytes (chatter-as-coded.md §8).
CHATTER_MAX_DATAGRAM = 8192


def _ipv4(name: str, value: str) -> str:
    try:
        address = ipaddress.IPv4Address(value)
    except ValueError:
        raise ConfigError(f"{name} must be a dotted IPv4 address", **{name: value}) from None
    return str(address)


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


def _host(name: str, value: str) -> str:
    """An IPv4 literal (made canonical) or a host name for the driver to resolve to one."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name} must be an IPv4 address or a host name", **{name: value})
    if is_ip(value):
        return _ipv4(name, value)  # refuses IPv6: NetIDs carry IPv4 only
    if not _HOST_NAME.fullmatch(value):
        raise ConfigError(f"{name} must be an IPv4 address or a host name", **{name: value})
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class GossipConfig(Checked):
    """Everything a gossip node needs.

    Chatter's settings:

    - ``my_addr``, ``my_port``: the node's NetID; it listens for TCP there. ``my_addr`` is
      an IPv4 address, or a host name (``localhost``) the driver resolves to one: the core
      needs the literal, as NetIDs carry IPv4 only. ``my_port`` 0 asks the driver for any
      free port (the NetID is then the port it got).
    - ``multicast_addr``, ``multicast_port``, ``multicast_ttl``: the UDP multicast group
      (224.1.1.1:29999, TTL 4 by default).
    - ``key``: the group key. There is no default: a node needs one, from here
      (``CHATTER_KEY``) or from the driver's ``wire=`` (``gossamer.open_gossip``), which
      sets ``wire``, ``key``, ``cluster`` and ``key_id``. In original-wire mode Chatter's
      pad/chop rule makes it 32 bytes. In sealed mode exactly 32 bytes are taken as a raw
      key, and anything else as a high-entropy passphrase (at least 16 bytes) through HKDF
      bound to ``cluster`` (``gossamer.wire.keyring``).

    gossamer's settings:

    - ``wire``: ``WireMode.SEALED`` (default) or ``WireMode.ORIGINAL`` (``--wire``).
    - ``cluster``, ``key_id``: bound into every envelope key.
    - ``multicast``: use the multicast shortcut at all (off: the tree is TCP only).
    - ``multicast_copies``: datagrams per multicast send, ``multicast_spacing`` seconds
      apart (identical bytes; a receiver drops the later copies as replays before
      decrypting them). A peer reached by multicast gets no other copy, so one lost datagram
      is one miss; a second copy costs one datagram per subnet and broadcast and turns a
      loss rate p into about p squared. Default (``None``): 2 in sealed mode, 1 in
      original-wire mode, where Chatter peers would dispatch both copies.
    - ``max_multicast_size``: a multicast datagram larger than this is not sent, and its LAN
      peers stay on the TCP list (8192: what a Chatter peer receives whole, §8).
    - ``max_message_size``: bound on one TCP message, both ways.
    - ``ack_timeout``: a next hop that has not acknowledged a TCP message within this many
      seconds is presumed dead and its chunk is re-planned (sealed mode). In
      original-wire mode, where peers send no acks, it is how long a sent chunk is kept
      for re-planning if the driver reports the connection failed.
    - ``connect_timeout``: for drivers; Chatter had none (§8).
    - ``suspect_time``: a peer that failed as a next hop is not chosen as one again for
      this long, unless no other member is left.
    - ``announce_interval``: a forwarding node multicasts when its list holds a peer that has
      seen it on multicast, or at least this often so that its LAN keeps seeing it.
    - ``max_peers``, ``peer_ttl``, ``seen_ttl``, ``max_seen``, ``max_witnesses``,
      ``max_others``: peer database bounds and expiry (``peers.py``).
    - ``dedupe_window``, ``max_origins``, ``origin_ttl``: the duplicate window (``dedupe.py``).
    - ``first_seqno``: the first broadcast's seqno. Receivers drop seqnos they have seen, so
      it must grow across restarts of this node: drivers pass a clock-based value.
    """

    my_addr: str
    key: bytes | None = None
    my_port: Annotated[int, Bounds(low=0, high=65535)] = DEFAULT_PORT
    multicast_addr: str = DEFAULT_MULTICAST_ADDR
    multicast_port: Annotated[int, Bounds(low=1, high=65535)] = DEFAULT_PORT
    multicast_ttl: Annotated[int, Bounds(low=0, high=255)] = DEFAULT_MULTICAST_TTL
    wire: WireMode = WireMode.SEALED
    cluster: str = "chatter"
    key_id: int = 1
    multicast: bool = True
    multicast_copies: PositiveCount | None = None
    multicast_spacing: Annotated[float, Bounds(low=0.0, high=1.0, unit="s")] = 0.002
    max_multicast_size: Annotated[int, Bounds(low=64, high=65_507, unit="bytes")] = (
        CHATTER_MAX_DATAGRAM
    )
    max_message_size: Annotated[int, Bounds(low=1024, high=1 << 30, unit="bytes")] = 1 << 22
    ack_timeout: PositiveSeconds = 1.0
    connect_timeout: PositiveSeconds = 2.0
    suspect_time: PositiveSeconds = 30.0
    announce_interval: PositiveSeconds = 10.0
    max_peers: PositiveCount = 16_384
    peer_ttl: PositiveSeconds = 3600.0
    seen_ttl: PositiveSeconds = 600.0
    max_seen: PositiveCount = 1024
    max_witnesses: PositiveCount = 1024
    max_others: Annotated[int, Bounds(low=0, high=64)] = 4
    dedupe_window: Annotated[int, Bounds(low=1, high=1 << 16)] = 1024
    max_origins: PositiveCount = 16_384
    origin_ttl: PositiveSeconds = 3600.0
    first_seqno: Annotated[int, Bounds(low=0, high=(1 << 63) - 1)] = 1

    def __post_init__(self) -> None:
        check(self)  # the Bounds of the fields (not super(): see Checked)
        object.__setattr__(self, "my_addr", _host("my_addr", self.my_addr))
        group = _ipv4("multicast_addr", self.multicast_addr)
        if not ipaddress.IPv4Address(group).is_multicast:
            raise ConfigError("multicast_addr must be in 224.0.0.0/4", multicast_addr=group)
        object.__setattr__(self, "multicast_addr", group)
        key: object = self.key
        if isinstance(key, str):
            object.__setattr__(self, "key", key.encode() or None)
        elif key is not None and not isinstance(key, bytes):
            raise ConfigError("key must be bytes or str")
        elif not key:
            object.__setattr__(self, "key", None)
        if not isinstance(self.wire, WireMode):
            raise ConfigError("wire must be a WireMode", wire=self.wire)
        if self.multicast_copies is None:
            copies = 1 if self.wire is WireMode.ORIGINAL else 2
            object.__setattr__(self, "multicast_copies", copies)
        if self.wire is WireMode.ORIGINAL and self.max_multicast_size > CHATTER_MAX_DATAGRAM:
            raise ConfigError(
                "in original-wire mode multicast datagrams must stay within 8192 bytes "
                "(a default-configured Chatter peer truncates larger ones)",
                size=self.max_multicast_size,
            )

    @property
    def netid(self) -> NetID:
        """This node's NetID: ``my_addr:my_port``."""
        return NetID(self.my_addr, self.my_port)

    @property
    def group(self) -> tuple[str, int]:
        """The multicast destination ``(multicast_addr, multicast_port)``."""
        return (self.multicast_addr, self.multicast_port)

    def require_key(self) -> bytes:
        """The group key; ``ConfigError`` when none is configured (no default key)."""
        if self.key is None:
            raise ConfigError(
                "no key configured (CHATTER_KEY, --key-file, or wire=Wire(key=...)): gossamer has "
                "no default key, Chatter's public fallback would let anyone read and forge messages"
            )
        return self.key

    def chatter_key(self) -> bytes:
        """The 32-byte AES key of original-wire mode (Chatter's pad/chop rule, §4)."""
        return chatter_wire.derive_key(self.require_key())

    def keyring(self, *, cache_size: int = DEFAULT_CACHE_SIZE) -> Keyring:
        """The envelope keyring: a raw 32-byte key, or a passphrase through HKDF; it caches
        the ciphers of ``cache_size`` sessions at most (``Keyring``)."""
        key = Key.from_secret(self.require_key(), key_id=self.key_id, cluster=self.cluster)
        return Keyring(cluster=self.cluster, keys=key, cache_size=cache_size)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> GossipConfig:
        """A configuration from Chatter's environment variables, then ``overrides``: the
        one place the ``CHATTER_*`` variables are read (module docstring), kept so that a
        gossamer node configures like a Chatter peer beside it.

        ``environ`` is passed in (``os.environ`` by the CLI) so that cores never read the
        process environment. Values in ``overrides`` win. Raises ``ConfigError`` for a
        missing address and for any unparsable value; a missing key is refused when the
        node opens (it may come from ``wire=`` instead).
        """
        values: dict[str, Any] = {}
        text = {
            "my_addr": "CHATTER_ADDRESS",
            "key": "CHATTER_KEY",
            "multicast_addr": "CHATTER_MULTICAST_ADDRESS",
            "cluster": "CHATTER_CLUSTER",
        }
        numbers = {
            "my_port": "CHATTER_PORT",
            "multicast_port": "CHATTER_MULTICAST_PORT",
            "multicast_ttl": "CHATTER_MULTICAST_TTL",
        }
        for name, var in text.items():
            if environ.get(var):
                values[name] = environ[var]
        for name, var in numbers.items():
            raw = environ.get(var)
            if raw:
                try:
                    values[name] = int(raw)
                except ValueError:
                    raise ConfigError(f"{var} must be an integer", value=raw) from None
        wire = environ.get("CHATTER_WIRE")
        if wire:
            values["wire"] = parse_wire(wire, setting="CHATTER_WIRE")
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigError("unknown gossip settings", settings=sorted(unknown))
        values.update(overrides)
        if "my_addr" not in values:
            raise ConfigError("no address configured (CHATTER_ADDRESS or my_addr)")
        return cls(**values)
