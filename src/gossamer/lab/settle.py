"""Settling: after the workload, wait until no node has anything in flight, then stop.

A run that stopped its nodes at a fixed time after the workload left messages
unfinished whenever the last ones needed longer (an ISIS message behind a lost
datagram waits for the next retransmission, up to 3.2 s on the spec's schedule, and
blocks every later one), and the analysis could only call them undelivered. So the
lab stops the workload, keeps the nodes serving for ``linger`` seconds as before, and
then for as long as the group has not *settled*, at most ``settle`` seconds more
(docs/lab.md, "Settling").

Settled is what the nodes report, not a guess: each node's ``progress`` line carries
``pending`` (ISIS messages held back or not yet acknowledged by every member, held
sends, gateway queue messages not yet acked; ``gossamer.lab.app.LabApp.in_flight``)
and ``idle`` (``pending == 0``). The group has settled when every live node's last two
reports after the workload are idle and its counts did not change between them: a
message still in flight keeps its sender busy (it retransmits until every member
answers), so no node reports idle twice with nothing moving while one is.

Contract: :meth:`Settling.update` takes every progress line; :meth:`Settling.settled`
answers for the live nodes; :meth:`Settling.result` is what ``run.json``'s
``lab.settle`` records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Settling"]

#: The figures of a progress line that must not change between the two idle reports.
_COUNTS = ("sent", "delivered")


@dataclass(slots=True)
class _Reports:
    """A node's last two progress lines after the workload (oldest first)."""

    last: list[Mapping[str, Any]] = field(default_factory=list)

    def add(self, line: Mapping[str, Any]) -> None:
        self.last = [*self.last[-1:], line]

    @property
    def pending(self) -> int | None:
        value = self.last[-1].get("pending") if self.last else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def quiet(self) -> bool:
        """Two reports, both idle, with the same counts."""
        if len(self.last) < 2:
            return False
        a, b = self.last
        return (
            a.get("idle") is True
            and b.get("idle") is True
            and all(a.get(k) == b.get(k) for k in _COUNTS)
        )


class Settling:
    """The settling phase of one run, from ``workload_end``: the nodes are stopped once
    ``linger`` seconds have passed and the group has settled, or ``linger + settle``
    seconds after the workload in any case (:meth:`done`).

    Times are ``time.monotonic()`` values (the nodes stamp their lines with the same
    clock).
    """

    def __init__(self, *, workload_end: float, linger: float, settle: float) -> None:
        self.workload_end = workload_end
        self.linger = linger
        self.settle = settle
        self.reports: dict[str, _Reports] = {}
        self.settled_at: float | None = None

    def update(self, node: str, line: Mapping[str, Any]) -> None:
        """Take one ``progress`` line; lines stamped before the workload end are ignored."""
        t = line.get("t")
        if not isinstance(t, int | float) or t < self.workload_end:
            return
        self.reports.setdefault(node, _Reports()).add(line)

    def settled(self, live: Iterable[str], now: float) -> bool:
        """True (and remembered: with the workload over, nothing new starts) once every
        node of ``live`` is quiet."""
        if self.settled_at is None and all(
            node in self.reports and self.reports[node].quiet for node in live
        ):
            self.settled_at = now
        return self.settled_at is not None

    def done(self, live: Iterable[str], now: float) -> bool:
        """Time to stop the nodes: settled and lingered, or out of time."""
        if now < self.workload_end:
            return False
        settled = self.settled(live, now)
        elapsed = now - self.workload_end
        return elapsed >= self.linger + self.settle or (settled and elapsed >= self.linger)

    def pending(self, live: Iterable[str]) -> dict[str, int | None]:
        """The live nodes not yet quiet and what they last reported pending."""
        return {
            node: (self.reports[node].pending if node in self.reports else None)
            for node in live
            if node not in self.reports or not self.reports[node].quiet
        }

    def result(self, live: Iterable[str], now: float) -> dict[str, Any]:
        """``run.json``'s ``lab.settle``: ``settled``; ``seconds``, from the workload's end
        until the group had settled (null if it did not); ``stopped_after``, until the
        nodes were stopped; ``linger`` and ``settle`` as configured; and, when it did not
        settle, ``pending`` by node."""
        settled = self.settled_at
        out: dict[str, Any] = {
            "settled": settled is not None,
            "seconds": None if settled is None else round(settled - self.workload_end, 3),
            "stopped_after": round(max(0.0, now - self.workload_end), 3),
            "linger": self.linger,
            "settle": self.settle,
        }
        if self.settled_at is None:
            out["pending"] = self.pending(live)
        return out
