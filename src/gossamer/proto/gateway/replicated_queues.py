"""The cluster's queues as a deterministic state machine (state machine replication).

Every member of the cluster holds one ``ReplicatedQueues`` and applies to it the same
commands (``gossamer.wire.queue_commands``) in the same order: the group's total order,
plus ``NodeGone`` for every node incarnation that a view install leaves out, applied by
every member at that install (the view cut: the driver calls ``install(members)``).
Nothing local enters a decision (no clock, no rng, no directory of connected clients):
what a node knows locally (a client pushed, asked, acked, disconnected; an ack timer
fired) it *proposes* as a command, and the
decision is taken when the command is applied, identically everywhere. So every
member's store holds the same queues.

Contract of ``apply(command) -> Effects``:

- ``position`` counts the commands applied (``NodeGone`` included); the same command has
  the same position on every member, and ``snapshot`` carries it to joiners.
- ``chain`` is a digest of the whole history through ``position`` (each command chained
  onto the previous digest). ISIS delivery is not uniform: a member about to leave the
  view (cut off, or crashing) may have applied a message the others then discard, so
  from there its positions name other commands than theirs. An ``applied_through``
  report therefore carries ``(position, chain)``, and a node counts a report towards a
  confirm only when the chain equals its own at that position.
- ``store_ops``: what the driver commits to its ``SqliteQueueStore`` (one transaction,
  ending with ``Position``) before acting on anything else of the effects.
- ``deliveries``: ``Deliver(node, app, client, ...)``; only ``node`` acts: it sends its
  client the QUEUE dispatch and arms the ack timer of that ``attempt``; when it fires,
  it proposes ``Expire(message_id, attempt)``. A node told to deliver to a client it does
  not have (it left before the command was applied) proposes ``ClientGone`` for it.
- ``confirms``: ``Confirm(node, ..., position)`` for a Push (again for a re-proposed
  Push, ``duplicate=True``): ``node`` sends QUEUE_CONFIRM once a majority of the view
  reports having committed through ``position`` (``docs/cluster.md``).
- ``refusals``: ``Refuse(node, ..., reason)``: ``node`` answers its client with op 3.
- ``acks`` and ``dead_letters``: what happened, for the trace events.

Consumers are known by the commands that name them: a ``Request`` registers the client
``(app, client)`` at ``node`` with its metadata at request time (targets are matched
against it) and gives it credits; ``ClientGone`` for that node and connection
(``session``), or ``NodeGone`` of the node, removes it, and what it held returns to its
place (redelivered at once if someone waits). A Request from another node or connection
for the same ``(app, client)`` first removes the old registration the same way (the
client moved: what it held there is redelivered). The order may put one node's commands
in another order than it proposed them: a late ``ClientGone`` of an old connection names
its session and changes nothing, and a ``Request`` ordered after its own connection's
``ClientGone`` registers a client that is gone, which the node learns from the first
``Deliver`` for it (and proposes ``ClientGone`` again).

Dispatch, ack, expiry and dead letters are ``QueueBook``'s (the single-node gateway's),
with ``rng=None`` and no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgpack
import xxhash

from gossamer.errors import DecodeError
from gossamer.proto.gateway.metadata import MetadataLimits, plain_value, validate_metadata
from gossamer.proto.gateway.query import QueryError, parse_query
from gossamer.proto.gateway.queues import (
    AckOutcome,
    Cleared,
    Enqueued,
    MessageState,
    Position,
    QueueBook,
    QueueConfig,
    QueuedMessage,
    QueueRecord,
    StoreOp,
)
from gossamer.proto.gateway.routing import Client, Directory
from gossamer.wire.packed import unpack_value
from gossamer.wire.queue_commands import (
    Ack,
    Cancel,
    ClientAt,
    ClientGone,
    ClientQueue,
    Command,
    Expire,
    NodeGone,
    Push,
    Replay,
    Request,
    encode,
)

__all__ = [
    "SNAPSHOT_VERSION",
    "Confirm",
    "Deliver",
    "Effects",
    "Refuse",
    "ReplicatedQueues",
]

SNAPSHOT_VERSION: Final = 1
_STATES: Final = {s.value: s for s in MessageState}
_GENESIS: Final = "0" * 16


def _chained(chain: str, command: Command) -> str:
    """The history digest after ``command`` (``NodeGone`` has no wire form: its own)."""
    if isinstance(command, NodeGone):
        data = b"\x00gone\x00" + command.node.encode("utf-8", "surrogatepass")
    else:
        data = encode(command)
    return xxhash.xxh64_hexdigest(chain.encode() + data)


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver(ClientQueue):
    """``node`` sends its client ``(app, client)`` the QUEUE dispatch of ``message_id``
    (delivery ``attempt``, from 1; above 1 a redelivery)."""

    message_id: str
    payload: Any
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Confirm(ClientQueue):
    """A Push applied at ``position``: ``node`` confirms it to its client once a majority
    of the view has committed through ``position``. ``duplicate``: the id was known
    (a re-proposal); the message is stored once."""

    message_id: str
    nonce: Any
    position: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Refuse(ClientAt):
    """``node`` answers its client with op 3 INVALID: ``reason`` (and the Push's
    ``nonce``, or the Ack's ``message_id``)."""

    reason: str
    queue: str | None = None
    nonce: Any = None
    message_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Effects:
    """What one applied command did (module docstring)."""

    position: int
    chain: str = ""
    store_ops: tuple[StoreOp, ...] = ()
    deliveries: tuple[Deliver, ...] = ()
    confirms: tuple[Confirm, ...] = ()
    refusals: tuple[Refuse, ...] = ()
    #: The applied Acks that removed their message.
    acks: tuple[Ack, ...] = ()
    #: The messages that moved to the dead letters (``reason`` says why).
    dead_letters: tuple[QueueRecord, ...] = ()
    #: Ids of the in-flight messages taken back from their holder (Expire, ClientGone,
    #: NodeGone, a client that moved), in order: ready again or dead.
    returned: tuple[str, ...] = ()


class _Collect:
    """The effects of the command being applied, gathered as it goes."""

    def __init__(self) -> None:
        self.deliveries: list[Deliver] = []
        self.confirms: list[Confirm] = []
        self.refusals: list[Refuse] = []
        self.acks: list[Ack] = []
        self.dead: list[QueueRecord] = []
        self.returned: list[str] = []


class ReplicatedQueues:
    """Every queue of the cluster, as one member holds it (module docstring).

    ``config``'s ``max_attempts``, ``max_name_length`` and ``max_credits`` apply (they
    must be the same on every member); its ``ack_timeout`` is the drivers' timer."""

    def __init__(self, config: QueueConfig | None = None) -> None:
        self.config = config or QueueConfig()
        self._limits = MetadataLimits()
        self._reset()

    def _reset(self) -> None:
        self._directory = Directory()
        self._book = QueueBook(self.config, self._directory, rng=None)
        self.position = 0
        #: ``(app, client)`` -> the connection (``session``) its registration came from.
        self._sessions: dict[tuple[str, str], str] = {}
        #: The digest of the history through ``position`` (module docstring).
        self.chain = _GENESIS

    # -- the order -------------------------------------------------------------------

    def apply(self, command: Command) -> Effects:
        """Apply the next command of the order (module docstring for the effects)."""
        self.position += 1
        self.chain = _chained(self.chain, command)
        out = _Collect()
        if isinstance(command, Push):
            self._push(command, out)
        elif isinstance(command, Request):
            self._request(command, out)
        elif isinstance(command, Cancel):
            consumer = self._consumer(command.node, command.app, command.client)
            if consumer is not None:
                self._book.cancel(command.queue, consumer)
        elif isinstance(command, Ack):
            self._ack(command, out)
        elif isinstance(command, Expire):
            message = self._book.expire_delivery(command.message_id, command.attempt)
            if message is not None:
                out.returned.append(message.id)
                self._after_return([message], [message.queue], out)
        elif isinstance(command, ClientGone):
            consumer = self._consumer(command.node, command.app, command.client)
            if consumer is not None and command.session in (
                "", self._sessions.get((command.app, command.client))
            ):
                self._gone([consumer], out)
        elif isinstance(command, NodeGone):
            consumers = [c for c in self._directory.clients.values() if c.node == command.node]
            self._gone(sorted(consumers, key=lambda c: (c.app_id, c.client_id)), out)
        else:
            assert isinstance(command, Replay)
            self._book.replay(command.queue, command.ids)
            self._dispatch([command.queue], out)
        ops = self._book.store_ops()
        ops.append(Position(position=self.position, chain=self.chain))
        return Effects(
            position=self.position,
            chain=self.chain,
            store_ops=tuple(ops),
            deliveries=tuple(out.deliveries),
            confirms=tuple(out.confirms),
            refusals=tuple(out.refusals),
            acks=tuple(out.acks),
            dead_letters=tuple(out.dead),
            returned=tuple(out.returned),
        )

    def install(self, members: Iterable[str]) -> list[Effects]:
        """A view was installed whose members are ``members`` (node names as the commands
        give them): ``NodeGone`` is applied for every node that has a consumer registered
        here and is not among them, in name order; returns their effects. Every member
        calls it at the same point of the order (the joiner right after ``restore``), and
        the decision depends only on the machine's state and the view, so positions stay
        equal everywhere (a node that left without consumers costs no position)."""
        staying = set(members)
        nodes = {c.node for c in self._directory.clients.values() if c.node is not None}
        return [self.apply(NodeGone(node=node)) for node in sorted(nodes - staying)]

    def _push(self, command: Push, out: _Collect) -> None:
        def refuse(reason: str) -> None:
            out.refusals.append(Refuse(node=command.node, app=command.app,
                                       client=command.client, reason=reason,
                                       queue=command.queue, nonce=command.nonce))

        if not self._book.valid_name(command.queue):
            refuse("invalid queue name")
            return
        known = self._book.message(command.message_id)
        if known is None:
            try:
                query = parse_query(command.target)
            except QueryError as exc:
                refuse(f"invalid target: {exc.reason}")
                return
            self._book.enqueue(queue=command.queue, message_id=command.message_id,
                               nonce=command.nonce, target=command.target, query=query,
                               payload=command.payload)
        out.confirms.append(Confirm(
            node=command.node, app=command.app, client=command.client, queue=command.queue,
            message_id=command.message_id, nonce=command.nonce, position=self.position,
            duplicate=known is not None,
        ))
        if known is None:
            self._dispatch([command.queue], out)

    def _request(self, command: Request, out: _Collect) -> None:
        def refuse(reason: str) -> None:
            out.refusals.append(Refuse(node=command.node, app=command.app,
                                       client=command.client, reason=reason,
                                       queue=command.queue))

        if not self._book.valid_name(command.queue):
            refuse("invalid queue name")
            return
        raw = {
            key: {"type": entry[0], "value": entry[1]}
            if isinstance(entry, list) and len(entry) == 2
            else entry
            for key, entry in command.metadata.items()
        }
        typed, errors = validate_metadata(raw, limits=self._limits, allow_reserved=True)
        if errors:
            refuse("invalid metadata: " + "; ".join(sorted(errors.values()))[:200])
            return
        identity = (command.app, command.client)
        consumer = self._directory.by_identity.get(identity)
        if consumer is not None and (
            consumer.node != command.node or self._sessions.get(identity) != command.session
        ):
            # The client moved to another node or connection: what the old one held returns.
            self._gone([consumer], out)
            consumer = None
        if consumer is None:
            consumer = self._directory.add(
                app_id=command.app, client_id=command.client, conn=-1,
                restricted=command.restricted, encoding="json", metadata=typed,
                node=command.node,
            )
            self._sessions[identity] = command.session
        else:
            self._directory.set_metadata(consumer, typed)
        self._book.request(command.queue, consumer, command.count)
        self._dispatch([command.queue], out)

    def _ack(self, command: Ack, out: _Collect) -> None:
        outcome = self._book.ack(command.queue, command.message_id, (command.app, command.client))
        if outcome is AckOutcome.ACKED:
            out.acks.append(command)
        else:
            out.refusals.append(Refuse(node=command.node, app=command.app,
                                       client=command.client, reason=outcome.value,
                                       queue=command.queue, message_id=command.message_id))

    def _consumer(self, node: str, app: str, client: str) -> Client | None:
        consumer = self._directory.by_identity.get((app, client))
        return consumer if consumer is not None and consumer.node == node else None

    def _gone(self, consumers: Iterable[Client], out: _Collect) -> None:
        dead: list[QueuedMessage] = []
        touched: list[str] = []
        for consumer in consumers:
            self._directory.remove(consumer)
            self._sessions.pop((consumer.app_id, consumer.client_id), None)
            out.returned.extend(self._book.held_by(consumer))
            died, queues = self._book.client_gone(consumer, 0.0)
            dead.extend(died)
            touched.extend(queues)
        self._after_return(dead, list(dict.fromkeys(touched)), out)

    def _after_return(
        self, returned: list[QueuedMessage], touched: list[str], out: _Collect
    ) -> None:
        out.dead.extend(m.record() for m in returned if m.state is MessageState.DEAD)
        self._dispatch(touched, out)

    def _dispatch(self, queues: Iterable[str], out: _Collect) -> None:
        for queue in queues:
            for message, client in self._book.dispatch(queue, None):
                assert client.node is not None
                out.deliveries.append(Deliver(
                    node=client.node, app=client.app_id, client=client.client_id,
                    queue=queue, message_id=message.id, payload=message.payload,
                    attempt=message.attempts,
                ))

    # -- inspection --------------------------------------------------------------------

    @property
    def book(self) -> QueueBook:
        """The queues themselves (read them; change them only through ``apply``)."""
        return self._book

    def consumers(self) -> list[tuple[str, str, str]]:
        """``(node, app, client)`` of every registered consumer, sorted."""
        return sorted(
            (c.node or "", c.app_id, c.client_id) for c in self._directory.clients.values()
        )

    def holder(self, message_id: str) -> tuple[str, str, str] | None:
        """``(node, app, client)`` holding ``message_id`` in flight, or ``None``."""
        message = self._book.message(message_id)
        if message is None or message.holder is None:
            return None
        holder = message.holder
        return (holder.node or "", holder.app_id, holder.client_id)

    def records(self) -> list[QueueRecord]:
        """Every message as the store keeps it, in ``seq`` order."""
        return [m.record() for m in self._book.messages()]

    # -- snapshot and restore -----------------------------------------------------------

    def snapshot(self) -> bytes:
        """The full state as bytes: the same state gives the same bytes on every member
        (``digest`` compares them). ``restore`` on a fresh machine rebuilds it exactly."""
        consumers = sorted(
            self._directory.clients.values(), key=lambda c: (c.app_id, c.client_id)
        )
        index = {id(c): i for i, c in enumerate(consumers)}
        directory = self._directory
        sessions = self._sessions
        people = [
            [c.app_id, c.client_id, c.node, sessions.get((c.app_id, c.client_id), ""),
             c.restricted,
             {k: [c.types[k], plain_value(v)] for k, v in sorted(directory.values(c).items())}]
            for c in consumers
        ]
        messages = [
            [m.id, m.queue, m.seq, m.nonce, m.target, m.payload, m.attempts, m.state.value,
             -1 if m.holder is None else index[id(m.holder)], sorted(m.holders), m.reason]
            for m in self._book.messages()
        ]
        book = self._book
        waiting = {
            name: [index[id(c)] for c in book.waiting(name)]
            for name in book.queue_names()
            if book.waiting(name)
        }
        packed: bytes = msgpack.packb(
            [SNAPSHOT_VERSION, self.position, self.chain, book.next_seq, people, messages,
             waiting],
            use_bin_type=True,
        )
        return packed

    def digest(self) -> str:
        """A short hash of ``snapshot()``: equal on members in the same state."""
        return xxhash.xxh64_hexdigest(self.snapshot())

    def restore(self, state: bytes) -> tuple[StoreOp, ...]:
        """Replace the whole state with ``snapshot()``'s bytes (a rejoiner's start,
        whatever it had before). Returns the store operations that make the store hold
        exactly this state (``Cleared``, every message, ``Position``): the driver commits
        them before applying what the order delivered after the cut. ``DecodeError`` for
        a state it cannot read, and then nothing changed."""
        try:
            value = unpack_value(state, max_size=len(state), what="queue snapshot")
            version, position, chain, next_seq, people, messages, waiting = value
            if version != SNAPSHOT_VERSION:
                raise DecodeError("queue snapshot: unknown version", version=repr(version)[:20])
            directory = Directory()
            consumers: list[Client] = []
            sessions: dict[tuple[str, str], str] = {}
            for app, client, node, session, restricted, metadata in people:
                typed, errors = validate_metadata(
                    {k: {"type": t, "value": v} for k, (t, v) in metadata.items()},
                    limits=self._limits,
                    allow_reserved=True,
                )
                if errors:
                    raise DecodeError("queue snapshot: bad consumer metadata", client=client)
                consumers.append(directory.add(
                    app_id=app, client_id=client, conn=-1, restricted=bool(restricted),
                    encoding="json", metadata=typed, node=node,
                ))
                sessions[(app, client)] = str(session)
            loaded = []
            for (mid, queue, seq, nonce, target, payload, attempts, state_name, holder,
                 holders, reason) in messages:
                try:
                    query = parse_query(target)
                except QueryError:
                    query = None
                loaded.append(QueuedMessage(
                    id=mid, queue=queue, seq=seq, nonce=nonce, target=target,
                    payload=payload, query=query, attempts=attempts,
                    state=_STATES[state_name],
                    holder=None if holder < 0 else consumers[holder],
                    holders={(a, c) for a, c in holders}, reason=reason,
                ))
            credits = {name: [consumers[i] for i in slots] for name, slots in waiting.items()}
        except DecodeError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise DecodeError(f"queue snapshot: {type(exc).__name__}") from exc
        book = QueueBook(self.config, directory, rng=None)
        book.load(loaded, credits, next_seq)
        self._directory, self._book, self.position = directory, book, position
        self._sessions = sessions
        self.chain = str(chain)
        return (
            Cleared(),
            *(Enqueued(record=r) for r in self.records()),
            Position(position=self.position, chain=self.chain),
        )

    @classmethod
    def from_store(
        cls,
        records: Iterable[QueueRecord],
        position: int,
        config: QueueConfig | None = None,
        *,
        chain: str = _GENESIS,
    ) -> ReplicatedQueues:
        """A machine rebuilt from a member's store (``SqliteQueueStore.load``, with its
        ``position()`` and ``chain()``): the messages, with in-flight ones ready again,
        and no consumers. Equal to the others' state only when every member restarts
        from its store (the whole cluster went down); a node rejoining a live cluster
        takes ``restore``."""
        machine = cls(config)
        machine._book.restore(records)
        machine.position = position
        machine.chain = chain
        return machine
