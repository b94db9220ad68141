"""The gateway's cores over byte streams: the websocket layer, sans-I/O.

``GatewayCore`` and ``ClientCore`` speak websocket *messages*. This module puts each
under the multi-connection contract of ``gossamer.proto.core.ConnectionsCore`` (bytes
in and out per connection), with websockets' own sans-I/O protocol objects doing the
HTTP/1.1 upgrade and the RFC 6455 framing, pings and closing handshake:

- ``GatewayConnections``: the server. A connection's first bytes must be the upgrade
  ``GET /gateway/websocket?encoding=json|msgpack|etf``; another path is answered 404 and
  another encoding 403 (as the reference), then the connection is closed. Once the
  handshake is done the gateway core sees ``connect``; each whole message (fragments
  joined, text checked for UTF-8) goes to ``receive``; ``connection_lost`` becomes
  ``disconnect``. Queue changes (``store_ops``) go to ``store`` before any frame their
  messages caused is produced, as in the asyncio server.
- ``ClientConnections``: one logical client that dials ``gateway`` whenever its core
  says a connection is due (``connect_due``), one connection at a time.

Either side closes the TCP connection once the closing handshake is over, or
``close_timeout`` seconds after it sent its close frame if the peer never answers.

Determinism: the server's handshake response carries no ``Date`` header (nothing here
reads the clock). Client frames are masked, and the handshake key drawn, by websockets
from the operating system's randomness, as RFC 6455 requires; nothing a core or a trace
sees depends on them (masks change bytes, never lengths), so simulated runs stay a
function of their seed. The asyncio server (``gossamer.aio.gateway_server``) drives
``GatewayCore`` with websockets' asyncio server directly; the simulator uses these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar
from urllib.parse import parse_qs, urlsplit

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
from gossamer.proto.gateway.queues import StoreOp
from gossamer.wire.gateway import ENCODINGS, Encoding, encode_packet, is_text_encoding

__all__ = ["WEBSOCKET_PATH", "ClientConnections", "GatewayConnections"]

WEBSOCKET_PATH: Final = "/gateway/websocket"
#: Seconds to wait for the peer's close frame (websockets' own default).
CLOSE_TIMEOUT: Final = 10.0


class _Messages:
    """Whole messages out of websocket frames: fragments joined, text decoded."""

    __slots__ = ("_fragments", "_text")

    def __init__(self) -> None:
        self._fragments: list[bytes] = []
        self._text = False

    def feed(self, ws: Protocol, frame: Frame) -> str | bytes | None:
        """The message ``frame`` completes, or None. Invalid UTF-8 fails ``ws`` (1007)."""
        opcode = frame.opcode
        if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            self._text = opcode is Opcode.TEXT
            self._fragments = [bytes(frame.data)]
        elif opcode is Opcode.CONT:
            # websockets' parser already checked the sequence and the total size.
            self._fragments.append(bytes(frame.data))
        else:
            return None  # control frames: websockets answers pings and closes itself
        if not frame.fin:
            return None
        data, self._fragments = b"".join(self._fragments), []
        if not self._text:
            return data
        try:
            return data.decode()
        except UnicodeDecodeError:
            ws.fail(WsCloseCode.INVALID_DATA, "invalid UTF-8 in a text frame")
            return None


@dataclass(slots=True)
class _Link:
    """One connection's websocket state (either side)."""

    ws: Protocol
    peer: Address
    messages: _Messages = field(default_factory=_Messages)
    encoding: Encoding | None = None  # server: set once the handshake is accepted
    open: bool = False  # the handshake is done: frames carry messages
    closed: bool = False  # we asked the driver to close the TCP connection


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

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        link = self._links.get(conn)
        if link is None or link.closed:
            return
        ws = link.ws
        ws.receive_data(data)
        for event in ws.events_received():
            if not isinstance(event, Frame):
                self._handshake(conn, link, event, now)
            elif link.open:
                message = link.messages.feed(ws, event)
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
                self._end(conn, self._links[conn])

    def _drain(self, conn: int, link: _Link) -> None:
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
    """``GatewayCore`` as a ``ConnectionsCore`` (see the module docstring).

    ``store`` receives the core's queue changes to make durable (the asyncio server's
    ``QueueStore.apply``); without it they are dropped and queues live in memory. Local
    requests go to ``core`` directly; the next input or timer carries their output out
    (call ``flush(now)`` to do it at once)."""

    def __init__(
        self, core: GatewayCore, *, store: Callable[[list[StoreOp]], None] | None = None
    ) -> None:
        super().__init__(core)
        self._store = store

    # -- inputs --------------------------------------------------------------------

    def connection_made(self, conn: int, peer: Address, now: float) -> None:
        max_size = self.core.config.max_frame_size
        self._links[conn] = _Link(ws=ServerProtocol(max_size=max_size), peer=peer)

    def connection_lost(self, conn: int, now: float) -> None:
        link = self._forget(conn)
        if link is not None and link.encoding is not None:
            self.core.disconnect(conn, now)
            self.flush(now)

    def shutdown(self, now: float) -> None:
        """Goodbye (op 7) and a 1001 close to every client."""
        self.core.shutdown(now)
        self.flush(now)

    # -- outputs -------------------------------------------------------------------

    def connections_to_open(self) -> list[tuple[int, Address]]:
        return []  # a gateway only accepts

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
        for action in core.actions():
            if isinstance(action, Transmit):
                encoded: dict[Encoding, bytes] = {}
                for conn in action.conns:
                    link = links.get(conn)
                    if link is None or link.encoding is None or link.ws.state is not State.OPEN:
                        continue
                    data = encoded.get(link.encoding)
                    if data is None:
                        frame = encode_packet(action.packet, link.encoding)
                        data = encoded[link.encoding] = (
                            frame.encode() if isinstance(frame, str) else frame
                        )
                    if is_text_encoding(link.encoding):
                        link.ws.send_text(data)
                    else:
                        link.ws.send_binary(data)
                    self._dirty[conn] = None
            else:
                link = links.get(action.conn)
                if link is not None:
                    self._send_close(action.conn, link, action.code, action.reason, now)
                    self._dirty[action.conn] = None
        dirty, self._dirty = self._dirty, {}
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
        target = urlsplit(request.path)
        encoding = parse_qs(target.query).get("encoding", ["json"])[-1]
        response: Response
        if target.path != WEBSOCKET_PATH:
            response = ws.reject(404, "not found\n")
        elif encoding not in ENCODINGS:
            # The reference refuses the upgrade with 403 (singyeong-as-coded §2).
            response = ws.reject(403, f"unknown encoding {encoding!r}\n")
        else:
            response = ws.accept(request)
        del response.headers["Date"]  # no clock in a sans-I/O core
        ws.send_response(response)
        if response.status_code == 101:
            link.encoding = chosen = next(e for e in ENCODINGS if e == encoding)
            link.open = True
            self.core.connect(conn, host=link.peer[0], encoding=chosen, now=now)


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
