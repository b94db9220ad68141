"""Exon/A3M sockets on asyncio: the public API of links and credit flow control.

Small and obvious::

    pull = await gossamer.aio.link.socket("pull", tag="jobs")          # listens on 127.0.0.1
    push = await gossamer.aio.link.socket("push", tag="feeder")
    await push.link(pull.address, "jobs")
    await push.send(b"work")                    # waits for credit (optional timeout)
    data = await pull.receive()                 # bytes (or a Receipt, which come first)
    pull.statistics()

Each socket lives on a :class:`Node` (one address, any number of sockets told apart by
their tags, as in the notes); ``socket()`` without ``node=`` opens a private node for
the socket. A node speaks TCP (default: one connection per pair of nodes, frames
written in batches, one ``write`` per loop iteration) or UDP (the reliable channel:
exactly once under loss). All protocol decisions are in the sans-I/O
:class:`gossamer.proto.link.core.LinkNode`; this module pumps it (DESIGN.md, "The
sans-I/O core contract") through the stream and datagram drivers of ``gossamer.aio``.

Nothing is dropped silently: a send that cannot get credit in time raises
``TimeoutError`` and the message was not sent; a link that goes down makes waiting
calls raise :class:`~gossamer.proto.link.core.LinkError` with the reason; receipts of
messages whose fate is unknown come back with ``taken=False``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from gossamer._types import Address
from gossamer.aio._pump import now
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.sealing import rejected_by, seal_core, stream_seals
from gossamer.aio.sockets import udp_socket
from gossamer.aio.stream import StreamDriver, StreamServer, connect, serve
from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.link import (
    Connect,
    LinkDown,
    LinkError,
    LinkNode,
    LinkSocket,
    LinkUp,
    Message,
    NodeConfig,
    Readable,
    Receipt,
    RequestFailed,
    SocketOptions,
    SocketStatistics,
    StreamEndpoint,
    Transport,
    Writable,
)
from gossamer.proto.link.channel import ChannelConfig
from gossamer.proto.link.machine import LinkState
from gossamer.proto.sealing import SealedStream, StreamSeals
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.mode import Wire

__all__ = [
    "LinkError",
    "Message",
    "Node",
    "Receipt",
    "Socket",
    "SocketStatistics",
    "open_node",
    "socket",
    "tag_id",
]

Tag = int | str


def tag_id(tag: Tag) -> int:
    """The 32-bit wire tag of a socket name: an int as is, a string by CRC-32 of its
    UTF-8 (0 is reserved for the node, so a name hashing to 0 takes 1)."""
    if isinstance(tag, int):
        return tag
    return zlib.crc32(tag.encode()) or 1


def _address(address: tuple[str, int]) -> Address:
    host, port = address
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ConfigError(
            "peer addresses are IPv4 literals (a node names itself by the address it "
            "listens on, so 'localhost' would not match '127.0.0.1')",
            host=host,
        ) from None
    return (host, int(port))


class Node:
    """One link node on real sockets. Make it with :func:`open_node`."""

    def __init__(
        self, transport: Transport, tracer: Tracer | None, trace_data: bool | None, wire: Wire
    ) -> None:
        self.transport = transport
        self.wire = wire
        self._seals: StreamSeals | None = None
        self._tracer = tracer or Tracer(NullSink(), run="-", node="-")
        # Per-message send/deliver traces cost a few microseconds each: on by default
        # only when a real tracer is given.
        self._trace_data = tracer is not None if trace_data is None else trace_data
        self._core: LinkNode | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: StreamServer[Any] | None = None
        self._datagram: DatagramDriver[Any] | None = None
        self._drivers: dict[StreamEndpoint, StreamDriver[Any]] = {}
        self._dialing: set[Address] = set()
        self._dial_tasks: set[asyncio.Task[None]] = set()
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._sockets: dict[int, Socket] = {}
        self._link_waiters: dict[tuple[int, Address, int], list[asyncio.Future[object]]] = {}
        self._closed = False
        self._time: Callable[[], float] = _no_time

    # -- setup ------------------------------------------------------------------------

    async def _start(
        self,
        host: str,
        port: int,
        *,
        channel: ChannelConfig | None,
        max_message: int | None,
        seed: int | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._time = now  # the drivers' clock, as every trace stamp (not uvloop's cached ms)
        rng = random.Random(seed)

        def make_core(address: Address) -> LinkNode:
            config = NodeConfig(
                address=address,
                node_id=self._tracer.node if self._tracer.node != "-" else None,
                transport=self.transport,
                channel=channel or ChannelConfig(),
                max_message=max_message,
                trace_data=self._trace_data,
            )
            return LinkNode(config, tracer=self._tracer, rng=rng)

        if self.transport is Transport.TCP:
            server = await serve(
                self._accepted_core,
                host,
                port,
                on_connection=self._on_connection,
                on_event=lambda _driver, event: self._on_event(event),
            )
            self._server = server
            self._core = make_core(server.address)
            self._core.wakeup = self._schedule_flush
            self._seals = stream_seals(
                self.wire, me=_name(server.address), tracer=self._tracer, layer="link"
            )
        else:
            sock = udp_socket(host, port)
            name = sock.getsockname()
            core = make_core((str(name[0]), int(name[1])))
            self._core = core
            sealed = seal_core(
                core, self.wire, sender=_name(core.address), tracer=self._tracer, layer="link"
            )
            self._datagram = await open_datagram(sealed, sock, on_event=self._on_event)

    @property
    def address(self) -> Address:
        """Where peers link to this node's sockets."""
        return self.core.address

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams or stream records the envelope refused, by reason (a refused record
        also ends its connection); always empty on the original wire."""
        if self._seals is not None:
            return Counter(self._seals.rejected)
        return rejected_by(None if self._datagram is None else self._datagram.core)

    @property
    def core(self) -> LinkNode:
        if self._core is None:
            raise LocalProtocolError("the node is not started")
        return self._core

    def socket(self, kind: str, *, tag: Tag, **options: Any) -> Socket:
        """A socket of ``kind`` (``push``, ``pull``, ``req``, ``rep``, ``dealer``,
        ``router``, ``pub``, ``sub``, ``pair``) with ``tag`` on this node; ``options``
        are :class:`~gossamer.proto.link.core.SocketOptions` fields (``capacity``,
        ``batch``, ``max_links``, ``receipts``, ...)."""
        if self._closed:
            raise LocalProtocolError("the node is closed")
        core = self.core.open_socket(kind, tag_id(tag), SocketOptions(**options))
        sock = Socket(self, core)
        self._sockets[core.tag] = sock
        return sock

    async def close(self, *, timeout: float = 1.0) -> None:
        """Close every socket (unlinking gracefully for up to ``timeout`` seconds),
        then the node's transports."""
        if self._closed:
            return
        for sock in list(self._sockets.values()):
            await sock.close(timeout=timeout)
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._dial_tasks):
            task.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for driver in list(self._drivers.values()):
            driver.close()
        if self._datagram is not None:
            self._datagram.close()
            await self._datagram.wait_closed()

    async def __aenter__(self) -> Node:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- pumping -------------------------------------------------------------------------

    def _now(self) -> float:
        # The drivers' clock (time.monotonic), not loop.time(): uvloop rounds the latter to
        # whole milliseconds, which would stamp a send before the link_up the datagram
        # driver traced with the precise clock.
        return now()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Once per loop iteration (or at once when the core says output is urgent):
        the core's batched output goes out, events are dispatched and the node's timer
        is re-armed."""
        self._flush_scheduled = False
        core = self._core
        if core is None or self._closed:
            return
        core.urgent = False
        if self._datagram is not None:
            if not self._datagram.closed:
                self._datagram.call(core.flush)  # pumps datagrams, events and its timer
            return
        for event in core.events_received():
            self._on_event(event)
        for endpoint in core.dirty_endpoints():
            driver = self._drivers.get(endpoint)
            if driver is not None and not driver.closed:
                # A driver closed under us raises: the core learns it from connection_lost.
                with contextlib.suppress(LocalProtocolError):
                    driver.call(_nothing)
        for endpoint, driver in list(self._drivers.items()):
            if driver.closed:
                del self._drivers[endpoint]
            elif endpoint.closing:
                driver.close()
        self._arm()

    def _arm(self) -> None:
        deadline = self.core.next_deadline()
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None and self._loop is not None:
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.core.handle_timer(self._now())
        self._flush()

    # -- TCP connections ---------------------------------------------------------------

    def _accepted_core(self) -> StreamEndpoint | SealedStream[StreamEndpoint]:
        return self._sealed(self.core.stream_endpoint(None), None)

    def _sealed(
        self, endpoint: StreamEndpoint, peer: Address | None
    ) -> StreamEndpoint | SealedStream[StreamEndpoint]:
        """The connection's stream core: ``endpoint``, behind the envelope when sealed."""
        if self._seals is None:
            return endpoint
        return SealedStream(endpoint, self._seals, None if peer is None else _name(peer))

    def _on_connection(self, driver: StreamDriver[Any]) -> None:
        core = driver.core
        self._drivers[core.inner if isinstance(core, SealedStream) else core] = driver

    def _dial(self, peer: Address) -> None:
        if peer in self._dialing or self._closed:
            return
        self._dialing.add(peer)
        task = asyncio.get_running_loop().create_task(self._dial_task(peer))
        self._dial_tasks.add(task)
        task.add_done_callback(self._dial_tasks.discard)

    async def _dial_task(self, peer: Address) -> None:
        endpoint: StreamEndpoint | None = None
        try:
            endpoint = self.core.stream_endpoint(peer)
            driver = await connect(self._sealed(endpoint, peer), peer[0], peer[1],
                                   on_event=self._on_event, event_queue=False)
            self._drivers[endpoint] = driver
        except (OSError, TimeoutError) as exc:
            if endpoint is not None:
                endpoint.abort(f"connect_failed:{type(exc).__name__}", self._now())
        finally:
            self._dialing.discard(peer)
        self._flush()

    # -- events --------------------------------------------------------------------------

    def _on_event(self, event: object) -> None:
        if isinstance(event, Readable | RequestFailed):
            sock = self._sockets.get(event.tag)
            if sock is not None:
                sock._readable.set()
        elif isinstance(event, Writable):
            sock = self._sockets.get(event.tag)
            if sock is not None:
                sock._writable.set()
        elif isinstance(event, LinkUp | LinkDown):
            for waiter in self._link_waiters.pop((event.tag, event.peer, event.peer_tag), []):
                if not waiter.done():
                    waiter.set_result(event)
            sock = self._sockets.get(event.tag)
            if sock is not None:
                sock._writable.set()
                sock._linked.set()
                if isinstance(event, LinkDown):
                    sock._readable.set()
        elif isinstance(event, Connect):
            self._dial(event.peer)

    def _link_waiter(self, tag: int, peer: Address, peer_tag: int) -> asyncio.Future[object]:
        assert self._loop is not None
        waiter: asyncio.Future[object] = self._loop.create_future()
        self._link_waiters.setdefault((tag, peer, peer_tag), []).append(waiter)
        return waiter


