"""The node's gateway as one 신경 gateway of the whole cluster, following the agreed views.

The gateway's cluster layer (``gossamer.aio.gateway_cluster``) exchanges clients and
deliveries with the peers it is given; :class:`GatewayPeers` gives it the members of
every view this node installs (``docs/node.md``, "The gateway across the cluster"):

- a member that **joined** is added as a peer at the link address its card names (the
  card of that very incarnation). Linking runs in the background: while the member's card
  has not reached this node yet or its link is not up yet, it is tried again every
  ``retry`` seconds, and the views' event loop never waits for it;
- a member that **left** is removed: its clients leave routing at once
  (CLIENT_DISCONNECTED to the watchers); deliveries that waited for it are counted;
- a member **replaced by a new incarnation** (a restarted process) is removed, then
  added again: the new process starts with no clients, and both sides exchange
  snapshots;
- the view's names go to ``set_nodes`` (op 7 load balancing against the agreed view).

Changes for one member are applied in the order of the views: a later view's change
waits for the earlier one's to stop (an add still retrying is abandoned) before it
starts. A member whose card names no gateway or no link (those services disabled in its
file) is not a gateway peer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gossamer.aio.gateway_cluster import GatewayCluster
from gossamer.aio.membership import Card
from gossamer.errors import LinkError, TimedOutError
from gossamer.proto.views import View

__all__ = ["GatewayPeers"]

log = logging.getLogger("gossamer.daemon.gateway")

#: Finds the card of member ``(name, incarnation)`` among those this node holds.
CardOf = Callable[[str, int], Card | None]


class GatewayPeers:
    """Keeps ``cluster``'s peers equal to the other members of the latest view.

    ``card_of(name, incarnation)`` returns that member's card when this node holds it
    (``None`` otherwise: asked again every ``retry`` seconds). Call :meth:`on_view` from
    the event loop for every installed view, in order; :meth:`close` abandons what is in
    progress (the cluster itself is closed by its owner).
    """

    def __init__(self, cluster: GatewayCluster, card_of: CardOf, *, retry: float = 0.5) -> None:
        self.cluster = cluster
        self.card_of = card_of
        self.retry = retry
        #: The other members of the latest view: name -> incarnation.
        self.members: dict[str, int] = {}
        #: The peers added to the cluster: name -> the incarnation they were added for.
        self.linked: dict[str, int] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._removing: dict[str, asyncio.Future[None]] = {}

    def on_view(self, view: View) -> None:
        """A view was installed: start the changes it makes (returns at once)."""
        me = self.cluster.name
        wanted = {m.name: m.incarnation for m in view.members if m.name != me}
        for name in sorted(self.members.keys() | wanted.keys()):
            if self.members.get(name) != wanted.get(name):
                self._change(name, wanted.get(name))
        self.members = wanted
        self.cluster.set_nodes([m.name for m in view.members])

    def pending(self) -> list[str]:
        """The members whose change is still in progress (a peer not linked yet)."""
        return sorted(self._tasks)

    async def close(self) -> None:
        """Abandon every change in progress. Idempotent."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *self._removing.values(), return_exceptions=True)

    # -- one member's change ---------------------------------------------------------

    def _change(self, name: str, incarnation: int | None) -> None:
        previous = self._tasks.pop(name, None)
        if previous is not None:
            previous.cancel()
        task = asyncio.ensure_future(self._settle(name, incarnation, previous))
        self._tasks[name] = task
        task.add_done_callback(lambda done: self._forget(name, done))

    def _forget(self, name: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(name) is task:
            del self._tasks[name]
        if not task.cancelled() and task.exception() is not None:
            log.error("gateway peer %s: %r", name, task.exception())

    async def _settle(
        self, name: str, incarnation: int | None, previous: asyncio.Task[None] | None
    ) -> None:
        """Make ``name`` the peer of ``incarnation`` (``None``: no peer)."""
        if previous is not None:
            await asyncio.wait([previous])  # the earlier view's change stops first
        if name in self.linked and self.linked[name] != incarnation:
            del self.linked[name]
            self._removing[name] = asyncio.ensure_future(self.cluster.remove_peer(name))
        removing = self._removing.get(name)
        if removing is not None:
            # Not cancelled with this change: a removal half done would leave the old
            # link's socket open; a later change waits for it here too.
            await asyncio.wait([removing])
            if self._removing.get(name) is removing:
                del self._removing[name]
        if incarnation is None or name in self.linked:
            return
        while True:
            card = self.card_of(name, incarnation)
            if card is not None:
                address = card.services.get("link")
                if address is None or "gateway" not in card.services:
                    return  # it serves no gateway over links: not a peer
                try:
                    await self.cluster.add_peer(name, address)
                except (LinkError, TimedOutError) as exc:
                    log.info("gateway peer %s not linked yet (%s)", name, exc)
                else:
                    self.linked[name] = incarnation
                    return
            await asyncio.sleep(self.retry)
