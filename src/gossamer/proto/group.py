"""A group member: agreed views with ISIS total order flushed through them (sans-I/O).

The one place where two protocol cores meet: a composition, not a protocol (the
protocol subpackages stay independent of each other); ``gossamer.proto.isis.vsync`` has
the checkers of what it guarantees.

``GroupCore`` composes one ``ViewsCore`` and one ``IsisCore`` on one address and wires
them as ``docs/cluster.md`` ("Integrating it with ISIS") states, so that the simulator
and the asyncio driver run the same glue:

============================ =========================================================
from                         the composition does
============================ =========================================================
``suspect(name)``            ``views.suspect`` only (a suspicion can be withdrawn, an
                             ISIS removal cannot: ISIS removes what a view change
                             leaves out)
``join_request(member)``     ``views.join_request``
views ``FlushRequired``      ``isis.begin_view_change`` with the ids the next view keeps
isis ``ViewFlushed``         ``views.flush_done`` for the latest ``FlushRequired``
views ``StateNeeded``        passed on: the application answers ``provide_state``, which
                             hands views the ISIS join state and the application's
views ``ViewInstalled``      ``isis.install_view`` (a joiner: ``IsisCore.joining`` from
                             the state); passed on with the application's state only
a proposal keeping a member  no ``flush_done`` for it, and the member is suspected
ISIS removed here            (also when reported up again): it must rejoin as a new
                             incarnation
views ``Excluded``           passed on; the ISIS core stops (the process rejoins as a
                             new incarnation)
============================ =========================================================

The application sees ``Delivered`` and ``Discarded`` (ISIS), ``ViewInstalled``,
``StateNeeded``, ``Blocked``, ``Unblocked`` and ``Excluded`` (views), in order: what is
delivered before ``ViewInstalled(v+1)`` belongs to view v.

The two protocols share the address: every datagram starts with one byte naming its
protocol (``V`` views, ``I`` ISIS); anything else is dropped, counted
(``counters["unknown_protocol"]``) and traced as a views ``drop``. An ISIS datagram
then carries the view its sender was in when it sent it (4 bytes, big-endian), which
``IsisCore.receive_datagram`` takes as ``view=``: a member drops Data of a view it has
closed instead of holding it until its sender's discard (``docs/cluster.md``); one too
short for the tag is dropped, counted (``counters["malformed"]``) and traced as an ISIS
``drop``. ISIS knows a member by ``<name>#<incarnation>`` (a restarted process is a new
member, with a new id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gossamer._types import Address
from gossamer.errors import DecodeError, LocalProtocolError
from gossamer.proto.core import DatagramOutputs
from gossamer.proto.isis import Delivered, Discarded, IsisConfig, IsisCore, members_from
from gossamer.proto.isis.core import ViewFlushed
from gossamer.proto.views import (
    Blocked,
    Excluded,
    FlushRequired,
    Member,
    StateNeeded,
    Unblocked,
    View,
    ViewInstalled,
    ViewsConfig,
    ViewsCore,
)
from gossamer.trace.sink import Tracer

if TYPE_CHECKING:
    from random import Random

__all__ = ["ISIS_TAG", "VIEWS_TAG", "GroupCore", "GroupEvent", "isis_name", "split_state"]

VIEWS_TAG = b"V"
ISIS_TAG = b"I"
VIEW_TAG_SIZE = 4  # the sender's view id, after ``ISIS_TAG``

GroupEvent = Delivered | Discarded | ViewInstalled | StateNeeded | Blocked | Unblocked | Excluded


def isis_name(member: Member) -> str:
    """The member's name in ISIS: one per incarnation."""
    return f"{member.name}#{member.incarnation}"


def join_state(isis_state: bytes, app_state: bytes) -> bytes:
    """The state views carries to joiners: the ISIS join state, then the application's."""
    return len(isis_state).to_bytes(4, "big") + isis_state + app_state


def split_state(state: bytes) -> tuple[bytes, bytes]:
    """``(isis state, application state)`` of :func:`join_state`; ``DecodeError`` if short."""
    if len(state) < 4 or len(state) < 4 + int.from_bytes(state[:4], "big"):
        raise DecodeError("a group join state is shorter than its ISIS part")
    size = int.from_bytes(state[:4], "big")
    return state[4 : 4 + size], state[4 + size :]


