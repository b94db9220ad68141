"""The gateway's cores over byte streams: the websocket layer, sans-I/O.

``GatewayCore`` and ``ClientCore`` speak websocket *messages*. This module puts each
under the multi-connection contract of ``gossamer.proto.core.ConnectionsCore`` (bytes
in and out per connection), with websockets' own sans-I/O protocol objects doing the
HTTP/1.1 upgrade and the RFC 6455 framing, pings and closing handshake:

- ``GatewayConnections``: the server, for the asyncio server
  (``gossamer.aio.gateway_server``, on the connections driver) and the simulator alike.
  The request line decides what a connection is: ``GET /gateway/websocket...`` is the
  websocket upgrade (``encoding=json|msgpack|etf``; another encoding is answered 403, as
  the reference); any other request goes to the HTTP API (``gossamer.proto.gateway.http``:
  one request per connection, bounded head and body, answered then closed; a proxy
  request is handed to the driver, ``proxies_to_perform``/``proxy_answered``). Once the
  handshake is done the gateway core sees ``connect``; each whole message (fragments
  joined, text checked for UTF-8) goes to ``receive``; ``connection_lost`` becomes
  ``disconnect``. Queue changes (``store_ops``) go to ``store`` before any frame their
  messages caused is produced, so a QUEUE_CONFIRM never leaves before its message is
  durable. One packet for many connections is framed once per encoding (the RFC 6455
  bytes websockets' own writer would produce, ``server_frame``). ``slow_consumer`` (a
  reader that stopped reading) closes a connection with 1008, ``connection_failed`` (its
  input raised) with 1011 or an HTTP 500; ``rejected`` counts refused input by reason.
  With ``open_timeout``, a connection that has not finished its upgrade or its HTTP
  request in time is closed.
- ``ClientConnections``: one logical client that dials ``gateway`` whenever its core
  says a connection is due (``connect_due``), one connection at a time.

Either side closes the TCP connection once the closing handshake is over, or
``close_timeout`` seconds after it sent its close frame if the peer never answers.

Determinism: the server's handshake response carries no ``Date`` header (nothing here
reads the clock). Client frames are masked, and the handshake key drawn, by websockets
from the operating system's randomness, as RFC 6455 requires; nothing a core or a trace
sees depends on them (masks change bytes, never lengths), so simulated runs stay a
function of their seed.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar
from urllib.parse import parse_qs, urlsplit

import msgpack
import orjson
from websockets.client import ClientProtocol
from websockets.frames import CloseCode as WsCloseCode
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import Protocol, State
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

from gossamer._types import Address
from gossamer.proto.core import OpenIds, TimedCore
from gossamer.proto.gateway.client import ClientCore, ClientEvent, ClientState
from gossamer.proto.gateway.core import ClientJoined, ClientLeft, GatewayCore, Transmit
from gossamer.proto.gateway.http import (
    REFUSED,
    HttpResponse,
    ProxyRequest,
    RequestReader,
    handle,
    response_bytes,
)
from gossamer.proto.gateway.queues import StoreOp
from gossamer.wire.gateway import ENCODINGS, Encoding, Op, Packet, encode_packet

__all__ = ["WEBSOCKET_PATH", "ClientConnections", "GatewayConnections", "server_frame"]

WEBSOCKET_PATH: Final = "/gateway/websocket"
_UPGRADE_PATH: Final = WEBSOCKET_PATH.encode()
#: Seconds to wait for the peer's close frame (websockets' own default).
CLOSE_TIMEOUT: Final = 10.0
#: A request line longer than this is not read further (websockets refuses it).
MAX_REQUEST_LINE: Final = 8192


class _Messages:
    """Whole messages out of websocket frames: fragments joined, text decoded."""

    __slots__ = ("_fragments", "_text")

    def __init__(self) -> None:
        self._fragments: list[bytes] = []
        self._text = False

    def feed(self, frame: Frame) -> str | bytes | None:
        """The message ``frame`` completes, or None; ``UnicodeDecodeError`` for a text
        message that is not UTF-8."""
        opcode = frame.opcode
        if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            if frame.fin:  # a whole message in one frame, the common case: no joining
                data = bytes(frame.data)
                return data.decode() if opcode is Opcode.TEXT else data
            self._text = opcode is Opcode.TEXT
            self._fragments = [bytes(frame.data)]
            return None
        elif opcode is Opcode.CONT:
            # websockets' parser already checked the sequence and the total size.
            self._fragments.append(bytes(frame.data))
        else:
            return None  # control frames: websockets answers pings and closes itself
        if not frame.fin:
            return None
        data, self._fragments = b"".join(self._fragments), []
        return data.decode() if self._text else data


@dataclass(slots=True)
class _Link:
    """One connection's websocket state (either side)."""

    ws: Protocol
    peer: Address
    messages: _Messages = field(default_factory=_Messages)
    encoding: Encoding | None = None  # server: set once the handshake is accepted
    open: bool = False  # the handshake is done: frames carry messages
    closed: bool = False  # we asked the driver to close the TCP connection
    #: Frames written past websockets (the server's shared frames), in order with its own.
    held: list[bytes] = field(default_factory=list)


