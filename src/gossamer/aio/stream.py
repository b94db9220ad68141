"""The stream driver: runs one ``StreamCore`` per TCP connection (the h11 style).

The same thin pump as the datagram driver (DESIGN.md, "The sans-I/O core
contract"): every read goes to ``core.receive_data(data, now=now())``,
the end of the peer's stream to ``core.receive_data(b"", now)``; after every
input the driver writes ``core.data_to_send()`` (one ``transport.write`` per
flush: the core has already joined its messages, and one write per message
caps an asyncio sender at a quarter of the throughput, see
``shared/reference/performance-baselines.md``), hands ``core.events_received()``
to the application and re-arms one timer at ``core.next_deadline()``.

Flow control. When the transport's write buffer passes its high-water mark
(``pause_writing``) the driver stops taking bytes from the core and stops
reading from the socket, so a peer that sends requests faster than their
answers drain cannot grow our buffers without bound; both resume at
``resume_writing``. Local producers ``await driver.drain()`` between requests.

Closing. A core may expose a boolean ``closing`` property ("this side will send
nothing more"): once it is true and its bytes are flushed, the driver ends our
half of the stream (``write_eof``), and closes the connection when both halves
have ended. A core without ``closing`` is treated as done when the peer's half
ends. Whatever way the connection ends (EOF, reset, ``close()``), the core is
told once with ``receive_data(b"", now)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar, cast

from gossamer._types import Address
from gossamer.aio._pump import DriverCounters, EventCallback, Pump, now
from gossamer.errors import LocalProtocolError
from gossamer.proto.core import StreamCore

__all__ = [
    "ClosesOnExit",
    "DriverCounters",
    "StreamDriver",
    "StreamServer",
    "WriteFlow",
    "connect",
    "listening_address",
    "peer_address_of",
    "serve",
]

SC = TypeVar("SC", bound=StreamCore)

#: Called with a connection's driver and one of its core's events (``serve``).
ConnectionEventCallback = Callable[["StreamDriver[Any]", object], None]


class WriteFlow:
    """Write flow control for one transport (the ``asyncio.Protocol`` side), shared by the
    stream driver and the connections driver (``gossamer.aio.connections``).

    Past the transport's high-water mark (``pause_writing``) the owner stops handing it
    bytes and reading stops too (the peer's input is what produces our output); both
    resume at ``resume_writing``, which then calls ``_writing_resumed()`` so the owner
    writes what it held back. Local producers ``await drain()``. The owner calls
    ``_init_write_flow()`` when it is made and ``_end_write_flow()`` when the
    connection is lost (waiting ``drain()`` calls then raise ``ConnectionResetError``).
    """

    _transport: asyncio.Transport | None

    def _init_write_flow(self) -> None:
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._lost = False

    @property
    def writing_paused(self) -> bool:
        """True while the transport's write buffer is above its high-water mark."""
        return self._write_paused

    async def drain(self) -> None:
        """Wait until the transport accepts more data; raise ``ConnectionError`` once it is gone."""
        if self._lost:
            raise ConnectionResetError("the connection is closed")
        if not self._write_paused:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def pause_writing(self) -> None:
        self._write_paused = True
        # Stop reading too: the peer's requests are what produce our answers.
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
        self._writing_resumed()

    def _writing_resumed(self) -> None:
        """Write what was held back while paused (the owner's)."""

    def _end_write_flow(self) -> None:
        self._lost = True
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("the connection was lost"))
        self._drain_waiters.clear()


