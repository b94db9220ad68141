"""How often a Prototari node answers: per source and globally.

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

The buckets are the shared ones (:mod:`gossamer.proto.ratelimit`); time is an
argument (``now``, seconds), never read from a clock.
"""

from __future__ import annotations

from gossamer._types import Address
from gossamer.proto.ratelimit import BucketTable, TokenBucket

__all__ = ["AnswerLimiter"]


class AnswerLimiter:
    """Per-source and global token buckets; ``allow(addr, now)`` spends from both.

    The per-source table is bounded to ``table_size`` addresses: the least
    recently used one is forgotten first, so a flood of distinct forged sources
    cannot grow memory without bound (a forgotten source starts again with a
    full bucket, and the global bucket still applies).
    """

    __slots__ = ("_global", "_sources")

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
        self._global = TokenBucket.full(rate=global_rate, burst=float(global_burst), now=now)
        self._sources: BucketTable[Address] = BucketTable(rate=rate, burst=burst, size=table_size)

    def allow(self, addr: Address, now: float, *, solicited: bool = False) -> bool:
        """Spend one token for an answer to ``addr``; False means do not answer.

        Both buckets must have a token; when either is empty neither is spent,
        so refusals by one bucket do not drain the other. A ``solicited`` answer
        (to a reply to our own recent broadcast) is charged to the source's
        bucket only: a whole LAN legitimately replies to one broadcast at once,
        and each such answer is one datagram for one datagram, never more.
        """
        bucket = self._sources.bucket(addr, now)
        if not (bucket.available(now) and (solicited or self._global.available(now))):
            return False
        bucket.take(now)
        if not solicited:
            self._global.take(now)
        return True

    @property
    def tracked_sources(self) -> int:
        """How many source addresses currently have a bucket."""
        return len(self._sources)
