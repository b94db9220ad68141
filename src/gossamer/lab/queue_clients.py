"""The ``queues`` scenario's workload: 신경 clients of one host producing and consuming.

In the lab's ``queues`` scenario every host runs a ``gossamer node`` daemon and a
``gossamer lab app`` whose ``[cluster]`` section (``workload = "queues"``) makes it this
workload only: ``clients`` clients of ``gossamer.gateway.client`` connected to the host's
daemon, each a consumer of the queue ``jobs`` and, in turn, a producer into it. A push
targets a metadata group (``g0``, ``g1``: client ``i`` of a host is in ``g<i mod 2>``), so
with two clients per host every push has consumers on every host, and whichever node
holds the queue's decision, the message may travel to another node's client.

Everything a client sees is traced in layer ``queue`` (the contract with
``gossamer.analysis.checks.queues``, which judges the run from these events and the
daemons' views): ``push`` (``msg`` = nonce ``<client>/<k>``), ``confirm`` (``msg`` =
message id, ``attrs.nonce``), ``refused`` (``msg`` = nonce, ``attrs.reason``),
``receive`` (``msg`` = id, ``attrs.attempt``, ``attrs.consumer``, ``attrs.nonce`` the
push's, from the payload) and ``ack``; every
event carries ``attrs.host``, the daemon the client is connected to. A push answered by
neither within ``PUSH_TIMEOUT`` is left indeterminate.

A consumer asks for one message at a time (QUEUE_REQUEST; again when a node outside the
majority refuses the request), acks it after ``work``
seconds on average (``[cluster]`` ``work``: consumers slower than the producers build a
backlog for the faults to find), and asks again; it asks again after every reconnect
too (a gateway forgets a disconnected client's requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, Final

from gossamer.aio.gateway_client import GatewayClient, GatewayInvalidError
from gossamer.errors import ClosedError, GossamerError, TimedOutError
from gossamer.lab.cluster_clients import APPLICATION, GROUPS, HostClients
from gossamer.lab.config import ClusterSection
from gossamer.trace.sink import Tracer

__all__ = ["LAYER", "QUEUE", "QueueClients"]

#: The trace layer of what the clients saw, and the queue they share.
LAYER: Final = "queue"
QUEUE: Final = "jobs"
#: Seconds a push waits for its QUEUE_CONFIRM or refusal before it is left indeterminate.
PUSH_TIMEOUT: Final = 5.0
#: A consumer that received nothing for this long re-checks its connection.
POLL: Final = 0.5
#: After the workload, a host's clients are idle once nothing arrived for this long.
QUIET: Final = 3.0
#: Seconds before a consumer asks again after its request was refused.
REASK: Final = 0.25


def _refused_requests(client: GatewayClient, seen: int) -> bool:
    """Whether an op 3 after the first ``seen`` refused a QUEUE_REQUEST."""
    return any(
        isinstance(invalid.extra_info, dict) and invalid.extra_info.get("t") == "QUEUE_REQUEST"
        for invalid in client.invalids[seen:]
    )


class QueueClients(HostClients):
    """One host's queue clients (see the module docstring)."""

    def __init__(
        self, config: ClusterSection, tracer: Tracer, on_delivered: Callable[[], None]
    ) -> None:
        super().__init__(config, tracer, on_delivered)
        self.unanswered = 0
        self.held = 0
        self.last_receive = 0.0

    @staticmethod
    def name(host: str, index: int) -> str:
        """Client ``index`` of ``host``: ``<host>-q<index>``."""
        return f"{host}-q{index}"

    def _trace(self, kind: str, msg: str, **attrs: str) -> None:
        self.tracer(time.monotonic(), LAYER, kind, msg=msg,
                    attrs={"host": self.config.host, **attrs})

    async def open(self, rng: Callable[[int], random.Random]) -> None:
        """Connect every client to this host's daemon and start consuming."""
        await self.open_clients(rng, self.name)
        self._rng = rng(200)
        for client in self.clients:
            self.spawn(self._consume(client))

    def pending(self) -> int:
        """Work not finished: pushes unanswered, messages held and not yet acked, and
        1 while a message arrived less than ``QUIET`` seconds ago (more may follow)."""
        recent = time.monotonic() - self.last_receive < QUIET
        return self.unanswered + self.held + (1 if recent else 0)

    async def _consume(self, client: GatewayClient) -> None:
        readies = -1
        refusals = 0
        while True:
            refused = _refused_requests(client, refusals)
            refusals = len(client.invalids)
            if refused:
                # A node outside the majority refused it (op 3): ask again, in a while.
                await asyncio.sleep(REASK)
            if client.ready and (client.core.counters.readies != readies or refused):
                # First connection, a reconnect (the gateway forgot our request), or a
                # refused request.
                readies = client.core.counters.readies
                with contextlib.suppress(ClosedError):
                    await client.queue_request(QUEUE)
            try:
                message = await client.receive(timeout=POLL)
            except TimedOutError:
                continue
            except ClosedError:
                return
            if message.event != "QUEUE" or message.id is None or message.queue is None:
                continue
            self.last_receive = time.monotonic()
            attempt = str(message.attempt or 0)
            data = message.data if isinstance(message.data, dict) else {}
            self._trace("receive", message.id, consumer=client.client_id, attempt=attempt,
                        nonce=str(data.get("nonce", "")))
            self.on_delivered()
            self.held += 1
            try:
                work = self.config.work
                await asyncio.sleep(self._rng.uniform(0.5 * work, 1.5 * work))
                await client.ack(message.queue, message.id)
                self._trace("ack", message.id, consumer=client.client_id, attempt=attempt)
                await client.queue_request(QUEUE)
            except ClosedError:
                return
            finally:
                self.held -= 1

    async def step(self, k: int) -> bool:
        """Push ``k``: handed to a client (its answer is awaited in the background)."""
        client = self.clients[k % len(self.clients)]
        nonce = f"{client.client_id}/{k}"
        group = GROUPS[(k // len(self.clients)) % len(GROUPS)]
        target = {"application": APPLICATION, "ops": [{"group": group}]}
        self._trace("push", nonce, client=client.client_id, queue=QUEUE)
        self.unanswered += 1
        self.spawn(self._push(client, nonce, target, {"nonce": nonce, "k": k}))
        return True

    async def _push(
        self, client: GatewayClient, nonce: str, target: dict[str, Any], payload: Any
    ) -> None:
        try:
            message_id = await client.queue(QUEUE, target, payload, nonce=nonce,
                                            timeout=PUSH_TIMEOUT)
        except GatewayInvalidError as exc:
            info = exc.fields.get("extra_info")
            reason = info.get("reason") if isinstance(info, dict) else None
            self._trace("refused", nonce, client=client.client_id,
                        reason=str(reason or exc.reason))
        except (GossamerError, TimeoutError):
            pass  # closed, or no answer in time: indeterminate
        else:
            if message_id is not None:
                self._trace("confirm", str(message_id), nonce=nonce, client=client.client_id)
        finally:
            self.unanswered -= 1