T = TypeVar("T")


def _taken(items: list[T]) -> list[T]:
    """The items, leaving the list empty (how outputs are drained)."""
    taken = items.copy()
    items.clear()
    return taken


K = TypeVar("K", bound=TimedCore)


class _Pump(Generic[K]):
    """What both sides share: bytes per connection, closes, close deadlines, the timer."""

    def __init__(self, core: K) -> None:
        self.core = core
        self._links: dict[int, _Link] = {}
        self._out: list[tuple[int, bytes]] = []
        self._close: list[int] = []
        #: Connections whose websocket may have bytes to send.
        self._dirty: dict[int, None] = {}
        #: Connections whose close frame went out: when to give up on the peer's.
        self._close_at: dict[int, float] = {}
        #: Input refused, by reason (invalid UTF-8, ...; the server adds its own).
        self.rejected: Counter[str] = Counter()

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        link = self._links.get(conn)
        if link is None or link.closed:
            return
        self._feed(conn, link, data, now)

    def _feed(self, conn: int, link: _Link, data: bytes, now: float) -> None:
        ws = link.ws
        ws.receive_data(data)
        for event in ws.events_received():
            if not isinstance(event, Frame):
                self._handshake(conn, link, event, now)
            elif link.open:
                try:
                    message = link.messages.feed(event)
                except UnicodeDecodeError:
                    self.rejected["invalid_utf8"] += 1
                    ws.fail(WsCloseCode.INVALID_DATA, "invalid UTF-8 in a text frame")
                    continue
                if message is not None:
                    self._message(conn, message, now)
        self._dirty[conn] = None
        self.flush(now)

    def _handshake(self, conn: int, link: _Link, event: Request | Response, now: float) -> None:
        raise NotImplementedError

    def _message(self, conn: int, message: str | bytes, now: float) -> None:
        raise NotImplementedError

    def data_to_send(self) -> list[tuple[int, bytes]]:
        return _taken(self._out)

    def connections_to_close(self) -> list[int]:
        return _taken(self._close)

    def handle_timer(self, now: float) -> None:
        self.core.handle_timer(now)
        self._expire(now)
        self.flush(now)

    def next_deadline(self) -> float | None:
        """The core's deadline (``_core_deadline``) or a close timeout, the earlier."""
        core = self._core_deadline()
        if not self._close_at:
            return core
        close = min(self._close_at.values())
        return close if core is None else min(core, close)

    def flush(self, now: float) -> None:
        raise NotImplementedError

    def _core_deadline(self) -> float | None:
        raise NotImplementedError

    def _forget(self, conn: int) -> _Link | None:
        """Drop what is kept about ``conn`` (its connection is lost); its link, if any."""
        self._dirty.pop(conn, None)
        self._close_at.pop(conn, None)
        return self._links.pop(conn, None)

    def _expire(self, now: float) -> None:
        for conn, when in list(self._close_at.items()):
            if when <= now:
                self._expired(conn)

    def _expired(self, conn: int) -> None:
        """``conn``'s close (or open) deadline passed: close the TCP connection."""
        self._end(conn, self._links[conn])

    def _drain(self, conn: int, link: _Link) -> None:
        if link.held:
            self._out.extend((conn, data) for data in link.held)
            link.held.clear()
        for data in link.ws.data_to_send():
            if data:
                self._out.append((conn, data))
            else:  # websockets' end of stream: the closing handshake is over
                self._end(conn, link)

    def _end(self, conn: int, link: _Link) -> None:
        self._close_at.pop(conn, None)
        if not link.closed:
            link.closed = True
            self._close.append(conn)

    def _send_close(self, conn: int, link: _Link, code: int, reason: str, now: float) -> None:
        if link.ws.state is State.OPEN:
            link.ws.send_close(code, reason)
            self._close_at[conn] = now + CLOSE_TIMEOUT


