"""Token buckets, alone and in a bounded table keyed by peer: the one rate limiter.

Every protocol core that bounds what untrusted peers can make it do uses these:
discovery bounds its answers per source and globally
(:class:`gossamer.proto.discovery.ratelimit.AnswerLimiter`), the gateway bounds password
guesses per source (:class:`gossamer.proto.gateway.auth.PasswordGuard`) and metadata
updates per client. Time is an argument (``now``,
seconds), never read from a clock, so the simulator and the drivers give the same answers.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from gossamer.errors import ConfigError

__all__ = ["BucketTable", "TokenBucket"]

K = TypeVar("K", bound=Hashable)


def _check(rate: float, burst: float) -> None:
    if not (rate >= 0 and burst >= 1):
        raise ConfigError("a token bucket needs rate >= 0 and burst >= 1", rate=rate, burst=burst)


@dataclass(slots=True)
class TokenBucket:
    """At most ``burst`` tokens, refilled at ``rate`` tokens per second.

    ``take(now)`` spends one token and returns True, or returns False and spends
    nothing when the bucket is empty. A bucket made by :meth:`full` starts full. A
    ``rate`` of 0 never refills (a fixed allowance of ``burst``). A clock that goes
    backwards mints no tokens.
    """

    rate: float
    burst: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, *, rate: float, burst: float, now: float) -> TokenBucket:
        """A full bucket; ``ConfigError`` unless ``rate >= 0`` and ``burst >= 1``."""
        _check(rate, burst)
        return cls(rate=rate, burst=burst, tokens=burst, updated=now)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def available(self, now: float) -> bool:
        """True when ``take(now)`` would succeed; spends nothing."""
        self._refill(now)
        return self.tokens >= 1.0

    def take(self, now: float) -> bool:
        """Spend one token and return True, or return False (spending nothing)."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def when_available(self, now: float) -> float:
        """The earliest time a token is available (``now`` if one is; ``inf`` if never)."""
        self._refill(now)
        if self.tokens >= 1.0:
            return now
        return now + (1.0 - self.tokens) / self.rate if self.rate > 0 else math.inf

    def full_at(self, now: float) -> float:
        """When the bucket is full again (``inf`` if never): then it can be forgotten."""
        self._refill(now)
        if self.tokens >= self.burst:
            return now
        return now + (self.burst - self.tokens) / self.rate if self.rate > 0 else math.inf


class BucketTable(Generic[K]):
    """One :class:`TokenBucket` per key (a peer's address, a client), at most ``size`` keys.

    ``bucket(key, now)`` returns the key's bucket, making a full one for a new key,
    and marks the key most recently used; beyond ``size`` keys the least recently
    used is forgotten, so a flood of distinct (forged) sources cannot grow memory
    without bound. A forgotten key starts again with a full bucket: whoever needs
    a bound over all keys adds a global bucket (as discovery does). ``prune(now)``
    forgets buckets that are full again, which is the same as forgetting nothing.
    """

    __slots__ = ("_buckets", "burst", "rate", "size")

    def __init__(self, *, rate: float, burst: float, size: int) -> None:
        _check(rate, burst)
        if size < 1:
            raise ConfigError("a rate-limit table needs room for at least one key", size=size)
        self.rate = rate
        self.burst = float(burst)
        self.size = size
        self._buckets: OrderedDict[K, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def get(self, key: K) -> TokenBucket | None:
        """The key's bucket if it has one; does not count as a use."""
        return self._buckets.get(key)

    def bucket(self, key: K, now: float) -> TokenBucket:
        """The key's bucket (a full one if new), now the most recently used."""
        found = self._buckets.get(key)
        if found is not None:
            self._buckets.move_to_end(key)
            return found
        made = TokenBucket(rate=self.rate, burst=self.burst, tokens=self.burst, updated=now)
        self._buckets[key] = made
        while len(self._buckets) > self.size:
            self._buckets.popitem(last=False)
        return made

    def prune(self, now: float) -> None:
        """Forget the buckets that are full again (nothing to remember about them)."""
        for key in [k for k, b in self._buckets.items() if b.full_at(now) <= now]:
            del self._buckets[key]
