"""The datagram driver: runs any ``DatagramCore`` on real UDP sockets.

It is the thin pump of DESIGN.md ("The sans-I/O core contract"):

- every datagram the socket receives goes to
  ``core.receive_datagram(data, addr, now=now())``;
- after every input (datagram, timer, local request) it sends everything in
  ``core.datagrams_to_send()`` and hands everything in ``core.events_received()``
  to the application, then re-arms its one timer (``loop.call_at``) at
  ``core.next_deadline()``;
- local requests run through ``driver.call(lambda now: core.send_x(..., now))``.

It makes no protocol decision. Socket errors reported by the transport (an
ICMP port unreachable surfaces as ``error_received``, an oversized datagram or
an unroutable address as a failed ``sendto``) are counted in
``counters.errors`` and otherwise ignored: on a datagram network the protocol,
not the driver, copes with loss. A ``FaultInjector`` may sit between the core
and the socket to drop, duplicate, delay and reorder datagrams.

Usage::

    sock = udp_socket("127.0.0.1", 0)
    driver = await open_datagram(core, sock, on_event=print)
    ...
    driver.close()
    await driver.wait_closed()
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Iterable
from typing import Any, Generic, TypeVar, cast

from gossamer._types import Address
from gossamer.aio._pump import DriverCounters, EventCallback, Pump, now
from gossamer.aio.faults import FaultInjector
from gossamer.errors import LocalProtocolError
from gossamer.proto.core import DatagramCore
from gossamer.trace.sink import Tracer

__all__ = ["DatagramDriver", "DriverCounters", "open_datagram"]

DC = TypeVar("DC", bound=DatagramCore)


class _Endpoint(asyncio.DatagramProtocol):
    """Forwards one socket's transport callbacks to the driver."""

    def __init__(self, driver: DatagramDriver[Any], *, sends: bool) -> None:
        self.driver = driver
        self.sends = sends
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport implements DatagramTransport without subclassing it.
        self.transport = cast(asyncio.DatagramTransport, transport)
        if self.sends:
            # Set here, not after create_datagram_endpoint returns: uvloop may deliver
            # a datagram already waiting in the socket before that, and the core's
            # answer must not find the driver without a transport to send it on.
            self.driver._send_transport = self.transport

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self.driver._datagram_received(data, addr)

    def error_received(self, exc: Exception) -> None:
        self.driver._error_received(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.driver._endpoint_lost(self)


class DatagramDriver(Pump[DC], Generic[DC]):
    """Pumps one ``DatagramCore`` over one sending socket and any extra listening sockets.

    Build it with ``open_datagram``. The core's datagrams all leave through the
    first socket; datagrams arriving on any of the sockets go to the core.
    ``faults`` (optional) is applied to outgoing datagrams and, if its
    ``incoming`` plan is set, to incoming ones. ``tracer`` (optional) records
    socket errors as ``layer="net", kind="error"`` events.

    See ``Pump`` for events (``on_event``, ``events()``), ``call()`` and failure.
    """

    def __init__(
        self,
        core: DC,
        *,
        on_event: EventCallback | None = None,
        event_queue: bool | None = None,
        faults: FaultInjector | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        super().__init__(core, on_event=on_event, event_queue=event_queue)
        self.faults = faults
        self.tracer = tracer
        #: The last socket error, for diagnostics.
        self.last_error: Exception | None = None
        self._endpoints: list[_Endpoint] = []
        self._send_transport: asyncio.DatagramTransport | None = None
        self._live = 0
        self._local: Address | None = None
        self._connected_to: Address | None = None

    async def attach(self, sock: socket.socket, *, listen: Iterable[socket.socket] = ()) -> None:
        """Attach the driver to bound sockets (it takes ownership of them) and start pumping.

        ``sock`` sends and receives; each socket in ``listen`` only receives (for
        example a multicast socket whose port several nodes on one host share,
        next to a unicast socket of the node's own). The core's initial deadline
        is armed at once, so a core that acts on start (deadline in the past) is
        driven on the next loop iteration.
        """
        if self._loop is not None:
            raise LocalProtocolError("the driver was already started")
        loop = asyncio.get_running_loop()
        self._start(loop)
        self._local = _address(sock.getsockname())
        self._connected_to = _peer_of(sock)
        pending = [sock, *listen]
        try:
            while pending:
                endpoint = await self._attach(loop, pending[0], sends=not self._endpoints)
                pending.pop(0)
                self._endpoints.append(endpoint)
                self._live += 1
        except BaseException:
            for each in pending:
                each.close()
            self._begin_close()
            raise
        self._pump()

    async def _attach(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, *, sends: bool
    ) -> _Endpoint:
        endpoint = _Endpoint(self, sends=sends)
        await loop.create_datagram_endpoint(lambda: endpoint, sock=sock)
        return endpoint

    @property
    def local_address(self) -> Address:
        """The address of the sending socket (where unicast replies arrive)."""
        if self._local is None:
            raise LocalProtocolError("the driver is not started")
        return self._local

    def close(self) -> None:
        """Stop the timer, discard held fault copies and close every socket. Idempotent."""
        self._begin_close()

    async def __aenter__(self) -> DatagramDriver[DC]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
        await self.wait_closed()

    # -- transport callbacks -----------------------------------------------------

    def _datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        if self._closing:
            return
        # AF_INET transports report exactly (host, port): the core's Address shape.
        peer = cast(Address, addr)
        if self.faults is not None and self.faults.incoming is not None:
            assert self._loop is not None
            self.faults.apply("in", data, peer, self._deliver, self._loop)
        else:
            self._deliver(data, peer)

    def _deliver(self, data: bytes, addr: Address) -> None:
        if self._closing:
            return
        assert self._loop is not None
        self.counters.received += 1
        self.counters.received_bytes += len(data)
        self._feed(self.core.receive_datagram, data, addr, now())

    def _error_received(self, exc: Exception) -> None:
        self.counters.errors += 1
        self.last_error = exc
        if self.tracer is not None and self._loop is not None:
            code = getattr(exc, "errno", None)
            attrs = {"error": type(exc).__name__, "errno": "" if code is None else str(code)}
            self.tracer(now(), "net", "error", attrs=attrs)

    def _endpoint_lost(self, endpoint: _Endpoint) -> None:
        self._live -= 1
        if self._live <= 0:
            self._finished()

    # -- pump hooks --------------------------------------------------------------

    def _flush_output(self) -> None:
        datagrams = self.core.datagrams_to_send()
        if not datagrams:
            return
        if self.faults is not None and self.faults.outgoing is not None:
            assert self._loop is not None
            for data, addr in datagrams:
                self.faults.apply("out", data, addr, self._sendto, self._loop)
        else:
            for data, addr in datagrams:
                self._sendto(data, addr)

    def _sendto(self, data: bytes, addr: Address) -> None:
        transport = self._send_transport
        if transport is None or transport.is_closing():
            # Only once closing (held fault copies are cancelled, but a core's
            # last answer may race the close): nothing can be sent any more.
            return
        try:
            if self._connected_to is None:
                transport.sendto(data, addr)
            elif addr == self._connected_to:
                # A connected socket (``sock.connect`` before ``start``) is how a
                # two-node link learns of ICMP errors (Linux reports them only on
                # connected UDP sockets). uvloop then refuses an explicit address
                # (EISCONN), so none is given.
                transport.sendto(data)
            else:
                raise OSError(errno.EISCONN, f"socket is connected to {self._connected_to}")
        except OSError as exc:
            # Most send errors reach error_received, but some are raised at once.
            self._error_received(exc)
            return
        self.counters.sent += 1
        self.counters.sent_bytes += len(data)

    def _shutdown(self) -> None:
        if self.faults is not None:
            self.faults.cancel()
        if not self._endpoints:
            self._finished()
            return
        for endpoint in self._endpoints:
            if endpoint.transport is not None:
                endpoint.transport.close()


def _peer_of(sock: socket.socket) -> Address | None:
    try:
        return _address(sock.getpeername())
    except OSError:  # not connected
        return None


def _address(addr: tuple[str | object, ...]) -> Address:
    # IPv4 transports report (host, port); keep exactly that shape for cores.
    host, port = addr[0], addr[1]
    assert isinstance(host, str) and isinstance(port, int)
    return (host, port)


async def open_datagram(
    core: DC,
    sock: socket.socket,
    *,
    listen: Iterable[socket.socket] = (),
    on_event: EventCallback | None = None,
    event_queue: bool | None = None,
    faults: FaultInjector | None = None,
    tracer: Tracer | None = None,
) -> DatagramDriver[DC]:
    """Start a ``DatagramDriver`` for ``core`` on ``sock`` (see ``DatagramDriver.attach``)."""
    driver = DatagramDriver(
        core, on_event=on_event, event_queue=event_queue, faults=faults, tracer=tracer
    )
    await driver.attach(sock, listen=listen)
    return driver
