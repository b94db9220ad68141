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
- **Joins.** A card from a process whose views core runs (``joining`` or ``member``) is
  ``join_request``: a newcomer wants in, a member is alive after all (a suspicion is
  withdrawn), or a restarted process, a higher incarnation, replaces the old one.
- **Failures.** Discovery's ``peer_down`` for a peer whose card we hold is
  ``suspect(name, incarnation)``. A node's own leave (``local``) is not.
- **Peers of peers.** A card also names the discovery addresses of the sender's peers.
  Given the discovery targets it started with (``targets``), the node adds those it learns
  to its own discovery's targets, so that nodes that named different seeds (or sit behind
  a router) find each other and every member's failure is noticed by several peers.
- **Founders and joiners.** A node opens its views core as a joiner, with the views
  addresses of the members it has cards from as seeds, as soon as it holds a member's
  card. A node configured ``bootstrap`` founds the cluster alone (view 1 of itself) if,
  ``bootstrap_wait`` seconds after it started, it holds no member's card and no card from
  another waiting founder candidate with a smaller name (so two candidates started together
  make one cluster, not two). A node that was a member never founds again.
- **Incarnations.** An ``Excluded`` member (removed while alive) closes its core and
  rejoins at once as incarnation + 1; a restarted process takes a new incarnation from its
  caller (the daemon uses the wall clock in milliseconds).

Every views event goes through one function, :meth:`Membership.views_event`, to the
**layer above views** (``layer_above``, :data:`ViewsLayer`): this is where ISIS attaches
for virtual synchrony (``FlushRequired`` -> ISIS's flush, then ``flush_done``;
``StateNeeded`` -> the application's state; ``ViewInstalled`` -> ISIS's new member list).
Until then :func:`settle_at_once` answers flushes and state requests at once (nothing is
multicast in views yet, so there is nothing to settle).
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
from typing import Any, Final, Literal

import orjson

from gossamer._types import Address
from gossamer.aio._pump import now
from gossamer.aio.addresses import resolve
from gossamer.aio.discovery import Discovery
from gossamer.aio.sockets import udp_socket
from gossamer.aio.views import ViewsService, open_views
from gossamer.errors import ClosedError, DecodeError, GossamerError, NetworkError
from gossamer.proto.discovery import PeerDown, PeerUp, Received
from gossamer.proto.views import Excluded, FlushRequired, Member, StateNeeded, ViewInstalled
from gossamer.proto.views.model import ViewsConfig, ViewsEvent
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.mode import Wire

__all__ = ["CARD_PREFIX", "Card", "Membership", "ViewsLayer", "settle_at_once"]

#: Every card starts with these bytes (a discovery datagram that does not is refused).
CARD_PREFIX: Final = b"gossamer-card/1\n"
#: The largest card read (a card with its peers is well under 4 KiB).
MAX_CARD: Final = 8192
#: A card names at most this many peers; a node remembers at most ``MAX_LEARNED``.
MAX_PEERS: Final = 64
MAX_LEARNED: Final = 256

CardState = Literal["waiting", "joining", "member"]
_STATES: Final = ("waiting", "joining", "member")

#: The layer above views: called with every views event, in order, and the service to
#: answer on (``flush_done``, ``provide_state``). ISIS attaches here.
ViewsLayer = Callable[[ViewsEvent, ViewsService], None]


def settle_at_once(event: ViewsEvent, views: ViewsService) -> None:
    """The layer above views while nothing is multicast in views: every flush is done at
    once, and joiners start from an empty state."""
    if isinstance(event, FlushRequired):
        views.flush_done(event.view_id)
    elif isinstance(event, StateNeeded):
        views.provide_state(event.view_id, b"")


