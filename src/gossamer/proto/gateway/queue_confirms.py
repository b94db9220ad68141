"""When a Push may be confirmed: the majority rule of the replicated queues (sans-I/O).

One ``ConfirmTracker`` per member, fed by its driver (``docs/cluster.md``, "Replicated
queues"):

- ``applied(effects)`` after each command is applied and committed: this member's own
  position and history digest (``chain``), and the Pushes of its own clients it must
  confirm (``Effects.confirms`` naming this node);
- ``reported(member, position, chain)`` for each ``applied_through`` report of another
  member (``gossamer.wire.queue_commands.encode_report``);
- ``confirmable(view)`` after either: the pending Pushes that more than half of
  ``view`` (this member included) have committed, *with this member's history*, removed
  from the pending set and returned in position order;
- ``refuse_all()`` when the member loses the majority (blocked, excluded): the pending
  Pushes, cleared, for the driver to answer ``no_majority``.

A report vouches for a Push at position p when it names a position q >= p and its chain
is this member's own chain at q (a member that left may have applied other commands at
the same positions: ISIS delivery is not uniform). Reports ahead of this member wait
until it reaches their position. Only the chains a pending Push may still need are kept.
"""

from __future__ import annotations

from collections.abc import Iterable

from gossamer.proto.gateway.replicated_queues import Confirm, Effects

__all__ = ["ConfirmTracker"]

#: Own chains kept beyond the oldest pending Push (reports lag a little behind).
_SLACK = 64


class ConfirmTracker:
    """The pending confirms of member ``me`` (its node name as commands give it)."""

    def __init__(self, me: str) -> None:
        self.me = me
        self.position = 0
        #: Message id -> the Confirm effect waiting for a majority.
        self.pending: dict[str, Confirm] = {}
        #: Member -> its latest report ``(position, chain)``.
        self.reports: dict[str, tuple[int, str]] = {}
        self._chains: dict[int, str] = {}

    def restored(self, position: int, chain: str) -> None:
        """This member took a state at ``position`` (a joiner): its history starts there."""
        self.position = position
        self._chains = {position: chain}

    def applied(self, effects: Effects) -> None:
        """This member applied and committed ``effects`` (in order)."""
        self.position = effects.position
        self._chains[effects.position] = effects.chain
        for confirm in effects.confirms:
            if confirm.node == self.me and confirm.message_id not in self.pending:
                self.pending[confirm.message_id] = confirm
        self._prune()

    def reported(self, member: str, position: int, chain: str) -> None:
        """``member`` reports it committed through ``position`` with history ``chain``."""
        if position > self.reports.get(member, (0, ""))[0]:
            self.reports[member] = (position, chain)

    def vouches(self, member: str, position: int) -> bool:
        """Whether ``member``'s latest report shows it committed ``position`` of this
        member's own history."""
        reported, chain = self.reports.get(member, (0, ""))
        return reported >= position and self._chains.get(reported) == chain

    def confirmable(self, view: Iterable[str]) -> list[Confirm]:
        """The pending Pushes a majority of ``view`` committed, removed from the pending
        set, by position."""
        members = tuple(view)
        ready = []
        for confirm in sorted(self.pending.values(), key=lambda c: c.position):
            count = sum(
                1 for m in members if m == self.me or self.vouches(m, confirm.position)
            )
            if 2 * count > len(members):
                ready.append(confirm)
        for confirm in ready:
            del self.pending[confirm.message_id]
        return ready

    def refuse_all(self) -> list[Confirm]:
        """Every pending Push, cleared (the member lost the majority)."""
        pending = sorted(self.pending.values(), key=lambda c: c.position)
        self.pending.clear()
        return pending

    def forget(self, members: Iterable[str]) -> None:
        """Keep only the reports of ``members`` (a new view)."""
        keep = set(members)
        self.reports = {m: r for m, r in self.reports.items() if m in keep}

    def _prune(self) -> None:
        if len(self._chains) <= 4 * _SLACK:
            return
        oldest = min((c.position for c in self.pending.values()), default=self.position)
        keep = min(oldest, self.position - _SLACK)
        self._chains = {p: c for p, c in self._chains.items() if p >= keep}
