"""The 신경 gateway server: websockets' asyncio server around ``GatewayCore``.

Opened as every gossamer service is (``docs/api.md``)::

    async with gossamer.open_gateway_server(GatewayConfig(), port=0) as server:
        print(server.address)            # (host, port)
        await server.serve_forever()

``GatewayServer`` listens on one port for both

- the websocket ``GET /gateway/websocket?encoding=json|msgpack|etf`` (any other
  encoding: HTTP 403, as the reference), served by the ``websockets`` library, and
- the HTTP API (``gossamer.proto.gateway.http``): ``GET /api/version``,
  ``POST /api/v1/query``, ``POST /api/v1/proxy`` and the dead-letter endpoints.

websockets only parses bodiless GET requests, so each connection first looks at the
request line: the websocket path goes to websockets untouched, anything else to a
small HTTP/1.1 handler here (one request per connection, ``Connection: close``,
bounded head and body). With ``ssl`` the same happens inside TLS (``ssingyeong://``).

The driver is the thin pump of DESIGN.md, on the one driver runtime
(``gossamer.aio._pump.Pump``, with an output hook for the many connections): each frame
goes to ``core.receive`` with ``now=now()``, then the pump's output hook commits the
core's store operations to the queue store (SQLite, ``gossamer.store.queues``)
*before* carrying out its actions, so a
QUEUE_CONFIRM never leaves before its message is durable; one packet addressed to
many connections is framed once per encoding (RFC 6455 header and payload, the bytes
websockets' own writer would produce: server frames are unmasked and compression is
off) and written to each with one ``transport.write``, after whatever websockets
queued on that connection itself. Frames go from websockets' parser straight to the
core (no receive queue, no task per message). The pump's one timer follows
``core.next_deadline()``. A connection whose write buffer passes
``write_buffer_limit`` (a reader that stopped reading) is closed with 1008 rather than
buffering without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import ssl as ssl_module
import struct
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import msgpack
import orjson
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import Event, State

from gossamer._types import Address
from gossamer.aio._pump import Pump, now
from gossamer.aio.addresses import resolve
from gossamer.aio.opening import Opening
from gossamer.errors import ConfigError, DecodeError, LocalProtocolError, NetworkError
from gossamer.proto.gateway import http
from gossamer.proto.gateway.core import Close, GatewayConfig, GatewayCore, Transmit
from gossamer.proto.gateway.queues import QueueRecord, StoreOp
from gossamer.trace.sink import Tracer
from gossamer.wire.gateway import ENCODINGS, Encoding, Op, Packet, encode_packet

__all__ = ["GatewayServer", "QueueStore", "open_gateway_server"]

log = logging.getLogger("gossamer.gateway")

WEBSOCKET_PATH: Final = "/gateway/websocket"
MAX_HTTP_BODY: Final = 1 << 20
MAX_PROXY_RESPONSE: Final = 16 << 20


class QueueStore(Protocol):
    """What the server needs from a durable queue store (``SqliteQueueStore``)."""

    def load(self) -> list[QueueRecord]: ...

    def apply(self, ops: list[StoreOp]) -> None: ...


class _HttpExchange:
    """Collects one HTTP request (head and body) on a connection that is not a websocket."""

    def __init__(self, conn: _GatewayConnection) -> None:
        self.conn = conn
        self.buffer = bytearray()
        self.head: tuple[str, str, dict[str, str]] | None = None
        self.body_start = 0
        self.length = 0
        self.started = False

    def feed(self, data: bytes) -> None:
        if self.started:
            return
        self.buffer += data
        if self.head is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > http.MAX_HEAD:
                    self.finish(http.HttpResponse(status=431, body=b'{"error":"head too large"}'))
                return
            if end > http.MAX_HEAD:
                self.finish(http.HttpResponse(status=431, body=b'{"error":"head too large"}'))
                return
            try:
                self.head = http.parse_request_head(bytes(self.buffer[:end]))
            except DecodeError as exc:
                body = f'{{"error":"{exc.reason}"}}'.encode()
                self.finish(http.HttpResponse(status=400, body=body))
                return
            headers = self.head[2]
            if "transfer-encoding" in headers:
                self.finish(http.HttpResponse(status=411, body=b'{"error":"length required"}'))
                return
            length = headers.get("content-length", "0").strip()
            if not length.isdigit():
                self.finish(http.HttpResponse(status=400, body=b'{"error":"bad content-length"}'))
                return
            self.length = int(length)
            if self.length > MAX_HTTP_BODY:
                self.finish(http.HttpResponse(status=413, body=b'{"error":"body too large"}'))
                return
            self.body_start = end + 4
        if len(self.buffer) - self.body_start >= self.length:
            self.started = True
            method, target, headers = self.head
            body = bytes(self.buffer[self.body_start : self.body_start + self.length])
            request = http.HttpRequest(
                method=method,
                path=unquote(urlsplit(target).path),
                headers=headers,
                body=body,
            )
            self.conn.gateway.spawn(self.respond(request))

    async def respond(self, request: http.HttpRequest) -> None:
        gateway = self.conn.gateway
        peer = self.conn.peer_host
        try:
            answer = gateway.http_answer(request, peer)
            if isinstance(answer, http.ProxyRequest):
                answer = await gateway.proxy(answer)
        except Exception:  # a bug must not leave the client hanging
            log.exception("HTTP request %s %s failed", request.method, request.path)
            answer = http.HttpResponse(status=500, body=b'{"error":"internal server error"}')
        self.finish(answer)

    def finish(self, response: http.HttpResponse) -> None:
        self.started = True
        if response.status in _REFUSED:
            self.conn.gateway.rejected[_REFUSED[response.status]] += 1
        transport = self.conn.transport
        if not transport.is_closing():
            transport.write(http.response_bytes(response))
            transport.close()


class _GatewayConnection(ServerConnection):
    """A websockets server connection that hands non-websocket requests to the API."""

    gateway: GatewayServer  # set on the per-server subclass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mode = 0  # 0: reading the request line, 1: websocket, 2: plain HTTP
        self._sniffed = bytearray()
        self._exchange: _HttpExchange | None = None
        self.gateway_encoding: Encoding = "json"
        self.gateway_conn = 0
        # Messages go straight from websockets' frame parser to the core (no receive
        # queue, no task wake-up per message): fragments are joined here.
        self._attached = False
        self._early: list[str | bytes] = []
        self._fragments: list[bytes] = []
        self._fragment_text = False
        self._frames_seen = False

    def attach(self, conn: int) -> None:
        """Start handing messages to the gateway as connection ``conn``."""
        self.gateway_conn = conn
        self._attached = True
        early, self._early = self._early, []
        for data in early:
            self.gateway.on_frame(self, data)
        if early:
            self.gateway.pump.pump()

    def process_event(self, event: Event) -> None:
        if self.request is None or not isinstance(event, Frame):
            super().process_event(event)
            return
        opcode = event.opcode
        if opcode is Opcode.TEXT and event.fin and self._attached:
            # The common case in one step: a whole text message once attached.
            try:
                message = bytes(event.data).decode()
            except UnicodeDecodeError:
                self._invalid_utf8()
                return
            self._frames_seen = True
            self.gateway.on_frame(self, message)
        elif opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            if not event.fin:
                self._fragment_text = opcode is Opcode.TEXT
                self._fragments = [bytes(event.data)]
                return
            self._message(bytes(event.data), opcode is Opcode.TEXT)
        elif opcode is Opcode.CONT:
            # websockets' protocol already checked the sequence and the total size.
            self._fragments.append(bytes(event.data))
            if event.fin:
                data, self._fragments = b"".join(self._fragments), []
                self._message(data, self._fragment_text)
        else:
            super().process_event(event)  # pongs

    def _message(self, data: bytes, text: bool) -> None:
        message: str | bytes = data
        if text:
            try:
                message = data.decode()
            except UnicodeDecodeError:
                self._invalid_utf8()
                return
        if not self._attached:
            self._early.append(message)
            return
        self._frames_seen = True
        self.gateway.on_frame(self, message)

    def _invalid_utf8(self) -> None:
        self.gateway.rejected["invalid_utf8"] += 1
        self.protocol.fail(CloseCode.INVALID_DATA, "invalid UTF-8 in a text frame")
        self.send_data()

    @property
    def peer_host(self) -> str:
        peer = self.transport.get_extra_info("peername")
        return str(peer[0]) if peer else "unknown"

    def data_received(self, data: bytes) -> None:
        if self._mode == 1:
            super().data_received(data)
            if self._frames_seen:
                # One flush per read: the store commits once for every frame in it,
                # still before anything those frames caused is sent.
                self._frames_seen = False
                self.gateway.pump.pump()
            return
        if self._mode == 2:
            assert self._exchange is not None
            self._exchange.feed(data)
            return
        self._sniffed += data
        end = self._sniffed.find(b"\r\n")
        if end < 0 and len(self._sniffed) < 8192:
            return
        line = bytes(self._sniffed[: max(end, 0)])
        parts = line.split(b" ")
        path = parts[1].split(b"?", 1)[0] if len(parts) == 3 else b""
        buffered, self._sniffed = bytes(self._sniffed), bytearray()
        if end < 0 or (parts[0] == b"GET" and path == WEBSOCKET_PATH.encode()):
            self._mode = 1  # websockets answers (or refuses) the upgrade
            self.data_received(buffered)
        else:
            self._mode = 2
            self._exchange = _HttpExchange(self)
            self._exchange.feed(buffered)

    def eof_received(self) -> bool | None:  # type: ignore[override]
        if self._mode == 2:
            # Keep the socket open to answer a client that half-closed after its request.
            return self._exchange is not None and self._exchange.started and not (
                self.transport.get_extra_info("sslcontext")
            )
        super().eof_received()
        return None


class GatewayServer:
    """A running gateway. Open it with :func:`open_gateway_server`.

    ``store`` (e.g. ``SqliteQueueStore``) makes queues durable; without it they live in
    memory. ``tracer`` records ``layer=gateway`` events. ``port=0`` picks a free port
    (see ``address``). ``host`` may be a name (``localhost``) or ``::1``. ``ssl`` enables
    TLS. ``on_event`` gets the core's events.
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
        self._server: Server | None = None
        self._conns: dict[int, _GatewayConnection] = {}
        self._next_conn = 0
        self._pump: Pump[GatewayCore] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.slow_consumers = 0
        #: Input refused, by reason: the gateway's op 3 answers (``no_route``, ``invalid
        #: query``, ...), invalid UTF-8, refused HTTP requests, frames that broke the core.
        self.rejected: Counter[str] = Counter()

    # -- lifecycle -------------------------------------------------------------

    async def _open(self) -> GatewayServer:
        """Load the queue store, build the core and start listening."""
        host, port = await resolve((self.host, self.requested_port), stream=True)
        config = dataclasses.replace(self.config, epoch_offset=time.time() - now())
        records = self.store.load() if self.store is not None else []
        self.core = GatewayCore(config, rng=self.rng, tracer=self.tracer, records=records)
        self._pump = Pump(
            self.core, on_event=self.on_event, event_queue=False, flush_output=self._carry_out
        )
        self._pump.start()
        connection_class = type(
            "GatewayConnection", (_GatewayConnection,), {"gateway": self}
        )
        try:
            self._server = await serve(
                self._handle,
                host,
                port,
                ssl=self.ssl,
                process_request=self._process_request,
                create_connection=connection_class,
                max_size=self.config.max_frame_size,
                # Liveness is the gateway's heartbeat (op 5), as in the reference; the
                # transport's own pings would only add traffic.
                ping_interval=None,
                compression=None,
                open_timeout=self.proxy_timeout + 5.0,
                # Thousands of clients reconnect at once after a restart.
                backlog=4096,
                server_header=None,
            )
        except OSError as exc:
            self._pump.close()
            raise NetworkError(
                f"cannot listen on {host}:{port}: {exc.strerror}", host=host, port=port
            ) from exc
        return self

    @property
    def pump(self) -> Pump[GatewayCore]:
        """The driver runtime under the server (the connections pump it after input)."""
        if self._pump is None:
            raise LocalProtocolError("the gateway server is not open")
        return self._pump

    @property
    def address(self) -> Address:
        """Where the gateway listens, ``(host, port)`` (the port bound with ``port=0``)."""
        if self._server is None:
            raise LocalProtocolError("the gateway server is not open")
        name = self._server.sockets[0].getsockname()
        return str(name[0]), int(name[1])

    @property
    def port(self) -> int:
        """The port actually bound (``address[1]``)."""
        return self.address[1]

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self, *, goodbye: bool = True) -> None:
        """Say goodbye (op 7, close 1001) to every client, then stop listening.
        Idempotent."""
        if self._closed or self._server is None:
            self._closed = True
            return
        self._closed = True
        self._server.close(close_connections=False)
        if goodbye and self.core is not None:
            self.core.shutdown(now())
            self.pump.pump()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await self._server.wait_closed()
        self.pump.close()
        for task in list(self._tasks):
            task.cancel()

    async def serve_forever(self) -> None:
        """Serve until cancelled or closed."""
        if self._server is None:
            raise LocalProtocolError("the gateway server is not open")
        await self._server.serve_forever()

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- websockets ------------------------------------------------------------

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        query = parse_qs(urlsplit(request.path).query)
        encoding = query.get("encoding", ["json"])[-1]
        if encoding not in ENCODINGS:
            # The reference refuses the upgrade with 403 (singyeong-as-coded §2).
            return conn.respond(403, f"unknown encoding {encoding!r}\n")
        assert isinstance(conn, _GatewayConnection)
        conn.gateway_encoding = encoding
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        """One websocket, from the end of its handshake to its close."""
        assert isinstance(ws, _GatewayConnection) and self.core is not None
        self._next_conn += 1
        conn = self._next_conn
        self._conns[conn] = ws
        core = self.core
        host, encoding = ws.peer_host, ws.gateway_encoding
        self.pump.feed(lambda: core.connect(conn, host=host, encoding=encoding, now=now()))
        ws.attach(conn)  # frames now go to on_frame, including any that came early
        try:
            await ws.wait_closed()
        finally:
            self._conns.pop(conn, None)
            self.pump.feed(lambda: core.disconnect(conn, now()))

    def on_frame(self, ws: _GatewayConnection, data: str | bytes) -> None:
        """A whole websocket message from ``ws`` (called from its ``data_received``)."""
        assert self.core is not None
        try:
            self.core.receive(ws.gateway_conn, data, now())
        except Exception:  # a bug must cost one connection, never the server
            self.rejected["core_failed"] += 1
            log.exception("gateway core failed on a frame from connection %d", ws.gateway_conn)
            self.spawn(ws.close(1011, "internal server error"))

    # -- the pump --------------------------------------------------------------

    def _carry_out(self) -> None:
        """The pump's output hook: commit the store operations, then carry out the
        actions (see the module docstring); the pump then delivers the events."""
        core = self.core
        assert core is not None
        ops = core.store_ops()
        if ops and self.store is not None:
            self.store.apply(ops)  # committed before anything that depends on it leaves
        for action in core.actions():
            if isinstance(action, Transmit):
                self._transmit(action)
            else:
                self._close(action)

    def _transmit(self, action: Transmit) -> None:
        frames: dict[str, bytes] = {}
        packet = action.packet
        if packet.op is Op.INVALID and isinstance(packet.d, dict):
            self.rejected[str(packet.d.get("error"))] += 1
        conns = self._conns
        limit = self.write_buffer_limit
        for conn in action.conns:
            ws = conns.get(conn)
            if ws is None:
                continue
            protocol = ws.protocol
            if protocol.state is not State.OPEN:
                continue
            encoding = ws.gateway_encoding
            frame = frames.get(encoding)
            if frame is None:
                frame = frames[encoding] = _frame(packet, encoding)
            if protocol.writes:
                ws.send_data()  # what websockets queued itself (a pong) goes first
            # The whole frame, header included, in one write: what websockets'
            # send_text + send_data produce for a server frame (unmasked, no extension:
            # compression is off), without building a Frame per receiver.
            transport = ws.transport
            transport.write(frame)
            if transport.get_write_buffer_size() > limit:
                self.slow_consumers += 1
                self.spawn(ws.close(1008, "slow consumer: write buffer full"))

    def _close(self, action: Close) -> None:
        ws = self._conns.get(action.conn)
        if ws is not None:
            self.spawn(ws.close(action.code, action.reason))

    # -- HTTP ------------------------------------------------------------------

    def http_answer(self, request: http.HttpRequest, peer: str) -> (
        http.HttpResponse | http.ProxyRequest
    ):
        """Answer an API request; queue changes (a replay) are committed and flushed."""
        assert self.core is not None
        answer = http.handle(self.core, request, peer=peer, now=now())
        self.pump.pump()
        return answer

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


