"""The 신경 gateway core: every connection, client, query and queue, sans-I/O.

One ``GatewayCore`` serves all connections of a gateway. The driver
(``gossamer.aio.gateway_server``) numbers connections and feeds:

- ``connect(conn, host=..., encoding=..., now)`` when a websocket opens (hello goes out);
- ``receive(conn, frame, now)`` for every websocket message (``str`` for a text frame,
  ``bytes`` for a binary one), decoded here with ``gossamer.wire.gateway``;
- ``disconnect(conn, now)`` when the transport ends;
- ``handle_timer(now)`` at ``next_deadline()``; ``shutdown(now)`` to say goodbye;
- in a cluster (``cluster.py``): ``add_peer(name, now)`` / ``remove_peer(name, now)``,
  ``set_nodes(nodes, now)`` (op 7 load balancing), and ``peer_receive(data, now)`` for
  every link message from a peer;

and then drains, in this order:

1. ``store_ops()``: queue changes that must be durable; the driver commits them
   *before* sending anything, so a QUEUE_CONFIRM never precedes its commit;
2. ``actions()``: ``Transmit(conns, packet)`` (one packet for many connections, so
   the driver encodes it once per encoding) and ``Close(conn, code, reason)``;
3. ``events_received()``: ``ClientJoined`` / ``ClientLeft`` for the application;
4. in a cluster, ``peers_waiting()`` and ``peer_batch(name, now)``: the next link
   message for each peer, taken when its link has credit (what waits is bounded,
   ``cluster.py``).

Protocol (``docs/gateway.md`` has the whole of it, with every difference from the
reference server): hello carries the configured ``heartbeat_interval``; a client that
does not heartbeat (or identify) within ``heartbeat_grace`` intervals gets op 8
``heartbeat took too long`` from a timer, then a close with code 4009; op 3 keeps the
socket, op 8 closes it, each close with a meaningful code (``CloseCode``); error
texts are the reference's (singyeong-as-coded §7). Restricted mode is the
reference's (§4, §14). Passwords are checked by ``PasswordGuard`` (``auth.py``), which
bounds the distinct wrong passwords each source may try. Metadata updates are validated
per key, applied in order and rate-limited per client by coalescing; a client's own
pending update is applied before any routed dispatch it sends. Queries are routed by ``Directory``;
queues are ``QueueBook``, or, once ``order_queues`` was called (a cluster whose queues
are replicated on its total order), proposed to the order and carried out as the driver
reports its decisions (``ordered_queues.py``).

Trace events (``layer=gateway``; conventions of ``gossamer.analysis.checks.gateway``):
``route`` (``msg``, ``attrs.matched``/``attrs.targets``: comma-separated client ids,
``app/client``; ``attrs.nonce``, the dispatch's nonce as ``proto.gateway.tracing``
names it, which joins the clients' own events), ``deliver`` (``peer`` = client; for
queues also ``attrs.queue``, ``attrs.attempt``), ``enqueue`` (``attrs.queue``,
``attrs.nonce``), ``ack``, ``redeliver`` (a queued message delivered again after an ack
timeout or its holder's disconnect), ``dead_letter`` (``attrs.reason``), ``drop`` (a
droppable dispatch nobody matched; in a cluster also one refused or undeliverable
across nodes, ``attrs.reason``), ``peer_up``/``peer_down`` (identify and disconnect),
``balance`` (a client sent away by op 7 load balancing).
"""

from __future__ import annotations

import heapq
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeAlias

import orjson

from gossamer.errors import DecodeError
from gossamer.params import Bounds, Checked, PositiveCount
from gossamer.proto.gateway.auth import PasswordGuard, Verdict
from gossamer.proto.gateway.cluster import ClusterConfig, ClusterMember
from gossamer.proto.gateway.lifecycle import ConnInput, ConnState, next_state
from gossamer.proto.gateway.metadata import (
    MetadataLimits,
    TypedValue,
    plain_value,
    validate_metadata,
)
from gossamer.proto.gateway.ordered_queues import OrderedQueues
from gossamer.proto.gateway.query import Query, QueryError, QueryLimits, parse_query
from gossamer.proto.gateway.queues import (
    AckOutcome,
    QueueBook,
    QueueConfig,
    QueuedMessage,
    QueueRecord,
    StoreOp,
)
from gossamer.proto.gateway.routing import Client, Directory
from gossamer.proto.gateway.tracing import LAYER, nonce_label
from gossamer.proto.ratelimit import TokenBucket
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.gateway import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_SIZE,
    Encoding,
    Op,
    Packet,
    decode_packet,
)

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "DISPATCH_TYPES",
    "LAYER",
    "Action",
    "ClientJoined",
    "ClientLeft",
    "Close",
    "CloseCode",
    "GatewayConfig",
    "GatewayCore",
    "Transmit",
]

DISPATCH_TYPES: Final = frozenset(
    {
        "UPDATE_METADATA",
        "SEND",
        "BROADCAST",
        "QUERY_NODES",
        "QUEUE",
        "QUEUE_REQUEST",
        "QUEUE_ACK",
        "QUEUE_REQUEST_CANCEL",
    }
)

# Elixir atom names of the opcodes, as the reference prints them in "invalid client op".
_OP_ATOMS: Final = {
    Op.HELLO: ":hello",
    Op.IDENTIFY: ":identify",
    Op.READY: ":ready",
    Op.INVALID: ":invalid",
    Op.DISPATCH: ":dispatch",
    Op.HEARTBEAT: ":heartbeat",
    Op.HEARTBEAT_ACK: ":heartbeat_ack",
    Op.GOODBYE: ":goodbye",
    Op.ERROR: ":error",
}

#: Opcode by value, for the JSON fast path (``_decode_json``).
_OPCODES: Final[dict[int, Op]] = {int(op): op for op in Op}
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 64) - 1
_ROUTED: Final = frozenset({"SEND", "BROADCAST"})

