"""Chatter broadcast on real sockets: ``open_gossip`` and the ``Gossip`` service.

A TCP listener, one connection per peer and a multicast group, following ``docs/api.md``::

    config = GossipConfig(my_addr="10.0.0.1")             # or GossipConfig.from_env(os.environ)
    async with gossamer.open_gossip(config, wire=Wire(key=group_key)) as gossip:
        msg = await gossip.send(b"hello", to=["10.0.0.2:29999", "10.0.1.7:29999"])
        async for delivered in gossip:                    # .data, .sender, .msg
            ...

``send`` takes ``bytes`` (carried by ``bytes_handler``, registered by default) or any payload
a registered ``MessageHandler`` carries (Chatter's payload types). Destinations are NetIDs,
``(host, port)`` or ``"host:port"``; host names resolve to IPv4, the only family a NetID
carries. Gossip has no notifications besides deliveries, so it has no ``events()``.

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

A delivered broadcast goes to its handler's ``dispatch`` (Chatter's callback) and to the
queue read by ``receive()`` and ``async for``. A ``dispatch`` that raises is counted in
``dispatch_errors`` (the last one kept in ``last_dispatch_error``): a handler's bug must not
take the node down. No protocol decision is made here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import secrets
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

from gossamer._types import Address, Datagram
from gossamer.addresses import AddressLike
from gossamer.aio._pump import now as _now
from gossamer.aio.addresses import resolve
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.inbox import Inbox
from gossamer.aio.opening import Opening
from gossamer.aio.sockets import multicast_socket
from gossamer.aio.stream import StreamDriver, StreamServer, connect, serve
from gossamer.errors import ClosedError, LocalProtocolError, NetworkError
from gossamer.proto.gossip import (
    Delivered,
    GossipConfig,
    GossipCore,
    HandlerRegistry,
    MessageHandler,
    PeerInfo,
    WireMode,
    bytes_handler,
)
from gossamer.proto.gossip.config import DEFAULT_PORT
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.chatter import NetID
from gossamer.wire.mode import Wire

__all__ = ["Delivered", "Destination", "Gossip", "GossipConfig", "open_gossip"]

#: One destination of a broadcast: a NetID, ``(host, port)`` or ``"host:port"``.
Destination = NetID | AddressLike


def open_gossip(
    config: GossipConfig,
    *,
    wire: Wire | None = None,
    handlers: Iterable[MessageHandler] = (),
    tracer: Tracer | None = None,
    rng: random.Random | None = None,
    first_seqno: int | None = None,
) -> Opening[Gossip]:
    """Open a gossip node: ``await`` it, or ``async with`` it (``docs/api.md``).

    ``wire`` (``gossamer.wire.mode.Wire``) sets the configuration's ``wire``, ``key``,
    ``cluster`` and ``key_id``; without it they are the configuration's own (what
    ``GossipConfig.from_env`` read from ``CHATTER_*``). There is no default key.
    ``handlers``: payload types besides ``bytes`` (more with ``register``). ``tracer``:
    where the core's trace events go (default: nowhere). ``rng``: the core's random
    choices (default: seeded from the OS). ``first_seqno``: the first broadcast's seqno;
    by default wall-clock microseconds, so that a restarted node never reuses seqnos its
    peers have seen (``config.first_seqno`` is used when it is not 1).

    Raises ``ConfigError`` for an unusable configuration (no key) and ``NetworkError``
    (its cause the ``OSError``) when a name does not resolve or a socket cannot be bound.
    """
    if wire is not None:
        config = dataclasses.replace(
            config, wire=wire.mode, key=wire.key, cluster=wire.cluster, key_id=wire.key_id
        )
    config.require_key()  # refused now, before any socket exists
    node = Gossip(config, handlers=handlers, tracer=tracer, rng=rng, first_seqno=first_seqno)
    return Opening(node._open)


class _Adapter:
    """A socket's side of the node as a driver's core: the node keeps the one timer and
    hands deliveries out itself, so the adapter has neither."""

    def handle_timer(self, now: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None

    def events_received(self) -> list[object]:
        return []


class _MulticastPort(_Adapter):
    """The multicast socket's side of the node, as the datagram driver's core."""

    def __init__(self, node: Gossip) -> None:
        self.node = node
        self.outbox: list[Datagram] = []

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        # The socket is bound to the group address: everything here came by multicast.
        self.node.core.receive_datagram(data, addr, now, multicast=True)
        self.node._kick()

    def datagrams_to_send(self) -> list[Datagram]:
        out, self.outbox = self.outbox, []
        return out


class _Connection(_Adapter):
    """One TCP connection's side of the node, as the stream driver's core.

    Inbound (``peer`` is None): bytes go to ``receive_stream(conn, ...)``. Outbound: bytes
    (ACKs) go to ``receive_reply(peer, ...)``. ``queue`` holds what the core wants written.
    """

    def __init__(self, node: Gossip, *, conn: int, peer: NetID | None) -> None:
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


class Gossip:
    """One running gossip node (from ``open_gossip``). See the module docstring."""

    def __init__(
        self,
        config: GossipConfig,
        *,
        handlers: Iterable[MessageHandler] = (),
        tracer: Tracer | None = None,
        rng: random.Random | None = None,
        first_seqno: int | None = None,
    ) -> None:
        if first_seqno is None and config.first_seqno == 1:
            first_seqno = time.time_ns() // 1000
        if first_seqno is not None:
            config = dataclasses.replace(config, first_seqno=first_seqno)
        self.config = config
        self._handlers = HandlerRegistry([bytes_handler(), *handlers])
        self._tracer = tracer
        self._rng = rng
        self._core: GossipCore | None = None
        self.dispatch_errors = 0
        self.last_dispatch_error: BaseException | None = None
        self._deliveries: Inbox[Delivered] = Inbox("the gossip node")
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

    async def _open(self) -> Gossip:
        """Listen on TCP and join the multicast group (when ``config.multicast``); once:
        the ``Opening`` calls it."""
        self._loop = asyncio.get_running_loop()
        config = self.config
        host = (await resolve((config.my_addr, config.my_port), ipv6=False))[0]
        try:
            self._server = await serve(
                self._accept, host, config.my_port, on_connection=self._accepted
            )
        except OSError as exc:
            raise NetworkError(
                f"cannot listen on {host}:{config.my_port}: {exc.strerror or exc}",
                address=host,
                port=config.my_port,
            ) from exc
        # Port 0 asked for any free port: the NetID is the port the listener got.
        config = dataclasses.replace(config, my_addr=host, my_port=self._server.address[1])
        self.config = config
        self._core = GossipCore(
            config,
            tracer=self._tracer or Tracer(NullSink(), run="gossip", node=str(config.netid)),
            rng=self._rng or random.Random(secrets.randbits(64)),
            handlers=self._handlers,
            epoch=time.time_ns() // 1000,
            randbytes=secrets.token_bytes,
        )
        if config.multicast:
            try:
                sock = multicast_socket(
                    config.multicast_addr,
                    config.multicast_port,
                    interface=config.my_addr,
                    ttl=config.multicast_ttl,
                    loopback=False,
                    bind_host=config.multicast_addr,
                )
            except OSError as exc:
                await self.close()
                raise NetworkError(
                    f"cannot join {config.multicast_addr}:{config.multicast_port}: {exc.strerror}",
                    group=config.multicast_addr,
                    port=config.multicast_port,
                ) from exc
            self._multicast = await open_datagram(self._port, sock)
        return self

    async def close(self) -> None:
        """Stop listening, close every connection and the multicast socket. Idempotent;
        what was delivered before stays readable, then ``receive`` raises ``ClosedError``."""
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
        self._deliveries.end()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the application's side --------------------------------------------------------

    async def send(self, data: object, *, to: Destination | Iterable[Destination] = ()) -> str:
        """Broadcast ``data`` to the destinations ``to`` (one, or several; none still
        multicasts on the LAN); returns the broadcast's id (``Delivered.msg`` at every
        receiver). ``data`` is ``bytes`` or a payload of a registered handler.

        Raises ``ClosedError`` once closed, ``NetworkError`` for a destination whose name
        does not resolve, ``ConfigError`` for one that is not an address, and
        ``LocalProtocolError`` for a payload no handler carries.
        """
        self._require_running()
        destinations = [await self._netid(item) for item in _listed(to)]
        self._require_running()
        try:
            return self.core.broadcast(destinations, data, _now())
        finally:
            self._kick()

    async def receive(self, timeout: float | None = None) -> Delivered:
        """The next delivered broadcast. Raises ``TimedOutError`` after ``timeout`` seconds
        without one and ``ClosedError`` once closed and drained."""
        return await self._deliveries.get(timeout)

    def __aiter__(self) -> AsyncIterator[Delivered]:
        """``async for delivered in gossip``: every delivery, in order, until it closes."""
        return self._deliveries

    def register(self, handler: MessageHandler) -> None:
        """Register a payload type."""
        self._handlers.add(handler)

    def peers(self) -> list[PeerInfo]:
        """What the peer database knows now."""
        return self.core.peers(_now())

    @property
    def core(self) -> GossipCore:
        """The protocol core (read its ``counters``; do not drive it)."""
        if self._core is None:
            raise LocalProtocolError("the node is not open yet (await open_gossip(...))")
        return self._core

    @property
    def netid(self) -> NetID:
        """This node's NetID: its address and TCP port."""
        return self.core.own

    @property
    def address(self) -> Address:
        """The TCP listening address."""
        if self._server is None:
            raise LocalProtocolError("the node is not open yet (await open_gossip(...))")
        return self._server.address

    @property
    def rejected(self) -> Counter[str]:
        """Input the node refused, by reason (forgeries, replays, malformed messages)."""
        return Counter(self.core.rejected)

    async def _netid(self, item: Destination) -> NetID:
        if isinstance(item, NetID):
            return item
        host, port = await resolve(item, ipv6=False, default_port=DEFAULT_PORT)
        return NetID(host, port)

    # -- the pump --------------------------------------------------------------------------

    def _require_running(self) -> None:
        if self._closed:
            raise ClosedError("the gossip node is closed")
        if self._core is None:
            raise LocalProtocolError("the node is not open yet (await open_gossip(...))")

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
        except Exception as exc:  # a handler's bug must not stop the node
            self.dispatch_errors += 1
            self.last_dispatch_error = exc
        self._deliveries.put(event)

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


def _listed(to: Destination | Iterable[Destination]) -> list[Destination]:
    """``to`` as a list: one destination (a NetID, ``"host:port"``, ``(host, port)``) or
    an iterable of them."""
    if isinstance(to, NetID | str):
        return [to]
    if isinstance(to, tuple) and len(to) == 2 and isinstance(to[1], int):
        return [(str(to[0]), to[1])]
    return list(to)
