"""Exon/A3M sockets on asyncio: the public API of links and credit flow control.

Opened as every gossamer service is (``docs/api.md``)::

    wire = Wire(key=key)
    async with gossamer.open_socket("pull", tag="jobs", wire=wire) as pull, \\
               gossamer.open_socket("push", tag="feeder", wire=wire) as push:
        await push.link(pull.address, "jobs")     # "host:port", ("localhost", 7001), "[::1]:7001"
        await push.send(b"work")                  # waits for credit (optional timeout)
        message = await pull.receive()            # a Message: .data, .sender, ...
        async for message in pull: ...            # until the socket closes

Each socket lives on a :class:`Node` (one address, any number of sockets told apart by
their tags, as in the notes); ``open_socket()`` without ``node=`` opens a private node
for the socket. A node speaks TCP (default: one connection per pair of nodes, frames
written in batches, one ``write`` per loop iteration) or UDP (the reliable channel:
exactly once under loss). All protocol decisions are in the sans-I/O
:class:`gossamer.proto.link.LinkNode`; this module pumps it through the one driver
runtime, ``gossamer.aio._pump.Pump`` (timer at the core's deadline, flush after every
input, ``time.monotonic()``): over TCP a ``Pump`` with hooks drives the node's core and
one stream driver per connection carries its bytes; over UDP the datagram driver does.

Nothing is dropped silently: a send that cannot get credit in time raises
``TimedOutError`` and the message was not sent; a link that goes down makes waiting
calls raise :class:`gossamer.errors.LinkError` with the reason; a ROUTER send to an
unknown routing id raises ``NoRouteError``; receipts of messages whose fate is unknown
come back with ``taken=False``.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from gossamer._types import Address, Datagram
from gossamer.addresses import AddressLike, format_address, parse_address
from gossamer.aio._pump import Pump, deadline, now
from gossamer.aio.addresses import resolve
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.opening import Opening
from gossamer.aio.sealing import rejected_by, seal_core, stream_seals
from gossamer.aio.sockets import udp_socket
from gossamer.aio.stream import StreamDriver, StreamServer, connect, serve
from gossamer.errors import (
    ClosedError,
    ConfigError,
    DecodeError,
    LinkError,
    LocalProtocolError,
    NetworkError,
    NoRouteError,
)
from gossamer.proto.link import (
    Connect,
    LinkConfig,
    LinkDown,
    LinkNode,
    LinkSocket,
    LinkUp,
    Message,
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
from gossamer.proto.link.exon_transport import default_node_id
from gossamer.proto.link.machine import LinkState
from gossamer.proto.sealing import SealedStream, StreamSeals
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.a3m import TagBook
from gossamer.wire.mode import Wire

__all__ = [
    "Message",
    "Node",
    "Receipt",
    "Socket",
    "SocketStatistics",
    "open_node",
    "open_socket",
    "tag_id",
]

Tag = int | str


def tag_id(tag: Tag) -> int:
    """The 32-bit wire tag of a socket name: an int as is, a string by CRC-32 of its
    UTF-8 (0 is reserved for the node, so a name hashing to 0 takes 1)."""
    if isinstance(tag, int):
        return tag
    return TagBook.number(tag)


class _FlushingDatagrams:
    """The UDP node's datagram core: the (sealed) link core, whose channels are flushed
    before every pump takes its datagrams, so that a local request's output leaves on
    the same pump (the link core batches it until ``flush``)."""

    def __init__(self, inner: Any, link: LinkNode) -> None:
        self.inner = inner
        self.link = link

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.inner.receive_datagram(data, addr, now)

    def datagrams_to_send(self) -> list[Datagram]:
        link = self.link
        link.urgent = False
        link.flush(now())
        out: list[Datagram] = self.inner.datagrams_to_send()
        return out

    def handle_timer(self, now: float) -> None:
        self.inner.handle_timer(now)

    def next_deadline(self) -> float | None:
        due: float | None = self.inner.next_deadline()
        return due

    def events_received(self) -> list[object]:
        out: list[object] = self.inner.events_received()
        return out


class Node:
    """One link node on real sockets. Open it with :func:`open_node`."""

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
        self._pump: Pump[Any] | None = None
        self._server: StreamServer[Any] | None = None
        self._datagram: DatagramDriver[Any] | None = None
        self._sealed_datagrams: object = None
        self._drivers: dict[StreamEndpoint, StreamDriver[Any]] = {}
        self._dialing: set[Address] = set()
        self._dial_tasks: set[asyncio.Task[None]] = set()
        self._sockets: dict[int, Socket] = {}
        self._link_waiters: dict[tuple[int, Address, int], list[asyncio.Future[object]]] = {}
        self._closed = False

    # -- setup ------------------------------------------------------------------------

    async def _start(
        self,
        host: str,
        port: int,
        *,
        channel: ChannelConfig | None,
        max_message: int | None,
        seed: int | None,
        node_id: str | None = None,
    ) -> None:
        rng = random.Random(seed)

        def make_core(address: Address) -> LinkNode:
            name = self._tracer.node if self._tracer.node != "-" else None
            if self.transport is Transport.EXON:
                name = node_id or name or default_node_id(address)
            config = LinkConfig(
                address=address,
                node_id=name,
                transport=self.transport,
                channel=channel or ChannelConfig(),
                max_message=max_message,
                trace_data=self._trace_data,
                wire=self.wire.mode,
            )
            return LinkNode(config, tracer=self._tracer, rng=rng)

        try:
            if self.transport is Transport.TCP:
                server = await serve(
                    self._accepted_core,
                    host,
                    port,
                    on_connection=self._on_connection,
                    on_event=lambda _driver, event: self._on_event(event),
                )
            else:
                sock = udp_socket(host, port)
        except OSError as exc:
            if isinstance(exc, NetworkError):
                raise
            raise NetworkError(f"cannot listen on {format_address((host, port))}: {exc.strerror}",
                               host=host, port=port) from exc
        if self.transport is Transport.TCP:
            self._server = server
            core = self._core = make_core(server.address)
            self._seals = stream_seals(
                self.wire, me=_name(server.address), tracer=self._tracer, layer="link"
            )
            pump: Pump[Any] = Pump(
                core, on_event=self._on_event, event_queue=False, flush_output=self._flush_streams
            )
            pump.start()
            core.wakeup = pump.flush_soon
            self._pump = pump
        else:
            name = sock.getsockname()
            core = self._core = make_core((str(name[0]), int(name[1])))
            sealed = seal_core(
                core, self.wire, sender=_name(core.address), tracer=self._tracer, layer="link"
            )
            self._sealed_datagrams = sealed
            self._datagram = await open_datagram(
                _FlushingDatagrams(sealed, core), sock, on_event=self._on_event
            )
            self._pump = self._datagram

    @property
    def address(self) -> Address:
        """Where peers link to this node's sockets."""
        return self.core.address

    def register(self, node_id: str, address: AddressLike) -> None:
        """Exon: the node named ``node_id`` (a Java A3M node's id) is at ``address``."""
        exon = self.core.exon
        if exon is None:
            raise ConfigError("node ids name Exon nodes: open the node with transport='exon'")
        exon.register(node_id, parse_address(address))

    def _tag(self, tag: Tag) -> int:
        """The number of a socket tag; on the original wire a string tag is also the
        name A3M peers know the socket by (an int tag: its decimal digits)."""
        frames = self.core.a3m
        if frames is None or isinstance(tag, int):
            return tag_id(tag)
        try:
            return frames.tags.tag(tag)
        except DecodeError as exc:
            raise ConfigError(f"socket tag {tag!r}: {exc.reason}") from None

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams or stream records the envelope refused, by reason (a refused record
        also ends its connection); always empty on the original wire."""
        if self._seals is not None:
            return Counter(self._seals.rejected)
        return rejected_by(self._sealed_datagrams)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def core(self) -> LinkNode:
        if self._core is None:
            raise LocalProtocolError("the node is not started")
        return self._core

    def socket(self, kind: str, *, tag: Tag, **options: Any) -> Socket:
        """A socket of ``kind`` (``push``, ``pull``, ``req``, ``rep``, ``dealer``,
        ``router``, ``pub``, ``sub``, ``pair``) with ``tag`` on this node; ``options``
        are :class:`~gossamer.proto.link.SocketOptions` fields (``capacity``,
        ``batch``, ``max_links``, ``receipts``, ...)."""
        if self._closed:
            raise ClosedError("the node is closed")
        try:
            socket_options = SocketOptions(**options)
        except TypeError as exc:
            raise ConfigError(f"unknown socket option: {exc}") from exc
        core = self.core.open_socket(kind, self._tag(tag), socket_options)
        sock = Socket(self, core)
        self._sockets[core.tag] = sock
        return sock

    async def close(self, *, timeout: float = 1.0) -> None:
        """Close every socket (unlinking gracefully for up to ``timeout`` seconds),
        then the node's transports. Idempotent."""
        if self._closed:
            return
        for sock in list(self._sockets.values()):
            await sock.close(timeout=timeout)
        self._closed = True
        for task in list(self._dial_tasks):
            task.cancel()
        if self._pump is not None:
            self._pump.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for driver in list(self._drivers.values()):
            driver.close()
        if self._datagram is not None:
            await self._datagram.wait_closed()

    # -- pumping -------------------------------------------------------------------------

    def _flush(self) -> None:
        """Now: the core's output goes out, events are dispatched, the timer re-armed."""
        if self._pump is not None:
            self._pump.pump()

    def _flush_soon(self) -> None:
        """Once per loop iteration, or at once when the core says output is urgent
        (credits or a request someone waits for)."""
        pump = self._pump
        if pump is None:
            return
        if self.core.urgent:
            pump.pump()
        else:
            pump.flush_soon()

    def _flush_streams(self) -> None:
        """TCP: each connection's batched bytes to its driver; closing ones closed."""
        core = self.core
        core.urgent = False
        drivers = self._drivers
        for endpoint in core.dirty_endpoints():
            driver = drivers.get(endpoint)
            if driver is not None and not driver.closed:
                driver.pump()  # its stream core reads the endpoint's bytes
        for endpoint, driver in list(drivers.items()):
            if driver.closed:
                del drivers[endpoint]
            elif endpoint.closing:
                driver.close()

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
                endpoint.abort(f"connect_failed:{type(exc).__name__}", now())
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
        waiter: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._link_waiters.setdefault((tag, peer, peer_tag), []).append(waiter)
        return waiter