_NOT_IDENTIFIED: Final = "sent payload with non-identify opcode without identifying first"
_UNRECOVERABLE: Final = "decode: payload: unrecoverable"
_NO_DATA: Final = "payload has no data"
_BAD_DISPATCH: Final = "invalid dispatch payload"


class CloseCode(IntEnum):
    """Websocket close codes. The reference closes every op 8 with 1000 (§2, §18.9)."""

    NORMAL = 1000
    #: Goodbye (op 7): the gateway is going away; reconnect.
    GOING_AWAY = 1001
    INTERNAL_ERROR = 4000
    INVALID_OP = 4001
    DECODE_ERROR = 4002
    NOT_IDENTIFIED = 4003
    ALREADY_REGISTERED = 4004
    INVALID_IDENTIFY = 4005
    RESTRICTED_ETF = 4006
    RATE_LIMITED = 4008
    HEARTBEAT_TIMEOUT = 4009


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig(Checked):
    """Everything a gateway core needs to know; defaults follow the reference (§12)."""

    node_id: str = "gateway"
    #: How traces name this gateway's messages (``<trace_name>/<n>``; ``None``: the
    #: ``node_id``). A process that restarts under the same ``node_id`` gives each
    #: incarnation its own (the daemon: ``name#incarnation``), so that the analysis
    #: never takes a restarted node's messages for its previous incarnation's.
    trace_name: str | None = None
    #: Sent in hello (reference: fixed 45000).
    heartbeat_interval_ms: Annotated[int, Bounds(low=1, unit="ms")] = 45_000
    #: A client is closed after this many intervals without a heartbeat (reference 1.5).
    heartbeat_grace: Annotated[float, Bounds(low=1.0)] = 1.5
    #: None: every client is normal (see ``docs/gateway.md``, "Auth").
    password: str | None = None
    #: Metadata updates applied per client per second, and the burst (singyeong.md: 50/s).
    metadata_rate: Annotated[float, Bounds(low=0.0, above=True, unit="/s")] = 50.0
    metadata_burst: Annotated[float, Bounds(low=1.0)] = 50.0
    metadata_limits: MetadataLimits = field(default_factory=MetadataLimits)
    query_limits: QueryLimits = field(default_factory=QueryLimits)
    queues: QueueConfig = field(default_factory=QueueConfig)
    #: Distinct wrong passwords a source (an address, an IPv6 /64) may try: a burst,
    #: then this many per second (identify and HTTP API together; ``auth.py``).
    password_guess_burst: Annotated[float, Bounds(low=1.0)] = 10.0
    password_guess_rate: Annotated[float, Bounds(low=0.0, above=True, unit="/s")] = 0.2
    #: Sources, and wrong passwords, remembered at most (least recently used go first).
    password_guess_sources: PositiveCount = 65_536
    #: ``ts`` and ``last_heartbeat_time`` are ``(now + epoch_offset)`` in ms; a driver
    #: sets the offset from the wall clock once, so the core never reads a clock.
    epoch_offset: float = 0.0
    max_frame_size: Annotated[int, Bounds(low=64, unit="bytes")] = DEFAULT_MAX_SIZE
    #: client_id and application_id: 1..max_id_length characters, no whitespace.
    max_id_length: PositiveCount = 128
    query_cache_size: PositiveCount = 1024
    #: Bounds and periods of the node-to-node layer (``cluster.py``).
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    #: Reported by ``GET /api/version``.
    version: str = "0.0.1"

    @property
    def liveness_timeout(self) -> float:
        """Seconds without a heartbeat after which a client is closed."""
        return self.heartbeat_interval_ms / 1000.0 * self.heartbeat_grace


@dataclass(frozen=True, slots=True, kw_only=True)
class Transmit:
    """Send ``packet`` on every connection of ``conns`` (each in its own encoding)."""

    conns: tuple[int, ...]
    packet: Packet


@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    """Close the websocket ``conn`` with ``code`` (after the packets before this)."""

    conn: int
    code: int
    reason: str


Action: TypeAlias = Transmit | Close


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientJoined:
    app_id: str
    client_id: str
    restricted: bool
    conn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientLeft:
    app_id: str
    client_id: str
    conn: int
    reason: str


@dataclass(slots=True, kw_only=True)
class _Conn:
    id: int
    host: str
    encoding: Encoding
    state: ConnState = ConnState.AWAITING_IDENTIFY
    client: Client | None = None


@dataclass(slots=True)
class _PendingMetadata:
    bucket: TokenBucket
    changes: dict[str, TypedValue] = field(default_factory=dict)
    scheduled: bool = False


class _IdentifyRejectedError(Exception):
    """An identify was refused: op 8 with ``text``, close with ``code``."""

    def __init__(self, text: str, code: CloseCode, extra: Any = None) -> None:
        super().__init__(text)
        self.text = text
        self.code = code
        self.extra = extra


def _flag(value: object) -> bool:
    return value is True or value == "true"


def _decode_json(data: str | bytes, max_size: int) -> tuple[Op, str | None, Any, Any] | None:
    """``(op, t, d, ts)`` of an ordinary JSON text frame, or None to take the full path.

    The common case of ``decode_packet(data, "json")`` without building a ``Packet``
    (a routed SEND's decode was about a third of the gateway's CPU per message). It
    only ever *accepts* what ``decode_packet`` accepts, with the same values: any frame
    it is not sure of (binary, large, possibly deeper than ``DEFAULT_MAX_DEPTH``, not
    JSON, not a valid envelope) returns None, and ``decode_packet`` then decides, with
    its exact error texts. A test checks the two agree.
    """
    # Four UTF-8 bytes per character at most: below this, the byte size needs no check.
    if type(data) is not str or len(data) * 4 > max_size:
        return None
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if type(raw) is not dict:
        return None
    op = raw.get("op")
    # type() is not isinstance(): True must not pass as opcode 1.
    opcode = _OPCODES.get(op) if type(op) is int else None
    t = raw.get("t")
    ts = raw.get("ts")
    if (
        opcode is None
        or (t is not None and type(t) is not str)
        or (ts is not None and (type(ts) is not int or not _INT64_MIN <= ts <= _INT64_MAX))
        # Nesting to depth k needs k opening brackets (decode_packet's own test).
        or data.count("[") + data.count("{") > DEFAULT_MAX_DEPTH
    ):
        return None
    return opcode, t, raw.get("d"), ts


