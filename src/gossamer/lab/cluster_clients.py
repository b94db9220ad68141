"""The ``cluster`` scenario's workload: 신경 clients of one host, routing across the cluster.

In the lab's ``cluster`` scenario every host runs a ``gossamer node`` daemon and a
``gossamer lab app`` whose ``[cluster]`` section makes it this workload only: ``clients``
gateway clients connected to the host's daemon (``cluster.gateway``), like any
application, which route to clients on every host through the daemons' gateways.

Naming is part of the contract with the analysis (``gossamer.analysis.checks.cluster``,
``docs/analysis.md``), which evaluates every routing query itself from the traces:

- a client is ``<host>-<group>-<index>`` (application ``lab``) with metadata
  ``{"host": <host>, "group": <group>, "index": <index>}``; groups are ``g0``, ``g1``
  (client ``i`` of a host is in ``g<i mod 2>``), so every group has clients on every host;
- a dispatch's nonce is ``<client>/<TYPE>/<key>=<value>/<k>``: the sending client, SEND,
  BROADCAST or QUERY, and the query, which is the one operator ``key == value`` on
  metadata ``host`` or ``group``.

Step ``k`` of the workload uses client ``k mod clients`` and does, in turn: a SEND to a
group, a SEND to another host's clients, a BROADCAST to a group, a QUERY_NODES of a group
(every other round: of another host), traced ``gateway``/``client_query`` (``msg`` the
nonce, ``attrs.client``, ``attrs.result``: the clients named, ``app/client``,
comma-separated). SENDs and
BROADCASTs are traced by the clients themselves (``client_send``/``client_recv``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from gossamer.aio.gateway_client import GatewayClient, open_gateway_client
from gossamer.errors import ClosedError, GossamerError
from gossamer.lab.config import ClusterSection
from gossamer.proto.gateway.tracing import LAYER, client_label
from gossamer.trace.sink import Tracer

__all__ = [
    "APPLICATION",
    "GROUPS",
    "QUERY_KIND",
    "ClusterClients",
    "HostClients",
    "client_name",
    "nonce",
]

#: The clients' application id.
APPLICATION: Final = "lab"
#: The metadata groups: client ``i`` of a host is in ``GROUPS[i % len(GROUPS)]``.
GROUPS: Final = ("g0", "g1")
#: The trace kind of a QUERY_NODES answer (layer ``gateway``).
QUERY_KIND: Final = "client_query"
#: Seconds a client waits for a daemon to identify it (the daemon may start later, or be
#: restarting); reconnects back off at most ``RECONNECT_MAX`` seconds.
OPEN_TIMEOUT: Final = 30.0
RECONNECT_MAX: Final = 0.5
QUERY_TIMEOUT: Final = 2.0


def client_name(host: str, index: int) -> str:
    """Client ``index`` of ``host``: ``<host>-<group>-<index>``."""
    return f"{host}-{GROUPS[index % len(GROUPS)]}-{index}"


def nonce(client: str, kind: str, key: str, value: str, k: int) -> str:
    """The nonce of step ``k``: ``<client>/<TYPE>/<key>=<value>/<k>``."""
    return f"{client}/{kind}/{key}={value}/{k}"


class HostClients:
    """What every client workload of a host has: its ``[cluster]`` section, the tracer,
    a callback for each dispatch received, the clients and the tasks that run them
    (``spawn``), which ``close`` cancels before it closes the clients."""

    def __init__(
        self, config: ClusterSection, tracer: Tracer, on_delivered: Callable[[], None]
    ) -> None:
        self.config = config
        self.tracer = tracer
        self.on_delivered = on_delivered
        self.clients: list[GatewayClient] = []
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` until it ends or ``close``."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def open_clients(
        self, rng: Callable[[int], random.Random], name: Callable[[str, int], str]
    ) -> None:
        """``config.clients`` clients of this host's daemon, opened once it serves: client
        ``i`` is ``name(host, i)`` of application ``lab``, with metadata ``host``,
        ``group`` (``GROUPS[i mod 2]``) and ``index``; they reconnect within
        ``RECONNECT_MAX`` s."""
        c = self.config
        dsn = f"singyeong://{APPLICATION}@{c.gateway}"
        opened = await asyncio.gather(*(
            open_gateway_client(
                dsn, client_id=name(c.host, i),
                metadata={"host": c.host, "group": GROUPS[i % len(GROUPS)], "index": i},
                rng=rng(100 + i), open_timeout=OPEN_TIMEOUT, reconnect_base=0.1,
                reconnect_max=RECONNECT_MAX, tracer=self.tracer,
            )
            for i in range(c.clients)
        ))
        self.clients = list(opened)

    async def close(self) -> None:
        """Cancel the workload's tasks, then close the clients."""
        for task in list(self.tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self.clients), return_exceptions=True)


class ClusterClients(HostClients):
    """One host's clients and its workload step (see the module docstring)."""

    def __init__(
        self, config: ClusterSection, tracer: Tracer, on_delivered: Callable[[], None]
    ) -> None:
        super().__init__(config, tracer, on_delivered)
        self.others = [h for h in config.hosts if h != config.host] or [config.host]

    async def open(self, rng: Callable[[int], random.Random]) -> None:
        """Connect every client to this host's daemon (waiting for it to serve)."""
        await self.open_clients(rng, client_name)
        for client in self.clients:
            self.spawn(self._consume(client))

    async def _consume(self, client: GatewayClient) -> None:
        while True:
            try:
                message = await client.receive()
            except ClosedError:
                return
            if message.event in ("SEND", "BROADCAST"):
                self.on_delivered()

    async def step(self, k: int) -> bool:
        """Workload step ``k``; whether a dispatch was handed over."""
        client = self.clients[k % len(self.clients)]
        name = client.client_id
        action = k % 4
        group = GROUPS[(k // 4) % len(GROUPS)]
        other = self.others[(k // 4) % len(self.others)]
        by_host = action == 1 or (action == 3 and (k // 4) % 2 == 1)
        key, value = ("host", other) if by_host else ("group", group)
        target: dict[str, Any] = {"application": APPLICATION, "ops": [{key: value}]}
        if action == 3:
            return await self._query(client, nonce(name, "QUERY", key, value, k), target)
        kind = "BROADCAST" if action == 2 else "SEND"
        try:
            await client.send({"from": name, "k": k}, to=target,
                              nonce=nonce(name, kind, key, value, k),
                              broadcast=kind == "BROADCAST")
        except GossamerError:
            return False  # closed, or an earlier send found no route
        return True

    async def _query(self, client: GatewayClient, label: str, target: dict[str, Any]) -> bool:
        t = time.monotonic()
        try:
            nodes = await client.query_nodes(target, timeout=QUERY_TIMEOUT)
        except (GossamerError, TimeoutError):
            return False
        names = sorted(
            client_label(str(n.get("app_id")), str(n.get("client_id")))
            for n in nodes if isinstance(n, dict)
        )
        self.tracer(t, LAYER, QUERY_KIND, msg=label, attrs={
            "client": client_label(APPLICATION, client.client_id), "result": ",".join(names),
        })
        return True