class ClosesOnExit:
    """``async with driver:`` closes it on the way out and waits until it is closed (the
    stream driver and server, the connections driver)."""

    def close(self) -> None:
        raise NotImplementedError

    async def wait_closed(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
        await self.wait_closed()


class StreamDriver(WriteFlow, Pump[SC], ClosesOnExit, asyncio.Protocol, Generic[SC]):
    """Pumps one ``StreamCore`` over one TCP connection; it is the connection's protocol.

    Made by ``connect`` (client) or ``serve`` (one per accepted connection).
    See ``Pump`` for events (``on_event``, ``events()``), ``call()`` and failure.
    """

    def __init__(
        self,
        core: SC,
        *,
        on_event: EventCallback | None = None,
        event_queue: bool | None = None,
    ) -> None:
        super().__init__(core, on_event=on_event, event_queue=event_queue)
        #: The remote and local addresses, once connected.
        self.peer_address: Address | None = None
        self.local_address: Address | None = None
        self._transport: asyncio.Transport | None = None
        self._init_write_flow()
        self._peer_eof = False  # the peer's half has ended
        self._eof_sent = False  # our half has ended
        self._told_end = False  # the core got receive_data(b"")

    # -- the application's side ------------------------------------------------

    def close(self) -> None:
        """Write what the core has queued, then close the connection. Idempotent."""
        self._begin_close()

    def abort(self) -> None:
        """Close the connection at once, discarding unwritten data."""
        if self._transport is not None:
            self._transport.abort()
        self._begin_close()

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport implements Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        self._start(asyncio.get_running_loop())
        self.peer_address = peer_address_of(transport.get_extra_info("peername"))
        self.local_address = peer_address_of(transport.get_extra_info("sockname"))
        # The core may have something to say first (a greeting) or a deadline.
        self._pump()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        assert self._loop is not None
        self.counters.received += 1
        self.counters.received_bytes += len(data)
        self._feed(self.core.receive_data, data, now())

    def eof_received(self) -> bool:
        self._peer_eof = True
        if self._closing:
            return False
        self._tell_end()
        # True keeps our half open while the core still has something to send;
        # when it is done, _flush_output has already closed the transport.
        return not self._closing

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_write_flow()
        if self._failure is None:
            # The stream ended without an EOF (reset, local close): the core still
            # learns that no more input will come, and its last events are delivered.
            self._tell_end()
        self._finished()

    def _writing_resumed(self) -> None:
        if not self._closing:
            self._pump()

    # -- pump hooks --------------------------------------------------------------

    def _tell_end(self) -> None:
        if self._told_end:
            return
        self._told_end = True
        assert self._loop is not None
        self._feed(self.core.receive_data, b"", now())

    def _flush_output(self) -> None:
        transport = self._transport
        if transport is None or self._closing or self._write_paused or transport.is_closing():
            # While paused the core keeps its bytes: one write joins them on resume.
            return
        data = self.core.data_to_send()
        if data:
            self.counters.sent += 1
            self.counters.sent_bytes += len(data)
            transport.write(data)
        if self._core_finished():
            if self._peer_eof or not transport.can_write_eof():
                # Both halves have ended (or this transport cannot half-close).
                self._begin_close()
            elif not self._eof_sent:
                self._eof_sent = True
                transport.write_eof()

    def _core_finished(self) -> bool:
        closing = getattr(self.core, "closing", None)
        if closing is None:
            return self._peer_eof
        return bool(closing)

    def _shutdown(self) -> None:
        transport = self._transport
        if transport is None:
            self._finished()
            return
        if transport.is_closing():
            return
        if self._failure is not None:
            transport.abort()
            return
        try:
            data = self.core.data_to_send()
        except Exception as exc:
            self._failure = exc
            transport.abort()
            return
        if data:
            self.counters.sent += 1
            self.counters.sent_bytes += len(data)
            transport.write(data)
        # close() writes out the transport's buffer first, then closes.
        transport.close()


def listening_address(server: asyncio.Server | None, what: str) -> Address:
    """Where ``server`` listens, ``(host, port)`` (the port bound when 0 was asked for);
    ``LocalProtocolError`` naming ``what`` when it does not listen."""
    if server is None or not server.sockets:
        raise LocalProtocolError(f"{what} is not listening")
    name = server.sockets[0].getsockname()
    return (str(name[0]), int(name[1]))


def peer_address_of(info: object) -> Address | None:
    """``(host, port)`` from a transport's ``peername``/``sockname``, or None."""
    if isinstance(info, tuple) and len(info) >= 2:
        host, port = info[0], info[1]
        if isinstance(host, str) and isinstance(port, int):
            return (host, port)
    return None


class StreamServer(ClosesOnExit, Generic[SC]):
    """A listening TCP socket that runs a fresh core (from ``factory``) per connection.

    ``connections`` holds the drivers of the connections still open;
    ``accepted`` counts every connection ever accepted.
    """

    def __init__(
        self,
        factory: Callable[[], SC],
        *,
        on_connection: Callable[[StreamDriver[SC]], None] | None = None,
        on_event: ConnectionEventCallback | None = None,
        event_queue: bool = False,
    ) -> None:
        self._factory = factory
        self._on_connection = on_connection
        self._on_event = on_event
        self._event_queue = event_queue
        self._server: asyncio.Server | None = None
        self.connections: set[StreamDriver[SC]] = set()
        self.accepted = 0

    async def start(self, host: str, port: int, *, backlog: int = 100) -> None:
        """Listen on ``host:port`` (port 0: any free port)."""
        if self._server is not None:
            raise LocalProtocolError("the server was already started")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._accept, host, port, backlog=backlog)

    @property
    def address(self) -> Address:
        """The listening address."""
        return listening_address(self._server, "the server")

    def close(self) -> None:
        """Stop listening and close every open connection."""
        if self._server is not None:
            self._server.close()
        for driver in list(self.connections):
            driver.close()

    async def wait_closed(self) -> None:
        """Wait until the listener and every connection are closed.

        Connection failures (a core that raised) are not raised here; each is in
        its driver's ``failure``.
        """
        drivers = list(self.connections)
        await asyncio.gather(*(d.wait_closed() for d in drivers), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self) -> StreamDriver[SC]:
        driver: StreamDriver[SC] = StreamDriver(self._factory(), event_queue=self._event_queue)
        if self._on_event is not None:
            on_event = self._on_event
            driver._on_event = lambda event: on_event(driver, event)
        self.accepted += 1
        self.connections.add(driver)
        driver._on_finish = lambda: self.connections.discard(driver)
        if self._on_connection is not None:
            self._on_connection(driver)
        return driver


async def serve(
    factory: Callable[[], SC],
    host: str,
    port: int,
    *,
    on_connection: Callable[[StreamDriver[SC]], None] | None = None,
    on_event: ConnectionEventCallback | None = None,
    event_queue: bool = False,
    backlog: int = 100,
) -> StreamServer[SC]:
    """Listen on ``host:port`` and run ``factory()``'s core on each accepted connection.

    ``on_connection`` sees each connection's driver before its first byte;
    ``on_event`` gets ``(driver, event)`` for every event of every connection.
    """
    server = StreamServer(
        factory, on_connection=on_connection, on_event=on_event, event_queue=event_queue
    )
    await server.start(host, port, backlog=backlog)
    return server


async def connect(
    core: SC,
    host: str,
    port: int,
    *,
    timeout: float = 10.0,
    on_event: EventCallback | None = None,
    event_queue: bool | None = None,
) -> StreamDriver[SC]:
    """Open a TCP connection to ``host:port`` and drive ``core`` on it.

    Raises ``TimeoutError`` when the connection is not made within ``timeout``
    seconds, and ``OSError`` when it is refused.
    """
    loop = asyncio.get_running_loop()
    driver = StreamDriver(core, on_event=on_event, event_queue=event_queue)
    async with asyncio.timeout(timeout):
        await loop.create_connection(lambda: driver, host, port)
    return driver