class GatewayCore(ClusterMember, OrderedQueues):
    """Sans-I/O gateway; see the module docstring for the input/output contract."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        rng: Random,
        tracer: Tracer | None = None,
        records: tuple[QueueRecord, ...] | list[QueueRecord] = (),
    ) -> None:
        self.config = config
        self._rng = rng
        # A tracer into a NullSink records nothing: skip building the events at all.
        self._trace = None if tracer is None or isinstance(tracer.sink, NullSink) else tracer
        self.directory = Directory(cache_size=config.query_cache_size)
        self.queues = QueueBook(config.queues, self.directory, rng=rng)
        self.restored = self.queues.restore(records)
        self._conns: dict[int, _Conn] = {}
        # conn -> liveness deadline, in deadline order (every deadline is "event time +
        # one constant", so appending and move_to_end keep the order).
        self._liveness: OrderedDict[int, float] = OrderedDict()
        #: The one password check (identify here, ``Authorization`` in ``http.py``).
        self.passwords = PasswordGuard(
            config.password,
            rate=config.password_guess_rate,
            burst=config.password_guess_burst,
            max_sources=config.password_guess_sources,
        )
        self._metadata: dict[int, _PendingMetadata] = {}
        self._metadata_due: list[tuple[float, int]] = []
        self._client_watchers: set[int] = set()
        self._metadata_watchers: set[int] = set()
        self._queries: dict[bytes, Query] = {}
        self._actions: list[Action] = []
        self._events: list[ClientJoined | ClientLeft] = []
        self._next_msg = 0
        self._next_prune = 0.0
        self._init_cluster(config)
        self._init_ordered()

    # ------------------------------------------------------------------ outputs

    def actions(self) -> list[Action]:
        """Packets to send and sockets to close, in order; drained by the caller."""
        out, self._actions = self._actions, []
        return out

    def store_ops(self) -> list[StoreOp]:
        """Queue changes to make durable before ``actions()`` are carried out."""
        return self.queues.store_ops()

    def events_received(self) -> list[ClientJoined | ClientLeft]:
        out, self._events = self._events, []
        return out

    def next_deadline(self) -> float | None:
        best = self.queues.next_deadline()
        if self._liveness:
            first = next(iter(self._liveness.values()))
            if best is None or first < best:
                best = first
        if self._metadata_due:
            due = self._metadata_due[0][0]
            if best is None or due < best:
                best = due
        if self._next_balance is not None and (best is None or self._next_balance < best):
            best = self._next_balance
        acks = self._cluster_deadline()
        if acks is not None and (best is None or acks < best):
            best = acks
        expiry = self._ordered_deadline()
        if expiry is not None and (best is None or expiry < best):
            best = expiry
        return best

    @property
    def connections(self) -> int:
        return len(self._conns)

    def encoding_of(self, conn: int) -> Encoding | None:
        state = self._conns.get(conn)
        return None if state is None else state.encoding

    def timestamp(self, now: float) -> int:
        """Milliseconds since the epoch at loop time ``now``."""
        return int((now + self.config.epoch_offset) * 1000)

    # ------------------------------------------------------------------- inputs

    def connect(self, conn: int, *, host: str, encoding: Encoding, now: float) -> None:
        """A websocket opened: send hello and start the identify deadline."""
        self._conns[conn] = _Conn(id=conn, host=host, encoding=encoding)
        self._liveness[conn] = now + self.config.liveness_timeout
        self._send(
            conn, Op.HELLO, {"heartbeat_interval": self.config.heartbeat_interval_ms}, now
        )

    def disconnect(self, conn: int, now: float) -> None:
        """The transport ended (whoever closed it)."""
        state = self._conns.pop(conn, None)
        if state is None:
            return
        self._liveness.pop(conn, None)
        if state.state is not ConnState.CLOSED:
            state.state = next_state(state.state, ConnInput.TRANSPORT_CLOSED)
        self._drop_client(state, now, "disconnected")

    def receive(self, conn: int, data: str | bytes, now: float) -> None:
        """One websocket message arrived on ``conn``."""
        state = self._conns.get(conn)
        if state is None or state.state is ConnState.CLOSED:
            return  # frames that were in flight when we decided to close
        fast = _decode_json(data, self.config.max_frame_size) if state.encoding == "json" else None
        if fast is not None:
            op, t, d, ts = fast
        else:
            try:
                packet = decode_packet(
                    data, state.encoding, max_size=self.config.max_frame_size
                )
            except DecodeError as exc:
                code = (
                    CloseCode.INVALID_OP
                    if exc.reason.startswith("invalid client op")
                    else CloseCode.DECODE_ERROR
                )
                self._fail(state, ConnInput.DECODE_ERROR, exc.reason, code, now)
                return
            op, t, d, ts = packet.op, packet.t, packet.d, packet.ts
        if op is Op.DISPATCH and state.state is ConnState.READY:
            self._on_dispatch(state, t, d, ts, now)  # the hot path: straight there
        elif op is Op.IDENTIFY:
            self._on_identify(state, d, now)
        elif op is Op.HEARTBEAT or op is Op.DISPATCH:
            event = ConnInput.HEARTBEAT if op is Op.HEARTBEAT else ConnInput.DISPATCH
            if state.state is ConnState.AWAITING_IDENTIFY:
                self._fail(state, event, _NOT_IDENTIFIED, CloseCode.NOT_IDENTIFIED, now)
            elif op is Op.HEARTBEAT:
                self._on_heartbeat(state, now)
            else:
                self._on_dispatch(state, t, d, ts, now)
        else:
            self._fail(
                state,
                ConnInput.SERVER_OP,
                f"invalid client op {_OP_ATOMS[op]}",
                CloseCode.INVALID_OP,
                now,
            )

    def handle_timer(self, now: float) -> None:
        """Enforce heartbeat deadlines, apply due metadata, expire queue deliveries."""
        while self._liveness:
            conn, deadline = next(iter(self._liveness.items()))
            if deadline > now:
                break
            del self._liveness[conn]
            state = self._conns.get(conn)
            if state is None or state.state is ConnState.CLOSED:
                continue
            text = (
                "identify took too long"
                if state.state is ConnState.AWAITING_IDENTIFY
                else "heartbeat took too long"
            )
            self._fail(state, ConnInput.DEADLINE, text, CloseCode.HEARTBEAT_TIMEOUT, now)
        while self._metadata_due and self._metadata_due[0][0] <= now:
            _due, handle = heapq.heappop(self._metadata_due)
            self._apply_due_metadata(handle, now)
        dead, touched = self.queues.expire(now)
        self._after_returns(dead, touched, now)
        if now >= self._next_prune:
            self.passwords.prune(now)
            self._next_prune = now + 60.0
        if self._next_balance is not None and now >= self._next_balance:
            self._next_balance = now + self.config.cluster.balance_interval
            self._load_balance(now)
        self._cluster_timer(now)
        self._ordered_timer(now)

    def shutdown(self, now: float, reason: str = "shutdown") -> None:
        """Say goodbye (op 7) to every connection and close them (1001)."""
        for state in list(self._conns.values()):
            if state.state is ConnState.CLOSED:
                continue
            self._send(state.id, Op.GOODBYE, {"reason": reason}, now)
            self._close(state, ConnInput.SHUTDOWN, CloseCode.GOING_AWAY, reason, now)

    # -------------------------------------------------------------- identify

    def _on_identify(self, state: _Conn, d: Any, now: float) -> None:
        if state.state is ConnState.READY:
            next_state(state.state, ConnInput.IDENTIFY_REJECTED)
            self._invalid(state.id, "already identified", None, now)
            return
        try:
            client = self._identify(state, d, now)
        except _IdentifyRejectedError as rejected:
            self._fail(
                state,
                ConnInput.IDENTIFY_REJECTED,
                rejected.text,
                rejected.code,
                now,
                extra=rejected.extra,
            )
            return
        state.state = next_state(state.state, ConnInput.IDENTIFY_OK)
        state.client = client
        self._liveness.pop(state.id, None)
        self._liveness[state.id] = now + self.config.liveness_timeout
        self._send(
            state.id,
            Op.READY,
            {"client_id": client.client_id, "restricted": client.restricted},
            now,
        )
        if client.receive_client_updates:
            self._client_watchers.add(client.handle)
        if client.receive_metadata_updates:
            self._metadata_watchers.add(client.handle)
        self._notify_watchers(
            self._client_watchers,
            "CLIENT_CONNECTED",
            {"app": client.app_id, "client_id": client.client_id},
            now,
        )
        if self._peers:
            self._replicate(["J", self._client_record(client)])
        self._events.append(
            ClientJoined(
                app_id=client.app_id,
                client_id=client.client_id,
                restricted=client.restricted,
                conn=state.id,
            )
        )
        if self._trace is not None:
            self._trace(
                now,
                LAYER,
                "peer_up",
                peer=client.trace_id,
                attrs={"restricted": str(client.restricted).lower(), "encoding": state.encoding},
            )

    def _valid_id(self, value: str) -> bool:
        return 0 < len(value) <= self.config.max_id_length and not any(
            c.isspace() or not c.isprintable() for c in value
        )

    def _identify(self, state: _Conn, d: Any, now: float) -> Client:
        """Check an identify payload and register the client (else raise the rejection)."""
        cfg = self.config
        if not isinstance(d, dict) or "client_id" not in d or "application_id" not in d:
            raise _IdentifyRejectedError(_UNRECOVERABLE, CloseCode.INVALID_IDENTIFY)
        client_id, app_id = d["client_id"], d["application_id"]
        if not isinstance(client_id, str) or not isinstance(app_id, str):
            raise _IdentifyRejectedError(_NO_DATA, CloseCode.INVALID_IDENTIFY)
        if not self._valid_id(client_id) or not self._valid_id(app_id):
            raise _IdentifyRejectedError(
                f"client_id and application_id must be 1 to {cfg.max_id_length} "
                "printable characters without spaces",
                CloseCode.INVALID_IDENTIFY,
            )
        auth = d.get("auth")
        options: dict[str, Any] = {}
        for name in ("ip", "namespace"):
            value = d.get(name)
            if value is not None and not isinstance(value, str):
                raise _IdentifyRejectedError(_NO_DATA, CloseCode.INVALID_IDENTIFY)
            options[name] = value
        if auth is not None and not isinstance(auth, str):
            raise _IdentifyRejectedError(_NO_DATA, CloseCode.INVALID_IDENTIFY)
        # Every check of the payload comes before the password is read, so a malformed
        # identify never spends the source's guessing budget.
        initial: dict[str, TypedValue] = {}
        if d.get("metadata") is not None:
            initial, errors = validate_metadata(d["metadata"], limits=cfg.metadata_limits)
            if errors:
                raise _IdentifyRejectedError(
                    "initial metadata: invalid", CloseCode.INVALID_IDENTIFY, errors
                )
        verdict = self.passwords.check(state.host, auth, now)
        if verdict is Verdict.REFUSED:
            # Decided before the password was read: a refusal teaches nothing about it.
            raise _IdentifyRejectedError(
                "too many failed identify attempts", CloseCode.RATE_LIMITED
            )
        restricted = verdict is Verdict.WRONG
        if restricted and state.encoding == "etf":
            raise _IdentifyRejectedError(
                "restricted clients may not use ETF", CloseCode.RESTRICTED_ETF
            )
        if (app_id, client_id) in self.directory.by_identity:
            raise _IdentifyRejectedError(
                f"{client_id}: already registered for app {app_id}",
                CloseCode.ALREADY_REGISTERED,
            )
        receive_updates = _flag(d.get("receive_client_updates")) and not restricted
        ip = None if restricted else (options["ip"] or state.host)
        reserved: dict[str, TypedValue] = {
            "last_heartbeat_time": ("integer", self.timestamp(now)),
            "restricted": ("boolean", restricted),
            "encoding": ("string", state.encoding),
            "ip": ("string", ip),
            "namespace": ("string", options["namespace"]),
            "receive_client_updates": ("boolean", receive_updates),
        }
        return self.directory.add(
            app_id=app_id,
            client_id=client_id,
            conn=state.id,
            restricted=restricted,
            encoding=state.encoding,
            metadata={**initial, **reserved},
            receive_client_updates=receive_updates,
            receive_metadata_updates=_flag(d.get("receive_metadata_updates")) and not restricted,
            ip=ip,
        )

    # ------------------------------------------------------------- heartbeat

    def _on_heartbeat(self, state: _Conn, now: float) -> None:
        client = state.client
        assert client is not None
        state.state = next_state(state.state, ConnInput.HEARTBEAT)
        self._liveness.pop(state.id, None)
        self._liveness[state.id] = now + self.config.liveness_timeout
        beat: dict[str, TypedValue] = {"last_heartbeat_time": ("integer", self.timestamp(now))}
        self.directory.set_metadata(client, beat)
        if self._peers:
            self._replicate_metadata(client, beat)
        # The reference ignores the heartbeat's d and acks with the socket's id (§3).
        self._send(state.id, Op.HEARTBEAT_ACK, {"client_id": client.client_id}, now)

    # -------------------------------------------------------------- dispatch

    def _on_dispatch(self, state: _Conn, t: str | None, d: Any, ts: Any, now: float) -> None:
        client = state.client
        assert client is not None
        if state.state is not ConnState.READY:  # READY stays READY (lifecycle table)
            state.state = next_state(state.state, ConnInput.DISPATCH)
        if t not in DISPATCH_TYPES:
            self._invalid(
                state.id,
                _BAD_DISPATCH,
                {"op": "dispatch", "d": d, "t": t, "ts": ts},
                now,
            )
            return
        if client.restricted and t != "UPDATE_METADATA":
            self._send(
                state.id,
                Op.INVALID,
                {"error": f"invalid dispatch type {t} (are you restricted?)"},
                now,
            )
            return
        if not isinstance(d, dict):
            self._invalid(state.id, _BAD_DISPATCH, {"op": "dispatch", "d": d, "t": t}, now)
            return
        if t in _ROUTED:
            self._on_routed(state, client, t, d, now)
        elif t == "UPDATE_METADATA":
            self._on_update_metadata(state, client, d, now)
        elif t == "QUERY_NODES":
            self._on_query_nodes(state, client, d, now)
        elif t == "QUEUE":
            self._on_queue(state, client, d, now)
        else:
            self._on_queue_control(state, client, t, d, now)

    def _query(self, raw: object) -> tuple[Query, bytes]:
        """Parse (or fetch from the cache) a target; raises ``QueryError``.

        The cache key is the target's JSON text as it came (key order included: the
        same query with its keys in another order is only a second cache entry), which
        also keys the directory's route-result cache.
        """
        try:
            text = orjson.dumps(raw)
        except orjson.JSONEncodeError:
            raise QueryError("the target is not a JSON object") from None
        query = self._queries.get(text)
        if query is None:
            query = parse_query(raw, limits=self.config.query_limits)
            if len(self._queries) >= self.config.query_cache_size:
                del self._queries[next(iter(self._queries))]
            self._queries[text] = query
        return query, text

    def _bad_query(self, conn: int, exc: QueryError, nonce: Any, now: float) -> None:
        self._send(
            conn,
            Op.INVALID,
            {
                "error": "invalid query",
                "extra_info": {"reason": exc.reason, "where": exc.where},
                "nonce": nonce,
            },
            now,
        )

    def _on_routed(
        self, state: _Conn, client: Client, t: str, d: dict[str, Any], now: float
    ) -> None:
        nonce = d.get("nonce")  # singyeong-py omits a None nonce (§16)
        if "target" not in d or "payload" not in d:
            self._invalid(
                state.id, _BAD_DISPATCH, {"op": "dispatch", "d": d, "t": t}, now, nonce=nonce
            )
            return
        try:
            query, text = self._query(d["target"])
        except QueryError as exc:
            self._bad_query(state.id, exc, nonce, now)
            return
        if client.handle in self._metadata:
            self._flush_metadata(client, now)
        self._route(client, t, d, query=query, text=text, attempt=0, now=now)

    def _route(
        self,
        client: Client,
        t: str,
        d: dict[str, Any],
        *,
        query: Query,
        text: bytes,
        attempt: int,
        now: float,
    ) -> None:
        """Route a SEND or BROADCAST of the local ``client`` (``attempt`` > 0: again,
        after its chosen client on another node had left)."""
        nonce = d.get("nonce")
        matched, targets, fallback = self.directory.targets(
            query, self._rng, broadcast=t == "BROADCAST", cache_key=text
        )
        if not targets:
            self._unroutable(client, t, d, droppable=query.droppable, why="no_route", now=now)
            return
        msg_id: str | None = None
        if self._trace is not None:
            self._next_msg += 1
            msg_id = f"{self.config.trace_name or self.config.node_id}/{self._next_msg}"
        out = {"nonce": nonce, "payload": d["payload"], "target": None}
        local = targets if not self._remote else [c for c in targets if c.node is None]
        if local:
            self._actions.append(
                Transmit(
                    conns=(local[0].conn,) if len(local) == 1 else tuple([c.conn for c in local]),
                    packet=Packet(
                        op=Op.DISPATCH,
                        t=t,
                        d=out,
                        ts=int((now + self.config.epoch_offset) * 1000),
                    ),
                )
            )
        if len(local) != len(targets):
            reroute = (
                [client.app_id, client.client_id, d["target"], attempt] if t == "SEND" else None
            )
            self._forward(client, t, d, out=out, targets=targets, droppable=query.droppable,
                          msg_id=msg_id, reroute=reroute, now=now)
        if self._trace is not None:
            attrs = {
                "type": t,
                "matched": ",".join(c.trace_id for c in matched),
                "targets": ",".join(c.trace_id for c in targets),
                "fallback": str(fallback).lower(),
            }
            label = nonce_label(nonce)
            if label is not None:  # joins the clients' client_send and client_recv
                attrs["nonce"] = label
            self._trace(now, LAYER, "route", msg=msg_id, peer=client.trace_id, attrs=attrs)
            for target in local:
                self._trace(now, LAYER, "deliver", msg=msg_id, peer=target.trace_id,
                            attrs={"type": t})

    def _unroutable(
        self, client: Client, t: str, d: dict[str, Any], *, droppable: bool, why: str, now: float
    ) -> None:
        """Nobody can take a dispatch of ``client``: drop it (droppable, counted and
        traced) or tell the sender with op 3 ``why`` and the nonce."""
        if droppable:
            if why != "no_route":
                self.cluster_dropped[why] += 1
            if self._trace is not None:
                self._trace(now, LAYER, "drop", peer=client.trace_id,
                            attrs={"reason": why, "type": t})
            return
        # One well-formed no_route whatever the query (#241; the reference crashes
        # the socket when the query has ops, §7).
        self._send(
            client.conn,
            Op.INVALID,
            {
                "error": why,
                "extra_info": {"op": 4, "d": d, "t": t, "ts": None},
                "nonce": d.get("nonce"),
            },
            now,
        )

    def _on_query_nodes(
        self, state: _Conn, client: Client, d: dict[str, Any], now: float
    ) -> None:
        # The reference takes the query itself as d (and crashes, §6.3); a
        # {"target": query, "nonce": n} wrapper, like SEND's, is accepted as well.
        raw = d["target"] if isinstance(d.get("target"), dict) else d
        nonce = d.get("nonce")
        try:
            query, text = self._query(raw)
        except QueryError as exc:
            self._bad_query(state.id, exc, nonce, now)
            return
        self._flush_metadata(client, now)
        _matched, selected, _fallback = self.directory.resolve_targets(
            query, self._rng, cache_key=text
        )
        nodes = [
            {
                "app_id": c.app_id,
                "client_id": c.client_id,
                "metadata": self.directory.plain_metadata(c),
            }
            for c in selected
        ]
        self._dispatch_to((state.id,), "QUERY_NODES", {"nonce": nonce, "nodes": nodes}, now)

    def _on_update_metadata(
        self, state: _Conn, client: Client, d: dict[str, Any], now: float
    ) -> None:
        limits = self.config.metadata_limits
        accepted, errors = validate_metadata(d, limits=limits)
        if not errors:
            pending = self._metadata.get(client.handle)
            keys = set(client.types) | set(accepted)
            if pending is not None:
                keys |= set(pending.changes)
            if len(keys) > limits.max_keys + 6:  # the reserved keys do not count
                errors = {"metadata": f"metadata: more than {limits.max_keys} keys"}
        if errors:
            self._invalid(state.id, "invalid metadata", errors, now)
            return
        if accepted:
            self._queue_metadata(client, accepted, now)

    # --------------------------------------------------------------- queues

    def _on_queue(self, state: _Conn, client: Client, d: dict[str, Any], now: float) -> None:
        nonce = d.get("nonce")
        queue = d.get("queue")
        if not self.queues.valid_name(queue) or "target" not in d or "payload" not in d:
            self._invalid(
                state.id,
                _BAD_DISPATCH,
                {"op": "dispatch", "d": d, "t": "QUEUE"},
                now,
                nonce=nonce,
            )
            return
        assert isinstance(queue, str)
        try:
            query, _text = self._query(d["target"])
        except QueryError as exc:
            self._bad_query(state.id, exc, nonce, now)
            return
        self._flush_metadata(client, now)
        if self.ordered:
            if not self._refused_at_once(state.id, "QUEUE", queue, nonce, now):
                self._propose_push(client, queue, nonce, d, now=now)
            return
        message_id = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        self.queues.enqueue(
            queue=queue,
            message_id=message_id,
            nonce=nonce,
            target=d["target"],
            query=query,
            payload=d["payload"],
        )
        if self._trace is not None:
            label = nonce_label(nonce)
            self._trace(now, LAYER, "enqueue", msg=message_id, peer=client.trace_id,
                        attrs={"queue": queue} if label is None else
                        {"queue": queue, "nonce": label})
        # The driver commits store_ops() before sending this (module docstring).
        self._dispatch_to(
            (state.id,), "QUEUE_CONFIRM", {"queue": queue, "id": message_id, "nonce": nonce}, now
        )
        self._deliver_queue(queue, now)

    def _on_queue_control(
        self, state: _Conn, client: Client, t: str, d: dict[str, Any], now: float
    ) -> None:
        queue = d.get("queue")
        if not self.queues.valid_name(queue):
            self._invalid(state.id, _BAD_DISPATCH, {"op": "dispatch", "d": d, "t": t}, now)
            return
        assert isinstance(queue, str)
        if self.ordered:
            self._on_ordered_control(state, client, t, d, queue=queue, now=now)
            return
        if t == "QUEUE_REQUEST":
            count = d.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                self._invalid(state.id, _BAD_DISPATCH, {"op": "dispatch", "d": d, "t": t}, now)
                return
            self.queues.request(queue, client, count)
            self._deliver_queue(queue, now)
        elif t == "QUEUE_REQUEST_CANCEL":
            self.queues.cancel(queue, client)
        else:
            message_id = d.get("id")
            if not isinstance(message_id, str):
                self._invalid(state.id, _BAD_DISPATCH, {"op": "dispatch", "d": d, "t": t}, now)
                return
            outcome = self.queues.ack(queue, message_id, (client.app_id, client.client_id))
            if outcome is AckOutcome.ACKED:
                if self._trace is not None:
                    self._trace(now, LAYER, "ack", msg=message_id, peer=client.trace_id,
                                attrs={"queue": queue})
            else:
                self._invalid(state.id, outcome.value, {"queue": queue, "id": message_id}, now)

    def _on_ordered_control(
        self, state: _Conn, client: Client, t: str, d: dict[str, Any], *, queue: str, now: float
    ) -> None:
        """QUEUE_REQUEST, QUEUE_REQUEST_CANCEL and QUEUE_ACK, checked here, proposed to the
        cluster's order (``ordered_queues.py``)."""
        if t == "QUEUE_REQUEST":
            count = d.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                self._invalid(state.id, _BAD_DISPATCH, {"op": "dispatch", "d": d, "t": t}, now)
                return
            if not self._refused_at_once(state.id, t, queue, d.get("nonce"), now):
                self._flush_metadata(client, now)
                self._propose_request(client, queue, min(count, self.config.queues.max_credits))
        elif t == "QUEUE_REQUEST_CANCEL":
            if not self._refused_at_once(state.id, t, queue, d.get("nonce"), now):
                self._propose_cancel(client, queue)
        else:
            message_id = d.get("id")
            if not isinstance(message_id, str):
                self._invalid(state.id, _BAD_DISPATCH, {"op": "dispatch", "d": d, "t": t}, now)
                return
            if not self._refused_at_once(state.id, t, queue, d.get("nonce"), now):
                self._propose_ack(client, queue, message_id)

    def _deliver_queue(self, queue: str, now: float) -> None:
        for message, client in self.queues.dispatch(queue, now):
            self._dispatch_to(
                (client.conn,),
                "QUEUE",
                {
                    "nonce": message.nonce,
                    "payload": {"queue": queue, "id": message.id, "payload": message.payload},
                    "target": None,
                    "attempt": message.attempts,
                },
                now,
            )
            if self._trace is not None:
                self._trace(
                    now,
                    LAYER,
                    "deliver" if message.attempts == 1 else "redeliver",
                    msg=message.id,
                    peer=client.trace_id,
                    seq=message.attempts,
                    attrs={"queue": queue, "attempt": str(message.attempts)},
                )

    def _after_returns(self, dead: list[QueuedMessage], touched: list[str], now: float) -> None:
        if self._trace is not None:
            for message in dead:
                self._trace(now, LAYER, "dead_letter", msg=message.id,
                            attrs={"queue": message.queue, "reason": message.reason or ""})
        for queue in touched:
            self._deliver_queue(queue, now)

    # ------------------------------------------------- queue inspection (HTTP)

    def replay_dead_letters(
        self, queue: str, ids: list[str] | None, now: float
    ) -> list[QueuedMessage]:
        """Put dead letters back at the tail of ``queue`` and deliver what can be."""
        if self.ordered:  # the order decides: these are the dead letters it will replay
            self._propose("replay", None, queue=queue, ids=ids)
            wanted = None if ids is None else set(ids)
            return [m for m in self.queues.dead_letters(queue)
                    if wanted is None or m.id in wanted]
        replayed = self.queues.replay(queue, ids)
        if self._trace is not None:
            for message in replayed:
                self._trace(now, LAYER, "enqueue", msg=message.id,
                            attrs={"queue": queue, "replay": "true"})
        self._deliver_queue(queue, now)
        return replayed

    def describe(self, client: Client) -> dict[str, Any]:
        """A client as ``POST /api/v1/query`` returns it (§13)."""
        return {
            "app_id": client.app_id,
            "client_id": client.client_id,
            "metadata": self.directory.plain_metadata(client),
            "metadata_types": dict(client.types),
            "queues": sorted(client.queues),
            "socket_ip": client.ip,
        }

    def query_clients(self, raw: object) -> list[Client]:
        """The clients a query selects (ops, selector, optional); raises ``QueryError``."""
        query, text = self._query(raw)
        _matched, selected, _fallback = self.directory.resolve_targets(
            query, self._rng, cache_key=text
        )
        return selected

    def pick_client(self, raw: object) -> Client | None:
        """One client for a proxied request, chosen like a SEND; raises ``QueryError``."""
        query, text = self._query(raw)
        route = self.directory.route(query, self._rng, broadcast=False, cache_key=text)
        return route.targets[0] if route.targets else None

    # ------------------------------------------------------------- metadata

    def _queue_metadata(self, client: Client, changes: dict[str, TypedValue], now: float) -> None:
        pending = self._metadata.get(client.handle)
        if pending is None:
            pending = self._metadata[client.handle] = _PendingMetadata(
                TokenBucket.full(
                    rate=self.config.metadata_rate, burst=self.config.metadata_burst, now=now
                )
            )
        if not pending.changes and pending.bucket.take(now):
            self._apply_metadata(client, changes, now)
            return
        # Over the rate: coalesce (later values of a key replace earlier ones), never drop.
        pending.changes.update(changes)
        if not pending.scheduled:
            pending.scheduled = True
            heapq.heappush(
                self._metadata_due, (pending.bucket.when_available(now), client.handle)
            )

    def _apply_due_metadata(self, handle: int, now: float) -> None:
        pending = self._metadata.get(handle)
        client = self.directory.clients.get(handle)
        if pending is None or client is None:
            return
        pending.scheduled = False
        if not pending.changes:
            return
        if not pending.bucket.take(now):
            pending.scheduled = True
            heapq.heappush(self._metadata_due, (pending.bucket.when_available(now), handle))
            return
        changes, pending.changes = pending.changes, {}
        self._apply_metadata(client, changes, now)

    def _flush_metadata(self, client: Client, now: float) -> None:
        """Apply the client's own coalesced update now: its next dispatch must see it."""
        pending = self._metadata.get(client.handle)
        if pending is not None and pending.changes:
            pending.bucket.take(now)
            changes, pending.changes = pending.changes, {}
            self._apply_metadata(client, changes, now)

    def _apply_metadata(self, client: Client, changes: dict[str, TypedValue], now: float) -> None:
        self.directory.set_metadata(client, changes)
        if self._peers and client.node is None:
            self._replicate_metadata(client, changes)
        if self._metadata_watchers:
            self._notify_watchers(
                self._metadata_watchers,
                "CLIENT_METADATA_UPDATED",
                {
                    "app": client.app_id,
                    "client_id": client.client_id,
                    "metadata": {key: plain_value(v) for key, (_t, v) in changes.items()},
                },
                now,
            )

    # -------------------------------------------------------------- helpers

    def _notify_watchers(
        self, watchers: set[int], t: str, payload: Mapping[str, Any], now: float
    ) -> None:
        clients = self.directory.clients
        conns = tuple(clients[h].conn for h in sorted(watchers) if h in clients)
        if conns:
            self._dispatch_to(conns, t, {"nonce": None, "payload": payload, "target": None}, now)

    def _send(self, conn: int, op: Op, d: Any, now: float) -> None:
        self._actions.append(
            Transmit(conns=(conn,), packet=Packet(op=op, d=d, ts=self.timestamp(now)))
        )

    def _dispatch_to(self, conns: tuple[int, ...], t: str, d: Any, now: float) -> None:
        self._actions.append(
            Transmit(conns=conns, packet=Packet(op=Op.DISPATCH, t=t, d=d, ts=self.timestamp(now)))
        )

    def _invalid(
        self, conn: int, error: str, extra: Any, now: float, *, nonce: Any = None
    ) -> None:
        d: dict[str, Any] = {"error": error, "extra_info": extra}
        if nonce is not None:
            d["nonce"] = nonce
        self._send(conn, Op.INVALID, d, now)

    def _fail(
        self,
        state: _Conn,
        event: ConnInput,
        text: str,
        code: CloseCode,
        now: float,
        *,
        extra: Any = None,
    ) -> None:
        """op 8 with ``text``, then close: the socket is beyond repair."""
        self._send(state.id, Op.ERROR, {"error": text, "extra_info": extra}, now)
        self._close(state, event, code, text, now)

    def _close(
        self, state: _Conn, event: ConnInput, code: CloseCode, text: str, now: float
    ) -> None:
        state.state = next_state(state.state, event)
        self._liveness.pop(state.id, None)
        # A close reason must fit a control frame (123 bytes of UTF-8).
        reason = text.encode()[:120].decode(errors="ignore")
        self._actions.append(Close(conn=state.id, code=int(code), reason=reason))
        self._drop_client(state, now, text)

    def _drop_client(self, state: _Conn, now: float, why: str) -> None:
        client = state.client
        if client is None:
            return
        state.client = None
        self.directory.remove(client)
        self._metadata.pop(client.handle, None)
        self._client_watchers.discard(client.handle)
        self._metadata_watchers.discard(client.handle)
        if self.ordered:
            self._ordered_client_gone(client)
        else:
            dead, touched = self.queues.client_gone(client, now)
            self._after_returns(dead, touched, now)
        self._notify_watchers(
            self._client_watchers,
            "CLIENT_DISCONNECTED",
            {"app": client.app_id, "client_id": client.client_id},
            now,
        )
        if self._peers:
            self._replicate(["L", client.app_id, client.client_id])
        self._events.append(
            ClientLeft(app_id=client.app_id, client_id=client.client_id, conn=state.id, reason=why)
        )
        if self._trace is not None:
            self._trace(now, LAYER, "peer_down", peer=client.trace_id, attrs={"reason": why})

    # ------------------------------------------------ hooks of the cluster layer

    def _refuse_duplicate(self, client: Client, now: float) -> None:
        """This node's ``client`` lost its identity to another node's (``_admit``)."""
        state = self._conns.get(client.conn)
        if state is not None:
            self._fail(
                state,
                ConnInput.IDENTIFY_REJECTED,
                f"{client.client_id}: already registered for app {client.app_id}",
                CloseCode.ALREADY_REGISTERED,
                now,
            )

    def _send_away(self, count: int, now: float) -> None:
        """op 7 ``load balancing`` and a 1001 close to the ``count`` newest clients."""
        newest = [s for s in reversed(self._conns.values()) if s.client is not None]
        for state in newest[:count]:
            self.balanced += 1
            if self._trace is not None and state.client is not None:
                self._trace(now, LAYER, "balance", peer=state.client.trace_id)
            self._send(state.id, Op.GOODBYE, {"reason": "load balancing"}, now)
            self._close(state, ConnInput.SHUTDOWN, CloseCode.GOING_AWAY, "load balancing", now)
