"""Scenario ``queues``: the cluster's replicated queues (``ReplicatedQueues`` on the total
order of ``GroupCore``) under crashes, restarts, partitions and network faults, with
producers and consumers attached to different members, checked for the promises of
``docs/cluster.md`` ("Replicated queues").

Nodes ``n0`` .. ``n<N-1>`` run a ``QueueMember``: ``GroupCore`` on UDP port 7500 with the
node's ``ReplicatedQueues`` on top, as the daemon's gateway does it:

- a client's request becomes a command multicast in the total order; every member
  applies the delivered commands and, at each view install, ``install(members)``
  (``NodeGone`` for the nodes that left); a joiner restores the members' snapshot at the
  cut (carried here by the view's INSTALL; the daemon fetches it over a stream);
- every member reports the position it has committed (``applied_through``) to the others
  of its view, after each batch and every ``report`` seconds (datagrams that faults may
  drop, duplicate or reorder); a Push's node confirms it once more than half of its view,
  itself included, reported at least the Push's position;
- a node whose group is blocked (no majority of its view reachable) or that is not a
  member refuses every queue request at once (``no_majority``), and answers its pending
  unconfirmed Pushes the same way;
- the node of a delivery arms its ack timer (``ack_timeout``) and proposes ``Expire`` if
  the delivery is still outstanding then; a delivery for a client that is not connected
  to it makes it propose ``ClientGone``.

Around them the scenario plays the failure detector (scenario ``views``'s oracle), a
node's disk (a ``MemoryStore`` the effects' store operations are committed to; a
restarted node rebuilds its machine from it, then takes the members' state when it
rejoins), ``producers`` that push every ``interval`` until ``stop`` through the node they
are connected to, and ``consumers`` that ask for ``credits`` messages, ack each after
``work`` seconds and ask again, to the end. A client whose node crashed, or refuses it,
reconnects to the next node after ``detect`` seconds (a consumer drops what it held).

The summary runs the checkers of ``gossamer.proto.gateway.queue_checks`` (``violations``)
and reports pushes, confirms, refusals, deliveries, acks, and whether the live members
converged to one view (``converged``) and applied the same history to the end
(``quiet``). The checks of a finished run (every member holds the same queues; with
``drain``, every confirmed message was received and acked) apply when both hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gossamer._types import Address, Datagram
from gossamer.errors import DecodeError, LocalProtocolError
from gossamer.proto.core import DatagramLayer
from gossamer.proto.gateway.queue_checks import (
    Confirmed,
    MemberLog,
    Received,
    Step,
    check_acked_never_again,
    check_confirm_majority,
    check_confirmed_acked,
    check_exclusive_holds,
    check_logs_agree,
    check_minority_never_confirms,
    check_none_lost,
)
from gossamer.proto.gateway.queue_confirms import ConfirmTracker
from gossamer.proto.gateway.queues import (
    Acked,
    Cleared,
    DeadLettered,
    Enqueued,
    Position,
    QueueConfig,
    QueueRecord,
    Replayed,
    StoreOp,
)
from gossamer.proto.gateway.queues import (
    Delivered as StoredDelivery,
)
from gossamer.proto.gateway.replicated_queues import Effects, ReplicatedQueues
from gossamer.proto.group import GroupCore, isis_name
from gossamer.proto.isis import Delivered
from gossamer.proto.views import (
    Blocked,
    Excluded,
    Member,
    StateNeeded,
    ViewInstalled,
    ViewsConfig,
)
from gossamer.proto.views.checks import Installed, check_converged
from gossamer.sim import scenarios as sc
from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.scenarios.views import ViewsRun, add_members, membership_params
from gossamer.wire import queue_commands as qc

PORT = 7500
QUEUE = "jobs"
APP = "app"
#: The tag of an ``applied_through`` report (``GroupCore`` uses ``V`` and ``I``).
REPORT_TAG = b"Q"
NO_MAJORITY = "no_majority"


class MemoryStore:
    """A node's disk: what ``SqliteQueueStore`` keeps, in a dict (the store operations
    are committed as the daemon commits them, so a restarted node finds them)."""

    def __init__(self) -> None:
        self.records: dict[str, QueueRecord] = {}
        self.position = 0
        self.chain = ""

    def apply(self, ops: tuple[StoreOp, ...] | list[StoreOp]) -> None:
        records = self.records
        for op in ops:
            if isinstance(op, Enqueued):
                records[op.record.id] = op.record
            elif isinstance(op, Cleared):
                records.clear()
                self.position = 0
            elif isinstance(op, Position):
                self.position, self.chain = op.position, op.chain
            elif isinstance(op, Acked):
                records.pop(op.id, None)
            else:
                old = records[op.id]
                if isinstance(op, StoredDelivery):
                    records[op.id] = replace(old, attempts=op.attempts)
                elif isinstance(op, DeadLettered):
                    records[op.id] = replace(old, dead=True, reason=op.reason)
                elif isinstance(op, Replayed):
                    records[op.id] = replace(old, dead=False, reason=None, attempts=0, seq=op.seq)


@dataclass(slots=True)
class _Pending:
    """A Push proposed at its node and not applied yet: whose it is."""

    producer: str
    nonce: str


@dataclass(slots=True)
class Told:
    """What a ``QueueMember`` tells the scenario (its clients' side), as events."""

    kind: str  # "confirm", "refuse", "deliver"
    client: str
    nonce: str = ""
    message_id: str = ""
    attempt: int = 0
    reason: str = ""
    position: int = 0
    view: tuple[str, ...] = ()
    session: str = ""


class QueueMember(DatagramLayer[GroupCore]):
    """``GroupCore`` with the node's ``ReplicatedQueues`` on top (module docstring)."""

    def __init__(
        self,
        inner: GroupCore,
        *,
        store: MemoryStore,
        config: QueueConfig,
        report_every: float,
        now: float,
    ) -> None:
        super().__init__(inner)
        self.me = isis_name(inner.me)
        self.store = store
        self.machine = ReplicatedQueues.from_store(
            list(store.records.values()), store.position, config, chain=store.chain
        )
        self.log = MemberLog()
        self.confirms = ConfirmTracker(self.me)
        #: Message id -> its producer, for the Pushes proposed here and not yet applied.
        self.proposed: dict[str, _Pending] = {}
        self.told: list[Told] = []
        self.inner_events: list[object] = []
        self._outbox: list[Datagram] = []
        self._report_every = report_every
        self._next_report = now + report_every
        self._next_id = 0
        self.state_too_large = 0
        self.bad_commands = 0

    # -- the driver's side --------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        if data[:1] == REPORT_TAG:
            try:
                report = qc.decode_report(data[1:])
            except DecodeError:
                return
            self.confirms.reported(report.member, report.position, report.chain)
            self._confirm(now)
        else:
            self.inner.receive_datagram(data, addr, now)
        self._drain(now)

    def handle_timer(self, now: float) -> None:
        deadline = self.inner.next_deadline()
        if deadline is not None and deadline <= now:
            self.inner.handle_timer(now)
        if now >= self._next_report:
            self._next_report = now + self._report_every
            self._report()
        self._drain(now)

    def next_deadline(self) -> float | None:
        inner = self.inner.next_deadline()
        return self._next_report if inner is None else min(inner, self._next_report)

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._outbox = self._outbox, []
        return self.inner.datagrams_to_send() + out

    def events_received(self) -> list[object]:
        events: list[object] = [*self.inner_events, *self.told]
        self.inner_events, self.told = [], []
        return events

    def suspect(self, name: str, now: float, *, incarnation: int | None = None) -> None:
        """The failure detector's ``peer_down`` (``GroupCore.suspect``)."""
        self.inner.suspect(name, now, incarnation=incarnation)
        self._drain(now)

    def join_request(self, member: Member, now: float) -> None:
        """The failure detector's ``peer_up`` (``GroupCore.join_request``)."""
        self.inner.join_request(member, now)
        self._drain(now)

    # -- the clients' side --------------------------------------------------------------

    @property
    def serving(self) -> bool:
        """A member whose group is not blocked: it takes queue requests."""
        return self.inner.isis is not None and not self.inner.blocked and not self.inner.excluded

    def propose(self, command: qc.Command, now: float) -> bool:
        """Multicast ``command`` in the order; False (refused) when not serving."""
        if not self.serving:
            return False
        try:
            self.inner.multicast(qc.encode(command), now)
        except LocalProtocolError:
            return False
        self._drain(now)
        return True

    def push(self, producer: str, nonce: str, now: float) -> str | None:
        """A producer's QUEUE: the message id proposed, or None (refused at once)."""
        self._next_id += 1
        message_id = f"{self.me}/{self._next_id}"
        command = qc.Push(queue=QUEUE, message_id=message_id, nonce=nonce,
                          target={"application": APP}, payload=nonce, node=self.me,
                          app=APP, client=producer)
        if not self.propose(command, now):
            return None
        self.proposed[message_id] = _Pending(producer=producer, nonce=nonce)
        return message_id

    # -- the order ------------------------------------------------------------------------

    def _drain(self, now: float) -> None:
        """Handle the group's events as they come (they go on to the scenario too)."""
        while True:
            events = self.inner.events_received()
            if not events:
                break
            for event in events:
                self._on_group(event, now)
            self.inner_events.extend(events)

    def _on_group(self, event: object, now: float) -> None:
        if isinstance(event, Delivered):
            try:
                command = qc.decode(bytes(event.data))
            except DecodeError:
                self.bad_commands += 1
                return
            if isinstance(command, qc.NodeGone):  # never on the wire; decode cannot say so
                return
            self._effects(self.machine.apply(command), now)
            self._report()
            self._confirm(now)
        elif isinstance(event, StateNeeded):
            try:
                self.inner.provide_state(event.view_id, self.machine.snapshot(), now)
            except LocalProtocolError:
                self.state_too_large += 1
        elif isinstance(event, ViewInstalled):
            if event.state is not None:
                self.store.apply(self.machine.restore(event.state))
                self.log.first = self.machine.position + 1
                self.log.applied.append((now, self.machine.position))
                self.log.restored.update(r.id for r in self.machine.records())
                self.confirms.restored(self.machine.position, self.machine.chain)
            members = [isis_name(m) for m in event.view.members]
            self.confirms.forget(members)
            for effects in self.machine.install(members):
                self._effects(effects, now)
            self._report()
            self._confirm(now)
        elif isinstance(event, Blocked | Excluded):
            refused = [(c.message_id, c.client, str(c.nonce)) for c in self.confirms.refuse_all()]
            refused += [(m, p.producer, p.nonce) for m, p in sorted(self.proposed.items())]
            self.proposed.clear()
            for message_id, producer, nonce in refused:
                self.told.append(Told(kind="refuse", client=producer, nonce=nonce,
                                      message_id=message_id, reason=NO_MAJORITY))

    def _effects(self, effects: Effects, now: float) -> None:
        self.store.apply(effects.store_ops)
        position = effects.position
        self.confirms.applied(effects)
        self.log.applied.append((now, position))
        steps = self.log.steps
        for confirm in effects.confirms:
            if not confirm.duplicate:
                steps.append(Step(position, "enqueue", confirm.message_id))
            self.proposed.pop(confirm.message_id, None)
        for message_id in effects.returned:
            steps.append(Step(position, "return", message_id))
        for record in effects.dead_letters:
            steps.append(Step(position, "dead", record.id))
        for ack in effects.acks:
            steps.append(Step(position, "ack", ack.message_id, ack.client))
        for d in effects.deliveries:
            steps.append(Step(position, "deliver", d.message_id, d.client, d.attempt))
            if d.node == self.me:
                self.told.append(Told(kind="deliver", client=d.client,
                                      message_id=d.message_id, attempt=d.attempt,
                                      session=d.session))
        for refusal in effects.refusals:
            if refusal.node == self.me:
                self.told.append(Told(kind="refuse", client=refusal.client,
                                      nonce=str(refusal.nonce), reason=refusal.reason,
                                      message_id=refusal.message_id or ""))

    # -- applied_through reports and confirms ---------------------------------------------

    def _report(self) -> None:
        view = self.inner.view
        if view is None or self.inner.isis is None:
            return
        report = qc.Report(member=self.me, position=self.machine.position,
                           chain=self.machine.chain)
        data = REPORT_TAG + qc.encode_report(report)
        self._outbox.extend((data, m.address) for m in view.members if isis_name(m) != self.me)

    def _confirm(self, now: float) -> None:
        view = self.inner.view
        if view is None or not self.serving:
            return
        members = tuple(isis_name(m) for m in view.members)
        for c in self.confirms.confirmable(members):
            self.told.append(Told(kind="confirm", client=c.client, nonce=str(c.nonce),
                                  message_id=c.message_id, position=c.position,
                                  view=members))


@dataclass(slots=True)
class _Client:
    name: str
    node: int  # index of the node it is connected to
    incarnation: int = 0  # of that node, when it connected
    #: ``(message id, attempt)`` of the deliveries it works on.
    held: set[tuple[str, int]] = field(default_factory=set)
    pushed: int = 0
    moving: bool = False
    connections: int = 0

    @property
    def session(self) -> str:
        """The client's current connection, as its node names it."""
        return f"{self.name}/{self.connections}"


class QueuesRun(ViewsRun):
    """The scenario's bookkeeping and its clients (module docstring)."""

    def __init__(self, sim: Simulator, params: Mapping[str, Any], names: list[str]) -> None:
        super().__init__(sim, params)
        self.names = names
        self.disks = {name: MemoryStore() for name in names}
        self.logs: dict[str, MemberLog] = {}
        self.confirms: list[Confirmed] = []
        self.received: list[Received] = []
        self.refused: dict[str, int] = {}
        self.pushed = 0
        self.producers = [
            _Client(name=f"p{k}", node=k % len(names)) for k in range(params["producers"])
        ]
        self.consumers = [
            _Client(name=f"c{k}", node=(k + 1) % len(names)) for k in range(params["consumers"])
        ]
        self.by_name = {c.name: c for c in self.producers + self.consumers}
        self.members: dict[str, QueueMember] = {}
        self.state_too_large = 0

    # -- nodes ----------------------------------------------------------------------------

    def make(self, config: ViewsConfig, ctx: NodeContext) -> QueueMember:
        tunables = {
            n: self.params[n] for n in ("retransmit_initial", "retransmit_max", "batch_turn")
        }
        group = GroupCore(config, isis=tunables, tracer=ctx.tracer, rng=ctx.rng, now=ctx.now)
        member = QueueMember(
            group,
            store=self.disks[ctx.node_id],
            config=QueueConfig(ack_timeout=self.params["ack_timeout"],
                               max_attempts=self.params["max_attempts"]),
            report_every=self.params["report"],
            now=ctx.now,
        )
        self.members[member.me] = member
        self.logs[member.me] = member.log
        return member

    def _member(self, node_id: str) -> QueueMember | None:
        core = self.sim.nodes[node_id].core
        return core if isinstance(core, QueueMember) else None

    def on_event(self, node: SimNode, event: object) -> None:
        if isinstance(event, Told):
            self._told(node, event)
        elif isinstance(event, ViewInstalled):
            key = (node.node_id, node.incarnation)
            self.installs.setdefault(key, []).append(
                Installed.of(event.view, event.agreed_by, None)
            )
            self.last_install = self.sim.now
        elif isinstance(event, Blocked):
            self.blocked += 1
        elif isinstance(event, Excluded):
            self.restart_excluded(node)

    def _at(self, node_id: str, action: Any) -> None:
        """Run ``action(member, now)`` on ``node_id``'s member now, then let the simulator
        send what it produced (nothing if the node is down)."""

        def run(core: Any, now: float) -> None:
            if isinstance(core, QueueMember):
                action(core, now)

        self.sim.local(node_id, run)

    # -- clients --------------------------------------------------------------------------

    def _connected(self, client: _Client) -> QueueMember | None:
        node = self.sim.nodes[self.names[client.node]]
        member = self._member(node.node_id)
        if member is None or client.moving or node.incarnation != client.incarnation:
            return None
        return member

    def connect(self, client: _Client, when: float) -> None:
        """``client`` connects to its node at ``when`` (a consumer then asks for credits);
        to the next live node if that one is down."""
        self.sim.at(when, self._connect, client)

    def _connect(self, client: _Client) -> None:
        node = self.sim.nodes[self.names[client.node]]
        if node.core is None:
            client.node = (client.node + 1) % len(self.names)
            self.connect(client, self.sim.now + self.params["detect"])
            return
        client.incarnation, client.moving = node.incarnation, False
        client.connections += 1
        if client in self.consumers:
            self._request(client, self.params["credits"])
        self.sim.at(self.sim.now + self.params["detect"], self._watch, client, node.incarnation)

    def _watch(self, client: _Client, incarnation: int) -> None:
        """The client notices that its node died (its connection broke) and moves."""
        if client.moving or client.incarnation != incarnation:
            return  # it moved since: another watch runs
        if self._connected(client) is None:
            self.move(client)
        else:
            self.sim.at(self.sim.now + self.params["detect"], self._watch, client, incarnation)

    def move(self, client: _Client) -> None:
        """The client's node is gone or refuses it: it reconnects to the next node."""
        if client.moving:
            return
        client.moving = True
        old = self._member(self.names[client.node])
        client.held.clear()
        if old is not None and client in self.consumers:
            gone = qc.ClientGone(node=old.me, app=APP, client=client.name,
                                 session=client.session)
            self._at(self.names[client.node], lambda m, now: m.propose(gone, now))
        client.node = (client.node + 1) % len(self.names)
        self.connect(client, self.sim.now + self.params["detect"])

    def _refused(self, client: _Client, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        if reason == NO_MAJORITY:
            self.move(client)

    def _request(self, client: _Client, count: int) -> None:
        def request(member: QueueMember, now: float) -> None:
            if self._connected(client) is not member:
                return
            command = qc.Request(queue=QUEUE, node=member.me, app=APP, client=client.name,
                                 restricted=False, metadata={}, count=count,
                                 session=client.session)
            if not member.propose(command, now):
                self._refused(client, NO_MAJORITY)

        self._at(self.names[client.node], request)

    def produce(self, producer: _Client, when: float) -> None:
        def push(member: QueueMember, now: float) -> None:
            if self._connected(producer) is not member:
                return
            producer.pushed += 1
            self.pushed += 1
            nonce = f"{producer.name}:{producer.pushed}"
            if member.push(producer.name, nonce, now) is None:
                self._refused(producer, NO_MAJORITY)

        t = when
        while t < self.params["stop"]:
            self.sim.at(t, self._on_connected, producer, push)
            t += self.params["interval"]

    def _on_connected(self, client: _Client, action: Any) -> None:
        if self._connected(client) is None:
            if not client.moving:
                self.move(client)
            return
        self._at(self.names[client.node], action)

    def _told(self, node: SimNode, told: Told) -> None:
        client = self.by_name.get(told.client)
        member = self._member(node.node_id)
        if client is None or member is None:
            return
        now = self.sim.now
        if told.kind == "confirm":
            self.confirms.append(Confirmed(told.nonce, told.message_id, member.me, now,
                                           told.position, told.view))
        elif told.kind == "refuse":
            self._refused(client, told.reason)
        elif told.kind == "deliver":
            if self._connected(client) is not member or client.session != told.session:
                # Not (or no more) its client here: the connection it was for is gone.
                gone = qc.ClientGone(node=member.me, app=APP, client=client.name,
                                     session=told.session)
                self._at(node.node_id, lambda m, now: m.propose(gone, now))
                return
            self.received.append(Received(told.message_id, client.name, told.attempt, now))
            client.held.add((told.message_id, told.attempt))
            self._arm_expiry(member, told.message_id, told.attempt)
            self.sim.at(now + self.params["work"], self._ack, client, told.message_id,
                        told.attempt)

    def _arm_expiry(self, member: QueueMember, message_id: str, attempt: int) -> None:
        me = member.me

        def expire(core: Any, now: float) -> None:
            if not isinstance(core, QueueMember) or core.me != me:
                return  # the node restarted since: its deliveries went with NodeGone
            message = core.machine.book.message(message_id)
            if message is not None and message.attempts == attempt and (
                message.state_name == "inflight"
            ):
                core.propose(qc.Expire(message_id=message_id, attempt=attempt), now)

        self.sim.local(me.split("#")[0], expire, when=self.sim.now + self.params["ack_timeout"])

    def _ack(self, client: _Client, message_id: str, attempt: int) -> None:
        """The consumer is done with a delivery: it acks it (even if the message came
        back meanwhile: a redelivery's ack is then refused) and asks for one more."""
        delivery = (message_id, attempt)
        if delivery not in client.held or self._connected(client) is None:
            return

        def ack(member: QueueMember, now: float) -> None:
            if self._connected(client) is not member or delivery not in client.held:
                return
            client.held.discard(delivery)
            command = qc.Ack(queue=QUEUE, message_id=message_id, node=member.me, app=APP,
                             client=client.name)
            if not member.propose(command, now):
                self._refused(client, NO_MAJORITY)
                return
            command_more = qc.Request(queue=QUEUE, node=member.me, app=APP,
                                      client=client.name, restricted=False, metadata={},
                                      count=1, session=client.session)
            member.propose(command_more, now)

        self._at(self.names[client.node], ack)

    # -- summary ----------------------------------------------------------------------------

    def live(self) -> list[tuple[str, int]]:
        return [
            (n.node_id, n.incarnation)
            for n in self.sim.nodes.values()
            if isinstance(n.core, QueueMember) and not n.core.inner.excluded
        ]

    def minority(self) -> list[tuple[str, float, float]]:
        """The partition's minority side and its period (a confirm decided by reports
        that left before the cut may still come within ``grace`` seconds)."""
        if self.params["partition"] is None:
            return []
        isolated, start, end = self.params["partition"]
        side = isolated if 2 * len(isolated) < len(self.names) else [
            n for n in self.names if n not in isolated
        ]
        if 2 * len(side) >= len(self.names):
            return []  # an even split: neither side is a majority
        stop = self.sim.now if end is None else end
        return [(name, start + self.params["grace"], stop) for name in side]

    def summary(self) -> dict[str, Any]:
        live = self.live()
        stuck = check_converged(self.installs, live)
        converged = not stuck
        members = {
            name: m for name, m in self.members.items()
            if (name.split("#")[0], int(name.split("#")[1])) in live
        }
        digests = {name: m.machine.digest() for name, m in sorted(members.items())}
        # Quiet: every live member applied the same history to the end (nothing was still
        # on its way through the order when the run stopped).
        quiet = len({(m.machine.position, m.machine.chain) for m in members.values()}) == 1
        stored = {name: list(m.store.records) for name, m in members.items()}
        violations = (
            check_confirm_majority(self.confirms, self.logs)
            + check_minority_never_confirms(self.confirms, self.minority())
            + check_acked_never_again(self.logs)
            + check_exclusive_holds(self.logs)
            + check_logs_agree({name: self.logs[name] for name in members})
        )
        if converged:
            violations += check_none_lost(self.confirms, self.logs, stored)
        if converged and quiet:
            if len(set(digests.values())) > 1:
                violations.append(f"live members hold different queues: {digests}")
            if self.params["drain"]:
                violations += check_confirmed_acked(self.confirms, self.received, self.logs)
        for name, m in members.items():
            if sorted(m.store.records.values(), key=lambda r: r.seq) != m.machine.records():
                violations.append(f"{name}'s store does not hold what its machine holds")
        acked = {s.message_id for log in self.logs.values() for s in log.steps if s.kind == "ack"}
        return {
            "violations": violations[:20],
            "violation_count": len(violations),
            "converged": converged,
            "quiet": quiet,
            "not_converged": stuck[:10],
            "live": [f"{n}#{i}" for n, i in sorted(live)],
            "pushed": self.pushed,
            "confirmed": len(self.confirms),
            "refused": dict(sorted(self.refused.items())),
            "received": len(self.received),
            "redelivered": sum(1 for r in self.received if r.attempt > 1),
            "acked": len(acked),
            "left": {name: len(m.machine.records()) for name, m in sorted(members.items())},
            "positions": {name: m.machine.position for name, m in sorted(members.items())},
            "state_too_large": sum(m.state_too_large for m in self.members.values()),
            "excluded": self.excluded,
            "last_install_s": round(self.last_install, 6),
        }


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> sc.Summarize:
    names = [f"n{i}" for i in range(nodes)]
    run = QueuesRun(sim, params, names)
    sim.on_event = run.on_event
    sim.keep_events = False
    late = add_members(sim, run, nodes, params, port=PORT, core=run.make, scenario="queues")
    for client in run.consumers + run.producers:
        run.connect(client, late.get(names[client.node], 0.0) + params["start"])
    for producer in run.producers:
        run.produce(producer, late.get(names[producer.node], 0.0) + params["start"] + 0.01)
    return run.summary


_SECONDS = sc.non_negative_float


def _flag(text: str) -> bool:
    if text not in ("true", "false", "1", "0", "True", "False"):
        raise ValueError(text)
    return text in ("true", "1", "True")


SCENARIO = sc.register(
    sc.Scenario(
        name="queues",
        description="replicated queues on ISIS: confirms, acks, redelivery under faults, checked",
        default_duration=15.0,
        params=membership_params(
            ("producers", sc.positive_int, 3, "producers, attached to n0, n1, ..."),
            ("consumers", sc.positive_int, 2, "consumers, attached to n1, n2, ..."),
            ("credits", sc.positive_int, 4, "messages a consumer asks for at first"),
            ("interval", _SECONDS, 0.2, "seconds between one producer's pushes"),
            ("work", _SECONDS, 0.1, "seconds a consumer takes before its ack"),
            ("start", _SECONDS, 0.2, "seconds from a node's start to its clients' first step"),
            ("stop", _SECONDS, 5.0, "when the producers stop"),
            ("ack_timeout", _SECONDS, 1.0, "seconds before an unacked delivery expires"),
            ("max_attempts", sc.positive_int, 50, "deliveries before a dead letter"),
            ("report", _SECONDS, 0.2, "seconds between a member's applied_through reports"),
            ("grace", _SECONDS, 0.1, "seconds after a cut a minority confirm may still come"),
            ("drain", _flag, True, "check every confirmed message was received and acked"),
            ("retransmit_initial", _SECONDS, 0.2, "ISIS: the timeout before a round trip"),
            ("retransmit_max", _SECONDS, 2.0, "ISIS: the largest retransmission interval"),
            ("batch_turn", _flag, True,
             "on|off, ISIS: a batch leaves at the instant it was filled (as in the daemon)"),
        ),
        setup=_setup,
    )
)

__all__ = ["SCENARIO", "MemoryStore", "QueueMember", "QueuesRun", "Told"]
