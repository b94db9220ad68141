"""ISIS total-order multicast (with Chandy–Lamport snapshots) on a real UDP socket.

A thin public API over ``gossamer.aio.datagram``: the protocol is entirely in
``gossamer.proto.isis`` and ``gossamer.proto.snapshot``; this module binds the socket,
resolves the hostfile, and turns local requests into ``driver.call``::

    members = resolve_members(parse_hostfile(text))
    service = await open_isis(
        IsisConfig(me=2, members=members), wire=Wire(key=group_key), on_event=print
    )
    service.multicast(42)                  # non-blocking, like the spec's multicast()
    sid = service.initiate_snapshot()
    ...
    service.remove_member(3)               # wire to the membership layer's peer_down
    await service.aclose()

Events (``on_event``, or ``async for event in service.events()``): ``Delivered``,
``Discarded``, ``MemberRemoved`` from ISIS and ``SnapshotDone`` from the snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from gossamer._types import Address
from gossamer.aio._pump import EventCallback
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.sealing import rejected_by, seal_core
from gossamer.aio.sockets import udp_socket
from gossamer.errors import ConfigError, DecodeError, LocalProtocolError, RemoteProtocolError
from gossamer.proto.core import DatagramLayer
from gossamer.proto.isis import HostEntry, IsisConfig, IsisCore, Member
from gossamer.proto.snapshot import SnapshotConfig, SnapshotNode, Workload
from gossamer.proto.snapshot.original import ORIGINAL_SNAPSHOT_ID, OriginalSnapshotNode
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire import isis as wire_isis
from gossamer.wire.mode import Wire

__all__ = ["IsisService", "find_me", "open_isis", "resolve_members"]


def resolve_members(entries: Sequence[HostEntry]) -> tuple[Member, ...]:
    """Members with IPv4 addresses: each hostfile host resolved once, here (I/O)."""
    members = []
    for entry in entries:
        try:
            ip = socket.gethostbyname(entry.host)
        except OSError as exc:
            raise ConfigError(f"cannot resolve hostfile host {entry.host!r}: {exc}") from None
        members.append(Member(id=entry.id, name=entry.name, addr=(ip, entry.port)))
    return tuple(members)


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
    """One running member: the driver and its core. Build with :func:`open_isis`.

    ``node`` is the ``SnapshotNode`` around the ISIS core, or ``None`` when the member
    was opened with ``snapshots=False`` or on the original wire (then the driver pumps
    ``isis`` directly, or ``markers.node``, the original's snapshot, on the original wire).
    """

    def __init__(
        self,
        driver: DatagramDriver[Any],
        isis: IsisCore,
        node: SnapshotNode | None,
        markers: _MarkerTransport | None = None,
    ) -> None:
        self.driver = driver
        self.isis = isis
        self.node = node
        self.markers = markers

    @property
    def local_address(self) -> Address:
        return self.driver.local_address

    def multicast(self, data: int) -> int | None:
        """Multicast ``data`` (uint32); returns its msg_id, or ``None`` while a snapshot
        holds new messages back. Never blocks."""
        sequencer: IsisCore | SnapshotNode | OriginalSnapshotNode = self.isis
        if self.node is not None:
            sequencer = self.node
        elif self.markers is not None:
            sequencer = self.markers.node
        return self.driver.call(lambda now: sequencer.multicast(data, now))

    def initiate_snapshot(self) -> int:
        """Start a Chandy–Lamport snapshot here; returns its id. On the original wire it
        is the original's one snapshot per lifetime (markers over TCP, id 1)."""
        markers = self.markers
        if markers is not None:
            markers.send_to(self.driver.call(markers.node.initiate))
            return ORIGINAL_SNAPSHOT_ID
        if self.node is None:
            raise LocalProtocolError("this member was opened without snapshots")
        return self.driver.call(self.node.initiate_snapshot)

    def remove_member(self, member: int) -> None:
        """The membership layer's ``peer_down``: ``member`` crashed."""
        node = self.node
        if node is None:
            self.driver.call(lambda now: self.isis.remove_member(member, now))
        else:
            self.driver.call(lambda now: node.remove_member(member, now))

    def events(self) -> AsyncIterator[object]:
        return self.driver.events()

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

    def close(self) -> None:
        self.driver.close()
        if self.markers is not None:
            asyncio.get_running_loop().create_task(self.markers.close())

    async def aclose(self) -> None:
        if self.markers is not None:
            await self.markers.close()
        self.driver.close()
        await self.driver.wait_closed()


async def open_isis(
    config: IsisConfig,
    *,
    tracer: Tracer | None = None,
    rng: random.Random | None = None,
    faults: FaultInjector | None = None,
    snapshot_config: SnapshotConfig | None = None,
    workload: Workload | None = None,
    on_event: EventCallback | None = None,
    event_queue: bool | None = None,
    sock: socket.socket | None = None,
    snapshots: bool = True,
    wire: Wire | None = None,
    snapshot_port: int = wire_isis.SNAPSHOT_PORT,
) -> IsisService:
    """Bind this member's address (or use ``sock``) and start the member.

    ``tracer`` defaults to one that discards events; ``rng`` (fault draws) to a
    generator seeded with 11 plus the member id (the original seeded every process with
    11). ``faults`` injects network faults (drop, duplicate, delay, reorder) around the
    socket; the original's own flags are in ``config.faults``. ``snapshots=False`` runs
    the bare ISIS core (a little less work per datagram, no snapshots).

    ``wire`` carries the group key: the default, sealed, wire puts every datagram in the
    envelope and needs it (there is no default key). On the original wire (``config.wire``
    and ``wire`` both ``original``) the member speaks the original program's plaintext, and
    its snapshots are the original's (``gossamer.proto.snapshot.original``): markers over
    TCP, to and from port ``snapshot_port`` (the original's 10002) of each member, one
    snapshot per lifetime, so that original members can start one in a mixed group.
    """
    wire = Wire(mode=config.wire) if wire is None else wire
    if wire.mode is not config.wire:
        raise ConfigError(
            "the wire given does not match the configuration's",
            wire=wire.mode.value,
            config=config.wire.value,
        )
    me = next(m for m in config.members if m.id == config.me)
    if tracer is None:
        tracer = Tracer(NullSink(), run="isis", node=me.name)
    if rng is None:
        rng = random.Random(11 + config.me)
    core = IsisCore(config, tracer=tracer, rng=rng)
    if sock is None:
        sock = udp_socket(me.addr[0], me.addr[1])
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
            raise ConfigError(
                f"cannot listen for snapshot markers on TCP {me.addr[0]}:{snapshot_port}: "
                f"{exc.strerror} (pass snapshots=False to run without them)"
            ) from None
        pumped = _MarkersFirst(original, markers)
    driver = await open_datagram(
        seal_core(pumped, wire, sender=me.name, tracer=tracer, layer="isis"),
        sock,
        on_event=on_event,
        event_queue=event_queue,
        faults=faults,
        tracer=tracer,
    )
    if markers is not None:
        markers.driver = driver
    return IsisService(driver, core, node, markers)
