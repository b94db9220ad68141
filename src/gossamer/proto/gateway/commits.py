"""The ``applied_through`` reports between the members of a cluster, as datagrams (sans-I/O).

A QUEUE_CONFIRM promises that the Push is stored on a majority of the current view
(``docs/cluster.md``, "Replicated queues"). The rule (which reports vouch for which
Push, a report counting only for the same history) is ``ConfirmTracker``'s
(``queue_confirms.py``); ``CommitReports`` is one member's datagram core around it,
which carries the reports (``gossamer.wire.queue_commands.encode_report``) between the
members of the view:

- ``applied(effects, now)`` after each commit (one command's effects, or a batch's): the tracker
  learns this member's position, history and own Pushes, and the member's report goes
  to every other member of the view at once, coalesced (at most one report per
  ``coalesce`` seconds, the latest position), and is repeated every ``repeat`` seconds
  (a datagram may be lost; a report only ever grows, so a late one is harmless);
- ``set_view(view_id, members, now)`` at every view install: reports of members no
  longer in it are forgotten; ``set_address(member, address, now)`` says where a member
  listens (its card), when known; ``restored(position, chain, now)`` a joiner's start;
- each time Pushes become confirmable (after ``applied``, a report, a new view), the
  event ``Confirmable(confirms)`` comes out: the driver sends their QUEUE_CONFIRMs;
  ``refuse_all()`` clears the pending Pushes when the member loses the majority.

A report that does not decode, or that comes from a process not in the current view,
is counted in ``rejected`` and ignored. The core runs behind the sealed envelope
(``SealedDatagrams``): only the cluster's members can report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gossamer._types import Address, Datagram
from gossamer.errors import DecodeError
from gossamer.proto.gateway.queue_confirms import ConfirmTracker
from gossamer.proto.gateway.replicated_queues import Confirm, Effects
from gossamer.wire.queue_commands import Report, decode_report, encode_report

__all__ = ["CommitReports", "Confirmable"]


@dataclass(frozen=True, slots=True)
class Confirmable:
    """These Pushes of this member's clients were committed by a majority of the view."""

    confirms: tuple[Confirm, ...]


class CommitReports:
    """One member's ``applied_through`` reports (module docstring); a ``DatagramCore``."""

    def __init__(self, me: str, *, repeat: float = 0.5, coalesce: float = 0.002) -> None:
        self.tracker = ConfirmTracker(me)
        self.repeat = repeat
        self.coalesce = coalesce
        #: The view's members (``name#incarnation``), this one included.
        self.members: tuple[str, ...] = (me,)
        #: Where the other members listen, by member.
        self.addresses: dict[str, Address] = {}
        #: Reports refused, by reason.
        self.rejected: Counter[str] = Counter()
        self._chain = ""
        self._out: list[Datagram] = []
        self._events: list[Confirmable] = []
        self._due: float | None = None
        self._last_sent = float("-inf")

    @property
    def me(self) -> str:
        return self.tracker.me

    @property
    def position(self) -> int:
        """This member's own ``applied_through``."""
        return self.tracker.position

    # -- inputs -------------------------------------------------------------------------

    def applied(self, effects: Effects | Sequence[Effects], now: float) -> None:
        """This member applied and committed ``effects`` (one command's, or a batch's
        committed together, in order): one report for them all."""
        batch = (effects,) if isinstance(effects, Effects) else effects
        if not batch:
            return
        for one in batch:
            self.tracker.applied(one)
        self._chain = batch[-1].chain
        self._schedule(now)
        self._check()

    def restored(self, position: int, chain: str, now: float) -> None:
        """This member took the members' state at ``position`` (a joiner)."""
        self.tracker.restored(position, chain)
        self._chain = chain
        self._schedule(now)

    def set_view(self, view_id: int, members: Iterable[str], now: float) -> None:
        self.members = tuple(members)
        self.tracker.forget(self.members)
        kept = set(self.members)
        self.addresses = {m: a for m, a in self.addresses.items() if m in kept}
        self._schedule(now)
        self._check()

    def set_address(self, member: str, address: Address, now: float) -> None:
        if member in self.members and member != self.me and self.addresses.get(member) != address:
            self.addresses[member] = address
            self._out.append((self._report(), address))

    def rename(self, me: str, now: float) -> None:
        """This member is now ``me`` (a process rejoining as its next incarnation)."""
        self.tracker.me = me

    def refuse_all(self) -> list[Confirm]:
        """The pending Pushes, cleared: the member lost the majority."""
        return self.tracker.refuse_all()

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        try:
            report = decode_report(data)
        except DecodeError as exc:
            self.rejected[exc.reason] += 1
            return
        if report.member not in self.members or report.member == self.me:
            self.rejected["not a member"] += 1
            return
        self.tracker.reported(report.member, report.position, report.chain)
        self._check()

    def handle_timer(self, now: float) -> None:
        if self._due is not None and self._due <= now:
            self._send(now)

    # -- outputs ------------------------------------------------------------------------

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._out = self._out, []
        return out

    def events_received(self) -> list[Confirmable]:
        out, self._events = self._events, []
        return out

    def next_deadline(self) -> float | None:
        return self._due

    # -- helpers ------------------------------------------------------------------------

    def _report(self) -> bytes:
        return encode_report(Report(member=self.me, position=self.position, chain=self._chain))

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

    def _check(self) -> None:
        ready = self.tracker.confirmable(self.members)
        if ready:
            self._events.append(Confirmable(tuple(ready)))
