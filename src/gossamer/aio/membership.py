"""Discovery proposes, views decide: the membership layer of a cluster node.

Prototari discovery (``gossamer.aio.discovery``) decides on its own, by heartbeats, that a
peer came or went; agreed views (``gossamer.aio.views``) turn such proposals into the
same sequence of views at every member (``docs/cluster.md``). :class:`Membership` is the
glue between the two, for one node:

- **Cards.** Discovery knows a peer by its address, views by a name and an incarnation.
  When discovery registers a peer, the node sends it its :class:`Card` over discovery's
  own datagrams (sealed with the cluster key): its cluster, name, incarnation, views
  address, whether it is a member, and where its other services listen. A card is
  answered with ours the first time it comes from that incarnation, and every node
  repeats its card to its peers every ``announce_interval``, so a lost one costs a delay.
- **Joins.** A card from a process whose group member runs (``joining`` or ``member``) is
  ``join_request``: a newcomer wants in, a member is alive after all (a suspicion is
  withdrawn), or a restarted process, a higher incarnation, replaces the old one.
- **Failures.** Discovery's ``peer_down`` for a peer whose card we hold is
  ``suspect(name, incarnation)``. A node's own leave (``local``) is not.
- **Peers of peers.** A card also names the discovery addresses of the sender's peers.
  Given the discovery targets it started with (``targets``), the node adds those it learns
  to its own discovery's targets, so that nodes that named different seeds (or sit behind
  a router) find each other and every member's failure is noticed by several peers.
- **Founders and joiners.** A node opens its group member as a joiner, with the views
  addresses of the members it has cards from as seeds, as soon as it holds a member's
  card. A node configured ``bootstrap`` founds the cluster alone (view 1 of itself) if,
  ``bootstrap_wait`` seconds after it started, it holds no member's card and no card from
  another waiting founder candidate with a smaller name (so two candidates started together
  make one cluster, not two). A node that was a member never founds again.
- **Incarnations.** An ``Excluded`` member (removed while alive) closes its core and
  rejoins at once as incarnation + 1; a restarted process takes a new incarnation from its
  caller (the daemon uses the wall clock in milliseconds).

**Virtual synchrony.** The core the node opens is a group member
(``gossamer.aio.group.open_group``): the agreed views with ISIS total order flushed
through them, so the members agree on membership *and* on the order of what is
multicast in it (``docs/cluster.md``, "ISIS on the views"). The flushes are inside the
group; what the node still answers goes through one function,
:meth:`Membership.group_event`, to the node's :class:`Replicated` state: every
``Delivered`` is ``apply``-ed in the total order, ``StateNeeded`` is answered with its
``snapshot()`` (awaited: a joiner still taking its own state answers once it has it),
and a joiner's first ``ViewInstalled`` carries the snapshot it ``restore``-s before it
applies anything of the new view.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

import orjson

from gossamer._types import Address
from gossamer.addresses import format_address
from gossamer.aio._pump import now
from gossamer.aio.addresses import resolve
from gossamer.aio.discovery import Discovery
from gossamer.aio.group import GroupService, open_group
from gossamer.aio.sockets import udp_socket
from gossamer.errors import ClosedError, DecodeError, GossamerError, NetworkError
from gossamer.proto.discovery import PeerDown, PeerUp, Received
from gossamer.proto.isis import Delivered
from gossamer.proto.snapshot_group import SnapshotGroupEvent
from gossamer.proto.views import Excluded, Member, StateNeeded, ViewInstalled
from gossamer.proto.views.model import ViewsConfig
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.mode import Wire

__all__ = ["CARD_PREFIX", "Card", "Membership", "Replicated"]

#: Every card starts with these bytes (a discovery datagram that does not is refused).
CARD_PREFIX: Final = b"gossamer-card/1\n"
#: The largest card read (a card with its peers is well under 4 KiB).
MAX_CARD: Final = 8192
#: A card names at most this many peers; a node remembers at most ``MAX_LEARNED``.
MAX_PEERS: Final = 64
MAX_LEARNED: Final = 256

CardState = Literal["waiting", "joining", "member"]
_STATES: Final = ("waiting", "joining", "member")

class Replicated(Protocol):
    """What rides on the group's total order at a node: a state every member changes
    the same way, because every member applies the same messages in the same order
    (virtual synchrony). :class:`Membership` calls it from its event loop, in the
    order of the group's events."""

    def apply(self, delivered: Delivered) -> None:
        """A message delivered in the total order (every member, the same sequence)."""

    async def snapshot(self) -> bytes:
        """The state as of the end of the flushed view, for the joiners of the next view:
        asked after this member flushed the ending view (nothing of it is left to
        apply), bytes up to what a view's INSTALL carries (``gossamer.wire.views.MAX_STATE``,
        less ISIS's). A member whose own state is not there yet (a joiner still taking it)
        returns once it is: the view change waits for it (``docs/cluster.md``)."""
        ...

    def restore(self, state: bytes) -> None:
        """A joiner's start: the members' ``snapshot()`` at the view that admitted it.
        A state it cannot read raises a ``GossamerError`` (``DecodeError``): the node
        counts it (``Membership.rejected["state"]``) and goes on from where it is."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Card:
    """What a node tells each peer its discovery registers: who it is (``name``,
    ``incarnation``, in ``cluster``), where its group member (views and ISIS) listens, its state
    (``waiting`` to found or to hear of a member, ``joining``, ``member``), whether it may
    found, its other services' addresses (``gateway``, ``link``, ``gossip``) and the
    discovery addresses of its registered ``peers``."""

    cluster: str
    name: str
    incarnation: int
    views: Address
    state: CardState
    bootstrap: bool = False
    services: Mapping[str, Address] = field(default_factory=dict)
    peers: tuple[Address, ...] = ()

    @property
    def member(self) -> Member:
        return Member(name=self.name, incarnation=self.incarnation, address=self.views)

    def encode(self) -> bytes:
        body = {
            "cluster": self.cluster, "name": self.name, "incarnation": self.incarnation,
            "views": list(self.views), "state": self.state, "bootstrap": self.bootstrap,
            "services": {k: list(v) for k, v in self.services.items()},
            "peers": [list(peer) for peer in self.peers[:MAX_PEERS]],
        }
        return CARD_PREFIX + orjson.dumps(body)

    @classmethod
    def decode(cls, data: bytes) -> Card:
        """The card in ``data``; ``DecodeError`` saying what is wrong otherwise."""
        if len(data) > MAX_CARD:
            raise DecodeError("card too long", size=len(data))
        if not data.startswith(CARD_PREFIX):
            raise DecodeError("not a card")
        try:
            body = orjson.loads(data[len(CARD_PREFIX):])
            card = cls(
                cluster=_text(body["cluster"]), name=_text(body["name"]),
                incarnation=_count(body["incarnation"]), views=_address(body["views"]),
                state=body["state"] if body["state"] in _STATES else _bad("state"),
                bootstrap=body["bootstrap"] if isinstance(body["bootstrap"], bool)
                else _bad("bootstrap"),
                services={_text(k): _address(v) for k, v in _mapping(body["services"]).items()},
                peers=tuple(_address(peer) for peer in _list(body["peers"])[:MAX_PEERS]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise DecodeError(f"malformed card: {exc}") from exc
        return card


def _bad(what: str) -> Any:
    raise ValueError(f"bad {what}")


def _text(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value.encode()) <= 255:
        raise ValueError("a name must be a string of 1 to 255 bytes")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 64:
        raise ValueError("an incarnation must be an integer in 1..2^64-1")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError("peers must be a list")
    return value


def _mapping(value: Any) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise ValueError("services must be an object")
    return value


def _address(value: Any) -> Address:
    if (
        not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], int)
        or isinstance(value[1], bool) or not 0 < value[1] < 65536
    ):
        raise ValueError("an address is [host, port]")
    return _text(value[0]), value[1]


class Membership:
    """The membership layer of one node (module docstring): cards over ``discovery``,
    ``join_request``/``suspect`` into this node's group member (views and ISIS), which it
    opens as a founder or a joiner, and every group event to ``replicated``.

    ``me`` is this process (its address is where its group member binds; port 0 takes
    any free port). ``views_options`` are :class:`~gossamer.proto.views.ViewsConfig`
    fields other than ``me``, ``initial`` and ``seeds``; ``isis_options`` are
    ``IsisConfig``'s tunables (``open_group``'s ``isis``). ``services`` goes on the card.
    ``targets``: the discovery broadcast targets ``discovery`` was opened with; given,
    the peers the cards name are added to them (``None``: discovery is left alone).
    ``replicated`` is the state on the total order (``None``: nothing is applied and
    joiners start from empty bytes); ``on_view`` is told every ``ViewInstalled`` after
    ``replicated`` (a joiner's first, after its ``restore``); ``on_event`` every other
    group event but ``Delivered`` and ``StateNeeded`` (``Blocked``, ``Unblocked``,
    ``Excluded``...), after the membership handled it. Multicast in the total
    order with ``group.send`` while ``state == "member"``. ``names`` is the dict it fills
    with each endpoint a card named and that node's name (:attr:`names`; the daemon's
    trace renames peers with it). Use it from one event loop:
    ``await start()``, then ``await close()``.
    """

    def __init__(
        self,
        discovery: Discovery,
        *,
        cluster: str,
        me: Member,
        wire: Wire,
        bootstrap: bool = False,
        bootstrap_wait: float = 3.0,
        announce_interval: float = 1.0,
        views_options: Mapping[str, Any] | None = None,
        isis_options: Mapping[str, Any] | None = None,
        services: Mapping[str, Address] | None = None,
        replicated: Replicated | None = None,
        on_view: Callable[[ViewInstalled], None] | None = None,
        on_event: Callable[[SnapshotGroupEvent], None] | None = None,
        targets: Sequence[Address] | None = None,
        tracer: Tracer | None = None,
        rng: random.Random | None = None,
        names: dict[str, str] | None = None,
    ) -> None:
        self.discovery = discovery
        self.cluster = cluster
        self.me = me
        self.wire = wire
        self.bootstrap = bootstrap
        self.bootstrap_wait = bootstrap_wait
        self.announce_interval = announce_interval
        self.views_options = dict(views_options or {})
        self.isis_options = dict(isis_options or {})
        self.services = dict(services or {})
        self.replicated = replicated
        self.on_view = on_view
        self.on_event = on_event
        self.tracer = tracer or Tracer(NullSink(), run="membership", node=me.name)
        self.rng = rng or random.Random()
        #: The cards of the peers discovery has registered, by their discovery address.
        self.cards: dict[Address, Card] = {}
        #: Every ``ip:port`` a card named (its discovery address, group member and
        #: services) -> that node's name: what a trace writer renames peers with
        #: (``gossamer.trace.peer_names``). Kept after the node leaves: its events still
        #: name it.
        self.names: dict[str, str] = {} if names is None else names
        self.targets = None if targets is None else tuple(targets)
        #: Discovery addresses the cards named, oldest first (at most ``MAX_LEARNED``).
        self.learned: dict[Address, None] = {}
        #: Discovery datagrams refused, by reason (``malformed``, ``cluster``, ``own_name``),
        #: and joiner's states ``replicated`` refused (``state``).
        self.rejected: Counter[str] = Counter()
        #: This incarnation's group member (``None`` while waiting, or rejoining).
        self.group: GroupService | None = None
        self._was_member = False
        self._opening = False
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # -- state ---------------------------------------------------------------------------

    @property
    def state(self) -> CardState:
        if self.group is None:
            return "waiting"
        return "member" if self.group.view is not None else "joining"

    def card(self) -> Card:
        """This node's card as it stands."""
        return Card(
            cluster=self.cluster, name=self.me.name, incarnation=self.me.incarnation,
            views=self.me.address, state=self.state, bootstrap=self.bootstrap,
            services=self.services, peers=tuple(self.discovery.peers()[:MAX_PEERS]),
        )

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the group's socket (the card names its address: ``views``), then follow
        discovery."""
        host, port = await resolve(self.me.address, ipv6=False)
        try:  # bound now: a port in use fails the start, and port 0 gets its number
            self._sock = udp_socket(host, port)
        except OSError as exc:
            raise NetworkError(f"cannot bind the group socket {host}:{port}: {exc.strerror}",
                               host=host, port=port) from exc
        self.me = dataclasses.replace(self.me, address=(host, self._sock.getsockname()[1]))
        self._spawn(self._follow_peers())
        self._spawn(self._follow_cards())
        self._spawn(self._announce_every())
        if self.bootstrap:
            self._spawn(self._found_when_alone())

    async def close(self) -> None:
        """Stop following discovery and close the group member (the others see a crash:
        the group has no goodbye; discovery's own leave tells them sooner). Idempotent."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.group is not None:
            await self.group.close()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- discovery -> the group ----------------------------------------------------------

    async def _follow_peers(self) -> None:
        async for event in self.discovery.events():
            if isinstance(event, PeerUp):
                await self._send_card(event.peer)
            elif isinstance(event, PeerDown) and not event.local:
                card = self.cards.pop(event.peer, None)
                if card is not None and self.group is not None and not self.group.closed:
                    self.group.suspect(card.name, incarnation=card.incarnation)

    async def _follow_cards(self) -> None:
        async for message in self.discovery:
            await self._on_datagram(message)

    async def _on_datagram(self, message: Received) -> None:
        try:
            card = Card.decode(message.data)
        except DecodeError as exc:
            self._refuse("malformed", message.sender, exc.reason)
            return
        if card.cluster != self.cluster:
            self._refuse("cluster", message.sender, card.cluster)
            return
        if card.name == self.me.name:
            self._refuse("own_name", message.sender, card.name)
            return
        old = self.cards.get(message.sender)
        self.cards[message.sender] = card
        for address in (message.sender, card.views, *card.services.values()):
            self.names[format_address(address)] = card.name
        self._learn(card.peers)
        if old is None or old.incarnation != card.incarnation:
            await self._send_card(message.sender)  # the sender may not have ours yet
        if old != card and card.state != "waiting" and self._group_open():
            assert self.group is not None
            self.group.join_request(card.member)
        await self._open_group()

    def _learn(self, peers: Sequence[Address]) -> None:
        """Add the discovery addresses a card named to discovery's targets."""
        if self.targets is None:
            return
        known = set(self.targets) | {self.discovery.address}
        new = [peer for peer in peers if peer not in known and peer not in self.learned]
        if not new:
            return
        for peer in new:
            self.learned[peer] = None
        while len(self.learned) > MAX_LEARNED:
            del self.learned[next(iter(self.learned))]
        with contextlib.suppress(GossamerError):
            self.discovery.set_broadcast_targets((*self.targets, *self.learned))

    def _refuse(self, reason: str, sender: Address, detail: str) -> None:
        self.rejected[reason] += 1
        self.tracer(now(), "views", "drop", peer=f"{sender[0]}:{sender[1]}",
                    attrs={"reason": f"card_{reason}", "detail": detail[:200]})

    async def _send_card(self, peer: Address | None) -> None:
        """Our card to ``peer`` (``None``: to every registered peer); best effort."""
        with contextlib.suppress(GossamerError):
            await self.discovery.send(self.card().encode(), to=peer)

    async def _announce_every(self) -> None:
        while True:
            await asyncio.sleep(self.announce_interval)
            await self._send_card(None)

    # -- founding, joining, rejoining ----------------------------------------------------

    def _group_open(self) -> bool:
        return self.group is not None and not self.group.closed

    def _member_seeds(self) -> tuple[Address, ...]:
        return tuple(sorted({c.views for c in self.cards.values() if c.state == "member"}))

    async def _open_group(self, *, found: bool = False) -> None:
        """Open the group member: as a joiner once a member's card is known, or as the
        founder (``found``). Does nothing while one is open or opening."""
        if self.group is not None or self._opening or self._closed:
            return
        seeds = self._member_seeds()
        if not found and not seeds:
            return
        self._opening = True
        try:
            config = ViewsConfig(
                me=self.me, initial=(self.me,) if found else (), seeds=() if found else seeds,
                **self.views_options,
            )
            # The socket bound at the start, or (rejoining) a new one on the same port.
            sock, self._sock = self._sock, None
            group = await open_group(config, wire=self.wire, isis=self.isis_options,
                                     tracer=self.tracer, rng=self.rng, sock=sock)
        finally:
            self._opening = False
        self.group = group
        self._spawn(self._follow_group(group))
        await self._send_card(None)  # our state changed: joining (or member)

    async def _found_when_alone(self) -> None:
        await asyncio.sleep(self.bootstrap_wait)
        while self.group is None and not self._was_member:
            rivals = [
                c for c in self.cards.values()
                if c.state != "waiting" or (c.bootstrap and c.name < self.me.name)
            ]
            if not rivals and not self._opening:
                await self._open_group(found=True)
                return
            await asyncio.sleep(self.announce_interval)

    async def _rejoin(self, group: GroupService) -> None:
        """Excluded while alive: close, take the next incarnation, join again."""
        await group.close()
        incarnation = max(self.me.incarnation + 1, clock_incarnation())
        self.me = dataclasses.replace(self.me, incarnation=incarnation)
        self.group = None
        await self._send_card(None)
        await self._open_group()

    # -- the group -> the replicated state -----------------------------------------------

    async def _follow_group(self, group: GroupService) -> None:
        with contextlib.suppress(ClosedError):
            async for event in group.events():
                self.group_event(event, group)

    async def _provide_state(self, replicated: Replicated, view_id: int,
                             group: GroupService) -> None:
        """The joiners' state once ``replicated`` has it. Nothing is delivered meanwhile:
        the ending view is flushed here, and the next one waits for this state."""
        state = await replicated.snapshot()
        with contextlib.suppress(ClosedError):
            group.provide_state(view_id, state)

    def group_event(self, event: SnapshotGroupEvent, group: GroupService) -> None:
        """Every group event of this node, in order: the one place the replicated state
        attaches (module docstring). ``Discarded`` needs nothing: a withdrawn message
        is multicast again by its sender, and the group traces it."""
        replicated = self.replicated
        if isinstance(event, Delivered):
            if replicated is not None:
                replicated.apply(event)
        elif isinstance(event, StateNeeded):
            if replicated is None:
                with contextlib.suppress(ClosedError):
                    group.provide_state(event.view_id, b"")
            else:
                self._spawn(self._provide_state(replicated, event.view_id, group))
        elif isinstance(event, ViewInstalled):
            if event.state is not None and replicated is not None:
                try:
                    replicated.restore(event.state)
                except GossamerError as exc:  # a member's bug: counted, traced, go on
                    self.rejected["state"] += 1
                    self.tracer(now(), "views", "drop", attrs={
                        "reason": "state_refused", "detail": str(exc)[:200]})
            first = not self._was_member
            self._was_member = True
            if self.on_view is not None:
                self.on_view(event)
            if first:
                self._spawn(self._send_card(None))  # we are a member now
        elif isinstance(event, Excluded) and not self._closed:
            self._spawn(self._rejoin(group))
        if self.on_event is not None and not isinstance(event, Delivered | StateNeeded):
            self.on_event(event)  # Blocked, Unblocked, Excluded, ViewInstalled, Discarded


def clock_incarnation() -> int:
    """An incarnation from the wall clock, in milliseconds: a restarted process takes a
    higher one than before as long as the clock did not go back by more than it was down."""
    return max(1, int(time.time() * 1000))

