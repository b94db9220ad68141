"""The views core: one member of a group that agrees on a sequence of views.

How a view change goes (``docs/cluster.md`` has the guarantees and the argument):

1. **Changes are collected.** The membership layer calls ``suspect`` (a member seems
   dead) and ``join_request`` (a process wants in; for a current member: it is alive
   after all, and a suspicion of it is withdrawn). A joiner also asks by itself: it
   sends CHANGE with itself to its seeds. A member that is not the coordinator forwards
   what it learned to the one it believes is (CHANGE, repeated every ``retry``).
2. **The coordinator proposes.** The coordinator is the first member of the current view
   that this member does not suspect. It runs one single-decree Paxos instance per view:
   the acceptors are the members of view v, quorums are majorities of v, and the value
   decided is the member list of view v+1. Ballots are ``(round, name)``.

   - PREPARE(b) -> PROMISE(b, last accepted ballot and value), or NACK(higher ballot);
   - with promises from a majority, the coordinator proposes the value it must (the
     highest-ballot value reported, when it could have been chosen) or else its own:
     the current members minus the suspected and replaced ones, plus the joiners;
   - PROPOSE(b, value): a member emits ``FlushRequired`` and answers ACCEPTED(b) only
     after ``flush_done``: accepting a value means having flushed the old view for it;
   - ACCEPTED from a majority of v decides view v+1; the coordinator also waits for
     every member of v staying in v+1 that it does not suspect. If it adds joiners, the
     coordinator asks its layer for the state (``StateNeeded``, ``provide_state``).
3. **The view is installed.** The coordinator installs it and sends INSTALL to every
   member of it (with the joiners' state, to all: any of them can bring a joiner in)
   and to the removed ones, repeated until each
   answers INSTALLED (removed ones at most ``notice_attempts`` times). A member installs
   it only if it flushed for exactly those members; one left behind, and a removed one,
   emits ``Excluded`` and stops.

**Primary partition.** A coordinator proposes only a value that keeps a majority of the
current view, and a value is decided only by a majority of it; a member whose
unsuspected members are no majority emits ``Blocked`` and proposes nothing.

**Catching up.** Every message carries the sender's view id. A member that hears a lower
view from a member of its current view sends it that view's INSTALL (a joiner only with
the state); one that hears a higher view answers STATUS, so
the sender does the same for it. One that hears from a removed incarnation answers
EXCLUDED. A member never installs a view that is not the successor of its own.

Acceptor and proposer, per view (``(state, input) -> action``; everything is reset when
a view is installed):

============== ===================== ==================================================
role           input                 action
============== ===================== ==================================================
acceptor       PREPARE b > promised  promise b, answer PROMISE(b, accepted)
acceptor       PREPARE b = promised  PROMISE again (a duplicate)
acceptor       PREPARE b < promised  NACK(promised)
acceptor       PROPOSE b < promised  NACK(promised)
acceptor       PROPOSE b >= promised promise b; flushed for the value? accept, ACCEPTED;
                                     else FlushRequired, ACCEPTED after ``flush_done``
proposer       PROMISE (majority)    choose the value, PROPOSE to all of v
proposer       ACCEPTED (majority,   decided: StateNeeded (joiners) or install
               and every unsuspected
               survivor)
proposer       NACK b > ours         give up this ballot, retry later with a higher round
installer      INSTALLED             stop repeating INSTALL to that member
member         INSTALL v+1, flushed  install v+1 (a joiner: with its state), INSTALLED
               for its members
member         INSTALL otherwise     a later view without it, or not flushed for it:
                                     INSTALLED, ``Excluded``; an old one: INSTALLED
============== ===================== ==================================================

Trace events (``layer=views``): ``propose`` (``seq`` = ballot round, ``attrs.members``),
``flush``, ``view_change`` (``seq`` = view id, ``peer`` = installer, ``attrs.members``),
``excluded``, ``blocked``, ``unblocked``, ``drop`` (``attrs.reason``), ``retransmit``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gossamer._types import Address
from gossamer.errors import DecodeError, LocalProtocolError
from gossamer.proto.backoff import AROUND, Backoff
from gossamer.proto.core import DatagramOutputs
from gossamer.proto.views import model as events
from gossamer.proto.views.model import Member, MemberKey, View, ViewsConfig, ViewsEvent
from gossamer.trace.sink import Tracer
from gossamer.wire import views as wire
from gossamer.wire.views import Ballot, ViewsMessage, ViewsType

if TYPE_CHECKING:
    from random import Random

__all__ = ["COUNTERS", "LAYER", "ViewsCore"]

LAYER = "views"
#: The longest a coordinator that lost a ballot waits before trying again, in retries.
_MAX_BACKOFF_RETRIES = 16


#: What ``ViewsCore.counters`` counts: datagrams ``sent`` (``retransmitted`` among them)
#: and ``received``; refused ones (``malformed``, ``spoofed``: a member's name from another
#: address, ``unknown_sender``, ``stale``: about a ballot or view that is over); and the
#: work done (``proposals``, ``nacks`` received, ``installs``).
COUNTERS = (
    "sent",
    "retransmitted",
    "received",
    "malformed",
    "spoofed",
    "unknown_sender",
    "stale",
    "proposals",
    "nacks",
    "installs",
)


@dataclass(slots=True)
class _Proposal:
    """The coordinator's attempt at deciding the view after the current one."""

    ballot: Ballot
    promises: dict[str, tuple[Ballot | None, tuple[Member, ...]]] = field(default_factory=dict)
    value: tuple[Member, ...] | None = None  # chosen once a majority promised
    accepted: set[str] = field(default_factory=set)
    decided: bool = False  # waiting for ``provide_state``
    free: bool = False  # the value is our own choice (no earlier value bound it)


