"""Exponential back-off with jitter: the one retry schedule of the protocol cores.

The wait before retry number ``attempt`` (0 for the first retry) is drawn from
``ceiling(attempt) * uniform(low, high)`` where ``ceiling`` starts at ``base`` and
doubles up to ``maximum``. The spread picks the jitter: ``FULL_JITTER`` (0 to the
ceiling; the gateway client's reconnects, so that clients cut off together do not come
back together), ``AROUND`` (half to one and a half times the ceiling; link retries) or
``NO_JITTER`` (exactly the ceiling, no random draw; ping retransmissions). Time and
randomness are arguments: the core passes its seeded ``Random``, so runs repeat.

ISIS retransmission is not a back-off of this kind: the spec's schedule cycles back to
its first interval (``gossamer.proto.isis.retransmit.RetransmitSchedule``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gossamer.errors import ConfigError

if TYPE_CHECKING:
    from random import Random

__all__ = ["AROUND", "FULL_JITTER", "NO_JITTER", "Backoff"]

#: Uniform between 0 and the ceiling ("full jitter").
FULL_JITTER = (0.0, 1.0)
#: Uniform between half and one and a half times the ceiling.
AROUND = (0.5, 1.5)
#: Exactly the ceiling; draws no random number.
NO_JITTER = (1.0, 1.0)

# 2**64 times any positive base exceeds every maximum worth configuring; capping the
# exponent keeps an endless retry count from overflowing a float.
_MAX_DOUBLINGS = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """``base`` doubling up to ``maximum`` (seconds), scaled by a draw from ``spread``."""

    base: float
    maximum: float = math.inf
    spread: tuple[float, float] = FULL_JITTER

    def __post_init__(self) -> None:
        if not 0 < self.base <= self.maximum:
            raise ConfigError(
                "a back-off needs 0 < base <= maximum", base=self.base, maximum=self.maximum
            )
        low, high = self.spread
        if not 0 <= low <= high:
            raise ConfigError("a back-off spread needs 0 <= low <= high", spread=self.spread)

    def ceiling(self, attempt: int) -> float:
        """``base * 2**attempt``, at most ``maximum``."""
        return min(self.maximum, self.base * 2.0 ** min(max(attempt, 0), _MAX_DOUBLINGS))

    def delay(self, attempt: int, rng: Random) -> float:
        """The wait before retry ``attempt``; a point spread draws nothing from ``rng``."""
        low, high = self.spread
        if low == high:
            return self.ceiling(attempt) * low
        return self.ceiling(attempt) * rng.uniform(low, high)