def _name(address: Address) -> str:
    return f"{address[0]}:{address[1]}"


class Socket:
    """A socket: link, send, receive, close. Opened by :func:`open_socket` (or
    :meth:`Node.socket`)."""

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
        # The hot paths' shortcuts: the node's core (``urgent``) and its pump.
        self._link_node = node.core
        assert node._pump is not None
        self._pump: Pump[Any] = node._pump

    @property
    def address(self) -> Address:
        """The address of the socket's node (link to ``(address, tag)``)."""
        return self.node.address

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def rejected(self) -> Counter[str]:
        """What the node's envelope refused, by reason (see :attr:`Node.rejected`)."""
        return self.node.rejected

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the socket is closed", tag=self.tag)

    # -- links ---------------------------------------------------------------------------

    async def link(self, address: AddressLike, tag: Tag, *, timeout: float | None = None) -> None:
        """Link with the socket ``tag`` at ``address`` (``(host, port)`` or
        ``"host:port"``; names and ``localhost`` resolve, ``"[::1]:port"`` is IPv6);
        returns once established.

        Raises ``LinkError`` with the reason when refused (``refused:incompatible``),
        after the retry limit (``gave_up:...``) or when the transport failed, and
        ``TimedOutError`` after ``timeout`` seconds (the link request goes on).
        """
        peer, peer_tag, waiter = await self._request(address, tag, self.core.link,
                                                     LinkState.ESTABLISHED)
        if waiter is None:
            return
        async with deadline(timeout, f"the link with {format_address(peer)}"):
            result = await waiter
        if isinstance(result, LinkDown):
            raise LinkError(f"link with {format_address(peer)}/{peer_tag} failed: "
                            f"{result.reason}", cause=result.reason)

    async def unlink(
        self, address: AddressLike, tag: Tag, *, timeout: float | None = None
    ) -> None:
        """Unlink; returns once every message sent either way was delivered and the
        link closed (or the cancelled link request ended)."""
        peer, peer_tag, waiter = await self._request(address, tag, self.core.unlink,
                                                     LinkState.IDLE)
        async with deadline(timeout, f"the unlink from {format_address(peer)}"):
            while waiter is not None:
                result = await waiter
                if isinstance(result, LinkDown):
                    return
                waiter = self.node._link_waiter(self.tag, peer, peer_tag)  # up, then down

    async def _request(
        self,
        address: AddressLike,
        tag: Tag,
        request: Callable[[Address, int, float], None],
        done: LinkState,
    ) -> tuple[Address, int, asyncio.Future[object] | None]:
        """Ask the core to link or unlink; the waiter for the link's next up or down,
        or ``None`` when the link is already in the ``done`` state."""
        self._check_open()
        node = self.node
        peer, peer_tag = await resolve(address, stream=True), node._tag(tag)
        waiter = node._link_waiter(self.tag, peer, peer_tag)
        request(peer, peer_tag, now())
        node._flush()
        if self.core.link_state(peer, peer_tag) is done:
            waiter.cancel()
            return peer, peer_tag, None
        return peer, peer_tag, waiter

    async def wait_links(self, count: int = 1, *, timeout: float | None = None) -> None:
        """Wait until at least ``count`` links are established (e.g. a PULL waiting for
        its PUSHes, a PUB for its subscribers)."""
        async with deadline(timeout, f"waiting for {count} link(s)"):
            while self.core.established < count:
                self._check_open()
                self._linked.clear()
                await self._linked.wait()

    # -- sending -------------------------------------------------------------------------

    async def send(
        self,
        data: bytes,
        *,
        to: int | None = None,
        timeout: float | None = None,
        cookie: Any = None,
        envelope: tuple[int, ...] = (),
    ) -> None:
        """Send one message, waiting for credit (and for a link) as long as needed, or
        up to ``timeout`` seconds (then ``TimedOutError``: the message was not sent).

        ROUTER: ``to`` is the routing id of a received :class:`Message` (``NoRouteError``
        when no established link has it). ``cookie`` comes back as a :class:`Receipt`
        from :meth:`receive` once the peer application took the message (needs the
        ``receipts=True`` option). ``ClosedError`` once the socket is closed.
        """
        if self._closed:
            self._check_open()
        if self._send(data, to, cookie, envelope):
            return
        async with deadline(timeout, "the send (no credit)"):
            while True:
                self._writable.clear()
                await self._writable.wait()
                self._check_open()
                if self._send(data, to, cookie, envelope):
                    return

    def _send(self, data: bytes, to: int | None, cookie: Any, envelope: tuple[int, ...]) -> bool:
        try:
            if cookie is None and to is None and not envelope:
                sent = self.core.send(data, now())
            else:
                sent = self.core.send(data, now(), cookie=cookie, to=to, envelope=envelope)
        except LinkError as exc:
            if exc.cause == "no_route":  # a ROUTER's routing id: nothing matches it
                raise NoRouteError(exc.reason, routing_id=to) from exc
            raise
        # Also when blocked: a FLOW may wait behind our output.
        if self._link_node.urgent:
            self._pump.pump()
        else:
            self._pump.flush_soon()
        return sent

    def try_send(
        self,
        data: bytes,
        *,
        to: int | None = None,
        cookie: Any = None,
        envelope: tuple[int, ...] = (),
    ) -> bool:
        """Send without waiting: ``False`` (nothing sent) when no link has credit."""
        self._check_open()
        return self._send(data, to, cookie, envelope)

    # -- receiving -----------------------------------------------------------------------

    async def receive(self, *, timeout: float | None = None) -> Message | Receipt:
        """The next message (``.data``; ``.sender`` and ``.peer_tag``: who sent it; the envelope
        and, ROUTER, the ``routing_id``), or a :class:`Receipt` (only with ``receipts=True``;
        receipts come first), waiting up to ``timeout`` seconds (``TimedOutError``).

        After :meth:`close` it returns what had already arrived, then raises
        ``ClosedError``. A REQ whose request's link went down raises ``LinkError``.
        """
        if not self._closed:  # the fast path, without a second coroutine
            item = self.core.take_message(now())
            if item is not None:
                # Taking released credits: the sender waits for them when urgent.
                if self._link_node.urgent:
                    self._pump.pump()
                else:
                    self._pump.flush_soon()
                return item
        else:
            item = self.try_receive()  # what had arrived, then ClosedError
            if item is not None:
                return item
        async with deadline(timeout, "the receive"):
            while True:
                failed = self.core.request_failed
                if failed is not None:
                    self.core.abandon_request()
                    raise LinkError(f"the request's link went down: {failed}", cause=failed)
                self._readable.clear()
                await self._readable.wait()
                item = self.try_receive()
                if item is not None:
                    return item

    def try_receive(self) -> Message | Receipt | None:
        """The next message or receipt if one is there, else ``None`` (``ClosedError``
        once the socket is closed and drained)."""
        try:
            item = self.core.take_message(now())
        except LocalProtocolError:
            if self._closed:
                item = None
            else:
                raise
        if item is not None:
            self.node._flush_soon()  # taking released credits: the sender waits for them
        elif self._closed:
            raise ClosedError("the socket is closed", tag=self.tag)
        return item

    async def __aiter__(self) -> AsyncIterator[Message | Receipt]:
        """Every message (and receipt) until the socket closes."""
        while True:
            try:
                item = await self.receive()
            except ClosedError:
                return
            yield item

    # -- options and state --------------------------------------------------------------

    def subscribe(self, prefix: bytes = b"") -> None:
        """SUB: receive messages starting with ``prefix``."""
        self.core.subscribe(prefix, now())
        self.node._flush_soon()

    def unsubscribe(self, prefix: bytes = b"") -> None:
        self.core.unsubscribe(prefix, now())
        self.node._flush_soon()

    def set_capacity(self, capacity: int) -> None:
        self.core.set_capacity(capacity, now())
        self.node._flush_soon()

    def adjust_capacity(self, delta: int) -> None:
        self.core.adjust_capacity(delta, now())
        self.node._flush_soon()

    def set_batch(self, fraction: float) -> None:
        self.core.set_batch(fraction, now())
        self.node._flush_soon()

    def abandon_request(self) -> None:
        """REQ: stop waiting for the pending reply (after a receive timeout)."""
        self.core.abandon_request()

    def statistics(self) -> SocketStatistics:
        return self.core.statistics()

    async def close(self, *, timeout: float = 1.0) -> None:
        """Unlink every link gracefully (up to ``timeout`` seconds), then remove the
        socket; closes the socket's private node if it has one. Idempotent. Waiting
        calls end with ``ClosedError``; messages already arrived can still be received."""
        if self._closed:
            return
        self._closed = True
        node = self.node
        core = self.core
        if not core.closing:
            core.close(now())
            node._flush()
        try:
            async with asyncio.timeout(timeout):
                while not core.closed:
                    self._linked.clear()
                    await self._linked.wait()
        except TimeoutError:
            pass  # the links that did not finish go down with the socket
        if node._core is not None:
            node._core.remove_socket(self.tag, now())
            node._flush()
        node._sockets.pop(self.tag, None)
        for event in (self._readable, self._writable, self._linked):
            event.set()  # wake every waiting call: it sees the socket closed
        if self._owns_node:
            await node.close()


