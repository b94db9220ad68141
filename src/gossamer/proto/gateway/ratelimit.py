"""Failed identifies per address: the gateway's use of the shared token buckets.

The reference has no limit on authentication attempts (its README, "Security") and
drains metadata updates every 500 ms whatever their number (singyeong-as-coded §8).
gossamer bounds both with :mod:`gossamer.proto.ratelimit` (the metadata bucket lives
with each client in ``core.py``); time is an argument (``now``, seconds).
"""

from __future__ import annotations

from gossamer.errors import ConfigError
from gossamer.proto.ratelimit import BucketTable

__all__ = ["AddressLimiter"]


class AddressLimiter:
    """One bucket per remote address, for failures (e.g. wrong passwords).

    ``blocked(addr, now)`` says whether the address has no token left;
    ``failure(addr, now)`` spends one. Buckets that have refilled completely are
    forgotten by ``prune``, and at most ``max_tracked`` addresses are remembered
    (the least recently failing ones are dropped first), so memory stays bounded
    under a flood of sources.
    """

    __slots__ = ("_table",)

    def __init__(self, *, rate: float, burst: float, max_tracked: int = 65_536) -> None:
        # rate 0 would block an address for good after ``burst`` failures: refuse it.
        if rate <= 0:
            raise ConfigError("the identify failure rate must be positive", rate=rate)
        self._table: BucketTable[str] = BucketTable(rate=rate, burst=burst, size=max_tracked)

    def __len__(self) -> int:
        return len(self._table)

    def blocked(self, addr: str, now: float) -> bool:
        bucket = self._table.get(addr)
        return bucket is not None and not bucket.available(now)

    def failure(self, addr: str, now: float) -> None:
        self._table.bucket(addr, now).take(now)

    def prune(self, now: float) -> None:
        """Forget buckets that are full again (nothing to remember about them)."""
        self._table.prune(now)
