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
  core (``stream_failed``), which re-plans the chunks it handed to that peer. The core
  runs as a ``ConnectionsCore`` (``GossipConnections``, the same adapter the simulator
  runs) on the generic connections driver (``gossamer.aio.connections``), whose ``Pump``
  keeps the one timer and delivers the broadcasts.
- UDP multicast: one socket *bound to the group address* (``multicast_addr:multicast_port``),
  joined on ``my_addr``, sending out of ``my_addr`` with ``multicast_ttl`` and without
  loopback. Bound to the group, it receives only the group's datagrams: a unicast datagram
  to the port never reaches it, so it can never pass for a multicast sighting (Chatter's
  wildcard-bound socket counted them, §8, §12 item 5).
- In original-wire mode each message is written by itself (the driver's
  ``coalesce=False``), as Chatter's receiver needs.

A delivered broadcast goes to its handler's ``dispatch`` (Chatter's callback) and to the
queue read by ``receive()`` and ``async for``. A ``dispatch`` that raises is counted in
``dispatch_errors`` (the last one kept in ``last_dispatch_error``): a handler's bug must not
take the node down. No protocol decision is made here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable

from gossamer._types import Address, Datagram
from gossamer.addresses import AddressLike
from gossamer.aio._pump import now as _now
from gossamer.aio.addresses import resolve
from gossamer.aio.connections import ConnectionsDriver, tcp_listener
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.inbox import Inbox
from gossamer.aio.opening import Opening
from gossamer.aio.sockets import multicast_socket
from gossamer.errors import ClosedError, LocalProtocolError, NetworkError
from gossamer.proto.core import Untimed
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
from gossamer.proto.gossip.connections import GossipConnections
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


class _MulticastPort(Untimed):
    """The multicast socket's side of the node, as the datagram driver's core: datagrams
    in go to the gossip core through the connections driver's pump (which keeps the one
    timer and delivers); ``outbox`` is filled by that pump's ``on_flush``."""

    def __init__(self, node: Gossip) -> None:
        self.node = node
        self.outbox: list[Datagram] = []

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        # The socket is bound to the group address: everything here came by multicast.
        node = self.node
        driver = node._driver
        if driver is not None and node._connections is not None:
            driver.pump.feed(node._connections.receive_datagram, data, addr, now)

    def datagrams_to_send(self) -> list[Datagram]:
        out, self.outbox = self.outbox, []
        return out


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
        self._connections: GossipConnections | None = None
        self._driver: ConnectionsDriver[GossipConnections] | None = None
        self._closed = False

    # -- life cycle ------------------------------------------------------------------

    async def _open(self) -> Gossip:
        """Listen on TCP and join the multicast group (when ``config.multicast``); once:
        the ``Opening`` calls it."""
        config = self.config
        host = (await resolve((config.my_addr, config.my_port), ipv6=False))[0]
        listener = tcp_listener(host, config.my_port)
        # Port 0 asked for any free port: the NetID is the port the listener got.
        config = dataclasses.replace(config, my_addr=host, my_port=listener.getsockname()[1])
        self.config = config
        self._core = GossipCore(
            config,
            tracer=self._tracer or Tracer(NullSink(), run="gossip", node=str(config.netid)),
            rng=self._rng or random.Random(secrets.randbits(64)),
            handlers=self._handlers,
            epoch=time.time_ns() // 1000,
            randbytes=secrets.token_bytes,
        )
        self._connections = GossipConnections(self._core, own=(host, config.my_port))
        driver = ConnectionsDriver(
            self._connections,
            on_event=self._deliver,
            event_queue=False,
            on_flush=self._multicast_out,
            connect_timeout=config.connect_timeout,
            ipv6=False,
            # One message per write in original-wire mode (chatter-as-coded.md §13).
            coalesce=config.wire is not WireMode.ORIGINAL,
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
                listener.close()
                await self.close()
                raise NetworkError(
                    f"cannot join {config.multicast_addr}:{config.multicast_port}: {exc.strerror}",
                    group=config.multicast_addr,
                    port=config.multicast_port,
                ) from exc
            self._multicast = await open_datagram(self._port, sock)
        # Started once the group's socket is there for the core's first datagrams.
        await driver.start(sock=listener)
        self._driver = driver
        return self

    async def close(self) -> None:
        """Stop listening, close every connection and the multicast socket. Idempotent;
        what was delivered before stays readable, then ``receive`` raises ``ClosedError``."""
        if self._closed:
            return
        self._closed = True
        if self._driver is not None:
            self._driver.close()
            with contextlib.suppress(Exception):
                await self._driver.wait_closed()
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
        assert self._driver is not None
        core = self.core
        return self._driver.call(lambda now: core.broadcast(destinations, data, now))

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
        if self._driver is None:
            raise LocalProtocolError("the node is not open yet (await open_gossip(...))")
        return self._driver.address

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

    def _multicast_out(self) -> None:
        """The pump's ``on_flush``: what the core multicasts goes to the group's socket."""
        assert self._connections is not None
        datagrams = self._connections.datagrams_to_send()
        multicast = self._multicast
        if datagrams and multicast is not None and not multicast.closed:
            self._port.outbox += datagrams
            multicast.pump()

    def _deliver(self, event: object) -> None:
        """A delivered broadcast: to its handler's ``dispatch``, then to the inbox."""
        assert isinstance(event, Delivered)
        try:
            event.handler.dispatch(event.payload)
        except Exception as exc:  # a handler's bug must not stop the node
            self.dispatch_errors += 1
            self.last_dispatch_error = exc
        self._deliveries.put(event)


def _listed(to: Destination | Iterable[Destination]) -> list[Destination]:
    """``to`` as a list: one destination (a NetID, ``"host:port"``, ``(host, port)``) or
    an iterable of them."""
    if isinstance(to, NetID | str):
        return [to]
    if isinstance(to, tuple) and len(to) == 2 and isinstance(to[1], int):
        return [(str(to[0]), to[1])]
    return list(to)
