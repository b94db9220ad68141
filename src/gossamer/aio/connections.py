"""The connections driver: runs any ``ConnectionsCore`` over real TCP, on the one ``Pump``.

A ``ConnectionsCore`` (``gossamer.proto.core``) serves many byte-stream connections,
each named by an integer id. ``ConnectionsDriver`` is its only asyncio driver::

    driver = ConnectionsDriver(core, on_event=handle, connect_timeout=2.0)
    await driver.start("127.0.0.1", 0)    # listen (optional: start() only dials)
    driver.call(lambda now: core.do_something(..., now))
    ...
    driver.close(); await driver.wait_closed()

What it does, as the contract in ``gossamer.proto.core`` says:

- **Accept** (when started with a host): each accepted connection gets the next
  positive id (1, 2, 3...) and ``connection_made(conn, peer, now)``.
- **Open**: every ``(conn, peer)`` of ``connections_to_open()`` is dialled in a task:
  ``peer`` resolved with ``gossamer.aio.addresses.resolve`` (``ipv6=`` as given), then
  connected within ``connect_timeout`` seconds. Success: ``connection_made(conn, peer,
  now)`` with the resolved address, then the bytes the core queued for ``conn`` before
  it was made. A name that does not resolve, a refusal or a timeout:
  ``connection_lost(conn, now)``.
- **Bytes in**: every read goes to ``receive_data(conn, data, now)``. The end of the
  peer's stream (EOF) ends the connection: there is no half-close (as in the
  simulator's streams), our side closes after what is queued and the core gets
  ``connection_lost``.
- **Bytes out**: after every input, ``data_to_send()``'s ``(conn, bytes)`` pairs go to
  their connections, joined into one ``transport.write`` per connection per flush
  (``coalesce=False``: one write per pair, the next pair for that connection on the
  next loop iteration, for receivers that expect one message per read, like the
  original Chatter's). Bytes for an id that is gone are discarded.
- **Write flow control** (``gossamer.aio.stream.WriteFlow``, the stream driver's):
  while a connection's transport is above its high-water mark the driver holds that
  connection's bytes and stops reading from it; on resume it writes them in one go.
- **Close**: each id of ``connections_to_close()`` is closed once the bytes queued
  before it are handed to the transport (which writes them out before closing); bytes
  queued after are dropped. With ``half_close`` only our half ends there
  (``write_eof``) and the connection closes at the peer's EOF, so the peer has seen the
  end by the time the core gets ``connection_lost`` (the order RFC 6455 §7.1.1 asks of
  a websocket server; TLS, which cannot half-close, closes at once). A peer that stopped
  reading, or never ends its half, cannot finish that: the connection is aborted
  ``linger`` seconds after the core asked to close it.
- **Write backlog** (``write_buffer_limit``): once a connection's unwritten bytes (held
  by the driver and in its transport) pass the limit, ``on_backlog(conn, now)`` is fed
  through the pump, once per connection, as a core input (the gateway closes the
  connection with 1008 there); without ``on_backlog`` the driver aborts the connection.
- **Error boundary** (``on_error``): when ``receive_data`` raises for one connection,
  the driver logs it, counts it (``connection_errors``) and feeds ``on_error(conn, exc,
  now)`` through the pump, so the core closes that connection and the others go on.
  Without ``on_error`` a raise is a bug that stops the driver (``Pump``).
- **TLS**: ``start(..., ssl=context)`` serves every accepted connection inside TLS.
- **Lost**: ``connection_lost(conn, now)`` exactly once per connection made or opened,
  however it ended (refused, timed out, reset, EOF, closed by the core), never after
  the driver is closed.
- **Timer and events**: the ``Pump``'s (one timer at ``next_deadline()``, events to
  ``on_event`` and/or ``events()``; a core that raises stops the driver, see ``Pump``).
  ``on_flush`` runs after the connections' output on every pump: a core that also
  speaks datagrams (gossip's multicast) moves them there.

``stop_listening()`` stops accepting (the connections go on);
``wait_connections_closed()`` waits until none is left. ``close()`` stops listening,
cancels the opens under way, writes what each connection
holds and closes it (the core is not told: the driver is gone); ``wait_closed()``
waits for all of it. Listening errors are ``NetworkError`` (their cause the
``OSError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl as ssl_module
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar, cast

from gossamer._types import Address
from gossamer.aio._pump import DriverCounters, EventCallback, Pump, now
from gossamer.aio.addresses import resolve
from gossamer.aio.stream import ClosesOnExit, WriteFlow, listening_address, peer_address_of
from gossamer.errors import GossamerError, LocalProtocolError, NetworkError
from gossamer.proto.core import ConnectionsCore

__all__ = ["ConnectionsDriver", "tcp_listener"]

log = logging.getLogger("gossamer.connections")

CC = TypeVar("CC", bound=ConnectionsCore)
_T = TypeVar("_T")


class _Connection(WriteFlow, asyncio.Protocol):
    """One TCP connection of a ``ConnectionsDriver``: its id, its bytes not yet handed to
    the transport (before it is made, while paused), and whether to close after them."""

    def __init__(self, driver: ConnectionsDriver[Any], conn: int, peer: Address | None) -> None:
        self._init_write_flow()
        self.driver = driver
        self.conn = conn
        self.peer = peer
        self._transport: asyncio.Transport | None = None
        self.queue: deque[bytes] = deque()
        self.held = 0  # bytes in ``queue``
        self.close_after = False
        self.over_limit = False  # the write backlog passed the limit (reported once)
        self.reported = False  # connection_lost was given to the core (or never will be)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._write_soon = False
        self._eof_sent = False
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport implements Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        driver = self.driver
        if driver.pump.closed:
            transport.close()
            return
        if self.peer is None:  # accepted: the peer is the socket's
            self.peer = peer_address_of(transport.get_extra_info("peername")) or ("", 0)
        driver.pump.feed(driver.core.connection_made, self.conn, self.peer, now())
        self.write_out()  # what the core queued while the connection was being opened

    def data_received(self, data: bytes) -> None:
        driver = self.driver
        pump = driver.pump
        if pump.closed or self.reported:
            return
        pump.counters.received += 1
        pump.counters.received_bytes += len(data)
        if driver.on_error is None:
            pump.feed(driver.core.receive_data, self.conn, data, now())
        else:
            driver._guarded_receive(self.conn, data)

    def eof_received(self) -> bool:
        # No half-close: hand over what is held, and let the transport close.
        self._write_all()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_write_flow()
        if self._linger is not None:
            self._linger.cancel()
        self.driver._lost(self)

    def _writing_resumed(self) -> None:
        self.write_out()

    # -- the driver's side ----------------------------------------------------------

    def add(self, data: bytes) -> None:
        """Queue ``data`` (written by the next ``write_out``)."""
        self.queue.append(data)
        self.held += len(data)

    def write_out(self) -> None:
        """Hand the queued bytes to the transport (unless paused), then close if asked;
        report a write backlog past the driver's limit."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        queue = self.queue
        if self._eof_sent:  # bytes queued after the close are dropped
            queue.clear()
            self.held = 0
            return
        if queue and not self._write_paused:
            counters = self.driver.pump.counters
            if not self.driver.coalesce:
                data = queue.popleft()
                if queue and not self._write_soon:
                    self._write_soon = True
                    asyncio.get_running_loop().call_soon(self._write_next)
            elif len(queue) == 1:
                data = queue.popleft()
            else:
                data = b"".join(queue)
                queue.clear()
            self.held -= len(data)
            counters.sent += 1
            counters.sent_bytes += len(data)
            transport.write(data)
        if self.close_after:
            if not queue:  # all handed over (else: held back while paused)
                if self.driver.half_close and transport.can_write_eof():
                    # End our half; the transport closes at the peer's EOF
                    # (eof_received), so the peer has seen the end at connection_lost.
                    self._eof_sent = True
                    transport.write_eof()
                else:
                    transport.close()  # after its buffer is written out
            if self._linger is None:  # the peer may never read, or never end its half
                self._linger = asyncio.get_running_loop().call_later(
                    self.driver.linger, transport.abort
                )
            return
        limit = self.driver.write_buffer_limit
        if (
            limit is not None
            and not self.over_limit
            and self.held + transport.get_write_buffer_size() > limit
        ):
            self.over_limit = True
            self.driver._backlog(self, transport)

    def _write_next(self) -> None:
        self._write_soon = False
        self.write_out()

    def _write_all(self) -> None:
        transport = self._transport
        if transport is not None and self.queue and not transport.is_closing():
            transport.write(b"".join(self.queue))
        self.queue.clear()
        self.held = 0

    def shut(self) -> None:
        """The driver closes: write what is held, close (the transport flushes first)."""
        self.reported = True
        transport = self._transport
        if transport is None:
            self._finish()
            return
        if self.driver.pump.failure is not None:
            transport.abort()
            return
        self._write_all()
        transport.close()
        if transport.get_write_buffer_size() and self._linger is None:
            # The peer may never read the rest: give up on it after ``linger``.
            self._linger = asyncio.get_running_loop().call_later(
                self.driver.linger, transport.abort
            )

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


