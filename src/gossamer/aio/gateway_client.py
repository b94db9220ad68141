"""An asyncio client for 신경 gateways (gossamer's or the reference), on ``websockets``.

::

    async with GatewayClient("singyeong://my-app:secret@127.0.0.1:4567",
                             metadata={"region": "eu", "latency": 12}) as client:
        await client.send({"application": "worker", "ops": [...]}, {"job": 1})
        async for message in client:          # SEND, BROADCAST, QUEUE, CLIENT_* ...
            if message.event == "QUEUE":
                await client.ack(message.queue, message.id)

The protocol decisions (identify, heartbeats, zombie detection, reconnect backoff,
buffering while disconnected, metadata restored on reconnect through the identify
``metadata`` field, same ``client_id`` on every connection) are made by
``gossamer.proto.gateway.client.ClientCore``; this module is its pump. It keeps the
connection up until ``close()``, and correlates replies by nonce:
``query_nodes()`` returns QUERY_NODES' ``nodes``, ``queue()`` waits for its
QUEUE_CONFIRM, and an op 3 carrying the nonce raises ``GatewayInvalidError`` there.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl as ssl_module
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.protocol import State

from gossamer.aio._pump import now as clock
from gossamer.errors import RemoteProtocolError
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

__all__ = [
    "GatewayClient",
    "GatewayInvalidError",
    "Message",
    "VersionString",
    "parse_dsn",
    "typed",
]


class GatewayInvalidError(RemoteProtocolError):
    """The gateway answered a request with op 3 (``error``, ``extra_info``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A dispatch received from the gateway.

    For ``QUEUE``, ``payload`` is the producer's payload and ``queue``/``id`` are what
    ``ack`` needs; ``attempt`` counts deliveries of this message (gossamer only).
    """

    event: str
    nonce: Any
    payload: Any
    ts: int | None
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
            payload=inner.get("payload"),
            ts=dispatch.ts,
            queue=inner.get("queue"),
            id=inner.get("id"),
            attempt=d.get("attempt"),
            d=dispatch.d,
        )
    return Message(
        event=dispatch.event,
        nonce=d.get("nonce"),
        payload=d.get("payload"),
        ts=dispatch.ts,
        d=dispatch.d,
    )


class GatewayClient:
    """One client of a gateway, reconnecting until closed (see the module docstring)."""

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
        )
        if self.dsn.secure and ssl is None:
            ssl = ssl_module.create_default_context()
        self._ssl = ssl if self.dsn.secure else None
        self._open_timeout = open_timeout
        self._max_size = max_size
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._messages: asyncio.Queue[Message] = asyncio.Queue()
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._pending: dict[Any, asyncio.Future[Any]] = {}
        self._pending_kind: dict[Any, str] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self.invalids: list[Invalid] = []
        self.errors: list[ServerError] = []
        self.goodbyes = 0
        self.last_error: BaseException | None = None

    # -- properties ------------------------------------------------------------

    @property
    def client_id(self) -> str:
        return self.core.config.client_id

    @property
    def restricted(self) -> bool:
        return self.core.restricted

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    # -- lifecycle -------------------------------------------------------------

    async def connect(self, timeout: float = 10.0) -> None:
        """Start the connection loop and wait until identified (op 2)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        await self.wait_ready(timeout)

    async def wait_ready(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            await self._ready.wait()

    async def close(self) -> None:
        """Close for good (no reconnect)."""
        self.core.close()
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
        if self._timer is not None:
            self._timer.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("client closed"))
        self._pending.clear()

    async def __aenter__(self) -> GatewayClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- receiving -------------------------------------------------------------

    async def recv(self, timeout: float | None = None) -> Message:
        """The next dispatch (SEND, BROADCAST, QUEUE, CLIENT_CONNECTED...)."""
        async with asyncio.timeout(timeout):
            return await self._messages.get()

    def pending_messages(self) -> int:
        return self._messages.qsize()

    async def __aiter__(self) -> AsyncIterator[Message]:
        while True:
            yield await self._messages.get()

    # -- requests --------------------------------------------------------------

    async def send(self, target: dict[str, Any], payload: Any, nonce: Any = None) -> None:
        """SEND: ``payload`` to one client matching ``target``."""
        self._dispatch("SEND", {"target": target, "nonce": nonce, "payload": payload})

    async def broadcast(self, target: dict[str, Any], payload: Any, nonce: Any = None) -> None:
        """BROADCAST: ``payload`` to every client matching ``target``."""
        self._dispatch("BROADCAST", {"target": target, "nonce": nonce, "payload": payload})

    async def update_metadata(self, values: dict[str, Any]) -> None:
        """Set metadata (plain values are typed by ``typed``); restored on reconnect."""
        self.core.update_metadata(values)
        self._flush()

    async def query_nodes(self, target: dict[str, Any], timeout: float = 10.0) -> list[Any]:
        """QUERY_NODES: the clients matching ``target``, with their metadata."""
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
        """QUEUE and wait for QUEUE_CONFIRM; returns the message id (gossamer) or None."""
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

    def _dispatch(self, event: str, d: dict[str, Any]) -> None:
        self.core.dispatch(event, d)
        self._flush()

    def _expect(self, nonce: Any, kind: str) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[nonce] = future
        self._pending_kind[nonce] = kind
        return future

    async def _await(self, nonce: Any, future: asyncio.Future[Any], timeout: float) -> Any:
        try:
            async with asyncio.timeout(timeout):
                return await future
        finally:
            self._pending.pop(nonce, None)
            self._pending_kind.pop(nonce, None)

    async def _run(self) -> None:
        core = self.core
        while core.state is not ClientState.CLOSED:
            now = clock()
            if not core.connect_due(now):
                deadline = core.next_deadline()
                self._wake.clear()
                delay = None if deadline is None else max(0.0, deadline - now)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
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
                core.connection_made(clock())
                core.connection_lost(clock())
                self._after()
                continue
            self._ws = ws
            core.connection_made(clock())
            try:
                async for frame in ws:
                    core.receive(frame, clock())
                    self._flush()
            except ConnectionClosed as exc:
                self.last_error = exc
            finally:
                self._ws = None
                self._ready.clear()
                with contextlib.suppress(Exception):
                    await ws.close()
                core.connection_lost(clock())
                self._after()

    def _after(self) -> None:
        """Drain events after a connection ended (no socket to write to)."""
        self.core.frames_to_send()
        self._handle_events()

    def _flush(self) -> None:
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
        self._handle_events()
        if core.close_requested and ws is not None:
            core.close_requested = False
            task = asyncio.get_running_loop().create_task(ws.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        self._arm_timer()

    def _handle_events(self) -> None:
        for event in self.core.events_received():
            if isinstance(event, Ready):
                self._ready.set()
            elif isinstance(event, Dispatch):
                self._on_dispatch(event)
            elif isinstance(event, Invalid):
                self.invalids.append(event)
                future = self._pending.get(event.nonce) if event.nonce is not None else None
                if future is not None and not future.done():
                    future.set_exception(
                        GatewayInvalidError(event.error, extra_info=event.extra_info)
                    )
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
        self._messages.put_nowait(_message(dispatch))

    def _arm_timer(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = self.core.next_deadline()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None and self.core.state is ClientState.READY:
            self._timer = loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.core.handle_timer(clock())
        self._flush()

