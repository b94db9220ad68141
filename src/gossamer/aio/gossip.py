"""Chatter broadcast on real sockets: a TCP listener, one connection per peer, a multicast group.

A thin pump over ``gossamer.proto.gossip.GossipCore`` built from ``gossamer.aio``'s public
pieces (``serve``/``connect`` for TCP, ``open_datagram`` and ``multicast_socket`` for UDP)::

    config = GossipConfig.from_env(os.environ)           # CHATTER_ADDRESS, CHATTER_KEY, ...
    async with GossipNode(config, handlers=[hello]) as node:
        msg = node.broadcast(destinations, ("hello", "world"))
        async for delivered in node.deliveries():        # or each handler's dispatch
            ...

Sockets, as Chatter's (chatter-as-coded.md §8), with the fixes:

- TCP: a listener on ``my_addr:my_port``; one persistent outbound connection per peer,
  opened on first use with ``connect_timeout`` (Chatter had none) and reopened after a
  failure. A connect that fails or times out, or a connection reset, is reported to the
  core (``stream_failed``), which re-plans the chunks it handed to that peer.
- UDP multicast: one socket *bound to the group address* (``multicast_addr:multicast_port``),
  joined on ``my_addr``, sending out of ``my_addr`` with ``multicast_ttl`` and without
  loopback. Bound to the group, it receives only the group's datagrams: a unicast datagram
  to the port never reaches it, so it can never pass for a multicast sighting (Chatter's
  wildcard-bound socket counted them, §8, §12 item 5).
- In original-wire mode each message is written by itself, as Chatter's receiver needs.

Delivered broadcasts go to their handler's ``dispatch``, to ``on_deliver`` and to the queue
read by ``deliveries()``. A ``dispatch`` that raises is counted in ``dispatch_errors`` (the
last one kept in ``last_dispatch_error``): a handler's bug must not take the node down.
No protocol decision is made here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from gossamer._types import Address, Datagram
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.sockets import multicast_socket
from gossamer.aio.stream import StreamDriver, StreamServer, connect, serve
from gossamer.errors import LocalProtocolError
from gossamer.proto.gossip import (
    Delivered,
    GossipConfig,
    GossipCore,
    HandlerRegistry,
    MessageHandler,
    PeerInfo,
    WireMode,
)
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.chatter import NetID

__all__ = ["GossipNode"]


def _now() -> float:
    # The clock every gossamer driver feeds its cores (gossamer.aio._pump.now).
    return time.monotonic()


class _MulticastPort:
    """The multicast socket's side of the node, as the datagram driver's core."""

    def __init__(self, node: GossipNode) -> None:
        self.node = node
        self.outbox: list[Datagram] = []

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        # The socket is bound to the group address: everything here came by multicast.
        self.node.core.receive_datagram(data, addr, now, multicast=True)
        self.node._kick()

    def datagrams_to_send(self) -> list[Datagram]:
        out, self.outbox = self.outbox, []
        return out

    def handle_timer(self, now: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None

    def events_received(self) -> list[object]:
        return []


class _Connection:
    """One TCP connection's side of the node, as the stream driver's core.

    Inbound (``peer`` is None): bytes go to ``receive_stream(conn, ...)``. Outbound: bytes
    (ACKs) go to ``receive_reply(peer, ...)``. ``queue`` holds what the core wants written.
    """

    def __init__(self, node: GossipNode, *, conn: int, peer: NetID | None) -> None:
        self.node = node
        self.conn = conn
        self.peer = peer
        self.queue: deque[bytes] = deque()
        self.close_after = False
        self.driver: StreamDriver[_Connection] | None = None

    @property
    def closing(self) -> bool:
        return self.close_after and not self.queue

    def receive_data(self, data: bytes, now: float) -> None:
        core = self.node.core
        if not data:
            # The peer ended the connection, however it ended (the driver says so once):
            # end ours too, once what is queued is written.
            self.close_after = True
        if self.peer is None:
            core.receive_stream(self.conn, data, now)
            if not data:
                self.node._inbound.pop(self.conn, None)
        else:
            core.receive_reply(self.peer, data, now)
            if not data:
                self.node._outbound_closed(self)
        self.node._kick()

    def data_to_send(self) -> bytes:
        if not self.queue:
            return b""
        if self.node.config.wire is WireMode.ORIGINAL:
            # One message per write (chatter-as-coded.md §13); the rest on the next turn.
            data = self.queue.popleft()
            if self.queue:
                asyncio.get_running_loop().call_soon(self.node._pump_driver, self)
            return data
        data = b"".join(self.queue)
        self.queue.clear()
        return data

    def handle_timer(self, now: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None

    def events_received(self) -> list[object]:
        return []


class GossipNode:
    """One gossip node on real sockets. See the module docstring.

    ``handlers``: the payload types (more with ``register``). ``tracer``: where the core's
    trace events go (default: nowhere). ``rng``: the core's random choices (default: seeded
    from the OS). ``first_seqno``: the first broadcast's seqno; by default wall-clock
    microseconds, so that a restarted node never reuses seqnos its peers have seen
    (``config.first_seqno`` is used when it is not 1).
    """

    def __init__(
        self,
        config: GossipConfig,
        *,
        handlers: Iterable[MessageHandler] = (),
        tracer: Tracer | None = None,
        rng: random.Random | None = None,
        on_deliver: Callable[[Delivered], None] | None = None,
        first_seqno: int | None = None,
    ) -> None:
        if first_seqno is None and config.first_seqno == 1:
            first_seqno = time.time_ns() // 1000
        if first_seqno is not None:
            config = dataclasses.replace(config, first_seqno=first_seqno)
        self.config = config
        self.netid = config.netid
        self.tracer = tracer or Tracer(NullSink(), run="gossip", node=str(self.netid))
        self.core = GossipCore(
            config,
            tracer=self.tracer,
            rng=rng or random.Random(secrets.randbits(64)),
            handlers=HandlerRegistry(handlers),
            epoch=time.time_ns() // 1000,
            randbytes=secrets.token_bytes,
        )
        self.dispatch_errors = 0
        self.last_dispatch_error: BaseException | None = None
        self._on_deliver = on_deliver
        self._deliveries: asyncio.Queue[Delivered | None] = asyncio.Queue()
        self._multicast: DatagramDriver[_MulticastPort] | None = None
        self._port = _MulticastPort(self)
        self._server: StreamServer[_Connection] | None = None
        self._inbound: dict[int, _Connection] = {}
        self._outbound: dict[NetID, _Connection] = {}
        self._connecting: dict[NetID, asyncio.Task[None]] = {}
        self._next_conn = 0
        self._timer: asyncio.TimerHandle | None = None
        self._kicking = False
        self._again = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on TCP and join the multicast group (when ``config.multicast``)."""
        if self._loop is not None:
            raise LocalProtocolError("the node was already started")
        self._loop = asyncio.get_running_loop()
        config = self.config
        self._server = await serve(
            self._accept, config.my_addr, config.my_port, on_connection=self._accepted
        )
        if config.multicast:
            sock = multicast_socket(
                config.multicast_addr,
                config.multicast_port,
                interface=config.my_addr,
                ttl=config.multicast_ttl,
                loopback=False,
                bind_host=config.multicast_addr,
            )
            self._multicast = await open_datagram(self._port, sock)

    async def close(self) -> None:
        """Stop listening, close every connection and the multicast socket."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in self._connecting.values():
            task.cancel()
        for task in list(self._connecting.values()):
            with contextlib.suppress(BaseException):
                await task
        outbound = list(self._outbound.values())
        for link in outbound:
            if link.driver is not None:
                link.driver.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for link in outbound:
            if link.driver is not None:
                with contextlib.suppress(Exception):
                    await link.driver.wait_closed()
        if self._multicast is not None:
            self._multicast.close()
            with contextlib.suppress(Exception):
                await self._multicast.wait_closed()
        self._deliveries.put_nowait(None)

    async def __aenter__(self) -> GossipNode:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the application's side --------------------------------------------------------

    def broadcast(self, destinations: Iterable[NetID | str], payload: object) -> str:
        """Broadcast ``payload`` to ``destinations`` (see ``GossipCore.broadcast``)."""
        self._require_running()
        try:
            return self.core.broadcast(destinations, payload, _now())
        finally:
            self._kick()

    def register(self, handler: MessageHandler) -> None:
        """Register a payload type."""
        self.core.register(handler)

    def peers(self) -> list[PeerInfo]:
        """What the peer database knows now."""
        return self.core.peers(_now())

    async def deliveries(self) -> AsyncIterator[Delivered]:
        """Every delivered broadcast, in order, until the node closes."""
        while True:
            item = await self._deliveries.get()
            if item is None:
                self._deliveries.put_nowait(None)
                return
            yield item

    @property
    def address(self) -> Address:
        """The TCP listening address."""
        if self._server is None:
            raise LocalProtocolError("the node is not started")
        return self._server.address

    # -- the pump --------------------------------------------------------------------------

    def _require_running(self) -> None:
        if self._loop is None:
            raise LocalProtocolError("the node is not started")
        if self._closed:
            raise LocalProtocolError("the node is closed")

    def _kick(self) -> None:
        """Carry out everything the core asked for; re-arm the timer."""
        if self._kicking:
            self._again = True  # a dispatch called broadcast: the outer loop goes round
            return
        self._kicking = True
        try:
            while True:
                self._again = False
                self._flush()
                if not self._again:
                    break
        finally:
            self._kicking = False
        self._arm()

    def _flush(self) -> None:
        core = self.core
        datagrams = core.datagrams_to_send()
        if datagrams and self._multicast is not None and not self._closed:
            self._port.outbox += datagrams
            self._pump(self._multicast)
        touched: dict[int, _Connection] = {}
        for item in core.streams_to_send():
            if item.peer is not None:
                link = self._link(item.peer)
                if link is None:
                    continue
                if item.data:
                    link.queue.append(item.data)
            else:
                assert item.conn is not None
                link = self._inbound.get(item.conn)
                if link is None:
                    continue  # the connection is gone: nothing to answer
                if item.data:
                    link.queue.append(item.data)
                if item.close:
                    link.close_after = True
            touched[id(link)] = link
        for link in touched.values():
            self._pump_driver(link)
        for event in core.events_received():
            self._deliver(event)

    def _deliver(self, event: Delivered) -> None:
        try:
            event.handler.dispatch(event.payload)
            if self._on_deliver is not None:
                self._on_deliver(event)
        except Exception as exc:  # a handler's bug must not stop the node
            self.dispatch_errors += 1
            self.last_dispatch_error = exc
        self._deliveries.put_nowait(event)

    def _pump(self, driver: DatagramDriver[Any] | StreamDriver[Any]) -> None:
        if not driver.closed:
            driver.call(lambda now: None)  # flushes the adapter's queue

    def _pump_driver(self, link: _Connection) -> None:
        if link.driver is not None and not link.driver.closed:
            self._pump(link.driver)
            if link.closing:
                link.driver.close()

    def _arm(self) -> None:
        if self._closed or self._loop is None:
            return
        deadline = self.core.next_deadline()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None:
            delay = deadline - _now()
            # uvloop rounds timers to whole milliseconds and may fire up to half a one
            # early; a millisecond more keeps a future deadline from spinning the loop.
            self._timer = self._loop.call_later(delay + 0.001 if delay > 0 else 0.0, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._closed:
            return
        self.core.handle_timer(_now())
        self._kick()

    # -- connections ---------------------------------------------------------------------

    def _accept(self) -> _Connection:
        self._next_conn += 1
        link = _Connection(self, conn=self._next_conn, peer=None)
        self._inbound[link.conn] = link
        return link

    def _accepted(self, driver: StreamDriver[_Connection]) -> None:
        driver.core.driver = driver

    def _link(self, peer: NetID) -> _Connection | None:
        """The outbound connection to ``peer``, opening it if needed."""
        if self._closed:
            return None
        link = self._outbound.get(peer)
        if link is None:
            self._next_conn += 1
            link = self._outbound[peer] = _Connection(self, conn=self._next_conn, peer=peer)
            assert self._loop is not None
            self._connecting[peer] = self._loop.create_task(self._connect(link))
        return link

    async def _connect(self, link: _Connection) -> None:
        peer = link.peer
        assert peer is not None
        try:
            driver = await connect(link, peer.host, peer.port, timeout=self.config.connect_timeout)
        except (OSError, TimeoutError):
            self._connecting.pop(peer, None)
            self._failed(link)
            return
        self._connecting.pop(peer, None)
        link.driver = driver
        if self._outbound.get(peer) is not link or self._closed:
            driver.close()
            return
        self._pump_driver(link)

    def _failed(self, link: _Connection) -> None:
        peer = link.peer
        assert peer is not None
        if self._outbound.get(peer) is link:
            del self._outbound[peer]
        if self._closed:
            return
        # Whatever was queued for it is lost; the core re-plans those chunks.
        self.core.stream_failed(peer, _now())
        self._kick()

    def _outbound_closed(self, link: _Connection) -> None:
        """The peer closed our connection. What it had not acknowledged is re-planned
        when its ACK times out; a later send opens a new connection."""
        peer = link.peer
        if peer is not None and self._outbound.get(peer) is link:
            del self._outbound[peer]
            if link.queue and not self._closed:
                link.queue.clear()
                self.core.stream_failed(peer, _now())