def tcp_listener(host: str, port: int, *, backlog: int = 100) -> socket.socket:
    """A TCP socket listening on ``host:port`` (an IP literal; port 0: any free port).
    ``NetworkError`` (its cause the ``OSError``) when it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=backlog)
    except OSError as exc:
        raise NetworkError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", host=host, port=port
        ) from exc


class ConnectionsDriver(ClosesOnExit, Generic[CC]):
    """Runs ``core`` (a ``ConnectionsCore``) over TCP; see the module docstring.

    ``connect_timeout`` bounds each open (seconds); ``ipv6=False`` resolves names to IPv4
    only (protocols whose wire carries IPv4); ``coalesce=False`` writes each
    ``data_to_send()`` pair by itself; ``on_flush`` runs after the connections' output on
    every pump; ``on_event``/``event_queue`` are the ``Pump``'s. ``half_close`` and
    ``linger`` (seconds: how long a close may wait for the peer) shape closes,
    ``write_buffer_limit`` and ``on_backlog`` the write backlog; ``on_error`` is the
    per-connection error boundary (module docstring).
    ``async with`` closes it.
    """

    def __init__(
        self,
        core: CC,
        *,
        connect_timeout: float = 10.0,
        ipv6: bool = True,
        coalesce: bool = True,
        on_flush: Callable[[], None] | None = None,
        on_event: EventCallback | None = None,
        event_queue: bool | None = None,
        half_close: bool = False,
        linger: float = 10.0,
        write_buffer_limit: int | None = None,
        on_backlog: Callable[[int, float], None] | None = None,
        on_error: Callable[[int, Exception, float], None] | None = None,
    ) -> None:
        self.core = core
        self.pump: Pump[CC] = Pump(
            core,
            on_event=on_event,
            event_queue=event_queue,
            flush_output=self._flush,
            shutdown=self._shutdown,
        )
        self.connect_timeout = connect_timeout
        self.ipv6 = ipv6
        self._on_flush = on_flush
        self._server: asyncio.Server | None = None
        # Writing and closing each connection.
        self.coalesce, self.write_buffer_limit = coalesce, write_buffer_limit
        self.half_close, self.linger = half_close, linger
        self.on_backlog, self.on_error = on_backlog, on_error
        #: Inputs that raised inside the error boundary (``on_error``).
        self.connection_errors = 0
        self._idle: asyncio.Event | None = None
        #: The connections made or being opened, by id.
        self.connections: dict[int, _Connection] = {}
        self._dialling: dict[int, asyncio.Task[None]] = {}
        self._closing: list[_Connection] = []
        self._accepted = 0
        self._started = False

    # -- life cycle -----------------------------------------------------------------

    async def start(
        self,
        host: str | None = None,
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        """Listen on ``host:port`` when ``host`` is given (port 0: any free port), or on
        ``sock`` (from ``tcp_listener``, for a core that must know its port before it is
        made), inside TLS with ``ssl``, then pump once (the core's first opens, bytes and
        timer). ``NetworkError`` (its cause the ``OSError``) when the port cannot be
        bound."""
        if self._started:
            raise LocalProtocolError("the connections driver was already started")
        self._started = True
        loop = asyncio.get_running_loop()
        if host is not None:
            sock = tcp_listener(host, port, backlog=backlog)
        if sock is not None:
            self._server = await loop.create_server(
                self._accept, sock=sock, backlog=backlog, ssl=ssl
            )
        self.pump.start(loop)

    @property
    def address(self) -> Address:
        """The listening address (the port bound with port 0)."""
        return listening_address(self._server, "the connections driver")

    @property
    def closed(self) -> bool:
        return self.pump.closed

    @property
    def counters(self) -> DriverCounters:
        """Reads and writes over every connection (``received``/``sent``), timers, events."""
        return self.pump.counters

    def call(self, request: Callable[[float], _T]) -> _T:
        """Run a local request on the core at ``now()``, then flush (``Pump.call``)."""
        return self.pump.call(request)

    def events(self) -> AsyncIterator[object]:
        """The core's events (with ``event_queue``), until the driver closes."""
        return self.pump.events()

    def stop_listening(self) -> None:
        """Accept no more connections; those made go on. Idempotent."""
        if self._server is not None:
            self._server.close()

    async def wait_connections_closed(self) -> None:
        """Wait until no connection is left (made or being opened)."""
        if not self.connections:
            return
        if self._idle is None:
            self._idle = asyncio.Event()
        self._idle.clear()
        await self._idle.wait()

    def close(self) -> None:
        """Stop listening and opening, close every connection after what it holds.
        Idempotent."""
        self.pump.close()

    async def wait_closed(self) -> None:
        """Wait until the listener and every connection are closed; raise the failure
        that stopped the driver, if any."""
        for task in list(self._dialling.values()):
            with contextlib.suppress(BaseException):
                await task
        await asyncio.gather(*(c.done for c in self._closing))
        if self._server is not None:
            await self._server.wait_closed()
        await self.pump.wait_closed()

    # -- the pump's hooks -----------------------------------------------------------

    def _flush(self) -> None:
        core = self.core
        connections = self.connections
        for conn, peer in core.connections_to_open():
            self._open(conn, peer)
        touched: dict[int, _Connection] = {}
        for conn, data in core.data_to_send():
            link = connections.get(conn)
            if link is not None:  # bytes for a dead id are discarded
                link.add(data)
                touched[conn] = link
        for conn in core.connections_to_close():
            link = connections.get(conn)
            if link is not None:
                link.close_after = True
                touched[conn] = link
        for link in touched.values():
            link.write_out()
        if self._on_flush is not None:
            self._on_flush()

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._dialling.values():
            task.cancel()
        self._closing = list(self.connections.values())
        self.connections.clear()
        for link in self._closing:
            link.shut()
        if self._idle is not None:
            self._idle.set()

    # -- connections ----------------------------------------------------------------

    def _accept(self) -> _Connection:
        self._accepted += 1
        link = _Connection(self, self._accepted, None)
        self.connections[link.conn] = link
        return link

    def _open(self, conn: int, peer: Address) -> None:
        link = _Connection(self, conn, peer)
        self.connections[conn] = link
        task = asyncio.get_running_loop().create_task(self._dial(link, peer))
        self._dialling[conn] = task
        task.add_done_callback(lambda _: self._dialling.pop(conn, None))

    async def _dial(self, link: _Connection, peer: Address) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                host, port = await resolve(peer, ipv6=self.ipv6, stream=True)
                link.peer = (host, port)
                await loop.create_connection(lambda: link, host, port)
        except (OSError, TimeoutError, GossamerError):
            self._lost(link)  # refused, timed out, unresolvable: lost before it was made

    def _lost(self, link: _Connection) -> None:
        """Tell the core once that ``link`` is gone (unless the driver is closed)."""
        link._finish()
        if link.reported:
            return
        link.reported = True
        if self.connections.get(link.conn) is link:
            del self.connections[link.conn]
            if not self.connections and self._idle is not None:
                self._idle.set()
        if not self.pump.closed:
            self.pump.feed(self.core.connection_lost, link.conn, now())

    def _guarded_receive(self, conn: int, data: bytes) -> None:
        """``receive_data`` inside the error boundary (``on_error``), then pump."""
        pump = self.pump
        at = now()
        try:
            self.core.receive_data(conn, data, at)
        except Exception as exc:
            self.connection_errors += 1
            log.warning("connection %d: its input raised; closing it", conn, exc_info=exc)
            assert self.on_error is not None
            pump.feed(self.on_error, conn, exc, at)
            return
        pump.pump()

    def _backlog(self, link: _Connection, transport: asyncio.Transport) -> None:
        """``link``'s unwritten bytes passed ``write_buffer_limit``."""
        if self.on_backlog is None:
            transport.abort()
        else:
            self.pump.feed(self.on_backlog, link.conn, now())
