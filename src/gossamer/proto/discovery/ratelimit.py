"""Token buckets that bound how often a Prototari node answers.

Every answer a node sends (``aupa!``, ``dale!``, ``hemen nago!``, an ``agur!``
to a stranger's ``hor?``) is triggered by a datagram whose source address
anyone on the LAN can forge. Without a bound, a flood of forged ``pelotari?``
would turn each node into a reflector aimed at the forged address. The spec
has no such bound; gossamer adds two (see ``docs/discovery.md``):

- one bucket per source address, so one source (or one forged victim) gets at
  most ``burst`` answers at once and ``rate`` per second after that;
- one global bucket, so many forged sources together get no more than the
  global rate. Answers to ``aupa!`` within the handshake timeout of our own
  broadcast are exempt from it (one broadcast of ours legitimately draws an
  ``aupa!`` from every node of the LAN), but not from the per-source bucket.

Time is an argument (``now``, seconds), never read from a clock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gossamer._types import Address
from gossamer.errors import ConfigError

__all__ = ["AnswerLimiter", "TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    """A bucket of at most ``burst`` tokens refilled at ``rate`` tokens per second.

    ``take(now)`` spends one token and returns True, or returns False (and spends
    nothing) when the bucket is empty. A bucket starts full at ``updated``.
    """

    rate: float
    burst: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, *, rate: float, burst: float, now: float) -> TokenBucket:
        if rate < 0 or burst < 1:
            raise ConfigError(
                "a token bucket needs rate >= 0 and burst >= 1", rate=rate, burst=burst
            )
        return cls(rate=rate, burst=burst, tokens=burst, updated=now)

    def _refill(self, now: float) -> None:
        # A clock that goes backwards (it does not in drivers or the simulator)
        # must not mint tokens: elapsed time is clamped at zero.
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        self.updated = max(self.updated, now)

    def peek(self, now: float) -> bool:
        """True when ``take(now)`` would succeed; spends nothing."""
        self._refill(now)
        return self.tokens >= 1.0

    def take(self, now: float) -> bool:
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class AnswerLimiter:
    """Per-source and global token buckets; ``allow(addr, now)`` spends from both.

    The per-source table is bounded to ``table_size`` addresses: the least
    recently used one is forgotten first, so a flood of distinct forged sources
    cannot grow memory without bound (a forgotten source starts again with a
    full bucket, and the global bucket still applies).
    """

    __slots__ = ("_burst", "_global", "_rate", "_sources", "_table_size")

    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        global_rate: float,
        global_burst: int,
        table_size: int,
        now: float,
    ) -> None:
        if table_size < 1:
            raise ConfigError("the rate-limit table needs room for at least one source")
        self._rate = rate
        self._burst = float(burst)
        self._global = TokenBucket.full(rate=global_rate, burst=float(global_burst), now=now)
        TokenBucket.full(rate=rate, burst=self._burst, now=now)  # validate once, here
        self._sources: OrderedDict[Address, TokenBucket] = OrderedDict()
        self._table_size = table_size

    def allow(self, addr: Address, now: float, *, solicited: bool = False) -> bool:
        """Spend one token for an answer to ``addr``; False means do not answer.

        Both buckets must have a token; when either is empty neither is spent,
        so refusals by one bucket do not drain the other. A ``solicited`` answer
        (to a reply to our own recent broadcast) is charged to the source's
        bucket only: a whole LAN legitimately replies to one broadcast at once,
        and each such answer is one datagram for one datagram, never more.
        """
        bucket = self._sources.get(addr)
        if bucket is None:
            bucket = TokenBucket.full(rate=self._rate, burst=self._burst, now=now)
            self._sources[addr] = bucket
            if len(self._sources) > self._table_size:
                self._sources.popitem(last=False)
        else:
            self._sources.move_to_end(addr)
        if not (bucket.peek(now) and (solicited or self._global.peek(now))):
            return False
        bucket.take(now)
        if not solicited:
            self._global.take(now)
        return True

    @property
    def tracked_sources(self) -> int:
        """How many source addresses currently have a bucket."""
        return len(self._sources)
