"""An asyncio client for 신경 gateways (gossamer's or the reference), on ``websockets``.

Opened as every gossamer service is (``docs/api.md``)::

    async with gossamer.open_gateway_client("singyeong://my-app:secret@127.0.0.1:4567",
                                            metadata={"region": "eu", "latency": 12}) as client:
        await client.send({"job": 1}, to={"application": "worker", "ops": [...]})
        await client.send("hello all", to={"application": "worker"}, broadcast=True)
        async for message in client:          # SEND, BROADCAST, QUEUE, CLIENT_* ...
            if message.event == "QUEUE":
                await client.ack(message.queue, message.id)

The protocol decisions (identify, heartbeats, zombie detection, reconnect backoff,
buffering while disconnected, metadata restored on reconnect through the identify
``metadata`` field, same ``client_id`` on every connection) are made by
``gossamer.proto.gateway.client.ClientCore``; this module pumps it with the one driver
runtime (``gossamer.aio._pump.Pump``: the heartbeat and reconnect timer at the core's
deadline, frames written after every input). It keeps the connection up until
``close()``, and correlates replies by nonce: ``query_nodes()`` returns QUERY_NODES'
``nodes``, ``queue()`` waits for its QUEUE_CONFIRM, and an op 3 carrying the nonce raises
there: ``NoRouteError`` when no client matches the target, else ``GatewayInvalidError``.
The protocol does not acknowledge a SEND or BROADCAST: when the gateway refuses one for
lack of a route (op 3 ``no_route`` after the fact), the next ``send()`` raises
``NoRouteError`` for it (its ``nonce`` in ``fields``), as a socket reports an
asynchronous error on its next call.

``tracer=`` records the client's side of the gateway (``layer=gateway``,
``client_send`` and ``client_recv``, named by nonce: ``gossamer.proto.gateway.tracing``),
from which ``gossamer analyze`` measures latency from client to client. A traced
``send()`` without a nonce gets one (``<client_id>/<n>``), so that its receipts can be
joined to it; untraced, the wire is as the caller wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl as ssl_module
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.protocol import State

from gossamer._types import Address
from gossamer.aio._pump import Pump, deadline, now
from gossamer.aio.inbox import Inbox
from gossamer.aio.opening import Opening
from gossamer.errors import (
    ClosedError,
    ConfigError,
    NoRouteError,
    RemoteProtocolError,
    TimedOutError,
)
from gossamer.proto.gateway.client import (
    ClientConfig,
    ClientCore,
    ClientState,
    Disconnected,
    Dispatch,
    Dsn,
    Goodbye,
    Invalid,
    Ready,
    ServerError,
    VersionString,
    parse_dsn,
    typed,
)
from gossamer.trace.sink import Tracer

__all__ = [
    "GatewayClient",
    "GatewayInvalidError",
    "Message",
    "VersionString",
    "open_gateway_client",
    "parse_dsn",
    "typed",
]


class GatewayInvalidError(RemoteProtocolError):
    """The gateway answered a request with op 3 (``error``, ``extra_info``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A dispatch received from the gateway.

    ``data`` is what the sender sent (for ``QUEUE`` the producer's payload, and
    ``queue``/``id`` are what ``ack`` needs; ``attempt`` counts deliveries of this message,
    gossamer only). ``sender`` is ``None``: the 신경 protocol does not name the client a
    dispatch came from (put it in ``data`` when the receiver needs it).
    """

    event: str
    nonce: Any
    data: Any
    ts: int | None
    sender: str | None = None
    queue: str | None = None
    id: str | None = None
    attempt: int | None = None
    d: Any = None


def _message(dispatch: Dispatch) -> Message:
    d = dispatch.d if isinstance(dispatch.d, dict) else {}
    if dispatch.event == "QUEUE" and isinstance(d.get("payload"), dict):
        inner = d["payload"]
        return Message(
            event="QUEUE",
            nonce=d.get("nonce"),
            data=inner.get("payload"),
            ts=dispatch.ts,
            queue=inner.get("queue"),
            id=inner.get("id"),
            attempt=d.get("attempt"),
            d=dispatch.d,
        )
    return Message(
        event=dispatch.event,
        nonce=d.get("nonce"),
        data=d.get("payload"),
        ts=dispatch.ts,
        d=dispatch.d,
    )


class GatewayClient:
    """One client of a gateway, reconnecting until closed (see the module docstring).

    Open it with :func:`open_gateway_client`."""

    def __init__(
        self,
        dsn: str | Dsn,
        *,
        client_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        ip: str | None = None,
        namespace: str | None = None,
        receive_client_updates: bool = False,
        receive_metadata_updates: bool = False,
        reconnect: bool = True,
        ssl: ssl_module.SSLContext | None = None,
        rng: random.Random | None = None,
        reconnect_base: float = 0.25,
        reconnect_max: float = 30.0,
        open_timeout: float = 10.0,
        max_size: int = 1 << 20,
        tracer: Tracer | None = None,
    ) -> None:
        self.dsn = dsn if isinstance(dsn, Dsn) else parse_dsn(dsn)
        self.core = ClientCore(
            ClientConfig(
                application_id=self.dsn.application_id,
                client_id=client_id or str(uuid.uuid4()),
                auth=self.dsn.password,
                encoding=self.dsn.encoding,
                ip=ip,
                namespace=namespace,
                receive_client_updates=receive_client_updates,
                receive_metadata_updates=receive_metadata_updates,
                reconnect=reconnect,
                reconnect_base=reconnect_base,
                reconnect_max=reconnect_max,
            ),
            rng=rng or random.Random(),
            metadata=metadata,
            tracer=tracer,
        )
        if self.dsn.secure and ssl is None:
            ssl = ssl_module.create_default_context()
        self._ssl = ssl if self.dsn.secure else None
        self._open_timeout = open_timeout
        self._max_size = max_size
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._messages: Inbox[Message] = Inbox("the gateway client")
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._pending: dict[Any, asyncio.Future[Any]] = {}
        self._pending_kind: dict[Any, str] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._pump = Pump(
            self.core, on_event=self._on_event, event_queue=False, flush_output=self._write
        )
        self._closed = False
        self._no_routes: list[Invalid] = []
        self._nonces = 0
        self.invalids: list[Invalid] = []
        self.errors: list[ServerError] = []
        self.goodbyes = 0
        self.last_error: BaseException | None = None

    # -- properties ------------------------------------------------------------

    @property
    def address(self) -> Address:
        """The gateway's ``(host, port)``, as the DSN names it."""
        return self.dsn.host.strip("[]"), self.dsn.port

    @property
    def client_id(self) -> str:
        return self.core.config.client_id

    @property
    def restricted(self) -> bool:
        return self.core.restricted

    @property
    def ready(self) -> bool:
        """True while identified on a connection (op 2 received, not yet lost)."""
        return self._ready.is_set()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def rejected(self) -> Counter[str]:
        """Frames from the gateway this client refused, by reason (each also cost the
        connection, which is then re-opened)."""
        bad = self.core.counters.bad_frames
        return Counter({"malformed_frame": bad} if bad else {})

    # -- lifecycle -------------------------------------------------------------

    async def _open(self) -> GatewayClient:
        """Start the connection loop and wait until identified (``open_timeout``)."""
        self._pump.start()
        self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            await self.wait_ready(self._open_timeout)
        except BaseException:
            await self.close()
            raise
        return self

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until identified (again, after a reconnect); ``TimedOutError`` after
        ``timeout`` seconds, with the last connection error in ``fields``."""
        try:
            async with asyncio.timeout(timeout):
                await self._ready.wait()
        except TimeoutError as exc:
            raise _timed_out("identifying with the gateway", timeout, self.last_error) from exc

    async def close(self) -> None:
        """Close for good (no reconnect). Idempotent. Waiting requests raise
        ``ClosedError``; ``receive`` returns what had arrived, then raises it."""
        if self._closed:
            return
        self._closed = True
        self.core.close()
        self._pump.pump()
        self._wake.set()
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(5.0):
                    await self._task
            self._task = None
        self._pump.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ClosedError("the gateway client is closed"))
        self._pending.clear()
        self._messages.end()

    # -- receiving -------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> Message:
        """The next dispatch (SEND, BROADCAST, QUEUE, CLIENT_CONNECTED...), waiting up to
        ``timeout`` seconds (``TimedOutError``); ``ClosedError`` once closed and drained."""
        return await self._messages.get(timeout)

    def pending_messages(self) -> int:
        """Dispatches received and not yet taken."""
        return len(self._messages)

    def __aiter__(self) -> AsyncIterator[Message]:
        """Every dispatch until the client closes."""
        return self._messages

    # -- requests --------------------------------------------------------------

    async def send(
        self, data: Any, *, to: dict[str, Any], nonce: Any = None, broadcast: bool = False
    ) -> None:
        """SEND ``data`` to one client matching the target query ``to``, or BROADCAST it
        to every one with ``broadcast=True``. Buffered while disconnected.

        Raises ``NoRouteError`` for an earlier send the gateway refused for lack of a
        matching client (see the module docstring), ``ClosedError`` once closed.
        """
        self._check_open()
        if self._no_routes:
            refused = self._no_routes.pop(0)
            raise NoRouteError(
                "the gateway found no client for an earlier send", nonce=refused.nonce
            ) from GatewayInvalidError(refused.error, extra_info=refused.extra_info)
        if nonce is None and self.core.tracing:
            nonce = self._nonce()
        event = "BROADCAST" if broadcast else "SEND"
        self._dispatch(event, {"target": to, "nonce": nonce, "payload": data})

    async def update_metadata(self, values: dict[str, Any]) -> None:
        """Set metadata (plain values are typed by ``typed``); restored on reconnect."""
        self._check_open()
        self.core.update_metadata(values)
        self._pump.pump()

    async def query_nodes(self, target: dict[str, Any], timeout: float = 10.0) -> list[Any]:
        """QUERY_NODES: the clients matching ``target``, with their metadata (an empty list
        when none does)."""
        nonce = f"query-{uuid.uuid4()}"
        future = self._expect(nonce, "QUERY_NODES")
        self._dispatch("QUERY_NODES", {"target": target, "nonce": nonce})
        d = await self._await(nonce, future, timeout)
        nodes = d.get("nodes") if isinstance(d, dict) else None
        return list(nodes) if isinstance(nodes, list) else []

    async def queue(
        self,
        queue: str,
        target: dict[str, Any],
        payload: Any,
        nonce: Any = None,
        timeout: float = 10.0,
    ) -> Any:
        """QUEUE and wait for QUEUE_CONFIRM; returns the message id (gossamer) or None.
        gossamer's gateway holds a message no client matches yet; a gateway that refuses
        it for lack of a matching client (op 3 ``no_route``) makes this raise
        ``NoRouteError``."""
        if nonce is None:
            nonce = f"queue-{uuid.uuid4()}"
        future = self._expect(nonce, "QUEUE_CONFIRM")
        self._dispatch(
            "QUEUE", {"queue": queue, "target": target, "nonce": nonce, "payload": payload}
        )
        d = await self._await(nonce, future, timeout)
        return d.get("id") if isinstance(d, dict) else None

    async def queue_request(self, queue: str, count: int = 1) -> None:
        """QUEUE_REQUEST: ask for ``count`` more messages of ``queue``."""
        d: dict[str, Any] = {"queue": queue}
        if count != 1:
            d["count"] = count
        self._dispatch("QUEUE_REQUEST", d)

    async def queue_cancel(self, queue: str) -> None:
        """QUEUE_REQUEST_CANCEL."""
        self._dispatch("QUEUE_REQUEST_CANCEL", {"queue": queue})

    async def ack(self, queue: str, message_id: str) -> None:
        """QUEUE_ACK a delivered message."""
        self._dispatch("QUEUE_ACK", {"queue": queue, "id": message_id})

    # -- the pump --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the gateway client is closed")

    def _dispatch(self, event: str, d: dict[str, Any]) -> None:
        self._check_open()
        self._pump.call(lambda at: self.core.dispatch(event, d, at))

    def _nonce(self) -> str:
        """A nonce for a traced send that has none: unique within the run as long as
        client ids are (``<client_id>/<n>``), so its receipts can be joined to it."""
        self._nonces += 1
        return f"{self.client_id}/{self._nonces}"

    def _expect(self, nonce: Any, kind: str) -> asyncio.Future[Any]:
        self._check_open()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[nonce] = future
        self._pending_kind[nonce] = kind
        return future

    async def _await(self, nonce: Any, future: asyncio.Future[Any], timeout: float) -> Any:
        try:
            async with deadline(timeout, f"the gateway's answer to {nonce}"):
                return await future
        finally:
            self._pending.pop(nonce, None)
            self._pending_kind.pop(nonce, None)

    async def _run(self) -> None:
        core = self.core
        pump = self._pump
        while core.state is not ClientState.CLOSED:
            if not core.connect_due(now()):
                # The pump's timer wakes us at the core's reconnect deadline (_write).
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                async with asyncio.timeout(self._open_timeout):
                    ws = await connect(
                        self.dsn.url,
                        ssl=self._ssl,
                        compression=None,
                        ping_interval=None,
                        max_size=self._max_size,
                        open_timeout=None,
                    )
            except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
                self.last_error = exc
                pump.feed(core.connection_made, now())
                pump.feed(core.connection_lost, now())
                continue
            self._ws = ws
            pump.feed(core.connection_made, now())
            try:
                async for frame in ws:
                    pump.feed(core.receive, frame, now())
            except ConnectionClosed as exc:
                self.last_error = exc
            finally:
                self._ws = None
                self._ready.clear()
                with contextlib.suppress(Exception):
                    await ws.close()
                pump.feed(core.connection_lost, now())
            if pump.failure is not None:
                raise pump.failure

    def _write(self) -> None:
        """The pump's output hook: the core's frames to the open connection (dropped
        when there is none: the core buffers dispatches itself), the close it asked for,
        and a wake-up of the connection loop when a reconnect is due."""
        core = self.core
        ws = self._ws
        frames = core.frames_to_send()
        if ws is not None and ws.protocol.state is State.OPEN:
            for frame in frames:
                if isinstance(frame, str):
                    ws.protocol.send_text(frame.encode())
                else:
                    ws.protocol.send_binary(frame)
            if frames:
                ws.send_data()
        if core.close_requested and ws is not None:
            core.close_requested = False
            task = asyncio.get_running_loop().create_task(ws.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        if core.connect_due(now()):
            self._wake.set()

    def _on_event(self, event: object) -> None:
        if isinstance(event, Ready):
            self._ready.set()
        elif isinstance(event, Dispatch):
            self._on_dispatch(event)
        elif isinstance(event, Invalid):
            self.invalids.append(event)
            future = self._pending.get(event.nonce) if event.nonce is not None else None
            refusal = GatewayInvalidError(event.error, extra_info=event.extra_info)
            if future is not None and not future.done():
                if event.error == "no_route":
                    error: Exception = NoRouteError(
                        "no client matches the target", nonce=event.nonce
                    )
                    error.__cause__ = refusal
                else:
                    error = refusal
                future.set_exception(error)
            elif event.error == "no_route":
                self._no_routes.append(event)
        elif isinstance(event, ServerError):
            self.errors.append(event)
        elif isinstance(event, Goodbye):
            self.goodbyes += 1
        elif isinstance(event, Disconnected):
            self._ready.clear()
            self._wake.set()

    def _on_dispatch(self, dispatch: Dispatch) -> None:
        if dispatch.event in ("QUERY_NODES", "QUEUE_CONFIRM"):
            nonce = dispatch.nonce
            future = self._pending.get(nonce)
            if future is None and dispatch.event == "QUEUE_CONFIRM":
                # A gateway that does not echo the nonce: the oldest pending confirm.
                future = next(
                    (
                        self._pending[n]
                        for n, kind in self._pending_kind.items()
                        if kind == "QUEUE_CONFIRM"
                    ),
                    None,
                )
            if future is not None and not future.done():
                future.set_result(dispatch.d)
            return
        self._messages.put(_message(dispatch))


def _timed_out(what: str, timeout: float | None, last: BaseException | None) -> TimedOutError:
    fields: dict[str, Any] = {"timeout": timeout}
    if last is not None:
        fields["last_error"] = f"{type(last).__name__}: {last}"
    return TimedOutError(f"{what} did not finish in time", **fields)


def open_gateway_client(dsn: str | Dsn, **options: Any) -> Opening[GatewayClient]:
    """Open a client of the gateway at ``dsn`` (``singyeong://app[:password]@host:port``,
    ``host`` a name, ``localhost`` or ``[::1]``); await it or use it with ``async with``.
    It is returned once identified (op 2), within ``open_timeout`` seconds
    (``TimedOutError``). ``options`` are :class:`GatewayClient`'s keyword arguments."""
    try:
        client = GatewayClient(dsn, **options)
    except TypeError as exc:
        raise ConfigError(f"unknown gateway client option: {exc}") from exc
    return Opening(client._open)
