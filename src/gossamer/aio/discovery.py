"""Prototari discovery on real UDP sockets: ``open_discovery`` and the ``Discovery`` service.

The service follows ``docs/api.md``::

    config = DiscoveryConfig(address="10.0.0.1", broadcast_address="10.0.0.255")
    async with gossamer.open_discovery(config, wire=Wire(key=group_key)) as discovery:
        async for event in discovery.events():          # PeerUp / PeerDown, in order
            if isinstance(event, PeerUp):
                await discovery.send(b"hello", to=event.peer)
                break
        message = await discovery.receive(timeout=5)    # .data, .sender (the peer)

One ``gossamer.proto.discovery.DiscoveryCore`` runs on the datagram driver with the
spec's two ports:

- the unicast socket, bound to the node's identity ``address:port`` (default port
  21450) with ``SO_BROADCAST``, sends everything, the ``pelotari?`` broadcast included,
  and receives unicast; because the broadcast leaves from it, every receiver sees the
  broadcaster's identity as the source, and the node recognises its own looped-back
  broadcast exactly;
- the broadcast socket listens on the broadcast port (default 21451, or
  ``listen_port``) with ``SO_REUSEADDR``/``SO_REUSEPORT``, so several nodes of one host
  (one per process, each with its own unicast port) all receive each broadcast. It is
  bound to the broadcast address (``0.0.0.0`` for ``255.255.255.255``) so it hears only
  its subnet's broadcasts.

Both sockets feed the core's one ``receive_datagram``; the core tells broadcast from
unicast traffic by message kind (see ``gossamer.proto.discovery.core``). Where the node
lives is always explicit (``DiscoveryConfig``: ``interface``, or ``address`` and
``broadcast_address``); host names resolve to IPv4, the only family Prototari carries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import random
import socket
import struct
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

from gossamer._types import Address, Datagram
from gossamer.addresses import AddressLike
from gossamer.aio._pump import now
from gossamer.aio.addresses import resolve
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.inbox import Inbox
from gossamer.aio.opening import Opening
from gossamer.aio.sealing import rejected_by, seal_core
from gossamer.aio.sockets import broadcast_socket, udp_socket
from gossamer.errors import ClosedError, ConfigError, LocalProtocolError, NetworkError, NoRouteError
from gossamer.proto.core import DatagramLayer
from gossamer.proto.discovery import (
    LAYER,
    DiscoveryConfig,
    DiscoveryCore,
    PeerDown,
    PeerUp,
    Received,
)
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.mode import Wire

__all__ = [
    "Discovery",
    "DiscoveryConfig",
    "PeerDown",
    "PeerEvent",
    "PeerUp",
    "Received",
    "interface_addresses",
    "open_discovery",
]

PeerEvent = PeerUp | PeerDown

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
            ) from exc
    # struct ifreq: 16-byte name, then a sockaddr_in whose address is at bytes 4..8.
    return socket.inet_ntoa(address[20:24]), socket.inet_ntoa(broadcast[20:24])


class _Fanout(DatagramLayer[DiscoveryCore]):
    """In front of the discovery core: while there are targets, each datagram addressed
    to the broadcast endpoint leaves as one unicast copy per target (see
    ``DiscoveryConfig.broadcast_targets``); everything else passes through."""

    def __init__(self, core: DiscoveryCore, broadcast: Address, targets: Sequence[Address]) -> None:
        super().__init__(core)
        self.broadcast = broadcast
        self.targets = tuple(targets)

    def datagrams_to_send(self) -> list[Datagram]:
        out: list[Datagram] = []
        for data, addr in self.inner.datagrams_to_send():
            if addr == self.broadcast and self.targets:
                out.extend((data, target) for target in self.targets)
            else:
                out.append((data, addr))
        return out


def open_discovery(
    config: DiscoveryConfig,
    *,
    wire: Wire,
    tracer: Tracer | None = None,
    rng: random.Random | None = None,
    faults: FaultInjector | None = None,
) -> Opening[Discovery]:
    """Open a Prototari node: ``await`` it, or ``async with`` it (``docs/api.md``).

    ``wire`` is the wire and its key (``gossamer.wire.mode.Wire``); it has no default, as
    the default (sealed) wire needs the group key. On the original wire the node speaks
    to the Go original: a peer is its IP, replies go to ``IP:port`` (``docs/interop.md``).
    ``tracer`` receives the core's trace events and the driver's socket errors (default:
    nowhere; its node name should be ``config.node_id``). ``rng`` seeds the
    first-broadcast jitter and the rebalancing draws; ``faults`` injects loss for tests.

    Raises ``ConfigError`` for an unusable configuration and ``NetworkError`` (its cause
    the ``OSError``) when a name does not resolve or a socket cannot be bound.
    """
    return Opening(Discovery(config, wire=wire, tracer=tracer, rng=rng, faults=faults)._open)


class Discovery:
    """One running Prototari node (from ``open_discovery``). Use from one event loop.

    ``send``/``receive``/``async for`` carry application datagrams between registered
    peers (``Received``: ``.data``, ``.sender``); ``events()`` yields ``PeerUp`` and
    ``PeerDown`` as peers come and go; ``close()`` says ``agur!`` to every peer.
    """

    def __init__(
        self,
        config: DiscoveryConfig,
        *,
        wire: Wire,
        tracer: Tracer | None,
        rng: random.Random | None,
        faults: FaultInjector | None,
    ) -> None:
        if not isinstance(wire, Wire):
            raise ConfigError(
                "give the wire: Wire(key=...) for the default, sealed, wire (there is no "
                "default key), or Wire(mode=WireMode.ORIGINAL) to talk to the Go original"
            )
        self.config = config
        self.wire = wire
        self._tracer = tracer
        self._rng = rng if rng is not None else random.Random()
        self._faults = faults
        self._core: DiscoveryCore | None = None
        self._fanout: _Fanout | None = None
        self._driver: DatagramDriver[Any] | None = None
        self._messages: Inbox[Received] = Inbox("the discovery node")
        self._events: Inbox[PeerEvent] = Inbox("the discovery node")
        self._closing = False
        self._watcher: asyncio.Task[None] | None = None

    # -- life cycle ------------------------------------------------------------------

    async def _open(self) -> Discovery:
        """Resolve, bind and start discovering (once: the ``Opening`` calls it)."""
        config = await self._resolved()
        assert config.address is not None and config.broadcast_address is not None
        host, port = config.address
        broadcast = config.broadcast_address
        device = config.interface
        try:
            unicast = udp_socket(host, port, broadcast=True, device=device)
        except OSError as exc:
            raise NetworkError(f"cannot bind {host}:{port}: {exc.strerror}", address=host,
                               port=port) from exc  # fmt: skip
        try:
            listen_host = "0.0.0.0" if broadcast == _LIMITED_BROADCAST else broadcast
            listen_port = (
                config.broadcast_port if config.listen_port is None else config.listen_port
            )
            listener = broadcast_socket(listen_port, host=listen_host, device=device)
        except OSError as exc:
            unicast.close()
            raise NetworkError(
                f"cannot listen on {listen_host}:{listen_port}: {exc.strerror}",
                address=listen_host,
                port=listen_port,
            ) from exc
        except BaseException:
            unicast.close()
            raise
        # Port 0 asked for any free port: the identity is the port the socket got.
        config = dataclasses.replace(
            config, address=(host, unicast.getsockname()[1]), start=now(), wire=self.wire.mode
        )
        node_id = config.node_id or f"{host}:{config.identity[1]}"
        tracer = self._tracer or Tracer(NullSink(), run="discovery", node=node_id)
        core = DiscoveryCore(config, tracer=tracer, rng=self._rng)
        fanout = _Fanout(core, (broadcast, config.broadcast_port), config.broadcast_targets)
        pumped = seal_core(fanout, self.wire, sender=node_id, tracer=tracer, layer=LAYER)
        self.config = config
        self._core = core
        self._fanout = fanout
        self._driver = await open_datagram(
            pumped,
            unicast,
            listen=[listener],
            on_event=self._dispatch,
            event_queue=False,
            faults=self._faults,
            tracer=tracer,
        )
        self._watcher = asyncio.get_running_loop().create_task(self._watch(self._driver))
        return self

    async def _resolved(self) -> DiscoveryConfig:
        """The configuration with literal IPv4 addresses, from the interface and resolver."""
        config = self.config
        address, broadcast = config.address, config.broadcast_address
        if config.interface is not None:
            found_address, found_broadcast = interface_addresses(config.interface)
            address = address or (found_address, config.port)
            broadcast = broadcast or found_broadcast
        if address is None:  # DiscoveryConfig refuses neither address nor interface
            raise ConfigError("the interface has no address", interface=config.interface)
        if broadcast is None:
            raise ConfigError("give the broadcast address (or an interface to read it from)")
        address = await resolve(address, ipv6=False)
        broadcast = (await resolve((broadcast, config.broadcast_port), ipv6=False))[0]
        targets = [await resolve(target, ipv6=False) for target in config.broadcast_targets]
        return dataclasses.replace(
            config, address=address, broadcast_address=broadcast, broadcast_targets=tuple(targets)
        )

    async def _watch(self, driver: DatagramDriver[Any]) -> None:
        # However the driver ends (close, abort, or a failure inside the core), the
        # message and event streams end with it instead of leaving readers waiting.
        failure: BaseException | None = None
        try:
            await driver.wait_closed()
        except Exception as exc:  # a core bug: readers get it as the ClosedError's cause
            failure = exc
        finally:
            self._end(failure)

    async def close(self) -> None:
        """Clean stop: ``agur!`` to every peer (they remove us at once), then close.

        Each peer is reported as ``PeerDown(reason="leave", local=True)``. Idempotent.
        """
        driver = self._driver
        if self._closing:
            return
        self._closing = True
        if driver is None:
            self._end(None)
            return
        if not driver.closed:
            driver.call(lambda now: self._require_core().stop(now))
        driver.close()
        try:
            await driver.wait_closed()
        except Exception:  # already handed to the readers by _watch
            pass
        finally:
            self._end(None)
            if self._watcher is not None:
                await asyncio.gather(self._watcher, return_exceptions=True)

    def abort(self) -> None:
        """Close the sockets without ``agur!``: to peers this looks like a crash."""
        self._closing = True
        if self._driver is not None:
            self._driver.close()
        self._end(None)

    @property
    def closed(self) -> bool:
        """True once ``close()`` or ``abort()`` was called or the driver stopped."""
        return self._closing or (self._driver is not None and self._driver.closed)

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

    def set_broadcast_targets(self, targets: Sequence[Address]) -> None:
        """From now on, each broadcast goes as one unicast copy to each of ``targets``
        (literal ``(ip, port)``), as ``DiscoveryConfig.broadcast_targets`` says; none:
        to the broadcast address itself. A node learns of other nodes as it runs (a
        cluster's members, whose discovery addresses its peers tell it)."""
        self._require_open()
        assert self._fanout is not None
        self._fanout.targets = tuple(targets)

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams the envelope refused, by reason (always empty on the original wire)."""
        if self._driver is None:
            return Counter()
        return rejected_by(self._driver.core)

    # -- data --------------------------------------------------------------------------

    async def send(self, data: bytes, *, to: AddressLike | None = None) -> int:
        """Send ``data`` to the registered peer ``to``, or to every registered peer
        (``to=None``); best effort, like UDP. Returns how many peers it was sent to.

        Raises ``NoRouteError`` when ``to`` is not a registered peer, ``ClosedError``
        once closed, and ``LocalProtocolError`` for a payload over ``max_datagram``.
        """
        if to is None:
            core = self._require_core()
            return self._require_open().call(lambda now: core.send_to_peers(data, now))
        self._require_open()
        peer = await resolve(to, ipv6=False)
        driver = self._require_open()
        core = self._require_core()
        if peer not in core.peers():
            raise NoRouteError("not a registered peer", peer=f"{peer[0]}:{peer[1]}")
        driver.call(lambda now: core.send_data(peer, data, now))
        return 1

    async def receive(self, timeout: float | None = None) -> Received:
        """The next datagram from a peer. Raises ``TimedOutError`` after ``timeout``
        seconds without one and ``ClosedError`` once closed and drained."""
        return await self._messages.get(timeout)

    def __aiter__(self) -> AsyncIterator[Received]:
        """``async for message in discovery``: every datagram until the node closes."""
        return self._messages

    def events(self) -> AsyncIterator[PeerEvent]:
        """``PeerUp``/``PeerDown`` in order until the node closes (one reader: a second
        one shares the same stream)."""
        return self._events

    # -- internals ---------------------------------------------------------------------

    def _dispatch(self, event: object) -> None:
        if isinstance(event, Received):
            self._messages.put(event)
        elif isinstance(event, PeerUp | PeerDown):
            self._events.put(event)

    def _end(self, failure: BaseException | None) -> None:
        self._messages.end(failure)
        self._events.end(failure)

    def _require_core(self) -> DiscoveryCore:
        if self._core is None:
            raise LocalProtocolError("the node is not open yet (await open_discovery(...))")
        return self._core

    def _require_open(self) -> DatagramDriver[Any]:
        if self.closed:
            raise ClosedError("the discovery node is closed")
        if self._driver is None:
            raise LocalProtocolError("the node is not open yet (await open_discovery(...))")
        return self._driver