def open_node(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    wire: Wire,
    transport: str = "tcp",
    tracer: Tracer | None = None,
    trace_data: bool | None = None,
    channel: ChannelConfig | None = None,
    max_message: int | None = None,
    seed: int | None = None,
    node_id: str | None = None,
) -> Opening[Node]:
    """Open a node listening on ``host:port`` (port 0: any free port); await it or use
    it with ``async with``.

    ``transport`` is ``tcp``, ``udp`` or ``exon`` (the original's reliable UDP; with
    ``Wire(mode=WireMode.ORIGINAL)`` the node speaks the Java A3M's messages, and
    ``node_id`` names it to Exon, by default ``"host:port"``; :meth:`Node.register`
    tells it where the peers' node ids are). ``host`` is the address peers reach the node at
    (not a wildcard): the node names itself by it; a name (``localhost``) is resolved
    first, and ``::1`` gives an IPv6 node. ``tracer`` records ``layer=link`` events
    (per-message ``send``/``deliver`` too unless ``trace_data=False``); ``seed`` fixes
    the node's randomness (clocks, back-off). ``wire`` is required: the default, sealed,
    wire needs the group key (every frame inside the envelope; over TCP as sealed
    records, see ``gossamer.proto.sealing``).
    """
    try:
        kind = Transport(transport)
    except ValueError:
        raise ConfigError("transport must be 'tcp', 'udp' or 'exon'",
                          transport=transport) from None

    async def start() -> Node:
        address = await resolve((host, port), stream=kind is Transport.TCP)
        node = Node(kind, tracer, trace_data, wire)
        await node._start(*address, channel=channel, max_message=max_message, seed=seed,
                          node_id=node_id)
        return node

    return Opening(start)


def open_socket(
    kind: str,
    *,
    tag: Tag,
    wire: Wire | None = None,
    node: Node | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    transport: str = "tcp",
    tracer: Tracer | None = None,
    **options: Any,
) -> Opening[Socket]:
    """Open a socket of ``kind`` with ``tag``; await it or use it with ``async with``.

    On ``node``, or on a private node opened on ``host:port`` with ``transport`` and
    ``wire`` (required then; the node closes with the socket). ``options`` are the
    :class:`~gossamer.proto.link.SocketOptions` fields (``capacity``, ``batch``,
    ``receipts``, ...).
    """
    if node is None and wire is None:
        raise ConfigError(
            "give wire=Wire(key=...): links are sealed by default and there is no default key"
        )

    async def start() -> Socket:
        if node is not None:
            return node.socket(kind, tag=tag, **options)
        assert wire is not None
        private = await open_node(host, port, transport=transport, tracer=tracer, wire=wire)
        try:
            sock = private.socket(kind, tag=tag, **options)
        except BaseException:
            await private.close()
            raise
        sock._owns_node = True
        return sock

    return Opening(start)