class GatewayConnections(_Pump[GatewayCore]):
    """``GatewayCore`` as a ``ConnectionsCore``, with the HTTP API on the same connections
    (see the module docstring).

    ``store`` receives the core's queue changes to make durable (``QueueStore.apply``);
    without it they are dropped and queues live in memory. ``open_timeout`` (seconds,
    ``None``: no limit) bounds a connection's upgrade or HTTP request. Local requests go
    to ``core`` directly; the next input or timer carries their output out (call
    ``flush(now)`` to do it at once)."""

    def __init__(
        self,
        core: GatewayCore,
        *,
        store: Callable[[list[StoreOp]], None] | None = None,
        open_timeout: float | None = None,
    ) -> None:
        super().__init__(core)
        self._store = store
        self.open_timeout = open_timeout
        self._peers: dict[int, Address] = {}  # every connection, from made to lost
        self._sniffing: dict[int, bytearray] = {}  # its request line is not read yet
        self._http: dict[int, RequestReader] = {}  # an HTTP request, until answered
        self._ended: set[int] = set()  # not a websocket, asked to close
        self._proxies: list[tuple[int, ProxyRequest]] = []
        #: Connections closed because they stopped reading (``slow_consumer``).
        self.slow_consumers = 0

    # -- inputs --------------------------------------------------------------------

    def connection_made(self, conn: int, peer: Address, now: float) -> None:
        self._peers[conn] = peer
        self._sniffing[conn] = bytearray()
        if self.open_timeout is not None:
            self._close_at[conn] = now + self.open_timeout

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        link = self._links.get(conn)
        if link is not None:
            if not link.closed:
                self._feed(conn, link, data, now)
            return
        reader = self._http.get(conn)
        if reader is not None:
            self._http_data(conn, reader, data, now)
            return
        sniffed = self._sniffing.get(conn)
        if sniffed is None:
            return  # closing
        sniffed += data
        end = sniffed.find(b"\r\n")
        if end < 0 and len(sniffed) < MAX_REQUEST_LINE:
            return
        del self._sniffing[conn]
        parts = bytes(sniffed[: max(end, 0)]).split(b" ")
        path = parts[1].split(b"?", 1)[0] if len(parts) == 3 else b""
        if end < 0 or (parts[0] == b"GET" and path == _UPGRADE_PATH):
            # The upgrade (or a line too long to read: websockets refuses it).
            max_size = self.core.config.max_frame_size
            link = _Link(ws=ServerProtocol(max_size=max_size), peer=self._peers[conn])
            self._links[conn] = link
            self._feed(conn, link, bytes(sniffed), now)
        else:
            reader = self._http[conn] = RequestReader()
            self._http_data(conn, reader, bytes(sniffed), now)

    def connection_lost(self, conn: int, now: float) -> None:
        self._peers.pop(conn, None)
        self._sniffing.pop(conn, None)
        self._http.pop(conn, None)
        self._ended.discard(conn)
        link = self._forget(conn)
        if link is not None and link.encoding is not None:
            self.core.disconnect(conn, now)
            self.flush(now)

    def proxy_answered(self, conn: int, response: HttpResponse, now: float) -> None:
        """The driver performed ``conn``'s proxy request: answer it (if still there)."""
        if conn in self._http and conn not in self._ended:
            self._answer(conn, response)

    def slow_consumer(self, conn: int, now: float) -> None:
        """``conn`` stopped reading (its unwritten bytes passed the driver's limit):
        close it with 1008 at once, the close frame after what is already queued."""
        self.slow_consumers += 1
        self._fail(conn, 1008, "slow consumer: write buffer full", now)

    def connection_failed(self, conn: int, exc: Exception, now: float) -> None:
        """Handling ``conn``'s input raised ``exc`` (a bug must cost one connection,
        never the server): close it with 1011, or answer its HTTP request 500."""
        self.rejected["core_failed"] += 1
        if conn in self._http:
            if conn not in self._ended:
                self._answer(conn, _INTERNAL_ERROR)
            return
        self._fail(conn, 1011, "internal server error", now)

    def shutdown(self, now: float) -> None:
        """Goodbye (op 7) and a 1001 close to every client."""
        self.core.shutdown(now)
        self.flush(now)

    # -- outputs -------------------------------------------------------------------

    def connections_to_open(self) -> list[tuple[int, Address]]:
        return []  # a gateway only accepts

    def proxies_to_perform(self) -> list[tuple[int, ProxyRequest]]:
        """HTTP proxy requests (``POST /api/v1/proxy``) to perform, each answered with
        ``proxy_answered`` (a driver without a proxy leaves them unanswered)."""
        return _taken(self._proxies)

    def events_received(self) -> list[ClientJoined | ClientLeft]:
        return self.core.events_received()

    def _core_deadline(self) -> float | None:
        return self.core.next_deadline()

    def flush(self, now: float) -> None:
        """Carry out what the core decided: commit, then frame and close."""
        core = self.core
        ops = core.store_ops()
        if ops and self._store is not None:
            self._store(ops)  # durable before any frame that depends on it exists
        links = self._links
        dirty = self._dirty
        for action in core.actions():
            if isinstance(action, Transmit):
                packet = action.packet
                if packet.op is Op.INVALID and isinstance(packet.d, dict):
                    self.rejected[str(packet.d.get("error"))] += 1
                frames: dict[Encoding, bytes] = {}
                for conn in action.conns:
                    link = links.get(conn)
                    if link is None or link.encoding is None or link.ws.state is not State.OPEN:
                        continue
                    frame = frames.get(link.encoding)
                    if frame is None:
                        frame = frames[link.encoding] = server_frame(packet, link.encoding)
                    ws = link.ws
                    if ws.writes:  # what websockets queued itself (a pong) goes first
                        link.held.extend(ws.data_to_send())
                    link.held.append(frame)
                    dirty[conn] = None
            else:
                link = links.get(action.conn)
                if link is not None:
                    self._send_close(action.conn, link, action.code, action.reason, now)
                    dirty[action.conn] = None
        self._dirty = {}
        for conn in dirty:
            link = links.get(conn)
            if link is not None:
                self._drain(conn, link)

    # -- helpers -------------------------------------------------------------------

    def _message(self, conn: int, message: str | bytes, now: float) -> None:
        self.core.receive(conn, message, now)

    def _handshake(self, conn: int, link: _Link, request: Request | Response, now: float) -> None:
        ws = link.ws
        assert isinstance(ws, ServerProtocol) and isinstance(request, Request)
        encoding = parse_qs(urlsplit(request.path).query).get("encoding", ["json"])[-1]
        response: Response
        if encoding not in ENCODINGS:
            # The reference refuses the upgrade with 403 (singyeong-as-coded §2).
            response = ws.reject(403, f"unknown encoding {encoding!r}\n")
        else:
            response = ws.accept(request)
        del response.headers["Date"]  # no clock in a sans-I/O core
        ws.send_response(response)
        if response.status_code == 101:
            self._close_at.pop(conn, None)  # the open timeout
            link.encoding = chosen = next(e for e in ENCODINGS if e == encoding)
            link.open = True
            self.core.connect(conn, host=link.peer[0], encoding=chosen, now=now)

    def _http_data(self, conn: int, reader: RequestReader, data: bytes, now: float) -> None:
        answer = reader.feed(data)
        if answer is None:
            return
        self._close_at.pop(conn, None)  # the open timeout: the request is in
        if isinstance(answer, HttpResponse):
            self._answer(conn, answer)
            return
        result = handle(self.core, answer, peer=self._peers[conn][0], now=now)
        if isinstance(result, ProxyRequest):
            self._proxies.append((conn, result))
        else:
            self._answer(conn, result)
        self.flush(now)  # a replay's store changes and frames

    def _answer(self, conn: int, response: HttpResponse) -> None:
        """Write ``response`` on HTTP connection ``conn`` and close it."""
        reason = REFUSED.get(response.status)
        if reason is not None:
            self.rejected[reason] += 1
        self._out.append((conn, response_bytes(response)))
        self._close_raw(conn)

    def _close_raw(self, conn: int) -> None:
        """Close ``conn``, not a websocket (yet), after what is queued for it."""
        self._sniffing.pop(conn, None)
        if conn not in self._ended:
            self._ended.add(conn)
            self._close.append(conn)

    def _expired(self, conn: int) -> None:
        link = self._links.get(conn)
        if link is not None:
            self._end(conn, link)
        else:
            self._close_at.pop(conn, None)
            self._close_raw(conn)

    def _fail(self, conn: int, code: int, reason: str, now: float) -> None:
        """Send a close frame now and close the connection after it (no handshake)."""
        link = self._links.get(conn)
        if link is None:
            self._close_raw(conn)
            return
        if link.ws.state is State.OPEN:
            link.ws.fail(code, reason)
            self._dirty[conn] = None
            self.flush(now)
        else:
            self._end(conn, link)