class GroupCore(DatagramOutputs[GroupEvent]):
    """One member: views and ISIS on one address (module docstring). ``isis`` takes
    ``IsisConfig``'s tunables (``retransmit_initial=``, ``batch_delay=``...); the wire is
    the sealed one (dynamic membership needs it)."""

    def __init__(
        self,
        views: ViewsConfig,
        *,
        isis: Mapping[str, Any] | None = None,
        tracer: Tracer,
        rng: Random,
        now: float,
    ) -> None:
        super().__init__()
        self.me = views.me
        self.counters = {"unknown_protocol": 0, "malformed": 0}
        self._tunables = dict(isis or {})
        self._tracer = tracer
        self._rng = rng
        self.views = ViewsCore(views, tracer=tracer, rng=rng, now=now)
        #: The ISIS member; ``None`` for a joiner not yet admitted, and once excluded.
        self.isis: IsisCore | None = None
        if views.initial:
            founders = members_from([(isis_name(m), m.address) for m in views.initial])
            config = IsisConfig(
                me=next(m.id for m in founders if m.name == isis_name(self.me)),
                members=founders,
                **self._tunables,
            )
            self.isis = IsisCore(config, tracer=tracer, rng=rng)
            self.isis.view_id = 1
        self._flush_view = 0  # the view of the latest FlushRequired
        self._proposals: list[tuple[Member, ...]] = []  # its next members, latest last
        self._refused = False  # the latest proposal keeps a member ISIS removed here
        self._pump(now)

    # -- properties --------------------------------------------------------------

    @property
    def view(self) -> View | None:
        return self.views.view

    @property
    def excluded(self) -> bool:
        return self.views.excluded

    @property
    def blocked(self) -> bool:
        return self.views.blocked

    # -- inputs ----------------------------------------------------------------------

    def multicast(self, data: bytes | int, now: float) -> int:
        """Multicast ``data`` in total order to the current view (held during a view
        change, see ``IsisCore.multicast``); returns its ISIS ``msg_id``.
        ``LocalProtocolError`` before this member is admitted, or once excluded."""
        if self.isis is None:
            raise LocalProtocolError("not a member of the group (yet)", member=self.me.name)
        msg_id = self.isis.multicast(data, now)
        self._pump(now)
        return msg_id

    def suspect(self, name: str, now: float, *, incarnation: int | None = None) -> None:
        """The membership layer's ``peer_down``: views suspects it. ISIS removes it only
        when a view change leaves it out: a suspicion can be withdrawn, a removal not."""
        self.views.suspect(name, now, incarnation=incarnation)
        self._pump(now)

    def join_request(self, member: Member, now: float) -> None:
        """The membership layer's ``peer_up``; but a member that ISIS here removed stays
        suspected (it cannot come back: it must rejoin as a new incarnation)."""
        if self._removed_here(member):
            self.views.suspect(member.name, now, incarnation=member.incarnation)
        else:
            self.views.join_request(member, now)
        self._pump(now)

    def provide_state(self, view_id: int, state: bytes, now: float) -> None:
        """The application's state for the joiners of view ``view_id`` (after
        ``StateNeeded``), as of the end of the flushed view. ``LocalProtocolError`` when
        it and the ISIS state exceed what a view's INSTALL carries."""
        if self.isis is None or view_id != self._flush_view + 1:
            return
        joiners = self._proposal_for(view_id)
        if joiners is None:
            return
        members = [(isis_name(m), m.address) for m in joiners]
        self.views.provide_state(
            view_id, join_state(self.isis.state_for_joiner(members), state), now
        )
        self._pump(now)

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        tag, body = data[:1], data[1:]
        if tag == VIEWS_TAG:
            self.views.receive_datagram(body, addr, now)
        elif tag == ISIS_TAG and self.isis is not None:
            if len(body) < VIEW_TAG_SIZE:
                self.counters["malformed"] += 1
                self._tracer(
                    now, "isis", "drop", size=len(data),
                    attrs={"reason": "an ISIS datagram shorter than its view tag"},
                )  # fmt: skip
                return
            view = int.from_bytes(body[:VIEW_TAG_SIZE], "big")
            self.isis.receive_datagram(body[VIEW_TAG_SIZE:], addr, now, view=view)
        elif tag != ISIS_TAG:
            self.counters["unknown_protocol"] += 1
            self._tracer(
                now,
                "views",
                "drop",
                size=len(data),
                attrs={"reason": "neither a views nor an ISIS datagram"},
            )
            return
        self._pump(now)

    def handle_timer(self, now: float) -> None:
        for core in (self.views, self.isis):
            if core is not None:
                deadline = core.next_deadline()
                if deadline is not None and deadline <= now:
                    core.handle_timer(now)
        self._pump(now)

    def next_deadline(self) -> float | None:
        isis = self.isis.next_deadline() if self.isis is not None else None
        # ``is not None``: a deadline at 0.0 (a batch due at the first instant) is one.
        deadlines = [d for d in (self.views.next_deadline(), isis) if d is not None]
        return min(deadlines, default=None)

    # -- the glue ------------------------------------------------------------------------

    def _pump(self, now: float) -> None:
        """Move every event between the two cores until neither has one, then collect
        the datagrams of both."""
        while True:
            views_events = self.views.events_received()
            isis_events = self.isis.events_received() if self.isis is not None else ()
            if not views_events and not isis_events:
                break
            for event in views_events:
                self._on_views(event, now)
            for told in isis_events:
                if isinstance(told, ViewFlushed) and not self._refused:
                    self.views.flush_done(self._flush_view, now)
                elif isinstance(told, Delivered | Discarded):
                    self._events.append(told)
        self._outbox.extend((VIEWS_TAG + d, a) for d, a in self.views.datagrams_to_send())
        self._collect_isis()

    def _collect_isis(self) -> None:
        """Move ISIS's datagrams to the outbox, tagged with the view they were sent in
        (so called before each ``install_view`` too)."""
        if self.isis is not None:
            head = ISIS_TAG + self.isis.view_id.to_bytes(VIEW_TAG_SIZE, "big")
            self._outbox.extend((head + d, a) for d, a in self.isis.datagrams_to_send())

    def _on_views(self, event: object, now: float) -> None:
        if isinstance(event, FlushRequired):
            if event.view_id != self._flush_view:
                self._proposals = []
            self._flush_view = event.view_id
            self._proposals.append(event.next_members)
            # A proposal that keeps a member ISIS here removed (an earlier proposal left
            # it out) cannot be flushed for: suspect it, so the coordinator proposes
            # without it, and confirm only a proposal that does not keep it.
            removed = [m for m in event.next_members if self._removed_here(m)]
            for m in removed:
                self.views.suspect(m.name, now, incarnation=m.incarnation)
            self._refused = bool(removed)
            if self.isis is not None:
                keep = [self.isis.id_of(isis_name(m)) for m in event.next_members]
                self.isis.begin_view_change([i for i in keep if i is not None], now)
        elif isinstance(event, ViewInstalled):
            self._installed(event, now)
        elif isinstance(event, Excluded):
            self.isis = None
            self._events.append(event)
        elif isinstance(event, StateNeeded | Blocked | Unblocked):
            self._events.append(event)

    def _installed(self, event: ViewInstalled, now: float) -> None:
        view = event.view
        members = [(isis_name(m), m.address) for m in view.members]
        app_state = None
        if self.isis is None:
            if event.state is None:  # a founder's view 1 builds its core at once
                return
            isis_state, app_state = split_state(event.state)
            self.isis = IsisCore.joining(
                isis_state,
                isis_name(self.me),
                view.id,
                members,
                tracer=self._tracer,
                rng=self._rng,
                **self._tunables,
            )
        elif view.id > 1:
            self._collect_isis()
            self.isis.install_view(view.id, members, now)
        self._events.append(dataclasses.replace(event, state=app_state))

    def _removed_here(self, member: Member) -> bool:
        if self.isis is None:
            return False
        member_id = self.isis.id_of(isis_name(member))
        return member_id is not None and self.isis.is_removed(member_id)

    def _proposal_for(self, view_id: int) -> Sequence[Member] | None:
        """The next view's members as proposed for ``view_id`` (the latest proposal
        that adds joiners)."""
        view = self.views.view
        if view is None or view.id + 1 != view_id:
            return None
        for value in reversed(self._proposals):
            if any(not view.has(m.key) for m in value):
                return value
        return None
