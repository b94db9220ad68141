"""Durable message queues with routing queries: at-least-once, with a dead-letter queue.

Reference behaviour and its gaps (singyeong-as-coded §10): one message per
QUEUE_REQUEST, a 15 s ack timeout, then a dead-letter list that feeds the tail of the
queue again; redelivery only when some later QUEUE/QUEUE_REQUEST happens; a head
message that no *waiting* consumer matches is **dropped**; state is in memory.

gossamer's rules (``docs/gateway.md``, "Queues"):

- **QUEUE** appends the message (id, queue, nonce, target, payload) and records it in
  the store *before* QUEUE_CONFIRM is sent (the core emits a store operation and the
  driver commits it before flushing the confirm), so a confirmed message survives a
  crash of the gateway.
- **QUEUE_REQUEST** gives the client one credit on the queue (``count`` credits when
  asked), i.e. it will receive that many messages; QUEUE_REQUEST_CANCEL takes its
  credits back.
- **Dispatch** runs after every QUEUE, QUEUE_REQUEST, timeout, disconnect and replay:
  ready messages are taken in queue order, and each goes to a waiting client its
  target matches (first-come first-served among them; by ``key`` hashing or the
  selector when the target has one; ``optional`` widens to every waiting client of
  the application when the ops match no connected client). A message that no waiting
  client matches **stays in place** and later messages are still considered: nothing
  is dropped and nothing blocks the head.
- **Ack**: QUEUE_ACK by a client that holds (or held) the message removes it for
  good. An unknown id, or an ack from a client that never held it, is refused (op 3).
- **At least once**: a delivery not acked within ``ack_timeout`` seconds, or whose
  holder disconnects, goes back to its place in the queue *and is redelivered at once*
  if a matching client is waiting (the reference waits for unrelated traffic). After
  ``max_attempts`` deliveries the message moves to the **dead-letter queue**, where it
  stays (persisted) until it is replayed (``replay``), which puts it at the tail.

Deliveries are returned to the caller as ``(message, client)`` pairs; the core builds
the packets and the trace events (``deliver`` / ``redeliver`` / ``ack`` /
``dead_letter`` / ``enqueue``).

One book, two owners. The single-node gateway core gives it the gateway's directory of
connected clients, its rng and its clock (``dispatch(queue, now)`` arms an ack deadline
that ``expire(now)`` enforces). The cluster's replicated state machine
(``replicated_queues.ReplicatedQueues``) gives it a directory of the consumers the
ordered commands named, no rng (``rng=None``: ties go to the first waiting consumer and
``key`` hashing is deterministic anyway) and no clock (``dispatch(queue, None)`` arms no
deadline; the holder's node proposes ``Expire`` and the machine calls
``expire_delivery``). The dispatch, ack, return and dead-letter rules are this class's,
for both.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeAlias

from gossamer.params import Checked, PositiveCount, PositiveSeconds
from gossamer.proto.gateway.query import Query, QueryError, parse_query
from gossamer.proto.gateway.routing import Client, Directory

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "AckOutcome",
    "Acked",
    "Cleared",
    "DeadLettered",
    "Delivered",
    "Enqueued",
    "MessageOp",
    "MessageState",
    "Position",
    "QueueBook",
    "QueueConfig",
    "QueueRecord",
    "QueuedMessage",
    "Replayed",
    "StoreOp",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig(Checked):
    """Queue timing and bounds (reference: 15 s ack timeout, no attempt limit, §12)."""

    ack_timeout: PositiveSeconds = 15.0
    max_attempts: PositiveCount = 5
    max_name_length: PositiveCount = 256
    max_credits: PositiveCount = 1000


# --------------------------------------------------------------- store operations


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRecord:
    """A queued message as the store keeps it (``target``/``payload`` as JSON values)."""

    id: str
    queue: str
    seq: int
    nonce: Any
    target: Any
    payload: Any
    attempts: int = 0
    dead: bool = False
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Enqueued:
    """Store a new message; it must be durable before QUEUE_CONFIRM leaves."""

    record: QueueRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageOp:
    """A change to the stored message ``id`` (the base of every op but ``Enqueued``)."""

    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivered(MessageOp):
    """A delivery attempt was made: persist the attempt count."""

    attempts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Acked(MessageOp):
    """The message is done: delete it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLettered(MessageOp):
    """The message moved to the dead-letter queue."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Replayed(MessageOp):
    """A dead letter went back to the queue, at ``seq``, with its attempts reset."""

    seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Cleared:
    """Delete every stored message (a replicated member replacing its store with the
    state it was given at a rejoin, whatever it had on disk)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """The replicated machine applied the cluster's order through ``position``, whose
    history digest is ``chain`` (kept with the messages, in the same transaction, so the
    store says where it stands)."""

    position: int
    chain: str = ""