#: HTTP answers that refuse a request, and the reason ``rejected`` counts them under.
_REFUSED: Final = {400: "http_bad_request", 411: "http_length_required",
                   413: "http_body_too_large", 431: "http_head_too_large"}


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


def _frame(packet: Packet, encoding: Encoding) -> bytes:
    """A whole websocket frame (RFC 6455 §5.2) carrying ``packet``: FIN, opcode text for
    JSON and binary otherwise, no mask (server to client), then the payload length in
    7, 7+16 or 7+64 bits."""
    data = _encode(packet, encoding)
    first = 0x81 if encoding == "json" else 0x82
    length = len(data)
    if length < 126:
        return bytes((first, length)) + data
    if length < 1 << 16:
        return _HEADER16.pack(first, 126, length) + data
    return _HEADER64.pack(first, 127, length) + data


_HEADER16: Final = struct.Struct("!BBH")
_HEADER64: Final = struct.Struct("!BBQ")


def _encode(packet: Packet, encoding: Encoding) -> bytes:
    """One frame's bytes. JSON and msgpack take a direct path: the core only builds
    packets from values that ``decode_packet`` produced, which are already in the JSON
    domain, so ``encode_packet``'s normalising walk (a third of the cost of a routed
    SEND) is only needed as the fallback and for ETF."""
    envelope = {"op": int(packet.op), "d": packet.d, "t": packet.t, "ts": packet.ts}
    try:
        if encoding == "json":
            return orjson.dumps(envelope)
        if encoding == "msgpack":
            packed: bytes = msgpack.packb(envelope, use_bin_type=True)
            return packed
    except (TypeError, ValueError, OverflowError):
        pass  # outside the fast path's domain: let the codec decide (and explain)
    frame = encode_packet(packet, encoding)
    return frame.encode() if isinstance(frame, str) else frame