@dataclass(frozen=True, slots=True, kw_only=True)
class Card:
    """What a node tells each peer its discovery registers: who it is (``name``,
    ``incarnation``, in ``cluster``), where its views core listens, its state
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
    ``join_request``/``suspect`` into this node's views core, which it opens as a founder
    or a joiner, and every views event to ``layer_above``.

    ``me`` is this process (its address is where its views core binds; port 0 takes
    any free port). ``views_options`` are :class:`~gossamer.proto.views.ViewsConfig`
    fields other than ``me``, ``initial`` and ``seeds``. ``services`` goes on the card.
    ``targets``: the discovery broadcast targets ``discovery`` was opened with; given,
    the peers the cards name are added to them (``None``: discovery is left alone).
    ``on_view`` is told every ``ViewInstalled`` after the layer above. Use it from one
    event loop: ``await start()``, then ``await close()``.
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
        services: Mapping[str, Address] | None = None,
        layer_above: ViewsLayer = settle_at_once,
        on_view: Callable[[ViewInstalled], None] | None = None,
        targets: Sequence[Address] | None = None,
        tracer: Tracer | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.discovery = discovery
        self.cluster = cluster
        self.me = me
        self.wire = wire
        self.bootstrap = bootstrap
        self.bootstrap_wait = bootstrap_wait
        self.announce_interval = announce_interval
        self.views_options = dict(views_options or {})
        self.services = dict(services or {})
        self.layer_above = layer_above
        self.on_view = on_view
        self.tracer = tracer or Tracer(NullSink(), run="membership", node=me.name)
        self.rng = rng or random.Random()
        #: The cards of the peers discovery has registered, by their discovery address.
        self.cards: dict[Address, Card] = {}
        self.targets = None if targets is None else tuple(targets)
        #: Discovery addresses the cards named, oldest first (at most ``MAX_LEARNED``).
        self.learned: dict[Address, None] = {}
        #: Discovery datagrams refused, by reason (``malformed``, ``cluster``, ``own_name``).
        self.rejected: Counter[str] = Counter()
        self.views: ViewsService | None = None
        self._was_member = False
        self._opening = False
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # -- state ---------------------------------------------------------------------------

    @property
    def state(self) -> CardState:
        if self.views is None:
            return "waiting"
        return "member" if self.views.view is not None else "joining"

    def card(self) -> Card:
        """This node's card as it stands."""
        return Card(
            cluster=self.cluster, name=self.me.name, incarnation=self.me.incarnation,
            views=self.me.address, state=self.state, bootstrap=self.bootstrap,
            services=self.services, peers=tuple(self.discovery.peers()[:MAX_PEERS]),
        )

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the views socket (the card names its address), then follow discovery."""
        host, port = await resolve(self.me.address, ipv6=False)
        try:  # bound now: a port in use fails the start, and port 0 gets its number
            self._sock = udp_socket(host, port)
        except OSError as exc:
            raise NetworkError(f"cannot bind the views socket {host}:{port}: {exc.strerror}",
                               host=host, port=port) from exc
        self.me = dataclasses.replace(self.me, address=(host, self._sock.getsockname()[1]))
        self._spawn(self._follow_peers())
        self._spawn(self._follow_cards())
        self._spawn(self._announce_every())
        if self.bootstrap:
            self._spawn(self._found_when_alone())

    async def close(self) -> None:
        """Stop following discovery and close the views core (the others see a crash:
        views have no goodbye; discovery's own leave tells them sooner). Idempotent."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.views is not None:
            await self.views.close()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- discovery -> views --------------------------------------------------------------

    async def _follow_peers(self) -> None:
        async for event in self.discovery.events():
            if isinstance(event, PeerUp):
                await self._send_card(event.peer)
            elif isinstance(event, PeerDown) and not event.local:
                card = self.cards.pop(event.peer, None)
                if card is not None and self.views is not None and not self.views.closed:
                    self.views.suspect(card.name, incarnation=card.incarnation)

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
        self._learn(card.peers)
        if old is None or old.incarnation != card.incarnation:
            await self._send_card(message.sender)  # the sender may not have ours yet
        if old != card and card.state != "waiting" and self._views_open():
            assert self.views is not None
            self.views.join_request(card.member)
        await self._open_views()

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

    def _views_open(self) -> bool:
        return self.views is not None and not self.views.closed

    def _member_seeds(self) -> tuple[Address, ...]:
        return tuple(sorted({c.views for c in self.cards.values() if c.state == "member"}))

    async def _open_views(self, *, found: bool = False) -> None:
        """Open the views core: as a joiner once a member's card is known, or as the
        founder (``found``). Does nothing while one is open or opening."""
        if self.views is not None or self._opening or self._closed:
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
            views = await open_views(config, wire=self.wire, tracer=self.tracer, rng=self.rng,
                                     sock=sock)
        finally:
            self._opening = False
        self.views = views
        self._spawn(self._follow_views(views))
        await self._send_card(None)  # our state changed: joining (or member)

    async def _found_when_alone(self) -> None:
        await asyncio.sleep(self.bootstrap_wait)
        while self.views is None and not self._was_member:
            rivals = [
                c for c in self.cards.values()
                if c.state != "waiting" or (c.bootstrap and c.name < self.me.name)
            ]
            if not rivals and not self._opening:
                await self._open_views(found=True)
                return
            await asyncio.sleep(self.announce_interval)

    async def _rejoin(self, views: ViewsService) -> None:
        """Excluded while alive: close, take the next incarnation, join again."""
        await views.close()
        incarnation = max(self.me.incarnation + 1, clock_incarnation())
        self.me = dataclasses.replace(self.me, incarnation=incarnation)
        self.views = None
        await self._send_card(None)
        await self._open_views()

    # -- views -> the layer above --------------------------------------------------------

    async def _follow_views(self, views: ViewsService) -> None:
        with contextlib.suppress(ClosedError):
            async for event in views.events():
                self.views_event(event, views)

    def views_event(self, event: ViewsEvent, views: ViewsService) -> None:
        """Every views event of this node, in order: the one place the layer above views
        (ISIS, for virtual synchrony) attaches (``layer_above``)."""
        self.layer_above(event, views)
        if isinstance(event, ViewInstalled):
            first = not self._was_member
            self._was_member = True
            if self.on_view is not None:
                self.on_view(event)
            if first:
                self._spawn(self._send_card(None))  # we are a member now
        elif isinstance(event, Excluded) and not self._closed:
            self._spawn(self._rejoin(views))


def clock_incarnation() -> int:
    """An incarnation from the wall clock, in milliseconds: a restarted process takes a
    higher one than before as long as the clock did not go back by more than it was down."""
    return max(1, int(time.time() * 1000))

