"""The gateway core's cluster queue mode: queue operations go to the cluster's order.

On one node the core decides queue operations itself (``QueueBook``). In a cluster the
queues are a state machine replicated on the cluster's total order
(``docs/cluster.md``, "Replicated queues"): nothing local may enter a decision, so the
core, once switched with :meth:`OrderedQueues.order_queues`, decides nothing about
queues. It checks a client's operation as on one node (name, target, count, id), then
*proposes* it (``queue_proposals()``, drained by the driver after each flush, which
multicasts each as a command in the order), and carries out what the order decided for
this node's clients, as the driver reports it:

================================ ======================================================
the driver calls                 the core sends
================================ ======================================================
``queue_deliver(...)``           the QUEUE dispatch to its client (and starts the
                                 delivery's ack timer: when it fires, ``expire`` is
                                 proposed, applied only if that attempt is still out)
``queue_confirm(...)``           QUEUE_CONFIRM to the producer (the driver calls it once
                                 a majority of the view committed the Push)
``queue_refuse(...)``            op 3 with the reason and the nonce
``queue_refuse_pending(reason)`` op 3 to every producer whose Push is not confirmed yet
``set_queue_refusal(reason)``    from now on, refuse every queue operation at once with
                                 op 3 ``reason`` (``None``: accept them again)
``ask_again()``                  nothing; the credits its consumers asked for and have
                                 not used are proposed again (the order forgot them
                                 with an earlier incarnation of this node)
================================ ======================================================

A proposal is a :class:`QueueProposal`: its ``kind`` (``push``, ``request``,
``cancel``, ``ack``, ``expire``, ``client_gone``, ``replay``) and its fields by the
names of the commands (``docs/cluster.md``): ``queue``, ``message_id``, ``nonce``,
``target``, ``payload``, ``app``, ``client``, ``metadata`` (``{key: [type, value]}``,
the client's metadata when it asked), ``restricted``, ``count``, ``attempt``, ``ids``.
The proposing node's name is the driver's to add. A Push's ``message_id`` is
``<trace name>/<n>`` (the daemon's trace name is ``name#incarnation``), unique in the
cluster, so a Push proposed again is recognised.

The op 3 of a refusal: ``{"error": reason, "reason": reason, "extra_info": {"t": type,
"queue": queue}, "nonce": nonce}`` (``no_majority`` while the node's group is blocked
or it is not a member).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gossamer.proto.gateway.metadata import plain_value
from gossamer.proto.gateway.queues import QueueBook
from gossamer.proto.gateway.routing import Client, Directory
from gossamer.proto.gateway.tracing import LAYER, nonce_label
from gossamer.wire.gateway import Op

if TYPE_CHECKING:
    from gossamer.proto.gateway.core import GatewayConfig
    from gossamer.trace.sink import Tracer

__all__ = ["OrderedQueues", "QueueProposal"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueProposal:
    """A queue operation this node proposes to the order (module docstring)."""

    kind: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _PendingPush:
    app: str
    client: str
    queue: str
    nonce: Any


class OrderedQueues:
    """The cluster queue mode of ``GatewayCore`` (a base class, like ``ClusterMember``).
    The core's parts it uses are declared for the type checker; the core defines them."""

    if TYPE_CHECKING:
        config: GatewayConfig
        directory: Directory
        queues: QueueBook
        _trace: Tracer | None

        def _dispatch_to(self, conns: tuple[int, ...], t: str, d: Any, now: float) -> None: ...

        def _send(self, conn: int, op: Op, d: Any, now: float) -> None: ...

    def _init_ordered(self) -> None:
        #: True once ``order_queues`` switched the core to the cluster's order.
        self.ordered = False
        self._proposals: list[QueueProposal] = []
        self._pushes: dict[str, _PendingPush] = {}
        self._next_push = 0
        self._refusal: str | None = None
        # (deadline, attempt, message id, app, client) of the deliveries to this node's
        # clients; an entry is stale once the delivery was acked or delivered again.
        self._ack_timers: list[tuple[float, int, str, str, str]] = []
        self._held: dict[str, int] = {}
        # Clients that asked for or were given messages: only their leaves are proposed.
        self._consumers: set[tuple[str, str]] = set()
        # (app, client) -> queue -> credits asked for and not yet used, as far as this
        # node knows (``ask_again``).
        self._credits: dict[tuple[str, str], dict[str, int]] = {}

    # -- the driver's side ------------------------------------------------------------

    def order_queues(self, now: float, book: QueueBook | None = None) -> None:
        """From now on, queue operations are proposed to the order (module docstring).
        ``book``: the replicated machine's queues, which the HTTP API then shows (the
        stats, the dead letters); called again whenever the machine's book is replaced."""
        self.ordered = True
        if book is not None:
            self.queues = book

    def queue_proposals(self) -> list[QueueProposal]:
        """The operations to multicast in the order, oldest first; drained."""
        out, self._proposals = self._proposals, []
        return out

    def set_queue_refusal(self, reason: str | None, now: float) -> None:
        """Refuse every queue operation at once with op 3 ``reason`` (``None``: accept)."""
        self._refusal = reason

    @property
    def queue_refusal(self) -> str | None:
        return self._refusal

    @property
    def unconfirmed(self) -> int:
        """Pushes proposed here and neither confirmed nor refused yet."""
        return len(self._pushes)

    def queue_deliver(
        self, *, app: str, client: str, queue: str, message_id: str, nonce: Any,
        payload: Any, attempt: int, now: float,
    ) -> bool:
        """The order gave ``message_id`` to this node's client: send it the QUEUE
        dispatch and start its ack timer. False when the client is not here (gone:
        its ``client_gone`` is on its way and returns the message)."""
        holder = self._own(app, client)
        if holder is None:
            return False
        self._dispatch_to(
            (holder.conn,), "QUEUE",
            {"nonce": nonce, "payload": {"queue": queue, "id": message_id, "payload": payload},
             "target": None, "attempt": attempt},
            now,
        )
        self._held[message_id] = attempt
        self._consumers.add((app, client))
        credits = self._credits.get((app, client))
        if credits is not None and credits.get(queue, 0) > 0:
            credits[queue] -= 1
        heapq.heappush(self._ack_timers, (now + self.config.queues.ack_timeout, attempt,
                                          message_id, app, client))
        if self._trace is not None:
            self._trace(now, LAYER, "deliver" if attempt == 1 else "redeliver", msg=message_id,
                        peer=holder.trace_id, seq=attempt,
                        attrs={"queue": queue, "attempt": str(attempt)})
        return True

    def queue_confirm(self, message_id: str, now: float) -> bool:
        """QUEUE_CONFIRM for the Push ``message_id`` proposed here (a majority of the view
        committed it); False when it is not pending (refused, or its client is gone)."""
        pending = self._pushes.pop(message_id, None)
        if pending is None:
            return False
        holder = self._own(pending.app, pending.client)
        if holder is None:
            return False
        self._dispatch_to((holder.conn,), "QUEUE_CONFIRM",
                          {"queue": pending.queue, "id": message_id, "nonce": pending.nonce}, now)
        return True

    def queue_refuse(
        self, *, app: str, client: str, reason: str, nonce: Any, now: float,
        queue: str | None = None, message_id: str | None = None, t: str = "QUEUE",
    ) -> None:
        """op 3 ``reason`` to this node's client (a Push's ``message_id``: no confirm)."""
        if message_id is not None:
            self._pushes.pop(message_id, None)
        holder = self._own(app, client)
        if holder is not None:
            self._refuse(holder.conn, reason, t, queue, nonce=nonce, now=now)

    def queue_refuse_pending(self, reason: str, now: float) -> int:
        """op 3 ``reason`` to the producer of every Push not confirmed yet; how many."""
        pushes, self._pushes = self._pushes, {}
        for message_id, pending in pushes.items():
            self.queue_refuse(app=pending.app, client=pending.client, reason=reason,
                              nonce=pending.nonce, queue=pending.queue, now=now)
            if self._trace is not None:
                self._trace(now, LAYER, "refuse", msg=message_id,
                            attrs={"queue": pending.queue, "reason": reason})
        return len(pushes)

    def ask_again(self, now: float) -> int:
        """Propose again, for every consumer still connected here, the credits it asked
        for and has not used: the order forgot them (this node left the view, as an
        earlier incarnation of it, and its consumers with it). Returns how many
        Requests."""
        count = 0
        for (app, client_id), queues in sorted(self._credits.items()):
            client = self._own(app, client_id)
            if client is None:
                continue
            for queue, credits in sorted(queues.items()):
                if credits > 0:
                    queues[queue] = 0  # counted again by the proposal
                    self._propose_request(client, queue, credits)
                    count += 1
        return count

    def pending_pushes(self) -> list[str]:
        """The ids of the Pushes proposed here, not confirmed nor refused, oldest first."""
        return list(self._pushes)

    # -- the core's side ----------------------------------------------------------------

    def _refused_at_once(
        self, conn: int, t: str, queue: Any, nonce: Any, now: float
    ) -> bool:
        """Refuse the operation at once while the node may not order (True: refused)."""
        if self._refusal is None:
            return False
        self._refuse(conn, self._refusal, t, queue, nonce=nonce, now=now)
        return True

    def _propose_push(
        self, client: Client, queue: str, nonce: Any, d: Mapping[str, Any], *, now: float
    ) -> str:
        """Propose the Push of QUEUE dispatch ``d`` (checked); its new message id."""
        self._next_push += 1
        message_id = f"{self.config.trace_name or self.config.node_id}/{self._next_push}"
        self._pushes[message_id] = _PendingPush(client.app_id, client.client_id, queue, nonce)
        self._propose("push", client, queue=queue, message_id=message_id, nonce=nonce,
                      target=d["target"], payload=d["payload"])
        if self._trace is not None:
            label = nonce_label(nonce)
            self._trace(now, LAYER, "propose", msg=message_id, peer=client.trace_id,
                        attrs={"queue": queue} if label is None
                        else {"queue": queue, "nonce": label})
        return message_id

    def _propose_request(self, client: Client, queue: str, count: int) -> None:
        identity = (client.app_id, client.client_id)
        self._consumers.add(identity)
        credits = self._credits.setdefault(identity, {})
        credits[queue] = min(credits.get(queue, 0) + count, self.config.queues.max_credits)
        types = client.types
        # Unset reserved keys (no namespace) are left out: a value is never null.
        metadata = {key: [types[key], plain_value(value)]
                    for key, value in self.directory.values(client).items()
                    if value is not None}
        self._propose("request", client, queue=queue, metadata=metadata,
                      restricted=client.restricted, count=count)

    def _propose_cancel(self, client: Client, queue: str) -> None:
        self._credits.get((client.app_id, client.client_id), {}).pop(queue, None)
        self._propose("cancel", client, queue=queue)

    def _propose_ack(self, client: Client, queue: str, message_id: str) -> None:
        self._held.pop(message_id, None)  # its timer is stale from now on
        self._propose("ack", client, queue=queue, message_id=message_id)

    def _propose(self, kind: str, client: Client | None, **fields: Any) -> None:
        if client is not None:
            fields["app"] = client.app_id
            fields["client"] = client.client_id
        self._proposals.append(QueueProposal(kind=kind, fields=fields))

    def _ordered_client_gone(self, client: Client) -> None:
        identity = (client.app_id, client.client_id)
        self._credits.pop(identity, None)
        if identity in self._consumers:  # it may hold deliveries or credits
            self._consumers.discard(identity)
            self._propose("client_gone", client)

    def _ordered_deadline(self) -> float | None:
        return self._ack_timers[0][0] if self._ack_timers else None

    def _ordered_timer(self, now: float) -> None:
        """Deliveries not acked in time: propose their expiry (applied only if that
        attempt is still out when the order reaches it)."""
        timers = self._ack_timers
        while timers and timers[0][0] <= now:
            _at, attempt, message_id, app, client = heapq.heappop(timers)
            if self._held.get(message_id) != attempt:
                continue  # acked here, or delivered again since
            del self._held[message_id]
            self._proposals.append(QueueProposal(
                kind="expire", fields={"message_id": message_id, "attempt": attempt,
                                       "app": app, "client": client}))

    def _own(self, app: str, client: str) -> Client | None:
        found = self.directory.by_identity.get((app, client))
        return found if found is not None and found.node is None else None

    def _refuse(
        self, conn: int, reason: str, t: str, queue: Any, *, nonce: Any, now: float
    ) -> None:
        self._send(conn, Op.INVALID, {"error": reason, "reason": reason,
                                      "extra_info": {"t": t, "queue": queue},
                                      "nonce": nonce}, now)
