"""ISIS total-order multicast (with Chandy–Lamport snapshots) on a real UDP socket.

The public API of total order (``docs/api.md``), over ``gossamer.aio.datagram``: the
protocol is entirely in ``gossamer.proto.isis`` and ``gossamer.proto.snapshot``; this
module binds the socket, resolves the members' addresses and turns local requests into
``driver.call``::

    config = IsisConfig(me=1, members=members_from([("a", ("localhost", 7001)), ...]))
    async with gossamer.open_isis(config, wire=Wire(key=group_key)) as isis:
        msg_id = await isis.send(b"job-1")       # waits only while a snapshot holds it
        delivered = await isis.receive(timeout=5) # .data, .sender, in the total order
        async for delivered in isis: ...          # every delivery, until closed
        sid = isis.initiate_snapshot()            # SnapshotDone comes from events()

A payload is ``bytes``, up to ``gossamer.wire.isis.MAX_DATA_SIZE`` (512) on the sealed
wire; on the original wire it is the original's uint32, 4 bytes or an ``int``
(``gossamer.proto.isis.payload``). Deliveries (:class:`Delivered`) come from
``receive`` and iteration; the other events (``SnapshotDone``, ``Discarded``,
``MemberRemoved``) from ``events()``. With ``on_event=`` every event goes to that
callback instead, right after the input that produced it (the CLI and the lab use it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import socket
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from gossamer._types import Address
from gossamer.aio._pump import EventCallback
from gossamer.aio.addresses import resolve
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.inbox import Inbox
from gossamer.aio.opening import Opening
from gossamer.aio.sealing import rejected_by, seal_core
from gossamer.aio.sockets import udp_socket
from gossamer.errors import (
    ClosedError,
    ConfigError,
    DecodeError,
    LocalProtocolError,
    NetworkError,
    RemoteProtocolError,
)
from gossamer.proto.core import DatagramLayer
from gossamer.proto.isis import Delivered, HostEntry, IsisConfig, IsisCore, Member
from gossamer.proto.snapshot import SnapshotConfig, SnapshotNode, Workload
from gossamer.proto.snapshot.original import ORIGINAL_SNAPSHOT_ID, OriginalSnapshotNode
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire import isis as wire_isis
from gossamer.wire.mode import Wire

__all__ = ["Delivered", "IsisService", "find_me", "open_isis", "resolve_members"]


async def resolve_members(members: Sequence[Member | HostEntry]) -> tuple[Member, ...]:
    """The members with literal addresses: each host name (``localhost`` too) resolved once,
    here (I/O), to its IPv4 address. ISIS is IPv4 on both wires: the original's wire names
    IPv4 hosts, and a group shares one address family. A hostfile's entries are numbered
    members already. Raises ``NetworkError`` (cause: the resolver's error) for a name that
    does not resolve, and for an IPv6 address."""
    resolved = []
    for m in members:
        host, port = (m.host, m.port) if isinstance(m, HostEntry) else m.addr
        addr = await resolve((host, port), ipv6=False)
        resolved.append(Member(id=m.id, name=m.name, addr=addr))
    return tuple(resolved)


def _is_local(ip: str) -> bool:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.bind((ip, 0))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def find_me(members: Sequence[Member], hint: str | None = None) -> Member:
    """Which member this process is.

    ``hint`` is a member name or 1-based id. Without it: the member named like this
    machine (the original matched ``gethostname()``), else the only member whose address
    is assigned to this machine; anything else needs a hint.
    """
    if hint is not None:
        for member in members:
            if hint in (member.name, str(member.id)):
                return member
        raise ConfigError(f"{hint!r} is neither a member name nor a member id")
    hostname = socket.gethostname()
    for member in members:
        if member.name == hostname:
            return member
    local = [m for m in members if _is_local(m.addr[0])]
    if len(local) == 1:
        return local[0]
    raise ConfigError(
        "cannot tell which member this process is; pass --me NAME",
        local=[m.name for m in local],
    )


MARKER_SIZE = 8  # the original's MarkerMessage: type 5, sender
#: Seconds a marker connection may take to deliver its 8 bytes.
MARKER_TIMEOUT = 5.0


class _MarkerTransport:
    """The original's snapshot markers (``gossamer.proto.snapshot.original``): a marker is
    one TCP connection to the member's port 10002 carrying 8 bytes, retried every second
    until it connects, as the original does; a marker's sender is the member at the
    connection's IP. A bad marker is traced as a ``snapshot`` ``drop`` and its connection
    closed.

    Pending connections are accepted whenever the listening socket is readable *and*
    before each datagram is handed to the node (:meth:`poll`, called by
    :class:`_MarkersFirst`), so that a marker that arrived before a datagram is known
    before that datagram is processed (the node's order rules).
    """

    def __init__(self, node: OriginalSnapshotNode, port: int, tracer: Tracer) -> None:
        self.node = node
        self.port = port
        self.retry = 1.0
        self.driver: DatagramDriver[Any] | None = None
        self._trace = tracer
        self._listener: socket.socket | None = None
        self._conns: dict[socket.socket, tuple[int, bytearray]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def listen(self, host: str) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, self.port))
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._listener = sock
        asyncio.get_running_loop().add_reader(sock, self._from_loop, self.poll)

    def _from_loop(self, work: Callable[[float], None]) -> None:
        if self.driver is not None and not self.driver.closed:
            self.driver.call(work)

    def poll(self, now: float) -> None:
        """Accept every pending marker connection and read what has arrived on it."""
        listener = self._listener
        if listener is None:
            return
        while True:
            try:
                conn, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            member = self.node.inner.member_at((str(peer[0]), 0))
            if member is None:
                self._drop(now, str(peer[0]), "not a member")
                conn.close()
                continue
            self.node.marker_coming(member)
            self._conns[conn] = (member, bytearray())
            if self._read(conn, now):
                loop = asyncio.get_running_loop()
                loop.add_reader(conn, self._from_loop, self._reader(conn))
                # A connection that never delivers its marker must not hold its
                # member's datagrams for ever.
                loop.call_later(MARKER_TIMEOUT, self._from_loop, self._expire(conn))

    def _reader(self, conn: socket.socket) -> Callable[[float], None]:
        def read(now: float) -> None:
            if conn in self._conns:
                self._read(conn, now)

        return read

    def _expire(self, conn: socket.socket) -> Callable[[float], None]:
        def expire(now: float) -> None:
            entry = self._conns.get(conn)
            if entry is not None:
                self._close(conn)
                self.node.marker_abandoned(entry[0], now)
                self._drop(now, self.node.peers.get(entry[0], "?"), "no marker in time")

        return expire

    def _read(self, conn: socket.socket, now: float) -> bool:
        """Read from a marker connection; True while more is to come."""
        member, buf = self._conns[conn]
        try:
            data = conn.recv(1024)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        buf += data
        if data and len(buf) < MARKER_SIZE:
            return True
        self._close(conn)
        try:
            msg = wire_isis.decode(bytes(buf)) if len(buf) == MARKER_SIZE else None
            if not isinstance(msg, wire_isis.MarkerMessage):
                raise DecodeError(f"not a marker ({len(buf)} bytes)")
            self.send_to(self.node.receive_marker(member, now))
        except (DecodeError, RemoteProtocolError) as exc:
            self.node.marker_abandoned(member, now)
            self._drop(now, self.node.peers.get(member, str(member)), exc.reason)
        return False

    def _close(self, conn: socket.socket) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(conn)
        self._conns.pop(conn, None)
        conn.close()

    def _drop(self, now: float, peer: str, reason: str) -> None:
        self._trace(now, "snapshot", "drop", peer=peer, attrs={"reason": f"marker: {reason}"})

    def send_to(self, members: Sequence[int]) -> None:
        for member in members:
            task = asyncio.get_running_loop().create_task(self._send(member))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, member: int) -> None:
        host = self.node.inner.address_of(member)[0]
        # From our own IP: the receiver names a marker's sender by the connection's IP
        # (on one machine the kernel would otherwise pick the destination's loopback IP).
        mine = self.node.inner.address_of(self.node.me)[0]
        while True:
            try:
                _, writer = await asyncio.open_connection(host, self.port, local_addr=(mine, 0))
                writer.write(self.node.marker())
                await writer.drain()
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            except OSError:
                await asyncio.sleep(self.retry)  # the original retries every second
                continue
            self._from_loop(lambda now: self.node.marker_sent(member, now))
            return

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in list(self._conns):
            self._close(conn)
        if self._listener is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self._listener)
            self._listener.close()
            self._listener = None


class _MarkersFirst(DatagramLayer[OriginalSnapshotNode]):
    """The datagram core the driver pumps on the original wire with snapshots: the
    snapshot node, with pending marker connections accepted before each datagram."""

    def __init__(self, node: OriginalSnapshotNode, markers: _MarkerTransport) -> None:
        super().__init__(node)
        self.markers = markers

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.markers.poll(now)
        self.inner.receive_datagram(data, addr, now)




class IsisService:
    """One running member of an ISIS group. Open it with :func:`open_isis`.

    ``address`` is where it listens; ``member`` is this member as the group knows it.
    ``node`` is the ``SnapshotNode`` around the ISIS core (``None`` when opened with
    ``snapshots=False``, or on the original wire, where ``markers.node`` is the original's
    snapshot); ``isis`` is the core, ``driver`` the datagram driver.
    """

    def __init__(
        self,
        driver: DatagramDriver[Any],
        isis: IsisCore,
        node: SnapshotNode | None,
        markers: _MarkerTransport | None,
        *,
        queues: bool,
    ) -> None:
        self.driver = driver
        self.isis = isis
        self.node = node
        self.markers = markers
        self.member = next(m for m in isis.config.members if m.id == isis.me)
        self._sequencer: IsisCore | SnapshotNode | OriginalSnapshotNode = isis
        if node is not None:
            self._sequencer = node
        elif markers is not None:
            self._sequencer = markers.node
        self._queues = queues
        self._deliveries: Inbox[Delivered] = Inbox("the ISIS member")
        self._events: Inbox[object] = Inbox("the ISIS member")
        # Sends held back by a snapshot, oldest first: each gets its msg_id on release.
        self._held: deque[asyncio.Future[int]] = deque()
        self._closing = False
        self._failure: BaseException | None = None  # why the driver stopped, if it failed
        self._close_task: asyncio.Task[None] | None = None
        self._watch = asyncio.get_running_loop().create_task(self._watch_driver())

    # -- names ------------------------------------------------------------------------

    @property
    def address(self) -> Address:
        """The ``(host, port)`` this member listens on."""
        return self.driver.local_address

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called or the driver stopped."""
        return self._closing or self.driver.closed

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams the envelope refused, by reason: forgeries, replays, strangers
        without the key (always empty on the original wire)."""
        return rejected_by(self.driver.core)

    @property
    def idle(self) -> bool:
        """Nothing to retransmit, hold back or finish here. (Stopping is harmless to the
        others only once every member is idle.)"""
        node = self.node
        busy = node is not None and (bool(node.snapshot.in_progress) or bool(node.queued))
        busy = busy or (self.markers is not None and self.markers.node.busy)
        return self.isis.quiescent and not busy

    # -- send ---------------------------------------------------------------------------

    async def send(self, data: bytes | int) -> int:
        """Multicast ``data`` to the group in total order; returns its ``msg_id`` (1, 2, ...
        for this member). It is delivered later, here too.

        ``data`` is ``bytes`` up to ``wire.isis.MAX_DATA_SIZE``; on the original wire the
        original's uint32 (4 bytes, or an ``int``). Anything else raises
        ``LocalProtocolError`` before it reaches the wire. Waits only while a snapshot
        holds new multicasts back; raises ``ClosedError`` once the service is closed.
        """
        self._require_open()
        sequencer = self._sequencer
        if sequencer is self.isis:  # no snapshot layer: nothing is ever held back
            return self.driver.call(lambda now: self.isis.multicast(data, now))
        # The future waits in line before the call: the call itself may release this
        # message (and older ones) before it returns, and each release answers the
        # oldest waiting send (``_released``).
        entered: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._held.append(entered)
        try:
            self.driver.call(lambda now: sequencer.multicast(data, now))
        except BaseException:
            self._held.remove(entered)  # refused: it never entered the line
            raise
        return await entered

    def _released(self, msg_id: int, data: bytes, now: float) -> None:
        # The snapshot layers report every message entering the sequencer, in the order
        # of the sends (at once, or released by a snapshot): it is the oldest waiting one.
        if self._held:
            future = self._held.popleft()
            if not future.done():
                future.set_result(msg_id)

    # -- receive ------------------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> Delivered:
        """The next message delivered in the total order.

        Raises ``TimedOutError`` when none comes within ``timeout`` seconds, and, once
        the service is closed and what had arrived was received, ``ClosedError``.
        """
        self._require_queues()
        return await self._deliveries.get(timeout)

    def __aiter__(self) -> AsyncIterator[Delivered]:
        self._require_queues()
        return self._deliveries

    async def events(self) -> AsyncIterator[object]:
        """The other notifications, in order, until the service closes: ``SnapshotDone``
        (this member's part of a snapshot), ``Discarded`` (a crashed sender's message
        the survivors agreed to drop) and ``MemberRemoved``."""
        self._require_queues()
        async for event in self._events:
            yield event

    def _unread(self) -> list[tuple[int, bytes]]:
        """``(sender id, payload)`` of each delivery the application has not received yet."""
        return [(d.sender_id, d.data) for d in self._deliveries.pending()]

    def _on_event(self, event: object) -> None:
        if isinstance(event, Delivered):
            self._deliveries.put(event)
        else:
            self._events.put(event)

    # -- snapshots and membership ---------------------------------------------------------

    def initiate_snapshot(self) -> int:
        """Start a Chandy–Lamport snapshot here; returns its id. Every member's part comes
        as a ``SnapshotDone`` from its ``events()``. On the original wire it is the
        original's one snapshot per lifetime (markers over TCP, id 1)."""
        self._require_open()
        markers = self.markers
        if markers is not None:
            markers.send_to(self.driver.call(markers.node.initiate))
            return ORIGINAL_SNAPSHOT_ID
        node = self.node
        if node is None:
            raise LocalProtocolError("this member was opened without snapshots")
        return self.driver.call(node.initiate_snapshot)

    def remove_member(self, member: int) -> None:
        """The membership layer's ``peer_down``: ``member`` (an id) crashed."""
        self._require_open()
        node = self.node
        if node is None:
            self.driver.call(lambda now: self.isis.remove_member(member, now))
        else:
            self.driver.call(lambda now: node.remove_member(member, now))

    # -- close --------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop: nothing more is sent or delivered. Idempotent. ``receive`` still returns
        what had arrived, then raises ``ClosedError``; iteration and ``events()`` end;
        sends still held back by a snapshot raise ``ClosedError``."""
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._closing = True
        if self.markers is not None:
            await self.markers.close()
        self.driver.close()
        await self._watch

    def abort(self) -> None:
        """Close at once, without waiting (a process on its way out)."""
        self._closing = True
        self.driver.close()
        if self.markers is not None:
            asyncio.get_running_loop().create_task(self.markers.close())

    async def _watch_driver(self) -> None:
        # The driver stops on close() or on its own (a bug in a core or callback): either
        # way deliveries and events end, and held sends learn they never will be sent.
        failure: BaseException | None = None
        try:
            await self.driver.wait_closed()
        except Exception as exc:
            failure = exc
        self._closing = True
        self._failure = failure
        self._deliveries.end(failure)
        self._events.end(failure)
        while self._held:
            future = self._held.popleft()
            if not future.done():
                future.set_exception(self._closed_error("closed before a snapshot released it"))

    # -- internals ------------------------------------------------------------------------

    def _closed_error(self, reason: str) -> ClosedError:
        error = ClosedError(reason)
        error.__cause__ = self._failure
        return error

    def _require_open(self) -> None:
        if self.closed:
            raise self._closed_error("the service is closed")

    def _require_queues(self) -> None:
        if not self._queues:
            raise ConfigError("this service was opened with on_event: events go to it")


def _bind(addr: Address) -> socket.socket:
    """A UDP socket bound to this member's address."""
    host, port = addr
    try:
        return udp_socket(host, port)
    except OSError as exc:
        raise NetworkError(
            f"cannot bind UDP {host}:{port}: {exc.strerror or exc}", host=host, port=port
        ) from exc


def open_isis(
    config: IsisConfig,
    *,
    wire: Wire | None = None,
    tracer: Tracer | None = None,
    rng: random.Random | None = None,
    faults: FaultInjector | None = None,
    snapshots: bool = True,
    snapshot_config: SnapshotConfig | None = None,
    workload: Workload | None = None,
    on_event: EventCallback | None = None,
    sock: socket.socket | None = None,
    snapshot_port: int = wire_isis.SNAPSHOT_PORT,
) -> Opening[IsisService]:
    """Open this member of the group ``config`` describes: ``await`` it for the started
    service, or use it with ``async with`` to close it on the way out.

    The members' addresses may be host names (``localhost`` too): they are resolved when
    the service starts (:func:`resolve_members`). It binds this member's address (or
    uses ``sock``); a port in use or a name that does not resolve is a ``NetworkError``
    whose cause is the ``OSError``.

    ``wire`` carries the group key: the default, sealed, wire puts every datagram in the
    envelope and needs it (there is no default key). On the original wire (``config.wire``
    and ``wire`` both ``original``) the member speaks the original program's plaintext, and
    its snapshots are the original's (``gossamer.proto.snapshot.original``): markers over
    TCP, to and from port ``snapshot_port`` (the original's 10002) of each member, one
    snapshot per lifetime, so that original members can start one in a mixed group.

    ``tracer`` defaults to one that discards events; ``rng`` (fault draws) to a
    generator seeded with 11 plus the member id (the original seeded every process with
    11). ``faults`` injects network faults (drop, duplicate, delay, reorder) around the
    socket; the original's own flags are ``config.drop_rate`` and ``config.ack_delay``.
    ``snapshots=False`` runs the bare ISIS core. ``snapshot_config`` defaults to the
    core's retransmission schedule and drop rate; ``workload`` is the application as the
    snapshots see it (``gossamer.proto.snapshot.Workload``). ``on_event`` takes every
    event instead of ``receive``/``events()``.
    """
    return Opening(
        lambda: _start(
            config, wire=wire, tracer=tracer, rng=rng, faults=faults, snapshots=snapshots,
            snapshot_config=snapshot_config, workload=workload, on_event=on_event,
            sock=sock, snapshot_port=snapshot_port,
        )
    )  # fmt: skip


async def _start(
    config: IsisConfig,
    *,
    wire: Wire | None,
    tracer: Tracer | None,
    rng: random.Random | None,
    faults: FaultInjector | None,
    snapshots: bool,
    snapshot_config: SnapshotConfig | None,
    workload: Workload | None,
    on_event: EventCallback | None,
    sock: socket.socket | None,
    snapshot_port: int,
) -> IsisService:
    wire = Wire(mode=config.wire) if wire is None else wire
    if wire.mode is not config.wire:
        raise ConfigError(
            "the wire given does not match the configuration's",
            wire=wire.mode.value,
            config=config.wire.value,
        )
    members = await resolve_members(config.members)
    if members != config.members:
        config = dataclasses.replace(config, members=members)
    me = next(m for m in config.members if m.id == config.me)
    if tracer is None:
        tracer = Tracer(NullSink(), run="isis", node=me.name)
    if rng is None:
        rng = random.Random(11 + config.me)
    core = IsisCore(config, tracer=tracer, rng=rng)
    if sock is None:
        sock = _bind(me.addr)
    node = original = None
    inner: IsisCore | SnapshotNode | OriginalSnapshotNode = core
    if snapshots and wire.sealed:
        inner = node = SnapshotNode(
            core, tracer=tracer, rng=rng, config=snapshot_config, workload=workload
        )
    elif snapshots:
        inner = original = OriginalSnapshotNode(core, tracer=tracer)
    markers = None
    pumped: IsisCore | SnapshotNode | OriginalSnapshotNode | _MarkersFirst = inner
    if original is not None:
        markers = _MarkerTransport(original, snapshot_port, tracer)
        try:
            markers.listen(me.addr[0])
        except OSError as exc:
            sock.close()
            raise NetworkError(
                f"cannot listen for snapshot markers on TCP {me.addr[0]}:{snapshot_port}: "
                f"{exc.strerror} (pass snapshots=False to run without them)",
                port=snapshot_port,
            ) from exc
        pumped = _MarkersFirst(original, markers)
    # The service, which routes events, needs the driver: what comes before it waits.
    routed: list[IsisService] = []
    early: list[object] = []

    def route(event: object) -> None:
        if on_event is not None:
            on_event(event)
        elif routed:
            routed[0]._on_event(event)
        else:
            early.append(event)

    try:
        driver = await open_datagram(
            seal_core(pumped, wire, sender=me.name, tracer=tracer, layer="isis"),
            sock,
            on_event=route,
            event_queue=False,
            faults=faults,
            tracer=tracer,
        )
    except BaseException:
        sock.close()
        if markers is not None:
            await markers.close()
        raise
    if markers is not None:
        markers.driver = driver
    service = IsisService(driver, core, node, markers, queues=on_event is None)
    routed.append(service)
    for event in early:
        service._on_event(event)
    if node is not None:
        node.on_multicast = service._released
        if on_event is None:
            # Deliveries wait in the service's queue until the application reads them: a
            # snapshot recorded meanwhile holds them as the node's ``unread``.
            node.unread = service._unread
    elif original is not None:
        original.on_multicast = service._released
    return service
