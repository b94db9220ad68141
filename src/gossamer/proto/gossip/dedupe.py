"""Deliver each broadcast once: bounded duplicate windows.

Chatter has no duplicate suppression of any kind (chatter-as-coded.md §9): every copy that
arrives, by multicast or by TCP, is dispatched. gossamer delivers each broadcast once.

- ``DuplicateWindow`` (sealed mode): the originator's BroadcastID travels end to end, so a
  broadcast is named by ``(origin, seqno)`` (the origin by its 6-byte wire form). Per
  origin, a sliding bitmap ``width`` seqnos wide below the highest seqno seen (the
  replay-window scheme of RFC 4303 §3.4.3). A seqno above the window slides it; one inside
  is new unless its bit is set; one below it is too old and is not delivered (it cannot be
  told from a duplicate any more).
- ``DigestWindow`` (original-wire mode): Chatter's wire names a message by its *last
  hop* (forwarders re-originate, §9), so there is no end-to-end id to use. Copies are
  recognised by a digest of the payload type tag and content, remembered for ``ttl``
  seconds. The price: the same payload broadcast twice within ``ttl`` is delivered once.

Both are bounded: at most ``max_origins`` origins (``max_entries`` digests), the least
recently used going first, and entries idle for ``ttl`` seconds are dropped by ``sweep``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from enum import Enum
from typing import TypeVar

from gossamer.errors import ConfigError

__all__ = ["DigestWindow", "DuplicateWindow", "Freshness", "payload_digest"]


class Freshness(Enum):
    """What a window says about a copy."""

    NEW = "new"
    DUPLICATE = "duplicate"
    TOO_OLD = "too_old"


_V = TypeVar("_V")


def _drop_idle(
    entries: OrderedDict[bytes, _V], oldest: float, last_used: Callable[[_V], float]
) -> int:
    """Drop the entries last used before ``oldest``; return how many.

    ``entries`` is kept in order of use (least recent first: every use moves its entry to
    the end), so the idle ones are a prefix and the scan stops at the first recent one.
    """
    removed = 0
    while entries:
        key, value = next(iter(entries.items()))
        if last_used(value) >= oldest:
            break
        del entries[key]
        removed += 1
    return removed


class _Window:
    __slots__ = ("bits", "last", "top")

    def __init__(self, top: int, now: float) -> None:
        self.top = top
        self.bits = 1
        self.last = now


class DuplicateWindow:
    """Per-origin windows of the seqnos already delivered. See the module docstring."""

    __slots__ = ("_mask", "_windows", "max_origins", "ttl", "width")

    def __init__(self, *, width: int = 1024, max_origins: int = 16_384, ttl: float = 3600.0):
        if not 1 <= width <= 1 << 16:
            raise ConfigError("duplicate window width must be 1 to 65536", width=width)
        if max_origins < 1 or not ttl > 0:
            raise ConfigError("max_origins must be >= 1 and ttl positive")
        self.width = width
        self.max_origins = max_origins
        self.ttl = ttl
        self._mask = (1 << width) - 1
        self._windows: OrderedDict[bytes, _Window] = OrderedDict()

    def __len__(self) -> int:
        return len(self._windows)

    def check(self, origin: bytes, seqno: int, now: float) -> Freshness:
        """Classify the copy ``(origin, seqno)`` and record it when it is new; ``origin`` is
        the origin's ``NetID.packed``."""
        window = self._windows.get(origin)
        if window is None:
            self._windows[origin] = _Window(seqno, now)
            if len(self._windows) > self.max_origins:
                self._windows.popitem(last=False)
            return Freshness.NEW
        self._windows.move_to_end(origin)
        window.last = now
        ahead = seqno - window.top
        if ahead > 0:
            window.bits = ((window.bits << ahead) | 1) & self._mask if ahead < self.width else 1
            window.top = seqno
            return Freshness.NEW
        behind = -ahead
        if behind >= self.width:
            return Freshness.TOO_OLD
        if (window.bits >> behind) & 1:
            return Freshness.DUPLICATE
        window.bits |= 1 << behind
        return Freshness.NEW

    def sweep(self, now: float) -> int:
        """Forget origins idle for ``ttl`` seconds; return how many."""
        return _drop_idle(self._windows, now - self.ttl, lambda window: window.last)


def payload_digest(tag: int, content: bytes) -> bytes:
    """An 8-byte digest naming a payload in original-wire mode (BLAKE2b)."""
    return hashlib.blake2b(tag.to_bytes(4, "big") + content, digest_size=8).digest()


class DigestWindow:
    """Payload digests delivered within ``ttl`` seconds (original-wire mode)."""

    __slots__ = ("_seen", "max_entries", "ttl")

    def __init__(self, *, max_entries: int = 65_536, ttl: float = 600.0) -> None:
        if max_entries < 1 or not ttl > 0:
            raise ConfigError("max_entries must be >= 1 and ttl positive")
        self.max_entries = max_entries
        self.ttl = ttl
        self._seen: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def check(self, digest: bytes, now: float) -> Freshness:
        """NEW (and remembered) unless ``digest`` was seen within ``ttl``."""
        when = self._seen.get(digest)
        if when is not None and when >= now - self.ttl:
            return Freshness.DUPLICATE
        self._seen[digest] = now
        self._seen.move_to_end(digest)
        if len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
        return Freshness.NEW

    def sweep(self, now: float) -> int:
        """Forget digests older than ``ttl``; return how many."""
        return _drop_idle(self._seen, now - self.ttl, lambda when: when)