_INTERNAL_ERROR: Final = HttpResponse(status=500, body=b'{"error":"internal server error"}')


def server_frame(packet: Packet, encoding: Encoding) -> bytes:
    """A whole websocket frame (RFC 6455 §5.2) carrying ``packet``, as websockets' own
    server-side writer produces it (compression off): FIN, opcode text for JSON and
    binary otherwise, no mask, then the payload length in 7, 7+16 or 7+64 bits."""
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
    """One frame's payload. JSON and msgpack take a direct path: the core only builds
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


class ClientConnections(_Pump[ClientCore]):
    """A ``ClientCore`` as a ``ConnectionsCore`` that dials ``gateway`` (see the module
    docstring). ``host`` is the ``Host`` header's name (default: the address)."""

    def __init__(self, core: ClientCore, gateway: Address, *, host: str | None = None) -> None:
        super().__init__(core)
        self.gateway = gateway
        name = host or gateway[0]
        self._uri = parse_uri(
            f"ws://{name}:{gateway[1]}{WEBSOCKET_PATH}?encoding={core.config.encoding}"
        )
        self._ids = OpenIds()
        self._open: list[tuple[int, Address]] = []
        self._conn: int | None = None  # the one connection, from open to lost

    # -- inputs --------------------------------------------------------------------

    def connection_made(self, conn: int, peer: Address, now: float) -> None:
        if conn != self._conn:
            return
        ws = ClientProtocol(self._uri, max_size=None)
        self._links[conn] = link = _Link(ws=ws, peer=peer)
        ws.send_request(ws.connect())
        self._drain(conn, link)

    def _handshake(self, conn: int, link: _Link, event: Request | Response, now: float) -> None:
        if link.ws.state is State.OPEN:
            link.open = True
            self.core.connection_made(now)

    def _message(self, conn: int, message: str | bytes, now: float) -> None:
        self.core.receive(message, now)

    def connection_lost(self, conn: int, now: float) -> None:
        if conn != self._conn:
            return
        self._forget(conn)
        self._conn = None
        self.core.connection_lost(now)
        self.flush(now)

    # -- outputs -------------------------------------------------------------------

    def connections_to_open(self) -> list[tuple[int, Address]]:
        return _taken(self._open)

    def events_received(self) -> list[ClientEvent]:
        return self.core.events_received()

    def _core_deadline(self) -> float | None:
        if self._conn is not None and self.core.state is ClientState.DISCONNECTED:
            return None  # a connection is under way: the retry deadline waits for its end
        return self.core.next_deadline()

    def flush(self, now: float) -> None:
        """Dial when due, frame what the core wrote, close when it asks to."""
        core = self.core
        self._dirty.clear()  # one connection at most, drained below
        if self._conn is None and core.connect_due(now):
            self._conn = self._ids.next()
            self._open.append((self._conn, self.gateway))
        frames = core.frames_to_send()
        conn = self._conn
        link = None if conn is None else self._links.get(conn)
        if link is None or conn is None:
            return  # frames written with no connection are lost, as on a dead socket
        ws = link.ws
        if ws.state is State.OPEN:
            for frame in frames:
                if isinstance(frame, str):
                    ws.send_text(frame.encode())
                else:
                    ws.send_binary(frame)
        if core.close_requested:
            core.close_requested = False
            if ws.state is State.OPEN:
                self._send_close(conn, link, 1000, "", now)
            else:
                self._end(conn, link)
        self._drain(conn, link)
