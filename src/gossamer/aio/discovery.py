"""A Prototari node on real UDP sockets: start, stop, peers, peer events, data.

``DiscoveryNode`` runs one ``gossamer.proto.discovery.DiscoveryCore`` with the
datagram driver. Its two sockets follow the spec's two ports:

- the unicast socket, bound to the node's identity ``address:port`` (default
  port 21450) with ``SO_BROADCAST``, sends everything, the ``pelotari?``
  broadcast included, and receives unicast; because the broadcast leaves from
  it, every receiver sees the broadcaster's identity as the source, and the
  node recognises its own looped-back broadcast exactly;
- the broadcast socket listens on the broadcast port (default 21451) with
  ``SO_REUSEADDR``/``SO_REUSEPORT``, so several nodes of one host (one per
  process, each with its own unicast port) all receive each broadcast. It is
  bound to the broadcast address (``0.0.0.0`` for ``255.255.255.255``) so it
  hears only its subnet's broadcasts.

Both sockets feed the core's one ``receive_datagram``; the core tells broadcast
from unicast traffic by message kind (see ``gossamer.proto.discovery.core``).

Where the node lives is always explicit (DESIGN.md: never "the first
interface"): ``interface`` (a device name: its IPv4 address and broadcast
address are read from the kernel, and both sockets are bound to the device),
or ``address`` and ``broadcast_address``.

Usage::

    options = DiscoveryOptions(interface="eth0")
    async with DiscoveryNode(options, on_peer=print) as node:
        async for event in node.peer_events():
            ...
        node.send(peer, b"hello")
        message = await node.receive()
"""

from __future__ import annotations

import asyncio
import fcntl
import random
import socket
import struct
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gossamer._types import Address, Datagram
from gossamer.aio._pump import now
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.sealing import rejected_by, seal_core
from gossamer.aio.sockets import broadcast_socket, udp_socket
from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.core import DatagramLayer
from gossamer.proto.discovery import (
    LAYER,
    DataReceived,
    DiscoveryConfig,
    DiscoveryCore,
    PeerDown,
    PeerUp,
)
from gossamer.trace.sink import NullSink, Tracer, TraceSink
from gossamer.wire.mode import Wire
from gossamer.wire.prototari import BROADCAST_PORT, MAX_DATAGRAM, UNICAST_PORT

__all__ = [
    "DiscoveryNode",
    "DiscoveryOptions",
    "PeerEvent",
    "interface_addresses",
]

PeerEvent = PeerUp | PeerDown
PeerCallback = Callable[[PeerEvent], None]

_SIOCGIFADDR = 0x8915
_SIOCGIFBRDADDR = 0x8919
_LIMITED_BROADCAST = "255.255.255.255"


def interface_addresses(interface: str) -> tuple[str, str]:
    """The IPv4 address and broadcast address of network device ``interface`` (Linux).

    Raises ``ConfigError`` when the device does not exist or has no IPv4 address.
    """
    if not sys.platform.startswith("linux"):
        raise ConfigError("reading an interface's addresses needs Linux; give address instead")
    name = interface.encode()
    if not 0 < len(name) < 16:
        raise ConfigError("interface names are 1 to 15 bytes", interface=interface)
    request = struct.pack("256s", name)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            address = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
            broadcast = fcntl.ioctl(probe.fileno(), _SIOCGIFBRDADDR, request)
        except OSError as exc:
            raise ConfigError(
                f"interface {interface!r} has no usable IPv4 address ({exc.strerror})",
                interface=interface,
            ) from None
    # struct ifreq: 16-byte name, then a sockaddr_in whose address is at bytes 4..8.
    return socket.inet_ntoa(address[20:24]), socket.inet_ntoa(broadcast[20:24])


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoveryOptions:
    """Where a node lives and how it behaves (see ``DiscoveryConfig`` for the timers).

    Give ``interface`` (address and broadcast address come from it) or
    ``address`` (and then ``broadcast_address``). ``port`` is the unicast port
    (the node's identity is ``address:port``); ``broadcast_port`` is shared by
    every node. ``node_id`` names the node in traces (default ``address:port``).

    ``listen_port`` is the port the broadcast socket listens on; it defaults to
    ``broadcast_port`` and differs only where ``broadcast_address`` is not a
    broadcast address at all but one peer's address (two nodes on 127.0.0.1 in
    the machine's own namespace, where nothing may be broadcast).

    ``broadcast_targets``, when not empty, turns every datagram the core addresses to
    ``broadcast_address:broadcast_port`` into one unicast copy per target: the
    broadcast emulated on a network where nothing may be broadcast (many nodes on
    127.0.0.1, each listening on its own port). ``names`` gives the node ids of known
    peer addresses, for traces and events (default: ``ip:port``).

    ``wire`` is the wire and its key (``gossamer.wire.mode.Wire``); it has no default, as
    the default (sealed) wire needs the group key. On the original wire, the node speaks
    to the Go original: a peer is its IP, replies go to ``IP:port`` (``docs/interop.md``).
    """

    interface: str | None = None
    address: str | None = None
    broadcast_address: str | None = None
    port: int = UNICAST_PORT
    broadcast_port: int = BROADCAST_PORT
    listen_port: int | None = None
    max_peers: int = 64
    broadcast_interval: float = 5.0
    inactive_time: float = 10.0
    heartbeat_wait: float = 1.0
    heartbeat_attempts: int = 3
    handshake_timeout: float = 2.0
    max_datagram: int = MAX_DATAGRAM
    rebalance: bool = True
    node_id: str | None = None
    names: Mapping[Address, str] = field(default_factory=dict)
    broadcast_targets: tuple[Address, ...] = ()
    wire: Wire | None = None

    def resolve(self) -> tuple[str, str]:
        """``(address, broadcast_address)``; raises ``ConfigError`` when underspecified."""
        address, broadcast = self.address, self.broadcast_address
        if self.interface is not None:
            found_address, found_broadcast = interface_addresses(self.interface)
            address = address or found_address
            broadcast = broadcast or found_broadcast
        if address is None:
            raise ConfigError("give the node's interface or its address (never guessed)")
        if broadcast is None:
            raise ConfigError("give the broadcast address (or an interface to read it from)")
        return address, broadcast


