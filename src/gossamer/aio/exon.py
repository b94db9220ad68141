"""An Exon node on a real UDP socket: the sans-I/O :class:`~gossamer.proto.link.exon_core.ExonCore`
under the datagram driver, with the original's API (``EOMiddleware``: send to a node
id, receive ``(node id, bytes)``), for tests and for talking to Java Exon nodes.

::

    async with open_exon("alice", "127.0.0.1") as alice, open_exon("bob", "127.0.0.1") as bob:
        alice.register("bob", bob.address)
        alice.send("bob", b"hi")
        message = await bob.receive(timeout=5.0)   # ExonMessage(node="alice", data=b"hi")

Delivery is exactly once and unordered. ``send`` never waits: messages beyond the
``in_transit`` window queue inside the core (``pending``). ``faults`` (a
:class:`~gossamer.aio.faults.FaultInjector`) drops, duplicates, delays or reorders
datagrams between the core and the socket.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

from gossamer._types import Address
from gossamer.aio._pump import deadline
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.opening import Opening
from gossamer.aio.sockets import udp_socket
from gossamer.errors import ClosedError, NetworkError
from gossamer.proto.link.exon_core import ExonConfig, ExonCore, ExonMessage

__all__ = ["ExonNode", "open_exon"]


class ExonNode:
    """One Exon node on a UDP socket. Open it with :func:`open_exon`."""

    def __init__(self, core: ExonCore) -> None:
        self.core = core
        self._driver: DatagramDriver[ExonCore] | None = None
        # Messages delivered, then None once closed (it stays, for every later receive).
        self._inbox: asyncio.Queue[ExonMessage | None] = asyncio.Queue()

    @property
    def address(self) -> Address:
        """Where the node's socket listens."""
        assert self._driver is not None
        return self._driver.local_address

    @property
    def node_id(self) -> str:
        return self.core.node_id

    @property
    def closed(self) -> bool:
        return self._driver is None or self._driver.closed

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams refused, by reason: ``malformed`` (not an Exon datagram, or slots
        beyond what one can name) and ``not_for_me`` (for another node id)."""
        counters = self.core.counters
        return Counter({k: counters[k] for k in ("malformed", "not_for_me") if counters[k]})

    def register(self, node_id: str, address: Address) -> None:
        """Node ``node_id`` is at ``address``."""
        self.core.register(node_id, address)

    def send(self, node_id: str, data: bytes) -> None:
        """Queue ``data`` for ``node_id`` (exactly once, in no particular order).
        Raises ``NoRouteError`` for a node without an address, ``LocalProtocolError``
        for a message larger than one datagram carries, ``ClosedError`` once closed."""
        if self._driver is None or self._driver.closed:
            raise ClosedError("the Exon node is closed")
        self._driver.call(lambda now: self.core.send(node_id, data, now))

    def pending(self, node_id: str) -> int:
        """Messages to ``node_id`` not yet acknowledged."""
        return self.core.pending(node_id)

    async def receive(self, *, timeout: float | None = None) -> ExonMessage:
        """The next message delivered; ``TimedOutError`` after ``timeout`` seconds,
        ``ClosedError`` once closed and drained (also to a receive waiting then)."""
        async with deadline(timeout, "an Exon message"):
            message = await self._inbox.get()
        if message is None:
            self._inbox.put_nowait(None)
            raise ClosedError("the Exon node is closed")
        return message

    async def __aiter__(self) -> AsyncIterator[ExonMessage]:
        """The messages delivered, until the node closes."""
        while True:
            try:
                yield await self.receive()
            except ClosedError:
                return

    async def close(self) -> None:
        """Close the socket (idempotent). Unacknowledged messages are abandoned."""
        driver = self._driver
        if driver is not None and not driver.closed:
            driver.close()
            await driver.wait_closed()
            self._inbox.put_nowait(None)

    def _on_event(self, event: object) -> None:
        assert isinstance(event, ExonMessage)
        self._inbox.put_nowait(event)


def open_exon(
    node_id: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    config: ExonConfig | None = None,
    clock: int = 0,
    faults: FaultInjector | None = None,
) -> Opening[ExonNode]:
    """Open Exon node ``node_id`` on ``host:port`` (port 0: any free port)."""

    async def start() -> ExonNode:
        node = ExonNode(ExonCore(node_id, config, clock=clock))
        try:
            sock = udp_socket(host, port)
        except OSError as exc:  # a port in use, an address not ours
            raise NetworkError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        node._driver = await open_datagram(node.core, sock, on_event=node._on_event,
                                           faults=faults)
        return node

    return Opening(start)
