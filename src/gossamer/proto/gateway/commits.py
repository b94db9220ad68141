"""Which position of the cluster's order a majority of the view has committed (sans-I/O).

A QUEUE_CONFIRM promises that the Push is stored on a majority of the current view
(``docs/cluster.md``, "Replicated queues"). Every member commits each command of the
order to its store as it applies it; ``CommitReports`` is one member's half of telling
the others how far it got:

- ``committed(position, now)`` after each commit: the member's ``applied_through``,
  reported to every other member of the view at once, coalesced (at most one report per
  ``coalesce`` seconds, the latest position), and repeated every ``repeat`` seconds (a
  datagram may be lost; a report only ever grows, so a late one is harmless);
- ``set_view(view_id, members, now)`` at every view install: the members' reports are
  kept for those still in it, the others forgotten; ``set_address(member, address)``
  tells where a member listens (its card), when known;
- ``through`` is the highest position that more than half of the view's members
  (this one included) have reported committing; each time it grows the event
  ``CommittedThrough(position)`` comes out, and the driver confirms every Push proposed
  here at or below it.

A report (``gossamer.wire.commit_reports``) from a process that is not a member of the
current view, or that does not decode, is counted in ``rejected`` and ignored. The core
runs behind the sealed envelope (``SealedDatagrams``): only the cluster's members can
report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gossamer._types import Address, Datagram
from gossamer.errors import DecodeError
from gossamer.wire.commit_reports import CommitReport, decode_report, encode_report

__all__ = ["CommitReports", "CommittedThrough"]


@dataclass(frozen=True, slots=True)
class CommittedThrough:
    """A majority of the view committed the order through ``position``."""

    position: int


class CommitReports:
    """One member's commit reports (module docstring); a ``DatagramCore``."""

    def __init__(self, me: str, *, repeat: float = 0.5, coalesce: float = 0.002) -> None:
        self.me = me
        self.repeat = repeat
        self.coalesce = coalesce
        self.view_id = 0
        #: The view's members (``name#incarnation``), this one included.
        self.members: tuple[str, ...] = (me,)
        #: Where the other members listen, by member.
        self.addresses: dict[str, Address] = {}
        #: The highest position each member reported (this one: its own).
        self.reported: dict[str, int] = {me: 0}
        self.through = 0
        #: Reports refused, by reason.
        self.rejected: Counter[str] = Counter()
        self._out: list[Datagram] = []
        self._events: list[CommittedThrough] = []
        self._due: float | None = None
        self._last_sent = float("-inf")

    @property
    def position(self) -> int:
        """This member's own ``applied_through``."""
        return self.reported[self.me]

    # -- inputs -------------------------------------------------------------------------

    def set_view(self, view_id: int, members: Iterable[str], now: float) -> None:
        self.view_id = view_id
        self.members = tuple(members)
        kept = set(self.members) | {self.me}
        self.reported = {m: p for m, p in self.reported.items() if m in kept}
        self.addresses = {m: a for m, a in self.addresses.items() if m in kept}
        self._schedule(now)
        self.through = 0  # counted again among this view's members
        self._recount()

    def set_address(self, member: str, address: Address, now: float) -> None:
        if member in self.members and member != self.me and self.addresses.get(member) != address:
            self.addresses[member] = address
            self._out.append((self._report(), address))

    def committed(self, position: int, now: float) -> None:
        """This member committed the order through ``position``."""
        if position > self.reported[self.me]:
            self.reported[self.me] = position
            self._schedule(now)
            self._recount()

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        try:
            report = decode_report(data)
        except DecodeError as exc:
            self.rejected[exc.reason] += 1
            return
        if report.member not in self.members or report.member == self.me:
            self.rejected["not a member"] += 1
            return
        if report.position > self.reported.get(report.member, 0):
            self.reported[report.member] = report.position
            self._recount()

    def handle_timer(self, now: float) -> None:
        if self._due is not None and self._due <= now:
            self._send(now)

    # -- outputs ------------------------------------------------------------------------

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._out = self._out, []
        return out

    def events_received(self) -> list[CommittedThrough]:
        out, self._events = self._events, []
        return out

    def next_deadline(self) -> float | None:
        return self._due

    # -- helpers ------------------------------------------------------------------------

    def _report(self) -> bytes:
        return encode_report(CommitReport(self.me, self.view_id, self.position))

    def _schedule(self, now: float) -> None:
        """Send now, or as soon as ``coalesce`` allows (the latest position then)."""
        at = max(now, self._last_sent + self.coalesce)
        if at <= now:
            self._send(now)
        elif self._due is None or at < self._due:
            self._due = at

    def _send(self, now: float) -> None:
        report = self._report()
        self._out.extend((report, address) for address in self.addresses.values())
        self._last_sent = now
        self._due = now + self.repeat

    def _recount(self) -> None:
        positions = sorted((self.reported.get(m, 0) for m in self.members), reverse=True)
        through = positions[len(positions) // 2] if positions else 0
        if through > self.through:
            self.through = through
            self._events.append(CommittedThrough(through))