class _Fanout(DatagramLayer[DiscoveryCore]):
    """In front of the discovery core: each datagram addressed to the broadcast endpoint
    leaves as one unicast copy per target (see ``DiscoveryOptions.broadcast_targets``);
    everything else passes through."""

    def __init__(
        self, core: DiscoveryCore, broadcast: Address, targets: Sequence[Address]
    ) -> None:
        super().__init__(core)
        self.broadcast = broadcast
        self.targets = tuple(targets)

    def datagrams_to_send(self) -> list[Datagram]:
        out: list[Datagram] = []
        for data, addr in self.inner.datagrams_to_send():
            if addr == self.broadcast:
                out.extend((data, target) for target in self.targets)
            else:
                out.append((data, addr))
        return out


class _End:
    """Marks the end of a queue."""


_END = _End()


class DiscoveryNode:
    """One Prototari node on real sockets. Not thread-safe; use from one event loop.

    ``on_peer`` is called with each ``PeerUp``/``PeerDown`` as it happens;
    ``peer_events()`` yields the same events; ``receive()`` returns application
    datagrams from peers. ``sink`` receives the core's trace events (and the
    driver's socket errors). ``rng`` seeds the first-broadcast jitter and
    rebalancing draws; ``faults`` injects loss for tests.
    """

    def __init__(
        self,
        options: DiscoveryOptions,
        *,
        on_peer: PeerCallback | None = None,
        sink: TraceSink | None = None,
        run: str = "discovery",
        rng: random.Random | None = None,
        faults: FaultInjector | None = None,
    ) -> None:
        self.options = options
        self._on_peer = on_peer
        self._sink = sink if sink is not None else NullSink()
        self._run = run
        self._rng = rng if rng is not None else random.Random()
        self._faults = faults
        self._core: DiscoveryCore | None = None
        self._driver: DatagramDriver[Any] | None = None
        self._peer_queue: asyncio.Queue[PeerEvent | _End] = asyncio.Queue()
        self._data_queue: asyncio.Queue[DataReceived | _End] = asyncio.Queue()
        self._stopping = False
        self._ended = False
        self._watcher: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Open the sockets and start discovering. Raises ``ConfigError`` for bad
        options and ``OSError`` when a socket cannot be bound (port in use)."""
        if self._driver is not None:
            raise LocalProtocolError("the node was already started")
        opts = self.options
        if opts.wire is None:
            raise ConfigError(
                "give the wire: Wire(key=...) for the default, sealed, wire (there is no "
                "default key), or Wire(mode=WireMode.ORIGINAL) to talk to the Go original"
            )
        address, broadcast = opts.resolve()
        loop = asyncio.get_running_loop()
        identity = (address, opts.port)
        config = DiscoveryConfig(
            address=identity,
            broadcast_address=broadcast,
            broadcast_port=opts.broadcast_port,
            max_peers=opts.max_peers,
            broadcast_interval=opts.broadcast_interval,
            inactive_time=opts.inactive_time,
            heartbeat_wait=opts.heartbeat_wait,
            heartbeat_attempts=opts.heartbeat_attempts,
            handshake_timeout=opts.handshake_timeout,
            max_datagram=opts.max_datagram,
            rebalance=opts.rebalance,
            start=now(),
            names=dict(opts.names),
            wire=opts.wire.mode,
        )
        node_id = opts.node_id or f"{address}:{opts.port}"
        tracer = Tracer(self._sink, run=self._run, node=node_id)
        core = DiscoveryCore(config, tracer=tracer, rng=self._rng)
        unicast = udp_socket(address, opts.port, broadcast=True, device=opts.interface)
        try:
            listen_host = "0.0.0.0" if broadcast == _LIMITED_BROADCAST else broadcast
            listen_port = opts.broadcast_port if opts.listen_port is None else opts.listen_port
            listener = broadcast_socket(listen_port, host=listen_host, device=opts.interface)
        except BaseException:
            unicast.close()
            raise
        self._core = core
        fanout: DiscoveryCore | _Fanout = core
        if opts.broadcast_targets:
            fanout = _Fanout(core, (broadcast, opts.broadcast_port), opts.broadcast_targets)
        pumped = seal_core(fanout, opts.wire, sender=node_id, tracer=tracer, layer=LAYER)
        self._driver = await open_datagram(
            pumped,
            unicast,
            listen=[listener],
            on_event=self._dispatch,
            event_queue=False,
            faults=self._faults,
            tracer=tracer,
        )
        self._watcher = loop.create_task(self._watch(self._driver))

    async def _watch(self, driver: DatagramDriver[Any]) -> None:
        # However the driver ends (stop, abort, or a failure inside the core), the
        # event streams end with it instead of leaving readers waiting forever.
        try:
            await driver.wait_closed()
        except Exception:  # the failure is re-raised by peer_events()
            pass
        finally:
            self._end_queues()

    async def stop(self) -> None:
        """Clean stop: ``agur!`` to every peer (they remove us at once), then close.

        Each peer is reported as ``PeerDown(reason="leave", local=True)``. Idempotent.
        """
        driver = self._driver
        if driver is None or self._stopping:
            return
        self._stopping = True
        if not driver.closed:
            driver.call(lambda now: self._require_core().stop(now))
        driver.close()
        try:
            await driver.wait_closed()
        finally:
            self._end_queues()
            if self._watcher is not None:
                await asyncio.gather(self._watcher, return_exceptions=True)

    def abort(self) -> None:
        """Close the sockets without ``agur!``: to peers this looks like a crash."""
        if self._driver is not None:
            self._stopping = True
            self._driver.close()
            self._end_queues()

    async def __aenter__(self) -> DiscoveryNode:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- queries -----------------------------------------------------------------------

    @property
    def address(self) -> Address:
        """This node's identity: the address and port of its unicast socket."""
        return self._require_core().address

    @property
    def core(self) -> DiscoveryCore:
        """The protocol core (read its ``counters`` or state; do not drive it)."""
        return self._require_core()

    def peers(self) -> list[Address]:
        """The currently registered peers."""
        return self._require_core().peers()

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams the envelope refused, by reason (always empty on the original wire)."""
        return rejected_by(self._require_driver().core)

    # -- data --------------------------------------------------------------------------

    def send(self, peer: Address, payload: bytes) -> None:
        """Send an application datagram to a registered peer (best effort, like UDP).

        Raises ``LocalProtocolError`` if ``peer`` is not registered, the payload is
        too large, or the node is stopped.
        """
        self._require_driver().call(lambda now: self._require_core().send_data(peer, payload, now))

    def send_to_peers(self, payload: bytes) -> int:
        """Send ``payload`` to every registered peer; returns how many."""
        return self._require_driver().call(
            lambda now: self._require_core().send_to_peers(payload, now)
        )

    async def receive(self) -> DataReceived:
        """The next application datagram from a peer. Raises ``LocalProtocolError``
        once the node is stopped and every received datagram was taken."""
        item = await self._data_queue.get()
        if isinstance(item, _End):
            self._data_queue.put_nowait(item)
            raise LocalProtocolError("the node is stopped")
        return item

    async def peer_events(self) -> AsyncIterator[PeerEvent]:
        """Yield ``PeerUp``/``PeerDown`` events in order until the node stops.

        Meant for one reader; a second reader shares (splits) the same stream.
        """
        while True:
            item = await self._peer_queue.get()
            if isinstance(item, _End):
                self._peer_queue.put_nowait(item)
                driver = self._driver
                if driver is not None and driver.failure is not None:
                    raise driver.failure
                return
            yield item

    # -- internals ---------------------------------------------------------------------

    def _dispatch(self, event: object) -> None:
        if isinstance(event, DataReceived):
            self._data_queue.put_nowait(event)
        elif isinstance(event, PeerUp | PeerDown):
            self._peer_queue.put_nowait(event)
            if self._on_peer is not None:
                self._on_peer(event)

    def _end_queues(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._peer_queue.put_nowait(_END)
        self._data_queue.put_nowait(_END)

    def _require_core(self) -> DiscoveryCore:
        if self._core is None:
            raise LocalProtocolError("the node is not started")
        return self._core

    def _require_driver(self) -> DatagramDriver[Any]:
        if self._driver is None:
            raise LocalProtocolError("the node is not started")
        return self._driver