StoreOp: TypeAlias = Enqueued | Delivered | Acked | DeadLettered | Replayed | Cleared | Position


# ------------------------------------------------------------------------ state


class MessageState(Enum):
    READY = "ready"
    INFLIGHT = "inflight"
    DEAD = "dead"


@dataclass(slots=True, kw_only=True, eq=False)
class QueuedMessage:
    """One message and where it is in its life."""

    id: str
    queue: str
    seq: int
    nonce: Any
    target: Any
    payload: Any
    query: Query | None
    attempts: int = 0
    state: MessageState = MessageState.READY
    #: The client holding it while in flight.
    holder: Client | None = None
    deadline: float = 0.0
    #: ``(app, client)`` of every client it was delivered to: any of them may ack it.
    holders: set[tuple[str, str]] = field(default_factory=set)
    reason: str | None = None

    @property
    def state_name(self) -> str:
        return self.state.value

    def record(self) -> QueueRecord:
        return QueueRecord(
            id=self.id,
            queue=self.queue,
            seq=self.seq,
            nonce=self.nonce,
            target=self.target,
            payload=self.payload,
            attempts=self.attempts,
            dead=self.state is MessageState.DEAD,
            reason=self.reason,
        )


@dataclass(slots=True)
class _Queue:
    ready: dict[int, QueuedMessage] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    #: One entry per credit, in arrival order (a client may appear several times).
    waiting: list[Client] = field(default_factory=list)
    dead: dict[str, QueuedMessage] = field(default_factory=dict)
    inflight: int = 0


class AckOutcome(Enum):
    """What a QUEUE_ACK did."""

    ACKED = "acked"
    UNKNOWN = "unknown message id"
    NOT_HOLDER = "message was not delivered to this client"


