"""The per-datagram fault plan shared by the simulator and the asyncio drivers.

Both ``gossamer.sim`` and ``gossamer.aio`` inject the same faults so that a
scenario behaves alike in simulation and on real sockets; they may not import
each other, so the plan lives here. It is pure: randomness comes from the
caller's ``random.Random``, and the decision is a value the caller acts on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gossamer.errors import ConfigError

if TYPE_CHECKING:
    from random import Random

__all__ = ["FaultDecision", "FaultPlan"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultDecision:
    """What happens to one datagram.

    ``copies`` holds one extra delay (seconds) per copy to deliver: empty means
    dropped, two entries mean duplicated. ``faults`` names each fault applied
    (``drop``, ``duplicate``, ``delay``, ``reorder``) so that it can be counted
    and traced; it is empty when the datagram passes untouched.
    """

    copies: tuple[float, ...]
    faults: tuple[str, ...]


_PASS = FaultDecision(copies=(0.0,), faults=())


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultPlan:
    """Probabilities and delays applied independently to each datagram.

    - ``drop``: probability the datagram is lost.
    - ``duplicate``: probability a surviving datagram is delivered twice.
    - ``delay``: each surviving copy is held for an extra uniform ``[0, delay]`` seconds.
    - ``reorder``: probability a copy is held back ``reorder_by`` seconds more, so
      datagrams sent after it overtake it.
    """

    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    reorder: float = 0.0
    reorder_by: float = 0.05

    def __post_init__(self) -> None:
        for name in ("drop", "duplicate", "reorder"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be a probability in [0, 1]", **{name: value})
        for name in ("delay", "reorder_by"):
            value = getattr(self, name)
            if value < 0.0:
                raise ConfigError(
                    f"{name} must be a non-negative number of seconds", **{name: value}
                )

    @property
    def is_clean(self) -> bool:
        """True when the plan never changes a datagram."""
        return self.drop == 0 and self.duplicate == 0 and self.delay == 0 and self.reorder == 0

    def decide(self, rng: Random) -> FaultDecision:
        """Draw the fate of one datagram. Consumes a fixed pattern of draws per
        enabled fault so that runs with the same seed and plan are identical."""
        if self.is_clean:
            return _PASS
        faults: list[str] = []
        if self.drop and rng.random() < self.drop:
            return FaultDecision(copies=(), faults=("drop",))
        count = 1
        if self.duplicate and rng.random() < self.duplicate:
            count = 2
            faults.append("duplicate")
        copies: list[float] = []
        for _ in range(count):
            extra = 0.0
            if self.delay:
                extra += rng.uniform(0.0, self.delay)
            if self.reorder and rng.random() < self.reorder:
                extra += self.reorder_by
                if "reorder" not in faults:
                    faults.append("reorder")
            copies.append(extra)
        if self.delay and "delay" not in faults:
            faults.append("delay")
        return FaultDecision(copies=tuple(copies), faults=tuple(faults))
