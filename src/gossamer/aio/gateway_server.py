"""The 신경 gateway server: ``GatewayConnections`` on the connections driver.

Opened as every gossamer service is (``docs/api.md``)::

    async with gossamer.open_gateway_server(GatewayConfig(), port=0) as server:
        print(server.address)            # (host, port)
        await server.serve_forever()

``GatewayServer`` listens on one port for both the websocket ``GET
/gateway/websocket?encoding=json|msgpack|etf`` and the HTTP API (``GET /api/version``,
``POST /api/v1/query``, ``POST /api/v1/proxy``, the dead-letter endpoints); with ``ssl``
both are served inside TLS (``ssingyeong://``). Everything about the protocol (the
request line deciding which a connection is, the websocket handshake and framing, the
HTTP limits, the 1008 and 1011 closes, the queue store's commit before any frame that
depends on it, one frame per encoding for a packet to many clients) is in the sans-I/O
``gossamer.proto.gateway.websocket.GatewayConnections``, the one the simulator runs.

This module is its thin driver: the generic ``gossamer.aio.connections.ConnectionsDriver``
(the one multi-connection driver, on the one ``Pump``) with

- ``write_buffer_limit``: a connection whose unwritten bytes pass it (a reader that
  stopped reading) is the core's ``slow_consumer``, closed with 1008 rather than
  buffered without bound;
- the error boundary: an exception while handling one connection's input is that
  connection's ``connection_failed`` (closed with 1011, or answered 500), logged and
  counted; the server goes on;
- the proxy: ``POST /api/v1/proxy`` requests the core hands out are performed here
  (``proxy_timeout``) and answered back to it;
- ``open_timeout`` = ``proxy_timeout`` + 5 s for a connection's upgrade or HTTP request;
- ``half_close``: a connection the core closes ends our half, and closes when the client
  has ended its own (RFC 6455 §7.1.1), within ``linger`` (10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import ssl as ssl_module
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol, TypeVar

from gossamer._types import Address
from gossamer.aio._pump import now
from gossamer.aio.addresses import resolve
from gossamer.aio.connections import ConnectionsDriver
from gossamer.aio.opening import Opening
from gossamer.errors import ConfigError, DecodeError, LocalProtocolError
from gossamer.proto.gateway import http
from gossamer.proto.gateway.core import GatewayConfig, GatewayCore
from gossamer.proto.gateway.queues import QueueRecord, StoreOp
from gossamer.proto.gateway.websocket import GatewayConnections
from gossamer.trace.sink import Tracer

__all__ = ["GatewayServer", "QueueStore", "open_gateway_server"]

log = logging.getLogger("gossamer.gateway")

MAX_PROXY_RESPONSE: Final = 16 << 20

_T = TypeVar("_T")


class QueueStore(Protocol):
    """What the server needs from a durable queue store (``SqliteQueueStore``)."""

    def load(self) -> list[QueueRecord]: ...

    def apply(self, ops: list[StoreOp]) -> None: ...


class GatewayServer:
    """A running gateway. Open it with :func:`open_gateway_server`.

    ``store`` (e.g. ``SqliteQueueStore``) makes queues durable; without it they live in
    memory. ``tracer`` records ``layer=gateway`` events. ``port=0`` picks a free port
    (see ``address``). ``host`` may be a name (``localhost``) or ``::1``. ``ssl`` enables
    TLS. ``write_buffer_limit`` (bytes) is where a reader that stopped reading is closed
    (1008). ``on_event`` gets the core's events.
    """

    def __init__(
        self,
        config: GatewayConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 4567,
        ssl: ssl_module.SSLContext | None = None,
        store: QueueStore | None = None,
        tracer: Tracer | None = None,
        rng: random.Random | None = None,
        proxy_timeout: float = 10.0,
        write_buffer_limit: int = 16 << 20,
        on_event: Callable[[object], None] | None = None,
    ) -> None:
        self.config = config or GatewayConfig()
        self.host = host
        self.requested_port = port
        self.ssl = ssl
        self.store = store
        self.tracer = tracer
        self.rng = rng or random.Random()
        self.proxy_timeout = proxy_timeout
        self.write_buffer_limit = write_buffer_limit
        self.on_event = on_event
        self.core: GatewayCore | None = None
        self._connections: GatewayConnections | None = None
        self._driver: ConnectionsDriver[GatewayConnections] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Called after every flush of the core's output (``gateway_cluster`` takes the
        #: batches waiting for its peers there).
        self.flush_listeners: list[Callable[[], None]] = []
        self._closed = False

    # -- lifecycle -------------------------------------------------------------

    async def _open(self) -> GatewayServer:
        """Load the queue store, build the core and start listening."""
        host, port = await resolve((self.host, self.requested_port), stream=True)
        config = dataclasses.replace(self.config, epoch_offset=time.time() - now())
        records = self.store.load() if self.store is not None else []
        self.core = GatewayCore(config, rng=self.rng, tracer=self.tracer, records=records)
        connections = self._connections = GatewayConnections(
            self.core,
            store=self.store.apply if self.store is not None else None,
            open_timeout=self.proxy_timeout + 5.0,
        )
        self._driver = ConnectionsDriver(
            connections,
            on_event=self.on_event,
            event_queue=False,
            on_flush=self._perform_proxies,
            half_close=True,  # the client closes after our end (RFC 6455 §7.1.1)
            write_buffer_limit=self.write_buffer_limit,
            on_backlog=connections.slow_consumer,
            on_error=connections.connection_failed,
        )
        # Thousands of clients reconnect at once after a restart: a long backlog.
        await self._driver.start(host, port, backlog=4096, ssl=self.ssl)
        return self

    @property
    def driver(self) -> ConnectionsDriver[GatewayConnections]:
        """The connections driver under the server (its ``counters``, ``pump``)."""
        if self._driver is None:
            raise LocalProtocolError("the gateway server is not open")
        return self._driver

    def call(self, request: Callable[[float], _T]) -> _T:
        """Run ``request(now)`` on the core (a local input, such as the cluster's), then
        carry out what it decided at once: packets written, sockets closed."""
        connections = self._connections
        if connections is None:
            raise LocalProtocolError("the gateway server is not open")

        def run(at: float) -> _T:
            try:
                return request(at)
            finally:
                connections.flush(at)

        return self.driver.call(run)

    @property
    def rejected(self) -> Counter[str]:
        """Input refused, by reason: the gateway's op 3 answers (``no_route``, ``invalid
        query``, ...), invalid UTF-8, refused HTTP requests (``http_*``), input that broke
        the core (``core_failed``)."""
        return self._connections.rejected if self._connections is not None else Counter()

    @property
    def slow_consumers(self) -> int:
        """Connections closed (1008) because they stopped reading."""
        return self._connections.slow_consumers if self._connections is not None else 0

    @property
    def address(self) -> Address:
        """Where the gateway listens, ``(host, port)`` (the port bound with ``port=0``)."""
        return self.driver.address

    @property
    def port(self) -> int:
        """The port actually bound (``address[1]``)."""
        return self.address[1]

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self, *, goodbye: bool = True) -> None:
        """Stop listening, say goodbye (op 7, close 1001) to every client and wait up to
        5 s for them to close, then close what is left. Idempotent."""
        if self._closed or self._driver is None or self._connections is None:
            self._closed = True
            return
        self._closed = True
        driver = self._driver
        driver.stop_listening()
        if goodbye and not driver.closed:
            driver.call(self._connections.shutdown)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await driver.wait_connections_closed()
        driver.close()
        for task in list(self._tasks):
            task.cancel()
        try:
            await driver.wait_closed()
        except Exception:  # the failure that had stopped the server: serve_forever raised it
            log.exception("the gateway server had stopped on a failure")

    async def serve_forever(self) -> None:
        """Serve until closed; raise the failure that stopped the server, if any."""
        await self.driver.wait_closed()

    # -- the proxy -------------------------------------------------------------

    def _perform_proxies(self) -> None:
        """The driver's ``on_flush``: start the proxy requests the core handed out, then
        tell the flush listeners."""
        assert self._connections is not None
        for conn, request in self._connections.proxies_to_perform():
            self._spawn(self._proxy_for(conn, request))
        for listener in self.flush_listeners:
            listener()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _proxy_for(self, conn: int, request: http.ProxyRequest) -> None:
        try:
            response = await self.proxy(request)
        except Exception:  # a bug must not leave the client hanging
            log.exception("proxy request to %s failed", request.host)
            response = http.HttpResponse(status=500, body=b'{"error":"internal server error"}')
        driver, connections = self._driver, self._connections
        if driver is not None and connections is not None and not driver.closed:
            driver.call(lambda at: connections.proxy_answered(conn, response, at))

    async def proxy(self, request: http.ProxyRequest) -> http.HttpResponse:
        """Perform a proxied request (``POST /api/v1/proxy``) within ``proxy_timeout``."""
        context = ssl_module.create_default_context() if request.scheme == "https" else None
        try:
            async with asyncio.timeout(self.proxy_timeout):
                reader, writer = await asyncio.open_connection(
                    request.host, request.port, ssl=context
                )
                try:
                    writer.write(http.proxy_request_bytes(request))
                    await writer.drain()
                    data = bytearray()
                    while chunk := await reader.read(65536):
                        data += chunk
                        if len(data) > MAX_PROXY_RESPONSE:
                            raise DecodeError("upstream response too large")
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
            return http.parse_response(bytes(data))
        except TimeoutError:
            return http.HttpResponse(status=504, body=b'{"errors":["client timed out"]}')
        except (OSError, DecodeError) as exc:
            body = f'{{"errors":["client request failed: {type(exc).__name__}"]}}'.encode()
            return http.HttpResponse(status=502, body=body)


def open_gateway_server(
    config: GatewayConfig | None = None, **options: Any
) -> Opening[GatewayServer]:
    """Open a gateway listening on ``host:port`` (default ``127.0.0.1:4567``; ``port=0``
    picks a free one, see ``address``); await it or use it with ``async with`` (closed,
    clients told goodbye, on the way out). ``options`` are :class:`GatewayServer`'s
    keyword arguments. ``NetworkError`` when the port cannot be bound."""
    try:
        server = GatewayServer(config, **options)
    except TypeError as exc:
        raise ConfigError(f"unknown gateway server option: {exc}") from exc
    return Opening(server._open)