class QueueBook:
    """Every queue of the gateway. ``store_ops()`` drains what must be persisted."""

    def __init__(
        self, config: QueueConfig, directory: Directory, *, rng: Random | None
    ) -> None:
        """``rng=None`` makes every choice deterministic (the replicated machine's case)."""
        self.config = config
        self._directory = directory
        self._rng = rng
        # handle -> ids of the messages that client holds in flight.
        self._held: dict[int, set[str]] = {}
        self._queues: dict[str, _Queue] = {}
        self._messages: dict[str, QueuedMessage] = {}
        self._deadlines: list[tuple[float, int, str]] = []
        self._next_seq = 1
        self._ops: list[StoreOp] = []

    # -- persistence ---------------------------------------------------------

    def restore(self, records: Iterable[QueueRecord]) -> int:
        """Load messages from the store (at start-up); returns how many."""
        count = 0
        for record in sorted(records, key=lambda r: r.seq):
            try:
                query: Query | None = parse_query(record.target)
            except QueryError:
                query = None
            message = QueuedMessage(
                id=record.id,
                queue=record.queue,
                seq=record.seq,
                nonce=record.nonce,
                target=record.target,
                payload=record.payload,
                query=query,
                attempts=record.attempts,
                reason=record.reason,
            )
            self._messages[message.id] = message
            queue = self._queue(record.queue)
            if record.dead or query is None:
                message.state = MessageState.DEAD
                queue.dead[message.id] = message
                if not record.dead:
                    message.reason = "invalid target"
                    self._ops.append(DeadLettered(id=message.id, reason=message.reason))
            else:
                queue.ready[message.seq] = message
                queue.order.append(message.seq)
            self._next_seq = max(self._next_seq, record.seq + 1)
            count += 1
        for queue in self._queues.values():
            queue.order.sort()
        return count

    def store_ops(self) -> list[StoreOp]:
        """Operations to persist, in order; the caller commits them before sending."""
        ops, self._ops = self._ops, []
        return ops

    # -- inputs --------------------------------------------------------------

    def valid_name(self, name: object) -> bool:
        return isinstance(name, str) and 0 < len(name) <= self.config.max_name_length

    def enqueue(
        self, *, queue: str, message_id: str, nonce: Any, target: Any, query: Query, payload: Any
    ) -> QueuedMessage:
        """Append a message (already validated) to ``queue``."""
        message = QueuedMessage(
            id=message_id,
            queue=queue,
            seq=self._next_seq,
            nonce=nonce,
            target=target,
            payload=payload,
            query=query,
        )
        self._next_seq += 1
        self._messages[message_id] = message
        book = self._queue(queue)
        book.ready[message.seq] = message
        book.order.append(message.seq)
        self._ops.append(Enqueued(record=message.record()))
        return message

    def request(self, queue: str, client: Client, count: int = 1) -> None:
        """Give ``client`` ``count`` credits on ``queue`` (bounded by ``max_credits``)."""
        book = self._queue(queue)
        held = sum(1 for c in book.waiting if c is client)
        count = max(0, min(count, self.config.max_credits - held))
        book.waiting.extend([client] * count)
        client.queues.add(queue)

    def cancel(self, queue: str, client: Client) -> None:
        """Take back every credit ``client`` has on ``queue``."""
        book = self._queues.get(queue)
        if book is not None:
            book.waiting = [c for c in book.waiting if c is not client]
        client.queues.discard(queue)

    def ack(self, queue: str, message_id: str, identity: tuple[str, str]) -> AckOutcome:
        """QUEUE_ACK of ``message_id`` by the client ``identity`` = ``(app, client id)``
        (any client it was delivered to may ack it, connected or not)."""
        message = self._messages.get(message_id)
        if message is None or message.queue != queue or message.state is MessageState.DEAD:
            return AckOutcome.UNKNOWN
        if identity not in message.holders:
            return AckOutcome.NOT_HOLDER
        self._forget(message)
        self._ops.append(Acked(id=message_id))
        return AckOutcome.ACKED

    def client_gone(self, client: Client, now: float) -> tuple[list[QueuedMessage], list[str]]:
        """A client disconnected: drop its credits, take back what it held.

        Returns ``(dead-lettered messages, queues to dispatch)``.
        """
        touched: list[str] = []
        for name in client.queues:
            book = self._queues.get(name)
            if book is not None:
                book.waiting = [c for c in book.waiting if c is not client]
        client.queues.clear()
        dead: list[QueuedMessage] = []
        for message_id in sorted(self._held.pop(client.handle, ())):
            message = self._messages[message_id]
            if self._return(message, "holder disconnected"):
                dead.append(message)
            touched.append(message.queue)
        return dead, list(dict.fromkeys(touched))

    def expire(self, now: float) -> tuple[list[QueuedMessage], list[str]]:
        """Deliveries whose ack timed out go back (or die): ``(dead, queues to dispatch)``."""
        dead: list[QueuedMessage] = []
        touched: list[str] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, attempts, message_id = heapq.heappop(heap)
            message = self._messages.get(message_id)
            if (
                message is None
                or message.state is not MessageState.INFLIGHT
                or message.attempts != attempts
                or message.deadline != deadline
            ):
                continue  # acked, returned or redelivered since: a stale entry
            if self._return(message, "ack timeout"):
                dead.append(message)
            touched.append(message.queue)
        return dead, list(dict.fromkeys(touched))

    def expire_delivery(self, message_id: str, attempt: int) -> QueuedMessage | None:
        """Take back delivery ``attempt`` of ``message_id`` as timed out, if it is still
        outstanding (else ``None``: acked, returned or redelivered since). The message is
        ready again, or dead (``state_name == "dead"``) after ``max_attempts``."""
        message = self._messages.get(message_id)
        if (
            message is None
            or message.state is not MessageState.INFLIGHT
            or message.attempts != attempt
        ):
            return None
        self._return(message, "ack timeout")
        return message

    def dispatch(self, queue: str, now: float | None) -> list[tuple[QueuedMessage, Client]]:
        """Deliver ready messages of ``queue`` to waiting clients; see the module doc.
        ``now=None``: arm no ack deadline (expiry comes from ``expire_delivery``)."""
        book = self._queues.get(queue)
        if book is None or not book.waiting or not book.order:
            return []
        delivered: list[tuple[QueuedMessage, Client]] = []
        i = 0
        while i < len(book.order) and book.waiting:
            message = book.ready[book.order[i]]
            client = self._consumer_for(message, book)
            if client is None:
                i += 1  # nobody waiting wants it: it keeps its place, the next is tried
                continue
            del book.order[i]
            del book.ready[message.seq]
            book.waiting.remove(client)
            message.state = MessageState.INFLIGHT
            message.holder = client
            message.attempts += 1
            message.holders.add((client.app_id, client.client_id))
            self._held.setdefault(client.handle, set()).add(message.id)
            book.inflight += 1
            if now is not None:
                message.deadline = now + self.config.ack_timeout
                heapq.heappush(self._deadlines, (message.deadline, message.attempts, message.id))
            self._ops.append(Delivered(id=message.id, attempts=message.attempts))
            delivered.append((message, client))
        return delivered

    # -- inspection and replay ----------------------------------------------

    def queue_names(self) -> list[str]:
        return sorted(self._queues)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per queue: ready, in-flight and dead messages, waiting credits."""
        return {
            name: {
                "ready": len(book.ready),
                "inflight": book.inflight,
                "dead": len(book.dead),
                "waiting": len(book.waiting),
            }
            for name, book in sorted(self._queues.items())
        }

    def dead_letters(self, queue: str) -> list[QueuedMessage]:
        book = self._queues.get(queue)
        return [] if book is None else sorted(book.dead.values(), key=lambda m: m.seq)

    def replay(self, queue: str, ids: Iterable[str] | None = None) -> list[QueuedMessage]:
        """Move dead letters (all, or the given ids) back to the tail of ``queue``."""
        book = self._queues.get(queue)
        if book is None:
            return []
        chosen = list(book.dead) if ids is None else [i for i in ids if i in book.dead]
        replayed = []
        for message_id in chosen:
            message = book.dead.pop(message_id)
            message.state = MessageState.READY
            message.attempts = 0
            message.reason = None
            message.holders.clear()
            message.seq = self._next_seq
            self._next_seq += 1
            book.ready[message.seq] = message
            book.order.append(message.seq)
            self._ops.append(Replayed(id=message.id, seq=message.seq))
            replayed.append(message)
        return replayed

    def message(self, message_id: str) -> QueuedMessage | None:
        return self._messages.get(message_id)

    def held_by(self, client: Client) -> list[str]:
        """Ids of the messages ``client`` holds in flight, sorted."""
        return sorted(self._held.get(client.handle, ()))

    def messages(self) -> list[QueuedMessage]:
        """Every message (ready, in flight, dead), in ``seq`` order."""
        return sorted(self._messages.values(), key=lambda m: m.seq)

    def waiting(self, queue: str) -> list[Client]:
        """The credits on ``queue``, one entry per credit, in arrival order."""
        book = self._queues.get(queue)
        return [] if book is None else list(book.waiting)

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next enqueued or replayed message gets."""
        return self._next_seq

    def load(
        self,
        messages: Iterable[QueuedMessage],
        waiting: dict[str, list[Client]],
        next_seq: int,
    ) -> None:
        """Replace the whole state (a replicated machine's ``restore``): ``messages`` as
        they were (state, attempts, holder and holders), the credits per queue in
        arrival order, and the next ``seq``. In-flight messages get no deadline."""
        self._held.clear()
        self._queues.clear()
        self._messages.clear()
        self._deadlines.clear()
        self._ops.clear()
        for message in sorted(messages, key=lambda m: m.seq):
            self._messages[message.id] = message
            book = self._queue(message.queue)
            if message.state is MessageState.READY:
                book.ready[message.seq] = message
                book.order.append(message.seq)
            elif message.state is MessageState.DEAD:
                book.dead[message.id] = message
            else:
                assert message.holder is not None, "an in-flight message has a holder"
                book.inflight += 1
                self._held.setdefault(message.holder.handle, set()).add(message.id)
        for name, clients in waiting.items():
            self._queue(name).waiting = list(clients)
            for client in clients:
                client.queues.add(name)
        self._next_seq = next_seq

    def next_deadline(self) -> float | None:
        return self._deadlines[0][0] if self._deadlines else None

    # -- helpers -------------------------------------------------------------

    def _queue(self, name: str) -> _Queue:
        book = self._queues.get(name)
        if book is None:
            book = self._queues[name] = _Queue()
        return book

    def _forget(self, message: QueuedMessage) -> None:
        book = self._queues[message.queue]
        if message.state is MessageState.READY:
            del book.ready[message.seq]
            del book.order[bisect_left(book.order, message.seq)]
        elif message.state is MessageState.INFLIGHT:
            book.inflight -= 1
            self._release(message)
        else:
            del book.dead[message.id]
        del self._messages[message.id]

    def _return(self, message: QueuedMessage, why: str) -> bool:
        """Take an in-flight message back; True when it went to the dead-letter queue."""
        book = self._queues[message.queue]
        book.inflight -= 1
        self._release(message)
        if message.attempts >= self.config.max_attempts:
            message.state = MessageState.DEAD
            message.reason = f"{why} after {message.attempts} deliveries"
            book.dead[message.id] = message
            self._ops.append(DeadLettered(id=message.id, reason=message.reason))
            return True
        message.state = MessageState.READY
        book.ready[message.seq] = message
        insort(book.order, message.seq)  # back to its own place, not the tail
        return False

    def _release(self, message: QueuedMessage) -> None:
        holder = message.holder
        if holder is not None:
            held = self._held.get(holder.handle)
            if held is not None:
                held.discard(message.id)
                if not held:
                    del self._held[holder.handle]
        message.holder = None

    def _consumer_for(self, message: QueuedMessage, book: _Queue) -> Client | None:
        query = message.query
        if query is None:
            return None
        directory = self._directory
        waiting = [c for c in dict.fromkeys(book.waiting) if c.handle in directory.clients]
        app = query.application
        candidates = [
            c
            for c in waiting
            if (app is None or c.app_id == app) and (query.restricted or not c.restricted)
        ]
        if not candidates:
            return None
        predicate = query.predicate
        matching = [c for c in candidates if predicate(directory.values(c))]
        if matching and query.selector is not None:
            matching = directory.select(query, matching, self._rng)
        if not matching:
            if not query.optional or directory.match(query):
                return None
            matching = candidates  # optional: the ops match no connected client at all
        if query.key is None and query.selector is None:
            return matching[0]  # first come, first served
        return directory.pick(query, matching, self._rng)
