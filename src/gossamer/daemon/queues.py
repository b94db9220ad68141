"""The gateway's queues replicated on the cluster's total order: the daemon's driver.

Every member holds a :class:`~gossamer.proto.gateway.replicated_queues.ReplicatedQueues`
and applies to it the commands the order delivers (state machine replication,
``docs/cluster.md``, "Replicated queues"). :class:`ClusterQueues` is the node's
``Replicated`` state (``gossamer.aio.membership``) and drives the rest:

- **Proposing.** The node's gateway core runs in its cluster queue mode
  (``GatewayCore.order_queues``): its clients' queue operations come out as proposals
  after each flush; each becomes a command (``gossamer.wire.queue_commands``) naming this
  incarnation (``name#incarnation``), cut into chunks that fit one multicast
  (``gossamer.wire.order_chunks``) and multicast in the order, one proposal after the
  other.
- **Applying.** A command is complete when its last chunk is delivered (at the same
  position everywhere); it is applied, its store operations committed (SQLite) before
  anything else (with those of the other commands applied in the same turn of the event
  loop: one transaction, then one ``applied_through`` report), then what it decided for
  this node's clients is carried out by the
  core: deliveries (a client no longer here: ``ClientGone`` is proposed for it),
  refusals (op 3). At every view install, ``NodeGone`` is applied for each incarnation
  that left and had consumers (``ReplicatedQueues.install``), and the unfinished chunks
  of every incarnation that left are dropped.
- **Confirming.** A Push applied here whose producer is this node's client is confirmed
  (QUEUE_CONFIRM) once more than half of the view reports having committed through its
  position (``gossamer.proto.gateway.commits``, sealed datagrams to the ``queues``
  address each member's card names).
- **Refusing.** While the node's group is blocked (no majority of the last agreed
  view), before its first view, after it was excluded, and while a joiner waits for
  its state, the core refuses every queue operation at once (op 3 ``no_majority``, or
  ``syncing``), and every Push not confirmed yet is answered the same way: a minority
  never confirms.
- **Rejoining.** ``snapshot()`` is a small token (position, digest); at the cut of a view
  that admits joiners every member keeps the full state (the machine's snapshot and the
  unfinished chunks, before the cut's ``NodeGone``) and serves it
  (``gossamer.daemon.state_transfer``). A joiner's ``restore(token)`` starts a fetch from
  the view's members; the commands delivered meanwhile are buffered; once the state
  arrives (its digest checked against the token) the store is replaced, whatever was on
  disk, then the cut and the buffer are applied as the members applied them (and the
  state at each of those cuts that admitted joiners kept and served, as the members
  do). A joiner asked for the next view's token before its own state arrived (it became
  the coordinator meanwhile) answers once it has restored it: ``snapshot`` waits.

Traces (``layer=queue``): ``apply`` (``seq`` = position, ``attrs.kind``), ``enqueue``,
``ack``, ``dead_letter``, ``confirm``, ``refuse``, ``restore`` and ``drop`` (a chunk or
command that does not decode: counted in ``rejected``, the same at every member).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

import msgpack
import xxhash

from gossamer._types import Address
from gossamer.aio._pump import now
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.gateway_server import GatewayServer
from gossamer.aio.sealing import seal_core
from gossamer.aio.sockets import udp_socket
from gossamer.daemon.state_transfer import SnapshotServer, fetch_snapshot
from gossamer.errors import ClosedError, DecodeError, GossamerError, LocalProtocolError
from gossamer.proto.gateway.commits import CommitReports, Confirmable
from gossamer.proto.gateway.ordered_queues import QueueProposal
from gossamer.proto.gateway.queues import QueueConfig
from gossamer.proto.gateway.replicated_queues import Effects, ReplicatedQueues
from gossamer.proto.isis import Delivered
from gossamer.proto.views import Blocked, Excluded, Unblocked, View
from gossamer.store.queues import SqliteQueueStore
from gossamer.trace.sink import Tracer
from gossamer.wire import queue_commands as commands
from gossamer.wire.mode import Wire
from gossamer.wire.order_chunks import decode as decode_chunk
from gossamer.wire.order_chunks import split

__all__ = ["LAYER", "ClusterQueues"]

log = logging.getLogger("gossamer.daemon.queues")

LAYER: Final = "queue"
NO_MAJORITY: Final = "no_majority"
SYNCING: Final = "syncing"
#: Seconds between two attempts to fetch a joiner's state (from the next member).
FETCH_RETRY: Final = 0.5

#: Where a member's service (``queues``: its commit reports, UDP; ``queues_state``: its
#: state at a cut, TCP) listens: its card's address, when known.
AddressOf = Callable[[str, str], Address | None]
Send = Callable[[bytes], Any]


#: The client dispatch a refused command answers.
_DISPATCH: Final[dict[type, str]] = {
    commands.Push: "QUEUE", commands.Request: "QUEUE_REQUEST", commands.Ack: "QUEUE_ACK",
    commands.Cancel: "QUEUE_REQUEST_CANCEL",
}


def _member(name: str, incarnation: int) -> str:
    return f"{name}#{incarnation}"


def _command(node: str, proposal: QueueProposal) -> commands.Command:
    """The command of a proposal of this node's core (``ordered_queues.py``)."""
    f = dict(proposal.fields)
    kind = proposal.kind
    if kind == "push":
        return commands.Push(queue=f["queue"], message_id=f["message_id"], nonce=f["nonce"],
                             target=f["target"], payload=f["payload"], node=node,
                             app=f["app"], client=f["client"])
    if kind == "request":
        return commands.Request(queue=f["queue"], node=node, app=f["app"], client=f["client"],
                                restricted=f["restricted"], metadata=f["metadata"],
                                count=f["count"], session=f["session"])
    if kind == "cancel":
        return commands.Cancel(queue=f["queue"], node=node, app=f["app"], client=f["client"])
    if kind == "ack":
        return commands.Ack(queue=f["queue"], message_id=f["message_id"], node=node,
                            app=f["app"], client=f["client"])
    if kind == "expire":
        return commands.Expire(message_id=f["message_id"], attempt=f["attempt"])
    if kind == "client_gone":
        return commands.ClientGone(node=node, app=f["app"], client=f["client"],
                                   session=f["session"])
    if kind == "replay":
        ids = f["ids"]
        return commands.Replay(queue=f["queue"], ids=None if ids is None else tuple(ids))
    raise LocalProtocolError(f"unknown queue proposal {kind!r}")


