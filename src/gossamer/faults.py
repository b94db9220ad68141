"""Faults shared by the simulator, the asyncio drivers and the lab: one definition each.

- :class:`FaultPlan`: the per-datagram faults (drop, duplicate, delay, reorder). Both
  ``gossamer.sim`` and ``gossamer.aio`` inject the same faults so that a scenario behaves
  alike in simulation and on real sockets; they may not import each other, so the plan
  lives here. Randomness comes from the caller's ``random.Random``, and the decision is a
  value the caller acts on.
- :class:`Crash` and :class:`Partition`: the scheduled faults, and the one syntax for
  them on every command line: ``NODE@SECONDS`` (a crash, a restart, a leave) and
  ``A,B@FROM-TO`` (``A`` and ``B`` cut off from the rest in ``[FROM, TO)``).
  :func:`parse_crash` and :func:`parse_partition` serve flags (``gossamer lab run
  --crash``); :func:`node_at_list` and :func:`partition_spec` are the same grammar as
  scenario parameter parsers (``gossamer sim --param crash=n3@5,n4@7``).

The module is pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from gossamer.errors import ConfigError
from gossamer.params import Checked, Probability, Seconds

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "Crash",
    "FaultDecision",
    "FaultPlan",
    "Partition",
    "node_at_list",
    "parse_crash",
    "parse_partition",
    "partition_spec",
]


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
class FaultPlan(Checked):
    """Probabilities and delays applied independently to each datagram.

    - ``drop``: probability the datagram is lost.
    - ``duplicate``: probability a surviving datagram is delivered twice.
    - ``delay``: each surviving copy is held for an extra uniform ``[0, delay]`` seconds.
    - ``reorder``: probability a copy is held back ``reorder_by`` seconds more, so
      datagrams sent after it overtake it.
    """

    drop: Probability = 0.0
    duplicate: Probability = 0.0
    delay: Seconds = 0.0
    reorder: Probability = 0.0
    reorder_by: Seconds = 0.05

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


# -- scheduled faults ----------------------------------------------------------------------

_NAME = r"[A-Za-z0-9_.:-]+"
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_NODE_AT: Final = re.compile(rf"^\s*({_NAME})\s*@\s*{_NUMBER}\s*$")
_WINDOW: Final = re.compile(
    rf"^\s*({_NAME}(?:\s*,\s*{_NAME})*)\s*@\s*{_NUMBER}\s*-\s*{_NUMBER}\s*$"
)
_CRASH_SYNTAX: Final = "expected HOST@SECONDS, e.g. h3@12"
_PARTITION_SYNTAX: Final = "expected A,B@FROM-TO, e.g. h1,h2@5-10"


@dataclass(frozen=True, slots=True, kw_only=True)
class Crash:
    """``HOST@SECONDS``: ``host`` stops ``at`` seconds after the start."""

    host: str
    at: float

    def __str__(self) -> str:
        return f"{self.host}@{self.at:g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    """``A,B@FROM-TO``: ``hosts`` against the rest, in ``[start, end)`` seconds."""

    hosts: tuple[str, ...]
    start: float
    end: float

    def __str__(self) -> str:
        return f"{','.join(self.hosts)}@{self.start:g}-{self.end:g}"


def _crash(text: str) -> Crash:
    match = _NODE_AT.match(text)
    if match is None:
        raise ValueError(_CRASH_SYNTAX)
    return Crash(host=match[1], at=float(match[2]))


def _partition(text: str) -> Partition:
    match = _WINDOW.match(text)
    if match is None:
        raise ValueError(_PARTITION_SYNTAX)
    hosts = tuple(h.strip() for h in match[1].split(","))
    if len(set(hosts)) != len(hosts):
        raise ValueError("hosts must be distinct and non-empty")
    start, end = float(match[2]), float(match[3])
    if not end > start:
        raise ValueError("FROM must be before TO")
    return Partition(hosts=hosts, start=start, end=end)


def parse_crash(text: str, *, flag: str = "--crash") -> Crash:
    """``h3@12.5`` -> ``Crash(host="h3", at=12.5)``; ``ConfigError`` naming ``flag``."""
    try:
        return _crash(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: {exc}") from exc


def parse_partition(text: str, *, flag: str = "--partition") -> Partition:
    """``h1,h2@5-10`` -> ``Partition(hosts=("h1", "h2"), start=5, end=10)``."""
    try:
        return _partition(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: {exc}") from exc


def node_at_list(text: str) -> list[tuple[str, float]]:
    """A parameter parser: ``n3@5,n4@7.5`` -> ``[("n3", 5.0), ("n4", 7.5)]``."""
    items = []
    for part in text.split(","):
        try:
            crash = _crash(part)
        except ValueError:
            raise ValueError(f"{part!r} is not NODE@SECONDS") from None
        items.append((crash.host, crash.at))
    return items


def partition_spec(text: str) -> tuple[list[str], float, float]:
    """A parameter parser: ``n1,n2@5-10`` -> the nodes cut off from 5 s to 10 s."""
    try:
        part = _partition(text)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    return list(part.hosts), part.start, part.end