class ViewsCore(DatagramOutputs[ViewsEvent]):
    """Sans-I/O group membership (module docstring). Inputs: ``suspect``,
    ``join_request``, ``flush_done``, ``provide_state``, ``receive_datagram``,
    ``handle_timer``; outputs: ``datagrams_to_send``, ``events_received``,
    ``next_deadline``."""

    def __init__(self, config: ViewsConfig, *, tracer: Tracer, rng: Random, now: float) -> None:
        super().__init__()
        self.config = config
        self.me = config.me
        self.counters: Counter[str] = Counter(dict.fromkeys(COUNTERS, 0))
        self._trace = tracer
        self._rng = rng
        self._backoff = Backoff(
            base=config.retry, maximum=config.retry * _MAX_BACKOFF_RETRIES, spread=AROUND
        )
        self._view: View | None = None
        # The INSTALL of the current view, but its state: sent again to whoever is behind.
        self._install_body: dict[str, Any] = {}
        self._installer = ""
        self._state: bytes | None = None  # the state joiners of the current view start from
        #: True once this member learned it was removed: it ignores every input (read only).
        self.excluded = False
        #: True while fewer than a majority of the view are unsuspected (read only).
        self.blocked = False
        # Per view: what this member suspects and who asked to join.
        self._suspects: set[MemberKey] = set()
        self._joins: dict[MemberKey, Member] = {}
        self._departed: dict[str, int] = {}  # name -> highest incarnation removed
        self._dead: dict[str, int] = {}  # name -> highest incarnation suspected outside
        # Acceptor, per view.
        self._promised: Ballot | None = None
        self._accepted: tuple[Ballot, tuple[Member, ...]] | None = None
        self._flushing: tuple[Member, ...] | None = None  # the last FlushRequired
        self._flushed: tuple[Member, ...] | None = None  # what flush_done confirmed
        self._awaiting: tuple[Ballot, tuple[Member, ...], Member] | None = None
        # Proposer, per view.
        self._round = 0  # the highest round seen in this view
        self._proposal: _Proposal | None = None
        self._lost_ballots = 0
        self._wait_until = now
        # Installer: who has not acknowledged our INSTALL (removed ones: attempts left).
        self._unacked: dict[MemberKey, Member] = {}
        self._notices: dict[MemberKey, tuple[Member, int]] = {}
        self._tick_at: float | None = None
        if config.initial:
            self._install(
                View(id=1, members=config.initial), agreed=(), installer="", state=None, now=now
            )
        self._drive(now)

    # -- properties -------------------------------------------------------------

    @property
    def view(self) -> View | None:
        """The current view; ``None`` for a joiner not yet admitted."""
        return self._view

    # -- inputs from the layers around ----------------------------------------

    def suspect(self, name: str, now: float, *, incarnation: int | None = None) -> None:
        """The membership layer believes member ``name`` (of that ``incarnation``, or
        whichever is in the view) failed. A suspicion of oneself is ignored; one of a
        process not in the view (a joiner, or a restarted member's new incarnation)
        cancels its pending join, and is remembered in case a change already under way
        admits it (the membership layer says it only once)."""
        if self.excluded or self._view is None:
            return
        member = self._view.member(name)
        if member is not None and incarnation in (None, member.incarnation):
            if member.key != self.me.key:
                self._suspects.add(member.key)
        else:  # not a member (yet): a joiner, or a later incarnation of a member
            for key in [k for k in self._joins if k[0] == name and incarnation in (None, k[1])]:
                del self._joins[key]
                self._dead[name] = max(self._dead.get(name, 0), key[1])
            if incarnation is not None:
                self._dead[name] = max(self._dead.get(name, 0), incarnation)
        self._drive(now)

    def join_request(self, member: Member, now: float) -> None:
        """The membership layer saw ``member``: a process that wants in (a new name, or a
        higher incarnation of a member, which replaces it), or a current member, which is
        thereby alive: a suspicion of it is withdrawn, and it is told our view (STATUS:
        if it went on without us, it answers EXCLUDED). A removed incarnation seen alive
        is told it is out (EXCLUDED): after a partition, nothing else may reach it."""
        if self.excluded or self._view is None:
            return
        view = self._view
        if member.key != self.me.key:
            if self._is_departed(member.name, member.incarnation):
                self._send(
                    member.address, ViewsType.EXCLUDED, now, new_view=view.id,
                    excluded=member.incarnation,
                )  # fmt: skip
            elif member.key in self._suspects:
                self._send(member.address, ViewsType.STATUS, now)
        self._note_join(member)
        self._drive(now)

    def flush_done(self, view_id: int, now: float) -> None:
        """The layer above settled view ``view_id`` for the latest ``FlushRequired``."""
        if self.excluded or self._view is None or view_id != self._view.id:
            return
        self._flushed = self._flushing
        awaiting, self._awaiting = self._awaiting, None
        if awaiting is not None and awaiting[1] == self._flushed:
            ballot, value, proposer = awaiting
            if self._promised is None or ballot >= self._promised:
                self._accept(ballot, value, proposer, now)
        self._drive(now)

    def provide_state(self, view_id: int, state: bytes, now: float) -> None:
        """The state the joiners of view ``view_id`` start from (after ``StateNeeded``).
        ``LocalProtocolError`` when it exceeds ``wire.views.MAX_STATE``."""
        if len(state) > wire.MAX_STATE:
            raise LocalProtocolError(
                "state exceeds the views wire's bound", size=len(state), bound=wire.MAX_STATE
            )
        proposal = self._proposal
        if (
            self.excluded
            or self._view is None
            or proposal is None
            or not proposal.decided
            or view_id != self._view.id + 1
            or proposal.value is None
        ):
            return
        self._install_decided(proposal, state, now)
        self._drive(now)

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        msg = None if self.excluded else self._decode(data, now)
        if msg is not None:
            self._dispatch(msg, addr, now)
            self._drive(now)

    def handle_timer(self, now: float) -> None:
        if self.excluded:
            return
        if self._tick_at is not None and now >= self._tick_at:
            self._tick_at = None
            self._repeat(now)
        self._drive(now)

    def next_deadline(self) -> float | None:
        if self.excluded:
            return None
        return self._tick_at

    # -- receiving ----------------------------------------------------------------

    def _decode(self, data: bytes, now: float) -> ViewsMessage | None:
        """The message in ``data``; ``None`` (counted and traced) when it is malformed."""
        self.counters["received"] += 1
        try:
            return wire.decode(data)
        except DecodeError as exc:
            self.counters["malformed"] += 1
            self._trace(now, LAYER, "drop", size=len(data), attrs={"reason": exc.reason})
            return None

    def _dispatch(self, msg: ViewsMessage, addr: Address, now: float) -> None:
        key = (msg.sender, msg.incarnation)
        kind = msg.type
        view = self._view
        sender = view.member(msg.sender) if view is not None else None
        if sender is not None and sender.key == key and sender.address != addr:
            self._drop(now, msg, "address does not match the member's")
            self.counters["spoofed"] += 1
            return
        if kind is ViewsType.INSTALL:
            self._on_install(msg, addr, now)
        elif kind is ViewsType.EXCLUDED:
            # Meant for this incarnation only: a process that rejoined at the same address
            # as its next incarnation still gets those sent to the one before.
            if msg.excluded != self.me.incarnation:
                self.counters["stale"] += 1
            elif view is None or msg.new_view > view.id:
                self._exclude(msg.new_view, now)
        elif kind is ViewsType.INSTALLED:
            self._unacked.pop(key, None)
            self._notices.pop(key, None)
        elif view is None:
            self.counters["stale"] += 1  # a joiner takes part in nothing before its view
        elif sender is None or sender.key != key:
            self._from_outsider(msg, addr, now)
        elif msg.view < view.id:
            self._push_install(sender, joiner=msg.view == 0, now=now)
        elif msg.view > view.id:
            self._send(sender.address, ViewsType.STATUS, now)  # it will bring us up
        else:
            self._from_member(msg, sender, now)

    def _from_outsider(self, msg: ViewsMessage, addr: Address, now: float) -> None:
        """A datagram from a process not in the current view: a member of a later view
        (we are behind: STATUS makes it bring us up), a joiner asking, or a member of an
        earlier view, which must have been removed since, as must a departed incarnation
        (EXCLUDED: removed incarnations are never admitted again)."""
        assert self._view is not None
        if msg.view > self._view.id:
            self._send(addr, ViewsType.STATUS, now)
            return
        if msg.view > 0 or self._is_departed(msg.sender, msg.incarnation):
            self._send(
                addr, ViewsType.EXCLUDED, now, new_view=self._view.id, excluded=msg.incarnation
            )
            return
        if msg.type is ViewsType.CHANGE and msg.view == 0:
            for record in msg.joins:
                joiner = Member.of(record)
                if joiner.key == (msg.sender, msg.incarnation) and joiner.address == addr:
                    self._note_join(joiner)
                    return
        self.counters["unknown_sender"] += 1
        self._drop(now, msg, "not a member")

    def _from_member(self, msg: ViewsMessage, sender: Member, now: float) -> None:
        kind = msg.type
        if kind is ViewsType.CHANGE:
            for record in msg.members:
                self.suspect(record.name, now, incarnation=record.incarnation)
            for record in msg.joins:
                self._note_join(Member.of(record))
        elif kind is ViewsType.PREPARE and msg.ballot is not None:
            self._on_prepare(msg.ballot, sender, now)
        elif kind is ViewsType.PROPOSE and msg.ballot is not None:
            self._on_propose(msg.ballot, tuple(Member.of(r) for r in msg.members), sender, now)
        elif kind is ViewsType.PROMISE and msg.ballot is not None:
            value = tuple(Member.of(r) for r in msg.members)
            self._on_promise(msg.ballot, sender, msg.accepted, value, now)
        elif kind is ViewsType.ACCEPTED and msg.ballot is not None:
            self._on_accepted(msg.ballot, sender, now)
        elif kind is ViewsType.NACK and msg.ballot is not None:
            self._on_nack(msg.ballot, now)
        # STATUS from a member of the same view: nothing to do.

    # -- acceptor ---------------------------------------------------------------------

    def _on_prepare(self, ballot: Ballot, proposer: Member, now: float) -> None:
        self._round = max(self._round, ballot.round)
        if self._promised is not None and ballot < self._promised:
            self._reply_nack(proposer, now)
            return
        self._promised = ballot
        accepted, value = self._accepted if self._accepted is not None else (None, ())
        if proposer.key == self.me.key:
            self._on_promise(ballot, self.me, accepted, value, now)
        else:
            promise: dict[str, Any] = {"ballot": ballot, "accepted": accepted, "members": value}
            self._send(proposer.address, ViewsType.PROMISE, now, **promise)

    def _on_propose(
        self, ballot: Ballot, value: tuple[Member, ...], proposer: Member, now: float
    ) -> None:
        self._round = max(self._round, ballot.round)
        if self._promised is not None and ballot < self._promised:
            self._reply_nack(proposer, now)
            return
        self._promised = ballot
        if self._flushed == value:
            self._accept(ballot, value, proposer, now)
            return
        self._awaiting = (ballot, value, proposer)
        if self._flushing != value:
            assert self._view is not None
            self._flushing = value
            self._trace(
                now,
                LAYER,
                "flush",
                seq=self._view.id,
                peer=proposer.name,
                attrs={"members": _names(value)},
            )
            self._events.append(events.FlushRequired(view_id=self._view.id, next_members=value))

    def _accept(
        self, ballot: Ballot, value: tuple[Member, ...], proposer: Member, now: float
    ) -> None:
        self._accepted = (ballot, value)
        if proposer.key == self.me.key:
            self._on_accepted(ballot, self.me, now)
        else:
            self._send(proposer.address, ViewsType.ACCEPTED, now, ballot=ballot)

    def _reply_nack(self, proposer: Member, now: float) -> None:
        if proposer.key == self.me.key:
            assert self._promised is not None
            self._on_nack(self._promised, now)
        else:
            self._send(proposer.address, ViewsType.NACK, now, ballot=self._promised)

    # -- proposer ---------------------------------------------------------------------

    def _start_proposal(self, now: float) -> None:
        view = self._view
        assert view is not None
        self._round += 1
        self._proposal = _Proposal(ballot=Ballot(round=self._round, name=self.me.name))
        self.counters["proposals"] += 1
        proposal = self._proposal
        for member in view.members:
            if self._proposal is not proposal:
                return  # decided and installed by our own answers (a group of one)
            self._prepare_to(member, now)

    def _prepare_to(self, member: Member, now: float, *, retransmit: bool = False) -> None:
        assert self._proposal is not None
        ballot = self._proposal.ballot
        if member.key == self.me.key:
            self._on_prepare(ballot, self.me, now)
        else:
            self._send(member.address, ViewsType.PREPARE, now, retransmit=retransmit, ballot=ballot)

    def _on_promise(
        self,
        ballot: Ballot,
        member: Member,
        accepted: Ballot | None,
        value: tuple[Member, ...],
        now: float,
    ) -> None:
        proposal, view = self._proposal, self._view
        if proposal is None or view is None or ballot != proposal.ballot:
            self.counters["stale"] += 1
            return
        proposal.promises[member.name] = (accepted, value)
        self._maybe_choose(now)

    def _maybe_choose(self, now: float) -> None:
        """Choose the value and propose it once a majority promised and every member not
        suspected did: the fewer are silent, the fewer values "could have been chosen"
        and bind us to keep a member that has died since. (A suspicion may be what it
        waits for: ``_drive`` calls this too.)"""
        proposal, view = self._proposal, self._view
        if proposal is None or view is None or proposal.value is not None:
            return
        if not view.is_majority(len(proposal.promises)) or any(
            m.name not in proposal.promises and m.key not in self._suspects for m in view.members
        ):
            return
        # Bound by Paxos, else our own change, else (an unfinished change that was never
        # chosen, and nothing left to change) the same members again: a change started
        # must end in a view, or its acceptors would wait for it forever.
        bound = self._bound_value(view, proposal)
        chosen = bound or self._own_value() or view.members
        proposal.value, proposal.free = chosen, bound is None
        ballot = proposal.ballot
        self._trace(now, LAYER, "propose", seq=ballot.round, attrs={"members": _names(chosen)})
        for m in view.members:
            if self._proposal is not proposal:
                return  # our own acceptance decided it, and the view is installed
            self._propose_to(m, now)

    @staticmethod
    def _bound_value(view: View, proposal: _Proposal) -> tuple[Member, ...] | None:
        """The value Paxos binds this ballot to: the one with the highest accepted ballot
        among the promises, if it could have been chosen, i.e. if the members that
        reported it plus those that did not answer make a majority. If some value was
        chosen at ballot b0, every accepted ballot from b0 on carries it, so it is the
        highest reported, and its holders in the majority that chose it pass this test;
        a value that fails it was never chosen, and the coordinator is free."""
        reported = [(b, v) for b, v in proposal.promises.values() if b is not None]
        if not reported:
            return None
        _, highest = max(reported, key=lambda item: item[0])
        holders = sum(1 for b, v in reported if v == highest)
        silent = len(view.members) - len(proposal.promises)
        return highest if view.is_majority(holders + silent) else None

    def _propose_to(self, member: Member, now: float, *, retransmit: bool = False) -> None:
        proposal = self._proposal
        assert proposal is not None and proposal.value is not None
        if member.key == self.me.key:
            self._on_propose(proposal.ballot, proposal.value, self.me, now)
        else:
            body = {"ballot": proposal.ballot, "members": proposal.value}
            self._send(member.address, ViewsType.PROPOSE, now, retransmit=retransmit, **body)

    def _on_accepted(self, ballot: Ballot, member: Member, now: float) -> None:
        proposal, view = self._proposal, self._view
        if proposal is None or view is None or ballot != proposal.ballot or proposal.decided:
            self.counters["stale"] += 1
            return
        proposal.accepted.add(member.name)
        self._maybe_decide(now)

    def _maybe_decide(self, now: float) -> None:
        """Decide once a majority of the view accepted, and every member of it that stays
        in the next one and is not suspected did too: a member installs the next view
        only if it flushed for it, so one left out would have to leave and rejoin."""
        proposal, view = self._proposal, self._view
        if proposal is None or view is None or proposal.value is None or proposal.decided:
            return
        if not view.is_majority(len(proposal.accepted)):
            return
        if any(
            view.has(m.key) and m.name not in proposal.accepted and m.key not in self._suspects
            for m in proposal.value
        ):
            return
        proposal.decided = True
        joiners = tuple(m for m in proposal.value if not view.has(m.key))
        if joiners and any(m.key == self.me.key for m in proposal.value):
            self._events.append(events.StateNeeded(view_id=view.id + 1, joiners=joiners))
        else:
            self._install_decided(proposal, None, now)

    def _on_nack(self, ballot: Ballot, now: float) -> None:
        self.counters["nacks"] += 1
        self._round = max(self._round, ballot.round)
        proposal = self._proposal
        if proposal is not None and ballot > proposal.ballot and not proposal.decided:
            # Another coordinator holds a higher ballot: give way for a while (duels of
            # two coordinators end because the waits are drawn at random).
            self._proposal = None
            self._lost_ballots += 1
            self._wait_until = now + self._backoff.delay(self._lost_ballots, self._rng)

    def _install_decided(self, proposal: _Proposal, state: bytes | None, now: float) -> None:
        view = self._view
        assert view is not None and proposal.value is not None
        new = View(id=view.id + 1, members=proposal.value)
        agreed = tuple(m.name for m in view.members if m.name in proposal.accepted)
        removed = [m for m in view.members if not new.has(m.key)]
        if not new.has(self.me.key):
            # A value bound by Paxos may leave out its coordinator: tell the members, and go.
            self._installer, self._view, self._state = self.me.name, new, state
            self._install_body = self._body_of(new, agreed)
            for m in new.members:
                self._send_install(m, now)
            self._exclude(new.id, now)
            return
        self._install(new, agreed=agreed, installer=self.me.name, state=state, now=now)
        self._unacked = {m.key: m for m in new.members if m.key != self.me.key}
        self._notices = {m.key: (m, self.config.notice_attempts) for m in removed}
        for m in [*self._unacked.values(), *removed]:
            self._send_install(m, now)

    # -- installing ---------------------------------------------------------------

    def _on_install(self, msg: ViewsMessage, addr: Address, now: float) -> None:
        mine = self._view.id if self._view is not None else 0
        members = tuple(Member.of(r) for r in msg.members)
        new = View(id=msg.new_view, members=members)
        if new.id <= mine:
            self._send(addr, ViewsType.INSTALLED, now, new_view=new.id)
            return
        if not new.has(self.me.key):
            if mine:  # removed at or before this view
                self._send(addr, ViewsType.INSTALLED, now, new_view=new.id)
                self._exclude(new.id, now)
            return
        if mine == 0 and msg.state is None:
            self.counters["stale"] += 1  # a joiner waits for an INSTALL that has its state
            return
        if mine and (new.id != mine + 1 or self._flushed != members):
            # A member installs the next view only if it flushed its own for exactly those
            # members (docs/cluster.md), and never skips a view: one that did not (it was
            # suspected and left behind) leaves and rejoins instead.
            self._send(addr, ViewsType.INSTALLED, now, new_view=new.id)
            self._exclude(new.id, now)
            return
        self._install(
            new,
            agreed=msg.agreed,
            installer=msg.installer,
            state=msg.state,
            now=now,
        )
        self._send(addr, ViewsType.INSTALLED, now, new_view=new.id)

    def _install(
        self, new: View, *, agreed: tuple[str, ...], installer: str, state: bytes | None, now: float
    ) -> None:
        old = self._view
        if old is not None:
            for m in old.members:
                if not new.has(m.key):
                    self._departed[m.name] = max(self._departed.get(m.name, 0), m.incarnation)
        first = old is None
        self._view = new
        self._installer = installer
        self._install_body = self._body_of(new, agreed)
        self._state = state
        self._suspects = {k for k in self._suspects if new.has(k)} | {
            m.key for m in new.members if m.incarnation <= self._dead.get(m.name, 0)
        }
        self._joins = {
            k: m for k, m in self._joins.items() if not new.has(k) and not self._is_departed(*k)
        }
        self._promised = self._accepted = self._flushing = self._flushed = None
        self._awaiting = None
        self._round = 0
        self._proposal = None
        self._lost_ballots = 0
        self._unacked = {}
        self._notices = {}
        self.blocked = False
        self.counters["installs"] += 1
        self._trace(
            now,
            LAYER,
            "view_change",
            seq=new.id,
            peer=installer or None,
            attrs={"members": _names(new.members)},
        )
        self._events.append(
            events.ViewInstalled(view=new, agreed_by=agreed, state=state if first else None)
        )

    def _body_of(self, view: View, agreed: tuple[str, ...]) -> dict[str, Any]:
        installer = self._installer or self.me.name
        return {
            "new_view": view.id,
            "members": view.members,
            "installer": installer,
            "agreed": agreed,
        }

    def _push_install(self, member: Member, *, joiner: bool, now: float) -> None:
        """Bring ``member`` of the current view, which is behind, into it. A joiner needs
        the state: every member that installed a view adding joiners holds it; if this one
        does not (it came in later) and the installer is gone, the joiner is suspected (it
        will be removed and rejoin)."""
        if not joiner or self._state is not None:
            self._send_install(member, now)
            return
        assert self._view is not None
        installer = self._view.member(self._installer)
        if installer is None or installer.key in self._suspects:
            self.suspect(member.name, now, incarnation=member.incarnation)

    def _send_install(self, member: Member, now: float) -> None:
        """The current view's INSTALL, with the joiners' state to its members (all of them,
        so that any member can bring a joiner in if the installer is gone)."""
        view = self._view
        state = self._state if view is not None and view.has(member.key) else None
        self._send(member.address, ViewsType.INSTALL, now, state=state, **self._install_body)

    def _exclude(self, view_id: int, now: float) -> None:
        self.excluded = True
        self._tick_at = None
        self._trace(now, LAYER, "excluded", seq=view_id)
        self._events.append(events.Excluded(view_id=view_id))

    # -- membership bookkeeping ---------------------------------------------------

    def _note_join(self, member: Member) -> None:
        view = self._view
        assert view is not None
        if self._dead.get(member.name, 0) >= member.incarnation:
            del self._dead[member.name]  # it is alive after all
        if view.has(member.key):
            self._suspects.discard(member.key)  # it is alive after all
            return
        current = view.member(member.name)
        if self._is_departed(member.name, member.incarnation) or (
            current is not None and current.incarnation > member.incarnation
        ):
            return
        for key in [k for k in self._joins if k[0] == member.name and k[1] < member.incarnation]:
            del self._joins[key]
        if current is not None and current.key != self.me.key:
            # A later incarnation proves this one gone (the membership layer may never say
            # so: a quick restart at the same address): do not wait for it.
            self._suspects.add(current.key)
        if not any(k[0] == member.name and k[1] > member.incarnation for k in self._joins):
            self._joins[member.key] = member

    def _is_departed(self, name: str, incarnation: int) -> bool:
        if incarnation <= self._departed.get(name, -1):
            return True
        current = self._view.member(name) if self._view is not None else None
        return current is not None and current.incarnation > incarnation

    def _survivors(self) -> tuple[Member, ...]:
        assert self._view is not None
        replaced = {k[0] for k in self._joins}
        return tuple(
            m for m in self._view.members if m.key not in self._suspects and m.name not in replaced
        )

    def _own_value(self) -> tuple[Member, ...] | None:
        """The next view this coordinator would propose, or ``None`` when nothing changes
        or when it would not keep a majority of the current view (primary partition)."""
        view = self._view
        assert view is not None
        survivors = self._survivors()
        joiners = tuple(sorted(self._joins.values(), key=lambda m: m.key))
        # Admit only as many as an INSTALL can carry with a joiner's largest state; the
        # others wait for a later view (the group is full).
        while joiners and _install_size(survivors + joiners) > wire.MAX_SIZE:
            joiners = joiners[:-1]
        if survivors == view.members and not joiners:
            return None
        if not view.is_majority(len(survivors)):
            return None
        return survivors + joiners

    def _coordinator(self) -> Member:
        assert self._view is not None
        return next(m for m in self._view.members if m.key not in self._suspects)

    # -- the one place that decides what to do next --------------------------------

    def _drive(self, now: float) -> None:
        """After every input: note blocking, start a proposal when this member is the
        coordinator and something must change, and keep the timer while work remains."""
        if self.excluded:
            return
        view = self._view
        if view is not None:
            self._note_blocking(view, now)
            coordinator = self._coordinator()
            if coordinator.key != self.me.key or (
                self.blocked and self._proposal is not None and not self._proposal.decided
            ):
                # Not ours to propose, or no longer backed by a majority (as we see it):
                # give it up (Paxos lets any proposal be abandoned); it restarts when the
                # suspicions that block us are withdrawn.
                self._proposal = None
            elif self._proposal is not None:
                self._maybe_choose(now)  # a suspicion may be what it waited for
                self._maybe_decide(now)
                if self._stale_proposal(view):
                    # No member our own value keeps accepted it yet, and one it keeps is
                    # now suspected: their layer may be unable to flush for it (ISIS
                    # waits for a dead member's messages, and only members that stay
                    # answer its questions), so start over (a new ballot is always safe;
                    # the value it finds bound, if any, is kept).
                    self._proposal = None
                    self._start_proposal(now)
            elif (
                now >= self._wait_until
                and not self.blocked
                and (self._own_value() is not None or self._accepted is not None)
            ):
                self._start_proposal(now)
        if self._tick_at is None and self._has_work():
            self._tick_at = now + self.config.retry

    def _stale_proposal(self, view: View) -> bool:
        proposal = self._proposal
        return (
            proposal is not None
            and proposal.free
            and not proposal.decided
            and proposal.value is not None
            and not proposal.accepted & {m.name for m in proposal.value}
            and any(view.has(m.key) and m.key in self._suspects for m in proposal.value)
        )

    def _note_blocking(self, view: View, now: float) -> None:
        blocked = not view.is_majority(len(self._survivors()))
        if blocked == self.blocked:
            return
        self.blocked = blocked
        if blocked:
            reachable = tuple(m.name for m in self._survivors())
            self._trace(
                now, LAYER, "blocked", seq=view.id, attrs={"reachable": ",".join(reachable)}
            )
            self._events.append(events.Blocked(view_id=view.id, reachable=reachable))
        else:
            self._trace(now, LAYER, "unblocked", seq=view.id)
            self._events.append(events.Unblocked(view_id=view.id))

    def _has_work(self) -> bool:
        if self._view is None:
            return True  # a joiner keeps asking
        return bool(
            self._proposal is not None
            or self._unacked
            or self._notices
            or self._suspects
            or self._joins
            or self._accepted is not None
            or self._awaiting is not None
        )

    def _repeat(self, now: float) -> None:
        """Every ``retry``: send again what has not been answered."""
        view = self._view
        if view is None:
            me = (self.me.record(),)
            for seed in self.config.seeds:
                self._send(seed, ViewsType.CHANGE, now, joins=me, retransmit=True)
            return
        proposal = self._proposal
        if proposal is not None and not proposal.decided:
            for m in view.members:
                if m.key == self.me.key:
                    continue
                if proposal.value is None and m.name not in proposal.promises:
                    self._prepare_to(m, now, retransmit=True)
                elif proposal.value is not None and m.name not in proposal.accepted:
                    self._propose_to(m, now, retransmit=True)
        for m in self._unacked.values():
            self._send_install(m, now)
        for key, (m, left) in list(self._notices.items()):
            self._send_install(m, now)
            if left <= 1:
                del self._notices[key]
            else:
                self._notices[key] = (m, left - 1)
        if self.blocked:
            # Cut off with a minority: ask everyone where they are, so that the side that
            # went on tells us (EXCLUDED) once the partition heals.
            for m in view.members:
                if m.key != self.me.key:
                    self._send(m.address, ViewsType.STATUS, now, retransmit=True)
            return
        coordinator = self._coordinator()
        if coordinator.key != self.me.key and (self._suspects or self._joins):
            suspects = tuple(m.record() for m in view.members if m.key in self._suspects)
            joins = tuple(m.record() for m in self._joins.values())
            self._send(coordinator.address, ViewsType.CHANGE, now, members=suspects, joins=joins)
        elif coordinator.key != self.me.key and self._accepted is not None:
            # A change we accepted is unfinished: remind the coordinator we are at this
            # view (if it is past it, it sends us the INSTALL).
            self._send(coordinator.address, ViewsType.STATUS, now)

    # -- sending --------------------------------------------------------------------

    def _send(
        self,
        addr: Address,
        kind: ViewsType,
        now: float,
        *,
        retransmit: bool = False,
        **fields: Any,
    ) -> None:
        """Send a ``kind`` message from this member at its view; ``fields`` are the body's
        (``ViewsMessage``), with ``members`` given as ``Member`` or as records."""
        members = fields.get("members", ())
        fields["members"] = tuple(m.record() if isinstance(m, Member) else m for m in members)
        view = self._view.id if self._view is not None else 0
        message = ViewsMessage(
            type=kind, view=view, sender=self.me.name, incarnation=self.me.incarnation, **fields
        )
        data = wire.encode(message)
        self._outbox.append((data, addr))
        self.counters["sent"] += 1
        if retransmit:
            self.counters["retransmitted"] += 1
            self._trace(now, LAYER, "retransmit", size=len(data), attrs={"type": kind.name})

    def _drop(self, now: float, msg: ViewsMessage, reason: str) -> None:
        self._trace(
            now, LAYER, "drop", peer=msg.sender, attrs={"reason": reason, "type": msg.type.name}
        )


def _install_size(members: tuple[Member, ...]) -> int:
    """An upper bound on the bytes of an INSTALL of ``members`` with the largest state."""
    header = 2 + 1 + 1 + 8 + 256 + 8 + 8 + 256 + 2 + 1 + 4
    per_member = sum(len(m.name.encode()) + len(m.address[0].encode()) + 14 for m in members)
    agreed = sum(len(m.name.encode()) + 1 for m in members)
    return header + per_member + agreed + wire.MAX_STATE


def _names(members: tuple[Member, ...]) -> str:
    return ",".join(f"{m.name}#{m.incarnation}" for m in members)
