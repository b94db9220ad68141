"""The client side of the 신경 protocol, sans-I/O: DSNs, identify, heartbeats, reconnects.

``parse_dsn`` reads ``s?singyeong://APPLICATION[:PASSWORD]@HOST[:PORT][/][?encoding=E]``
(singyeong.md step 0). Unlike singyeong-py, whose ``[\\w-]+`` host refuses
``127.0.0.1`` (singyeong-as-coded §1.10), hosts may be dotted names, IPv4 addresses
or bracketed IPv6 addresses. The user part is the **application id** and the password
is the identify ``auth``, as every real client reads it (§2). The port defaults to 80,
or 443 for ``ssingyeong`` (TLS).

``ClientCore`` is one logical client across any number of websocket connections:

- on hello it identifies with its ``client_id`` (the same one on every reconnect,
  unlike singyeong-py) and its whole cached metadata in the identify ``metadata``
  field, so a reconnected client is routable with its metadata restored at once;
- after ready it heartbeats at once and then every ``heartbeat_interval`` (from
  hello); a heartbeat that finds the previous one unacknowledged means the gateway
  is gone (a zombie connection), and the core asks its driver to close;
- dispatches sent while not ready are buffered (bounded) and sent after ready;
- after any disconnect it asks to reconnect after an exponential backoff with full
  jitter (``reconnect_base`` doubling up to ``reconnect_max``), immediately after a
  goodbye (op 7), and resets the backoff once ready.

The driver (``gossamer.aio.gateway_client``) calls ``connection_made``,
``receive(frame)``, ``connection_lost`` and ``handle_timer``, and drains
``frames_to_send()``, ``events_received()``, ``next_deadline()``, ``close_requested``
and ``connect_due(now)``.

With a ``tracer`` the core traces (``layer=gateway``) each identify
(``client_ready``), each SEND, BROADCAST and QUEUE it is handed (``client_send``, when
the application hands it over, so that time spent buffered while disconnected counts)
and each such dispatch delivered to it (``client_recv``), named by nonce
(``gossamer.proto.gateway.tracing``); the analysis joins them into client-to-client
latency. Without one (or with one into a ``NullSink``) no event is built.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, TypeAlias, cast

from gossamer.errors import ConfigError, DecodeError, LocalProtocolError
from gossamer.params import Checked, PositiveSeconds, check
from gossamer.proto.backoff import FULL_JITTER, Backoff
from gossamer.proto.core import EventOutputs
from gossamer.proto.gateway.tracing import (
    CLIENT_READY,
    CLIENT_RECV,
    CLIENT_SEND,
    LAYER,
    TRACED_DISPATCHES,
    client_label,
    nonce_label,
)
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.gateway import ENCODINGS, Encoding, Op, Packet, decode_packet, encode_packet

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "DSN_PATTERN",
    "TRANSITIONS",
    "ClientConfig",
    "ClientCore",
    "ClientInput",
    "ClientState",
    "Disconnected",
    "Dispatch",
    "Dsn",
    "Goodbye",
    "Invalid",
    "Ready",
    "ServerError",
    "VersionString",
    "parse_dsn",
    "typed",
]

DSN_PATTERN: Final = re.compile(
    r"^(?P<scheme>s?singyeong)://"
    r"(?P<user>[^:@/?#\s]+)(?::(?P<password>[^\s]*))?"
    r"@(?P<host>[\w.-]+|\[[0-9A-Fa-f:.]+\])"
    r"(?::(?P<port>\d{1,5}))?/?"
    r"(?:\?encoding=(?P<encoding>json|etf|msgpack))?$"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Dsn:
    """A parsed DSN."""

    secure: bool
    application_id: str
    password: str | None
    host: str
    port: int
    encoding: Encoding = "json"

    @property
    def url(self) -> str:
        """The websocket URL of the gateway."""
        scheme = "wss" if self.secure else "ws"
        return f"{scheme}://{self.host}:{self.port}/gateway/websocket?encoding={self.encoding}"


def parse_dsn(text: str) -> Dsn:
    """Parse a 신경 DSN; ``ConfigError`` when it is not one."""
    match = DSN_PATTERN.match(text)
    if match is None:
        raise ConfigError("not a singyeong DSN", dsn=text)
    secure = match["scheme"] == "ssingyeong"
    port = int(match["port"]) if match["port"] else (443 if secure else 80)
    if not 0 < port < 65536:
        raise ConfigError("DSN port out of range", port=port)
    encoding = match["encoding"] or "json"
    assert encoding in ENCODINGS
    return Dsn(
        secure=secure,
        application_id=match["user"],
        password=match["password"] or None,
        host=match["host"],
        port=port,
        encoding=cast(Encoding, encoding),
    )


class VersionString(str):
    """A string to be sent as metadata of type ``version`` (see ``typed``)."""

    __slots__ = ()


def typed(value: Any) -> dict[str, Any]:
    """``{"type": T, "value": V}`` for a Python value.

    ``bool`` is ``boolean`` (singyeong-py sends it as an ``integer``, which the gateway
    rejects, §16), ``int`` ``integer``, ``float`` ``float``, ``VersionString``
    ``version``, ``str`` ``string``, ``list`` ``list``, ``dict`` ``map``; an explicit
    ``{"type": ..., "value": ...}`` passes through.
    """
    if isinstance(value, dict) and value.keys() == {"type", "value"}:
        return dict(value)
    if isinstance(value, bool):
        return {"type": "boolean", "value": value}
    if isinstance(value, int):
        return {"type": "integer", "value": value}
    if isinstance(value, float):
        return {"type": "float", "value": value}
    if isinstance(value, VersionString):
        return {"type": "version", "value": str(value)}
    if isinstance(value, str):
        return {"type": "string", "value": value}
    if isinstance(value, list):
        return {"type": "list", "value": value}
    if isinstance(value, dict):
        return {"type": "map", "value": value}
    raise ConfigError(f"no metadata type for a {type(value).__name__}")


# ------------------------------------------------------------------------ events


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    """Identified (op 2). ``reconnect`` is True after the first time."""

    client_id: str
    restricted: bool
    reconnect: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Dispatch:
    """An op 4 from the gateway: ``event`` is its ``t`` (SEND, QUEUE, QUERY_NODES...)."""

    event: str
    d: Any
    ts: int | None

    @property
    def nonce(self) -> Any:
        return self.d.get("nonce") if isinstance(self.d, dict) else None

    @property
    def payload(self) -> Any:
        return self.d.get("payload") if isinstance(self.d, dict) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Invalid:
    """op 3: the gateway refused something; the connection stays."""

    error: str
    extra_info: Any
    nonce: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerError:
    """op 8: the gateway is closing this connection."""

    error: str
    extra_info: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodbye:
    """op 7: the gateway asks us to reconnect."""

    reason: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Disconnected:
    """A connection ended; ``retry_at`` is when the next attempt is due (None: closed)."""

    retry_at: float | None


ClientEvent: TypeAlias = Ready | Dispatch | Invalid | ServerError | Goodbye | Disconnected


# ------------------------------------------------------------------ state table


class ClientState(Enum):
    DISCONNECTED = "disconnected"
    AWAITING_HELLO = "awaiting_hello"
    AWAITING_READY = "awaiting_ready"
    READY = "ready"
    CLOSED = "closed"


class ClientInput(Enum):
    CONNECTED = "connected"
    HELLO = "hello"
    READY = "ready"
    HEARTBEAT_ACK = "heartbeat_ack"
    DISPATCH = "dispatch"
    INVALID = "invalid"
    ERROR = "error"
    GOODBYE = "goodbye"
    BAD_FRAME = "bad_frame"
    TRANSPORT_CLOSED = "transport_closed"
    CLOSE = "close"


_D, _H, _W, _R, _X = (
    ClientState.DISCONNECTED,
    ClientState.AWAITING_HELLO,
    ClientState.AWAITING_READY,
    ClientState.READY,
    ClientState.CLOSED,
)
_In = ClientInput

#: ``(state, input) -> next state``. Every input leaves the state as it is except the
#: few below: connecting, the hello and ready steps of the handshake, the transport
#: ending and ``close``. Frames received while DISCONNECTED cannot happen (no connection)
#: and are ignored; a frame out of order (ready before hello...) is treated as a broken
#: connection: close and reconnect.
TRANSITIONS: Final[dict[tuple[ClientState, ClientInput], ClientState]] = {
    **{(s, i): s for s in ClientState for i in ClientInput},
    (_D, _In.CONNECTED): _H,
    (_H, _In.HELLO): _W,
    (_W, _In.READY): _R,
    **{(s, _In.TRANSPORT_CLOSED): _D for s in (_H, _W, _R)},
    **{(s, _In.CLOSE): _X for s in ClientState},
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig(Checked):
    """Who the client is and how it behaves."""

    application_id: str
    client_id: str
    auth: str | None = None
    encoding: Encoding = "json"
    ip: str | None = None
    namespace: str | None = None
    receive_client_updates: bool = False
    receive_metadata_updates: bool = False
    reconnect: bool = True
    reconnect_base: PositiveSeconds = 0.25
    reconnect_max: PositiveSeconds = 30.0
    max_buffered: int = 10_000

    def __post_init__(self) -> None:
        check(self)  # the Bounds of the fields (not super(): see Checked)
        if not self.application_id or not self.client_id:
            raise ConfigError("application_id and client_id are required")
        if self.reconnect_max < self.reconnect_base:
            raise ConfigError("reconnect_base <= reconnect_max required")


@dataclass(slots=True)
class _Counters:
    connects: int = 0
    readies: int = 0
    heartbeats: int = 0
    zombies: int = 0
    bad_frames: int = 0


class ClientCore(EventOutputs[ClientEvent]):
    """One logical gateway client (see the module docstring)."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        rng: Random,
        metadata: dict[str, Any] | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        # A tracer into a NullSink records nothing: skip building the events at all.
        self._trace = None if tracer is None or isinstance(tracer.sink, NullSink) else tracer
        #: The client as trace events name it (``attrs.client``; the server's ``peer``).
        self.label = client_label(config.application_id, config.client_id)
        self.state = ClientState.DISCONNECTED
        self.restricted = False
        self.counters = _Counters()
        self._rng = rng
        #: The typed metadata sent in every identify: ``{key: {"type", "value"}}``.
        self.metadata: dict[str, dict[str, Any]] = {
            key: typed(value) for key, value in (metadata or {}).items()
        }
        self._out: list[str | bytes] = []
        self._buffer: deque[Packet] = deque()
        self._interval: float | None = None
        self._next_heartbeat: float | None = None
        self._acked = True
        self._retry_at: float | None = 0.0
        self._reconnect_now = False
        self._failures = 0
        self._backoff = Backoff(
            base=config.reconnect_base, maximum=config.reconnect_max, spread=FULL_JITTER
        )
        self.close_requested = False

    @property
    def tracing(self) -> bool:
        """True when this core records trace events."""
        return self._trace is not None

    # -- outputs (and events_received: EventOutputs) ---------------------------

    def frames_to_send(self) -> list[str | bytes]:
        out, self._out = self._out, []
        return out

    def next_deadline(self) -> float | None:
        if self.state is ClientState.READY:
            return self._next_heartbeat
        if self.state is ClientState.DISCONNECTED:
            return self._retry_at
        return None

    def connect_due(self, now: float) -> bool:
        """True when the driver should open a connection now."""
        return (
            self.state is ClientState.DISCONNECTED
            and self._retry_at is not None
            and now >= self._retry_at
        )

    # -- inputs ----------------------------------------------------------------

    def _go(self, event: ClientInput) -> ClientState:
        try:
            self.state = TRANSITIONS[(self.state, event)]
        except KeyError:  # pragma: no cover - the table is complete (swept by a test)
            raise LocalProtocolError(
                "no transition", state=self.state.value, input=event.value
            ) from None
        return self.state

    def connection_made(self, now: float) -> None:
        self.counters.connects += 1
        self.close_requested = False
        self._acked = True
        self._go(ClientInput.CONNECTED)

    def connection_lost(self, now: float) -> None:
        if self.state is ClientState.CLOSED:
            return
        self._go(ClientInput.TRANSPORT_CLOSED)
        self._next_heartbeat = None
        if not self.config.reconnect:
            self._go(ClientInput.CLOSE)
            self._events.append(Disconnected(retry_at=None))
            return
        if self._reconnect_now:
            self._reconnect_now = False
            self._retry_at = now
        else:
            self._retry_at = now + self._backoff.delay(self._failures, self._rng)
            self._failures += 1
        self._events.append(Disconnected(retry_at=self._retry_at))

    def close(self) -> None:
        """Stop for good: no more reconnects; the driver closes the connection."""
        if self.state is not ClientState.CLOSED:
            self._go(ClientInput.CLOSE)
            self.close_requested = True

    def receive(self, data: str | bytes, now: float) -> None:
        try:
            packet = decode_packet(data, self.config.encoding)
        except DecodeError:
            self.counters.bad_frames += 1
            self._go(ClientInput.BAD_FRAME)
            self.close_requested = True
            return
        op, d = packet.op, packet.d
        if op is Op.HELLO:
            self._on_hello(d, now)
        elif op is Op.READY:
            self._on_ready(d, now)
        elif op is Op.HEARTBEAT_ACK:
            self._go(ClientInput.HEARTBEAT_ACK)
            self._acked = True
        elif op is Op.DISPATCH:
            self._go(ClientInput.DISPATCH)
            dispatch = Dispatch(event=packet.t or "", d=d, ts=packet.ts)
            if self._trace is not None and dispatch.event in TRACED_DISPATCHES:
                size = len(data) if isinstance(data, bytes) else len(data.encode())
                self._trace_receipt(dispatch, size, now)
            self._events.append(dispatch)
        elif op is Op.INVALID:
            self._go(ClientInput.INVALID)
            info = d if isinstance(d, dict) else {}
            nonce = info.get("nonce")
            extra = info.get("extra_info")
            if nonce is None and isinstance(extra, dict):
                nested = extra.get("d")
                nonce = extra.get("nonce") or (
                    nested.get("nonce") if isinstance(nested, dict) else None
                )
            self._events.append(
                Invalid(error=str(info.get("error")), extra_info=extra, nonce=nonce)
            )
        elif op is Op.ERROR:
            self._go(ClientInput.ERROR)
            info = d if isinstance(d, dict) else {}
            self._events.append(
                ServerError(error=str(info.get("error")), extra_info=info.get("extra_info"))
            )
        elif op is Op.GOODBYE:
            self._go(ClientInput.GOODBYE)
            self._events.append(Goodbye(reason=d.get("reason") if isinstance(d, dict) else d))
            self._reconnect_now = True  # reconnect at once (load balancing, shutdown)
            self.close_requested = True
        else:  # a client-only op from the server: the connection is confused
            self.counters.bad_frames += 1
            self._go(ClientInput.BAD_FRAME)
            self.close_requested = True

    def handle_timer(self, now: float) -> None:
        if self.state is not ClientState.READY or self._next_heartbeat is None:
            return
        if now < self._next_heartbeat:
            return
        if not self._acked:
            # No ack for a whole interval: the connection is a zombie (singyeongjs does
            # the same); close it and let the reconnect logic take over.
            self.counters.zombies += 1
            self.close_requested = True
            self._next_heartbeat = None
            return
        self._heartbeat(now)

    # -- requests --------------------------------------------------------------

    def dispatch(self, event: str, d: Any, now: float) -> None:
        """Send (or buffer, while not ready) a dispatch ``event`` with payload ``d``;
        ``now`` stamps its ``client_send`` event when the core traces."""
        packet = Packet(op=Op.DISPATCH, t=event, d=d)
        if self.state is ClientState.READY:
            self._write(packet)
            if self._trace is not None and event in TRACED_DISPATCHES:
                self._trace_send(event, d, now, buffered=False)
            return
        if self.state is ClientState.CLOSED:
            raise LocalProtocolError("the client is closed")
        if len(self._buffer) >= self.config.max_buffered:
            raise LocalProtocolError(
                "too many dispatches buffered while disconnected", limit=self.config.max_buffered
            )
        self._buffer.append(packet)
        if self._trace is not None and event in TRACED_DISPATCHES:
            self._trace_send(event, d, now, buffered=True)

    def update_metadata(self, values: dict[str, Any]) -> None:
        """Merge ``values`` into the cached metadata and send the change when ready."""
        changes = {key: typed(value) for key, value in values.items()}
        self.metadata.update(changes)
        if self.state is ClientState.READY and changes:
            self._write(Packet(op=Op.DISPATCH, t="UPDATE_METADATA", d=changes))

    # -- helpers ---------------------------------------------------------------

    def _trace_send(self, event: str, d: Any, now: float, *, buffered: bool) -> None:
        assert self._trace is not None
        nonce = d.get("nonce") if isinstance(d, dict) else None
        attrs = {"type": event, "client": self.label}
        if buffered:
            attrs["buffered"] = "true"
        self._trace(now, LAYER, CLIENT_SEND, msg=nonce_label(nonce), attrs=attrs)

    def _trace_receipt(self, dispatch: Dispatch, size: int, now: float) -> None:
        assert self._trace is not None
        attrs = {"type": dispatch.event, "client": self.label}
        d = dispatch.d if isinstance(dispatch.d, dict) else {}
        if dispatch.event == "QUEUE":
            inner = d.get("payload")
            if isinstance(inner, dict) and isinstance(inner.get("id"), str):
                attrs["id"] = inner["id"]
            if isinstance(d.get("attempt"), int):
                attrs["attempt"] = str(d["attempt"])
        self._trace(
            now, LAYER, CLIENT_RECV, msg=nonce_label(d.get("nonce")), size=size, attrs=attrs
        )

    def _write(self, packet: Packet) -> None:
        self._out.append(encode_packet(packet, self.config.encoding))

    def _on_hello(self, d: Any, now: float) -> None:
        if self.state is not ClientState.AWAITING_HELLO:
            self._go(ClientInput.HELLO)
            return
        interval = d.get("heartbeat_interval") if isinstance(d, dict) else None
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
            self.counters.bad_frames += 1
            self._go(ClientInput.BAD_FRAME)
            self.close_requested = True
            return
        self._go(ClientInput.HELLO)
        self._interval = interval / 1000.0
        cfg = self.config
        identify: dict[str, Any] = {
            "client_id": cfg.client_id,
            "application_id": cfg.application_id,
        }
        optional = {
            "auth": cfg.auth,
            "ip": cfg.ip,
            "namespace": cfg.namespace,
            "receive_client_updates": cfg.receive_client_updates or None,
            "receive_metadata_updates": cfg.receive_metadata_updates or None,
            "metadata": dict(self.metadata) or None,
        }
        identify.update({k: v for k, v in optional.items() if v is not None})
        self._write(Packet(op=Op.IDENTIFY, d=identify))

    def _on_ready(self, d: Any, now: float) -> None:
        was = self.state
        self._go(ClientInput.READY)
        if was is not ClientState.AWAITING_READY:
            return
        self.restricted = bool(d.get("restricted")) if isinstance(d, dict) else False
        self.counters.readies += 1
        self._failures = 0
        self._retry_at = None
        ready = Ready(
            client_id=self.config.client_id,
            restricted=self.restricted,
            reconnect=self.counters.readies > 1,
        )
        if self._trace is not None:
            self._trace(now, LAYER, CLIENT_READY,
                        attrs={"client": self.label, "reconnect": str(ready.reconnect).lower()})
        self._events.append(ready)
        self._heartbeat(now)
        while self._buffer:
            self._write(self._buffer.popleft())

    def _heartbeat(self, now: float) -> None:
        assert self._interval is not None
        self.counters.heartbeats += 1
        self._acked = False
        self._next_heartbeat = now + self._interval
        self._write(Packet(op=Op.HEARTBEAT, d={"client_id": self.config.client_id}))