class _Sync:
    """A joiner waiting for its state: the token, and what the order delivered since."""

    def __init__(self, view_id: int, position: int, digest: str) -> None:
        self.view_id = view_id
        self.position = position
        self.digest = digest
        #: Chunks delivered since (bytes), and the later views (a cut: id, members).
        self.buffer: list[bytes | tuple[int, tuple[str, ...]]] = []


class ClusterQueues:
    """The node's queues on the cluster's order (module docstring); its ``Replicated``.

    ``name`` and ``incarnation`` are this process's; ``store`` its queue store (``None``:
    in memory); ``address_of(member, service)`` where another member's ``queues`` or
    ``queues_state`` listens (its card). Call :meth:`start` (binds its two ports),
    :meth:`attach` once the gateway is open (a node without a gateway holds, commits and
    reports the queues all the same), then :meth:`on_view` and :meth:`on_group_event`
    from the membership's event loop; :meth:`close` at the end.
    """

    def __init__(
        self, *, name: str, incarnation: int, store: SqliteQueueStore | None,
        config: QueueConfig, wire: Wire, tracer: Tracer, address_of: AddressOf,
    ) -> None:
        self.name = name
        self.me = _member(name, incarnation)
        self.store = store
        self.wire = wire
        self.tracer = tracer
        if store is not None:
            chain = store.chain()
            self.machine = (
                ReplicatedQueues.from_store(store.load(), store.position(), config, chain=chain)
                if chain else ReplicatedQueues.from_store(store.load(), store.position(), config)
            )
        else:
            self.machine = ReplicatedQueues(config)
        #: Unfinished commands: key -> (total, {chunk number: bytes}).
        self.partials: dict[str, tuple[int, dict[int, bytes]]] = {}
        #: Chunks and commands refused (undecodable), by reason: the same at every member.
        self.rejected: Counter[str] = Counter()
        #: The members (``name#incarnation``) of the view installed last.
        self.members: tuple[str, ...] = ()
        self.view_id = 0
        self.server: GatewayServer | None = None
        self.send: Send | None = None
        self.address_of = address_of
        self.reports = CommitReports(self.me)
        self.snapshots = SnapshotServer(wire, self.me, tracer)
        self._reports_driver: DatagramDriver[Any] | None = None
        self._syncing: _Sync | None = None
        #: Applied to the machine, not committed yet: (command, effects, its nonces).
        self._uncommitted: list[tuple[commands.Command, Effects, dict[str, Any]]] = []
        #: Set while this member's state is the one the order delivered (not a joiner
        #: waiting for its own): ``snapshot`` waits for it.
        self._synced = asyncio.Event()
        self._synced.set()
        self._blocked = False
        self._ask_again = False
        self._outbox: asyncio.Queue[commands.Command] = asyncio.Queue()
        self._next_key = 0
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Where this node's commit reports and its state are served.
        self.addresses: dict[str, Address] = {}

    # -- life cycle --------------------------------------------------------------------

    async def start(self, host: str) -> dict[str, Address]:
        """Bind any free ports on ``host``: ``queues`` (the commit reports, UDP) and
        ``queues_state`` (the state at a cut, TCP); returns them, for the node's card."""
        sock = udp_socket(host, 0)
        reports = sock.getsockname()
        core = seal_core(self.reports, self.wire, sender=self.me, tracer=self.tracer,
                         layer=LAYER)
        self._reports_driver = await open_datagram(core, sock, on_event=self._on_report,
                                                   tracer=self.tracer)
        self.addresses = {"queues": (str(reports[0]), int(reports[1])),
                          "queues_state": await self.snapshots.start(host, 0)}
        self._spawn(self._propose_all())
        return self.addresses

    def attach(self, server: GatewayServer) -> None:
        """Serve the queues through ``server``'s core (switched to the order); refuse
        until this node is a member of a view."""
        self.server = server
        server.flush_listeners.append(self._take_proposals)
        def switch(at: float) -> None:
            core = self._core()
            core.order_queues(at, self.machine.book)
            core.set_queue_refusal(NO_MAJORITY, at)

        server.call(switch)

    def stop_proposing(self) -> None:
        """The node stops cleanly, and a clean stop starts nothing new: what its clients
        ask from now on (their disconnections, above all) and what is not proposed yet
        is not proposed. The members that stay settle it: a Push never confirmed is not
        owed, and this incarnation's deliveries go back to their queues (``NodeGone``)
        when a view leaves it out."""
        self._stopping = True

    async def close(self) -> None:
        self._commit()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._reports_driver is not None:
            self._reports_driver.close()
            await self._reports_driver.wait_closed()
        await self.snapshots.close()

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def syncing(self) -> bool:
        """A joiner waiting for the state at its cut."""
        return self._syncing is not None

    @property
    def refusing(self) -> str | None:
        """Why the gateway refuses queue operations now (``None``: it serves them)."""
        core = None if self.server is None else self.server.core
        return None if core is None else core.queue_refusal

    # -- Replicated --------------------------------------------------------------------

    def apply(self, delivered: Delivered) -> None:
        """A chunk delivered in the total order (module docstring)."""
        if self._syncing is not None:
            self._syncing.buffer.append(delivered.data)
            return
        self._take(delivered.data)

    async def snapshot(self) -> bytes:
        """The token a joiner starts from: position and digest of the state at the cut.

        A member still taking its own state (a joiner that became the coordinator of the
        next view before its state arrived) answers only once it has restored it and
        applied what the order delivered since: the ending view is flushed, so that is
        the state at the new cut, and this member then keeps and serves it like the
        others. Answering earlier would name a state no member holds."""
        while self._syncing is not None:
            await self._synced.wait()
        return msgpack.packb([self.machine.position, self._digest()])  # type: ignore[no-any-return]

    def restore(self, state: bytes) -> None:
        """A joiner's start: wait for the state the token names (fetched at ``on_view``)."""
        try:
            position, digest = msgpack.unpackb(state, raw=False)
            if not isinstance(position, int) or not isinstance(digest, str):
                raise TypeError("bad fields")
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as exc:
            raise DecodeError("not a queue state token", size=len(state)) from exc
        self._syncing = _Sync(0, position, digest)
        self._synced.clear()
        self.partials.clear()

    # -- the group's events -------------------------------------------------------------

    def on_view(self, view: View) -> None:
        """A view was installed (after ``restore`` for a joiner's first): the cut."""
        members = tuple(_member(m.name, m.incarnation) for m in view.members)
        for m in view.members:
            if m.name == self.name and _member(m.name, m.incarnation) != self.me:
                self._rename(_member(m.name, m.incarnation))
        previous = self.members
        joined = bool(previous) and bool(set(members) - set(previous))
        self.members, self.view_id = members, view.id
        sync = self._syncing
        if sync is not None:
            if sync.view_id == 0:
                sync.view_id = view.id
                self._spawn(self._fetch(sync, [m for m in members if m != self.me]))
            sync.buffer.append((view.id, members))  # the cut, in its place among the chunks
        else:
            self._cut(view.id, members, joined=joined)
        self._blocked = False
        self._reports_call(lambda at: self.reports.set_view(view.id, members, at))
        self._learn_addresses()
        self._set_refusal()

    def on_group_event(self, event: object) -> None:
        """``Blocked``, ``Unblocked``, ``Excluded`` (``Membership``'s ``on_event``)."""
        if isinstance(event, Blocked):
            self._blocked = True
        elif isinstance(event, Unblocked):
            self._blocked = False
        elif isinstance(event, Excluded):  # not a member until it joins again
            self.members = ()
        else:
            return
        self._set_refusal()

    def _rename(self, me: str) -> None:
        """This process rejoined as its next incarnation (it was excluded while alive):
        it proposes, reports and serves its state under its new name from now on."""
        self.me = me
        self._ask_again = True  # its consumers' credits went with its old incarnation
        self.snapshots.rename(me)
        self._reports_call(lambda at: self.reports.rename(me, at))

    # -- applying -----------------------------------------------------------------------

    def _take(self, data: bytes) -> None:
        try:
            chunk = decode_chunk(data)
        except DecodeError as exc:
            self._reject(exc.reason)
            return
        total, got = self.partials.setdefault(chunk.key, (chunk.total, {}))
        if total != chunk.total:
            self._reject("chunk totals disagree")
            return
        got[chunk.number] = chunk.data
        if len(got) < total:
            return
        del self.partials[chunk.key]
        try:
            command = commands.decode(b"".join(got[i] for i in range(total)))
        except DecodeError as exc:
            self._reject(exc.reason)
            return
        self._apply(command)

    def _cut(self, view_id: int, members: tuple[str, ...], *, joined: bool) -> None:
        """A view cut: the state at it kept for its joiners (``joined``: before the cut's
        own NodeGones), the unfinished commands of incarnations not in it dropped, and
        ``NodeGone`` applied for those with consumers (``ReplicatedQueues.install``)."""
        if joined:
            self.snapshots.keep(view_id, self._full_state())
        staying = set(members)
        for key in [k for k in self.partials if k.rpartition("/")[0] not in staying]:
            del self.partials[key]
        for effects in self.machine.install(members):
            self._effects(commands.NodeGone(node=""), effects)

    def _apply(self, command: commands.Command) -> None:
        self._effects(command, self.machine.apply(command))

    def _effects(self, command: commands.Command, effects: Effects) -> None:
        """``command``'s effects, applied to the machine: committed with the others of
        this turn of the event loop (:meth:`_commit`), then carried out."""
        # What a delivery names is read now: a later command of the batch may ack it.
        nonces = {d.message_id: self._nonce(d.message_id)
                  for d in effects.deliveries if d.node == self.me}
        self._uncommitted.append((command, effects, nonces))
        if len(self._uncommitted) == 1:
            asyncio.get_running_loop().call_soon(self._commit)

    def _nonce(self, message_id: str) -> Any:
        message = self.machine.book.message(message_id)
        return None if message is None else message.nonce

    def _commit(self) -> None:
        """Group commit: the store operations of every command applied since the last
        commit, in one SQLite transaction, durable before anything they decided is
        carried out or reported (so every confirm still waits for a majority's commits);
        then one ``applied_through`` report for the batch."""
        batch, self._uncommitted = self._uncommitted, []
        if not batch:
            return
        if self.store is not None:
            self.store.apply([op for _, effects, _ in batch for op in effects.store_ops])
        server = self.server
        serving = server is not None and not server.closed
        for command, effects, nonces in batch:
            self._trace_effects(command, effects)
            if serving:
                mine = [d for d in effects.deliveries if d.node == self.me]
                refusals = [r for r in effects.refusals if r.node == self.me]
                if mine or refusals:
                    self._carry_out(command, mine, refusals, nonces)
        # Its own Pushes wait for a majority there (``Confirmable``, below).
        everything = tuple(effects for _, effects, _ in batch)
        self._reports_call(lambda at: self.reports.applied(everything, at))

    def _carry_out(self, command: commands.Command, deliveries: list[Any],
                   refusals: list[Any], nonces: dict[str, Any]) -> None:
        server = self.server
        assert server is not None
        server.call(functools.partial(self._carry_out_at, command, deliveries, refusals,
                                      nonces))

    def _carry_out_at(self, command: commands.Command, deliveries: list[Any],
                      refusals: list[Any], nonces: dict[str, Any], at: float) -> None:
        core = self._core()
        gone: set[tuple[str, str, str]] = set()
        for d in deliveries:
            nonce = nonces.get(d.message_id)
            if not core.queue_deliver(app=d.app, client=d.client, queue=d.queue,
                                      message_id=d.message_id, nonce=nonce,
                                      payload=d.payload, attempt=d.attempt, now=at,
                                      session=d.session):
                gone.add((d.app, d.client, d.session))
        for app, client, session in sorted(gone):  # it left before the order reached it
            self._outbox.put_nowait(commands.ClientGone(node=self.me, app=app, client=client,
                                                        session=session))
        push_id = command.message_id if isinstance(command, commands.Push) else None
        t = _DISPATCH.get(type(command), "QUEUE")
        for r in refusals:  # a Push's refusal: its id is no longer pending confirm
            core.queue_refuse(app=r.app, client=r.client, reason=r.reason, nonce=r.nonce,
                              queue=r.queue, message_id=push_id, t=t, now=at)

    def _trace_effects(self, command: commands.Command, effects: Effects) -> None:
        at = now()
        trace = self.tracer
        trace(at, LAYER, "apply", seq=effects.position, attrs={"kind": type(command).__name__})
        if isinstance(command, commands.Push) and any(not c.duplicate for c in effects.confirms):
            trace(at, LAYER, "enqueue", msg=command.message_id,
                  attrs={"queue": command.queue, "node": command.node})
        for ack in effects.acks:
            trace(at, LAYER, "ack", msg=ack.message_id, attrs={"queue": ack.queue})
        for dead in effects.dead_letters:
            trace(at, LAYER, "dead_letter", msg=dead.id,
                  attrs={"queue": dead.queue, "reason": dead.reason or ""})

    def _reject(self, reason: str) -> None:
        self.rejected[reason] += 1
        self.tracer(now(), LAYER, "drop", attrs={"reason": reason})

    # -- confirming ---------------------------------------------------------------------

    def _on_report(self, event: object) -> None:
        """A majority of the view committed these Pushes: QUEUE_CONFIRM to their
        producers (a Push the core answered meanwhile, refused, is not confirmed)."""
        server = self.server
        if not isinstance(event, Confirmable) or server is None or server.closed:
            return

        def confirm(at: float) -> None:
            core = self._core()
            for pending in event.confirms:
                if core.queue_confirm(pending.message_id, at):
                    self.tracer(at, LAYER, "confirm", msg=pending.message_id,
                                seq=pending.position)

        server.call(confirm)

    # -- refusing -----------------------------------------------------------------------

    def _set_refusal(self) -> None:
        server = self.server
        if server is None or server.closed:
            return
        if self._syncing is not None:
            reason: str | None = SYNCING
        elif self._blocked or self.me not in self.members:
            reason = NO_MAJORITY
        else:
            reason = None

        def apply(at: float) -> None:
            core = self._core()
            core.set_queue_refusal(reason, at)
            if reason is not None:
                core.queue_refuse_pending(reason, at)

        if reason is not None:  # never confirmed, whatever reports come later
            self._reports_call(lambda at: self._refuse_all())
        server.call(apply)

    def _refuse_all(self) -> None:
        self.reports.refuse_all()

    # -- proposing ----------------------------------------------------------------------

    def _take_proposals(self) -> None:
        """After each flush of the gateway core: its proposals, in order, to the order."""
        server = self.server
        if server is None or server.core is None:
            return
        for proposal in server.core.queue_proposals():
            self._outbox.put_nowait(_command(self.me, proposal))

    async def _propose_all(self) -> None:
        while True:
            command = await self._outbox.get()
            if self.send is None or self._stopping:
                continue
            self._next_key += 1
            try:
                for chunk in split(f"{self.me}/{self._next_key}", commands.encode(command)):
                    await self.send(chunk)
            except (GossamerError, ValueError) as exc:
                # Not a member (any more): the core refuses meanwhile (its pending Pushes
                # included, when the refusal is set); this one is lost with it.
                log.info("queue command not proposed: %s", exc)
                self._reject("not proposed")

    # -- rejoining ----------------------------------------------------------------------

    def _digest(self) -> str:
        partials = msgpack.packb(sorted(
            [key, total, sorted(got.items())] for key, (total, got) in self.partials.items()))
        return xxhash.xxh64_hexdigest(self.machine.snapshot() + partials)

    def _full_state(self) -> bytes:
        partials = [[key, total, sorted(got.items())]
                    for key, (total, got) in sorted(self.partials.items())]
        packed: bytes = msgpack.packb([self.machine.snapshot(), partials], use_bin_type=True)
        return packed

    async def _fetch(self, sync: _Sync, members: list[str]) -> None:
        """Fetch the state at the cut from the members, one after the other, until one
        gives it; then restore it and apply what was buffered."""
        attempt = 0
        while self._syncing is sync:
            member = members[attempt % len(members)] if members else None
            attempt += 1
            address = None if member is None else self.address_of(member, "queues_state")
            if member is None or address is None:
                await asyncio.sleep(FETCH_RETRY)
                continue
            try:
                blob = await fetch_snapshot(self.wire, me=self.me, member=member,
                                            address=address, view_id=sync.view_id,
                                            tracer=self.tracer)
                self._install(sync, blob)
                return
            except (GossamerError, OSError, TimeoutError) as exc:
                log.info("queue state from %s not fetched: %s", member, exc)
                await asyncio.sleep(FETCH_RETRY)

    def _install(self, sync: _Sync, blob: bytes) -> None:
        try:
            machine_state, partials = msgpack.unpackb(blob, raw=False, strict_map_key=False)
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as exc:
            raise DecodeError("not a queue state") from exc
        fresh = ReplicatedQueues(self.machine.config)
        ops = fresh.restore(machine_state)
        saved = self.machine, self.partials
        self.machine = fresh
        self.partials = {key: (total, dict(got)) for key, total, got in partials}
        if fresh.position != sync.position or self._digest() != sync.digest:
            self.machine, self.partials = saved
            raise DecodeError("the queue state does not match its token",
                              position=fresh.position)
        self._commit()  # nothing applied before may be written after the replacement
        if self.store is not None:
            self.store.apply(ops)  # whatever was on disk is replaced
        if self.server is not None and not self.server.closed:
            self.server.call(lambda at: self._core().order_queues(at, fresh.book))
        self.tracer(now(), LAYER, "restore", seq=fresh.position,
                    attrs={"size": str(len(blob)), "buffered": str(len(sync.buffer))})
        self._syncing = None
        self._synced.set()
        self._reports_call(lambda at: self.reports.restored(fresh.position, fresh.chain, at))
        previous: tuple[str, ...] = ()
        for item in sync.buffer:  # the first is the cut of the view that admitted it
            if isinstance(item, tuple):
                view_id, members = item
                # Views that admitted joiners, its own included: it serves their cuts too.
                self._cut(view_id, members,
                          joined=not previous or bool(set(members) - set(previous)))
                previous = members
            else:
                self._take(item)
        self._set_refusal()
        if self._ask_again and self.server is not None and not self.server.closed:
            self._ask_again = False
            self.server.call(lambda at: self._core().ask_again(at))

    # -- helpers ------------------------------------------------------------------------

    def _core(self) -> Any:
        assert self.server is not None and self.server.core is not None
        return self.server.core

    def _reports_call(self, request: Callable[[float], None]) -> None:
        driver = self._reports_driver
        if driver is not None and not driver.closed:
            with contextlib.suppress(ClosedError):
                driver.call(request)

    def _learn_addresses(self) -> None:
        for member in self.members:
            if member != self.me:
                address = self.address_of(member, "queues")
                if address is not None:
                    self._reports_call(functools.partial(self._set_address, member, address))

    def _set_address(self, member: str, address: Address, at: float) -> None:
        self.reports.set_address(member, address, at)

    async def keep_learning(self, every: float = 0.5) -> None:
        """Ask for the members' addresses again (their cards may come after the view)."""
        while True:
            await asyncio.sleep(every)
            if any(m not in self.reports.addresses for m in self.members if m != self.me):
                self._learn_addresses()

