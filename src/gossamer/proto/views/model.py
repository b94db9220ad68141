"""What the views protocol agrees on and tells the layer above: members, views, events,
and the one configuration."""

from __future__ import annotations

from dataclasses import dataclass

from gossamer._types import Address
from gossamer.errors import ConfigError
from gossamer.params import Checked, Count, PositiveSeconds, check
from gossamer.wire.views import MemberRecord

MemberKey = tuple[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """A group member: a process named ``name`` in its ``incarnation`` (a restarted
    process takes a higher one and is a new member), reachable at ``address``."""

    name: str
    incarnation: int
    address: Address

    @property
    def key(self) -> MemberKey:
        """What identifies the member: its name and incarnation."""
        return (self.name, self.incarnation)

    def record(self) -> MemberRecord:
        host, port = self.address
        return MemberRecord(name=self.name, incarnation=self.incarnation, host=host, port=port)

    @classmethod
    def of(cls, record: MemberRecord) -> Member:
        return cls(
            name=record.name, incarnation=record.incarnation, address=(record.host, record.port)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """An agreed view: its id (1, 2, ... with no gap) and its members in seniority order
    (the survivors of the previous view in their order, then the joiners by name and
    incarnation), so every member computes the same ``coordinator``: the oldest."""

    id: int
    members: tuple[Member, ...]

    @property
    def coordinator(self) -> Member:
        return self.members[0]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members)

    def member(self, name: str) -> Member | None:
        """The member called ``name`` (whatever its incarnation), or ``None``."""
        for m in self.members:
            if m.name == name:
                return m
        return None

    def has(self, key: MemberKey) -> bool:
        return any(m.key == key for m in self.members)

    def is_majority(self, count: int) -> bool:
        """Whether ``count`` of this view's members are more than half of them."""
        return 2 * count > len(self.members)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlushRequired:
    """View ``view_id`` is ending: the layer above must stop sending in it, settle its
    messages among ``next_members`` (the proposed next view), then call
    ``flush_done(view_id, now)``. A later ``FlushRequired`` for the same view (the
    proposal changed) supersedes this one: ``flush_done`` confirms the latest."""

    view_id: int
    next_members: tuple[Member, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StateNeeded:
    """This member installs view ``view_id`` next, which adds ``joiners``: the layer above
    must call ``provide_state(view_id, state, now)`` with the state they start from (its
    own, as of the end of the flushed view: nothing of view ``view_id`` is delivered yet)."""

    view_id: int
    joiners: tuple[Member, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewInstalled:
    """``view`` is this member's view from now on. ``agreed_by`` names the members of the
    previous view that accepted it (a majority of it); ``state`` is the state a joiner
    starts from, given with its first view only (``None`` otherwise, and for founders)."""

    view: View
    agreed_by: tuple[str, ...]
    state: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Blocked:
    """Fewer than a majority of view ``view_id`` are reachable (``reachable`` names them):
    no view can follow it on this side, so this member must refuse what needs the group
    until ``Unblocked`` or a ``ViewInstalled``."""

    view_id: int
    reachable: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Unblocked:
    """A majority of view ``view_id`` is reachable again (suspicions were withdrawn)."""

    view_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Excluded:
    """This member is not in view ``view_id`` of the group although it is alive (it was
    suspected, or cut off with a minority). The core is stopped; the process must start
    a new core with a higher incarnation to rejoin."""

    view_id: int


ViewsEvent = FlushRequired | StateNeeded | ViewInstalled | Blocked | Unblocked | Excluded


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewsConfig(Checked):
    """One member's configuration.

    ``me`` is this process (name, incarnation, the address its datagrams come from). A
    member listed in ``initial`` founds the group: it starts in view 1 of exactly
    ``initial`` (every founder must be given the same tuple). Any other member is a
    joiner: it asks ``seeds`` (addresses of any members) to let it in until a view with
    it is installed. ``retry`` is the retransmission interval of every message;
    ``notice_attempts`` bounds the notices sent to a removed member (it may be dead)."""

    me: Member
    initial: tuple[Member, ...] = ()
    seeds: tuple[Address, ...] = ()
    retry: PositiveSeconds = 0.1
    notice_attempts: Count = 8

    def __post_init__(self) -> None:
        check(self)
        keys = [m.key for m in self.initial]
        names = [m.name for m in self.initial]
        if len(set(names)) != len(names):
            raise ConfigError("initial members must have distinct names", members=names)
        if self.initial and self.me.key not in keys:
            raise ConfigError("a founder must be one of the initial members", me=self.me.name)
        if not self.initial and not self.seeds:
            raise ConfigError("a joiner needs seeds to ask", me=self.me.name)
