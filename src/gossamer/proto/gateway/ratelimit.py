"""Token buckets: failed identifies per address, metadata updates per client.

The reference has no limit on authentication attempts (its README, "Security") and
drains metadata updates every 500 ms whatever their number (singyeong-as-coded §8).
gossamer bounds both; time is an argument (``now``, seconds), never read from a clock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gossamer.errors import ConfigError

__all__ = ["AddressLimiter", "TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    """At most ``burst`` tokens, refilled at ``rate`` per second; starts full."""

    rate: float
    burst: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> TokenBucket:
        if rate <= 0 or burst < 1:
            raise ConfigError("a token bucket needs rate > 0 and burst >= 1")
        return cls(rate=rate, burst=burst, tokens=burst, updated=now)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def available(self, now: float) -> bool:
        """True when a token could be taken now."""
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
        """The earliest time a token is available (``now`` if one is)."""
        self._refill(now)
        if self.tokens >= 1.0:
            return now
        return now + (1.0 - self.tokens) / self.rate

    def full_at(self, now: float) -> float:
        """When the bucket will be full again (then it can be forgotten)."""
        self._refill(now)
        return now + (self.burst - self.tokens) / self.rate


class AddressLimiter:
    """One bucket per remote address, for failures (e.g. wrong passwords).

    ``blocked(addr, now)`` says whether the address has no token left;
    ``failure(addr, now)`` spends one. Buckets that have refilled completely are
    forgotten, and at most ``max_tracked`` addresses are remembered (the least
    recently failing ones are dropped first), so memory stays bounded under a
    flood of sources.
    """

    def __init__(self, *, rate: float, burst: float, max_tracked: int = 65_536) -> None:
        if rate <= 0 or burst < 1 or max_tracked < 1:
            raise ConfigError("rate > 0, burst >= 1 and max_tracked >= 1 are required")
        self.rate = rate
        self.burst = burst
        self.max_tracked = max_tracked
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def blocked(self, addr: str, now: float) -> bool:
        bucket = self._buckets.get(addr)
        return bucket is not None and not bucket.available(now)

    def failure(self, addr: str, now: float) -> None:
        bucket = self._buckets.get(addr)
        if bucket is None:
            bucket = TokenBucket.full(self.rate, self.burst, now)
            self._buckets[addr] = bucket
        self._buckets.move_to_end(addr)
        bucket.take(now)
        while len(self._buckets) > self.max_tracked:
            self._buckets.popitem(last=False)

    def prune(self, now: float) -> None:
        """Forget buckets that are full again (nothing to remember about them)."""
        for addr in [a for a, b in self._buckets.items() if b.full_at(now) <= now]:
            del self._buckets[addr]