def _nothing(now: float) -> None:
    return None


def _name(address: Address) -> str:
    return f"{address[0]}:{address[1]}"


def _no_time() -> float:
    raise LocalProtocolError("the node is not started")


class Socket:
    """A socket: link, send, receive. Made by :func:`socket` or :meth:`Node.socket`."""

    def __init__(self, node: Node, core: LinkSocket) -> None:
        self.node = node
        self.core = core
        self.tag = core.tag
        self.kind = core.pattern.name
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._linked = asyncio.Event()
        self._owns_node = False
        self._closed = False

    @property
    def address(self) -> Address:
        """The address of the socket's node (link to ``(address, tag)``)."""
        return self.node.address

    # -- links ---------------------------------------------------------------------------

    async def link(
        self, address: tuple[str, int], tag: Tag, *, timeout: float | None = None
    ) -> None:
        """Link with the socket ``tag`` at ``address``; returns once established.

        Raises ``LinkError`` with the reason when refused (``refused:incompatible``),
        after the retry limit (``gave_up:...``) or when the transport failed, and
        ``TimeoutError`` after ``timeout`` seconds (the link request goes on).
        """
        node = self.node
        peer, peer_tag = _address(address), tag_id(tag)
        waiter = node._link_waiter(self.tag, peer, peer_tag)
        self.core.link(peer, peer_tag, node._now())
        node._flush()
        if self.core.link_state(peer, peer_tag) is LinkState.ESTABLISHED:
            waiter.cancel()
            return
        async with asyncio.timeout(timeout):
            result = await waiter
        if isinstance(result, LinkDown):
            raise LinkError(f"link with {peer}/{peer_tag} failed: {result.reason}",
                            cause=result.reason)

    async def unlink(
        self, address: tuple[str, int], tag: Tag, *, timeout: float | None = None
    ) -> None:
        """Unlink; returns once every message sent either way was delivered and the
        link closed (or the cancelled link request ended)."""
        node = self.node
        peer, peer_tag = _address(address), tag_id(tag)
        waiter = node._link_waiter(self.tag, peer, peer_tag)
        self.core.unlink(peer, peer_tag, node._now())
        node._flush()
        if self.core.link_state(peer, peer_tag) is LinkState.IDLE:
            waiter.cancel()
            return
        async with asyncio.timeout(timeout):
            while True:
                result = await waiter
                if isinstance(result, LinkDown):
                    return
                waiter = node._link_waiter(self.tag, peer, peer_tag)  # up, then down

    async def wait_links(self, count: int = 1, *, timeout: float | None = None) -> None:
        """Wait until at least ``count`` links are established (e.g. a PULL waiting for
        its PUSHes, a PUB for its subscribers)."""
        async with asyncio.timeout(timeout):
            while self.core.established < count:
                self._linked.clear()
                await self._linked.wait()

    # -- sending -------------------------------------------------------------------------

    async def send(
        self,
        data: bytes,
        *,
        timeout: float | None = None,
        cookie: Any = None,
        to: int | None = None,
        envelope: tuple[int, ...] = (),
    ) -> None:
        """Send one message, waiting for credit (and for a link) as long as needed, or
        up to ``timeout`` seconds (then ``TimeoutError``: the message was not sent).

        ``cookie`` comes back as a :class:`Receipt` from :meth:`receive` once the peer
        application took the message (needs the ``receipts=True`` option). ROUTER:
        ``to`` is the routing id from :meth:`receive_message`.
        """
        core = self.core
        node = self.node
        if cookie is None and to is None and not envelope:
            sent = core.send(data, node._time())
        else:
            sent = core.send(data, node._time(), cookie=cookie, to=to, envelope=envelope)
        if node._core.urgent:  # type: ignore[union-attr]
            node._flush()
        elif not node._flush_scheduled:
            node._schedule_flush()  # also when blocked: a FLOW may wait behind our output
        if sent:
            return
        async with asyncio.timeout(timeout):
            while True:
                self._writable.clear()
                await self._writable.wait()
                if core.send(data, node._now(), cookie=cookie, to=to, envelope=envelope):
                    node._schedule_flush()
                    return

    def try_send(
        self,
        data: bytes,
        *,
        cookie: Any = None,
        to: int | None = None,
        envelope: tuple[int, ...] = (),
    ) -> bool:
        """Send without waiting: ``False`` (nothing sent) when no link has credit."""
        sent = self.core.send(data, self.node._now(), cookie=cookie, to=to, envelope=envelope)
        if sent:
            self.node._schedule_flush()
        return sent

    # -- receiving -----------------------------------------------------------------------

    async def receive(self, *, timeout: float | None = None) -> bytes | Receipt:
        """The next receipt (receipts come first) or message body, waiting up to
        ``timeout`` seconds (``TimeoutError``)."""
        node = self.node
        item = self.core.take(node._time())
        if item is not None:  # the fast path, without a second coroutine
            if node._core.urgent:  # type: ignore[union-attr]
                node._flush()  # taking released credits: the sender waits for them
            elif not node._flush_scheduled:
                node._schedule_flush()
            return item
        waited: bytes | Receipt = await self._receive(self.core.take, timeout)
        return waited

    async def receive_message(self, *, timeout: float | None = None) -> Message | Receipt:
        """Like :meth:`receive`, with the sender, the envelope and (ROUTER) the routing id."""
        item: Message | Receipt = await self._receive(self.core.take_message, timeout)
        return item

    async def _receive(self, take: Callable[[float], Any], timeout: float | None) -> Any:
        node = self.node
        item = take(node._time())
        if item is not None:
            if node._core.urgent:  # type: ignore[union-attr]
                node._flush()  # taking released credits: the sender waits for them
            elif not node._flush_scheduled:
                node._schedule_flush()
            return item
        async with asyncio.timeout(timeout):
            while True:
                failed = self.core.request_failed
                if failed is not None:
                    self.core.abandon_request()
                    raise LinkError(f"the request's link went down: {failed}", cause=failed)
                self._readable.clear()
                await self._readable.wait()
                item = take(node._now())
                if item is not None:
                    node._schedule_flush()
                    return item

    def try_receive(self) -> bytes | Receipt | None:
        item = self.core.take(self.node._now())
        if item is not None:
            self.node._schedule_flush()
        return item

    # -- options and state --------------------------------------------------------------

    def subscribe(self, prefix: bytes = b"") -> None:
        """SUB: receive messages starting with ``prefix``."""
        self.core.subscribe(prefix, self.node._now())
        self.node._schedule_flush()

    def unsubscribe(self, prefix: bytes = b"") -> None:
        self.core.unsubscribe(prefix, self.node._now())
        self.node._schedule_flush()

    def set_capacity(self, capacity: int) -> None:
        self.core.set_capacity(capacity, self.node._now())
        self.node._schedule_flush()

    def adjust_capacity(self, delta: int) -> None:
        self.core.adjust_capacity(delta, self.node._now())
        self.node._schedule_flush()

    def set_batch(self, fraction: float) -> None:
        self.core.set_batch(fraction, self.node._now())
        self.node._schedule_flush()

    def abandon_request(self) -> None:
        """REQ: stop waiting for the pending reply (after a receive timeout)."""
        self.core.abandon_request()

    def statistics(self) -> SocketStatistics:
        return self.core.statistics()

    async def close(self, *, timeout: float = 1.0) -> None:
        """Unlink every link gracefully (up to ``timeout`` seconds), then remove the
        socket; closes the socket's private node if it has one."""
        if self._closed:
            return
        self._closed = True
        node = self.node
        core = self.core
        if not core.closing:
            core.close(node._now())
            node._flush()
        try:
            async with asyncio.timeout(timeout):
                while not core.closed:
                    self._linked.clear()
                    await self._linked.wait()
        except TimeoutError:
            pass
        if node._core is not None:
            node._core.remove_socket(self.tag, node._now())
            node._flush()
        node._sockets.pop(self.tag, None)
        if self._owns_node:
            await node.close()

    async def __aenter__(self) -> Socket:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def open_node(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    transport: str = "tcp",
    tracer: Tracer | None = None,
    trace_data: bool | None = None,
    channel: ChannelConfig | None = None,
    max_message: int | None = None,
    seed: int | None = None,
    wire: Wire,
) -> Node:
    """Open a node listening on ``host:port`` (port 0: any free port).

    ``transport`` is ``tcp`` or ``udp``. ``host`` must be the address peers reach the
    node at (not a wildcard): the node names itself by it. ``tracer`` records
    ``layer=link`` events (per-message ``send``/``deliver`` too unless
    ``trace_data=False``); ``seed`` fixes the node's randomness (clocks, back-off).
    ``wire`` is required: the default, sealed, wire needs the group key (every frame
    inside the envelope; over TCP as sealed records, see ``gossamer.proto.sealing``).
    """
    try:
        kind = Transport(transport)
    except ValueError:
        raise ConfigError("transport must be 'tcp' or 'udp'", transport=transport) from None
    if kind is Transport.SIM_STREAM:
        raise ConfigError("sim-stream is the simulator's transport")
    _address((host, port))
    node = Node(kind, tracer, trace_data, wire)
    await node._start(host, port, channel=channel, max_message=max_message, seed=seed)
    return node


async def socket(
    kind: str,
    *,
    tag: Tag,
    node: Node | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    transport: str = "tcp",
    tracer: Tracer | None = None,
    wire: Wire | None = None,
    **options: Any,
) -> Socket:
    """A socket of ``kind`` with ``tag``: on ``node``, or on a private node opened on
    ``host:port`` with ``transport`` and ``wire`` (required then; closed with the
    socket). ``options`` as in :meth:`Node.socket`."""
    if node is None:
        if wire is None:
            raise ConfigError(
                "give wire=Wire(key=...): links are sealed by default and there is no "
                "default key"
            )
        node = await open_node(host, port, transport=transport, tracer=tracer, wire=wire)
        try:
            sock = node.socket(kind, tag=tag, **options)
        except BaseException:
            await node.close()
            raise
        sock._owns_node = True
        return sock
    return node.socket(kind, tag=tag, **options)
