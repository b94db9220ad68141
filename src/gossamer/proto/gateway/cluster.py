"""A clustered gateway's bookkeeping: peers, bounded outboxes, load balancing (sans-I/O).

Every node holds a replica of every client of the cluster (the choice and its figures
are in ``docs/gateway.md``, "Clustering"): a node sends its own clients' joins, leaves
and metadata changes to every peer, in order, over one link each (FIFO), preceded by a
snapshot of all its clients whenever a peer is (re)added. Routing then runs on the
local ``Directory`` over the whole cluster, with exactly the single-node semantics
(selectors, ``key`` hashing and ``optional`` over every client), and only the
deliveries to other nodes' clients travel.

``ClusterMember`` is that half of ``GatewayCore`` (its base class: the core's inputs
``add_peer``, ``remove_peer``, ``set_nodes``, ``peer_receive`` and outputs
``peers_waiting``, ``peer_batch``). ``PeerOutbox`` holds what waits for one peer. The
driver takes a batch when the link has credit (``peer_batch``), so a slow peer makes the
outbox grow, never the peer's memory; the outbox is bounded:

- deliveries: at most ``ClusterConfig.peer_deliveries`` waiting. Past that a SEND or
  BROADCAST to that node's clients is refused to its sender (op 3 ``node_busy`` with
  the nonce), or, ``droppable``, dropped, counted and traced: never silently;
- replication records: past ``ClusterConfig.peer_updates`` waiting, they are all
  discarded and replaced by one snapshot built when the peer catches up (the snapshot
  carries the same final state, so nothing is lost: the outbox is bounded by the size
  of the state instead of the rate of change);
- batches sent and not yet acknowledged: at most ``ClusterConfig.window``.

Batches are numbered per *session* (one per peer each time it is added) and acknowledged
cumulatively (an ``A`` record at the front of the receiver's next batch to the sender,
alone after ``ClusterConfig.ack_delay`` if nothing else goes). The sender keeps every
batch until it is acknowledged and, after its link was linked again (``add_peer`` again)
or when the receiver asks (it saw a gap), sends them again, in order; the receiver takes
batches strictly in order and drops the ones it already took. So while both nodes keep
each other as peers nothing is lost with a link, and a delivery reaches a client at most
once. A peer that is removed takes its unacknowledged deliveries with it (counted,
``cluster_dropped["peer_removed"]``, and traced); a peer that restarted (a new
incarnation, seen in its batches) gets a new session: what it had not acknowledged is
not resent (``cluster_dropped["peer_restarted"]``, traced), its snapshot replaces its
old replicas.

``balance`` is op 7 load balancing as the reference does it (singyeong-as-coded §11),
against the node list the daemon gives (``GatewayCore.set_nodes``).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gossamer.errors import DecodeError, LocalProtocolError
from gossamer.params import Checked, PositiveCount
from gossamer.proto.gateway.metadata import (
    RESERVED_KEYS,
    MetadataLimits,
    TypedValue,
    plain_value,
    validate_metadata,
)
from gossamer.proto.gateway.query import Query, QueryError
from gossamer.proto.gateway.routing import Client, Directory
from gossamer.proto.gateway.tracing import LAYER
from gossamer.wire.gateway_cluster import (
    Header,
    Record,
    batch_overhead,
    decode_batch,
    join_batch,
    pack_record,
)

if TYPE_CHECKING:
    from random import Random

    from gossamer.proto.gateway.core import GatewayConfig
    from gossamer.trace.sink import Tracer

__all__ = ["ClusterConfig", "ClusterMember", "PeerOutbox", "balance"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig(Checked):
    """Bounds and periods of the cluster layer."""

    #: Deliveries waiting for one peer before SENDs to its clients are refused.
    peer_deliveries: PositiveCount = 10_000
    #: Replication records waiting for one peer before they become one snapshot.
    peer_updates: PositiveCount = 100_000
    #: Records in one link message at most (the batch must also fit ``max_batch``).
    batch_records: PositiveCount = 512
    #: Bytes of one link message at most, accepted and built.
    max_batch: PositiveCount = 4 << 20
    #: Batches sent to one peer and not yet acknowledged, at most (kept to be resent).
    window: PositiveCount = 64
    #: Seconds an acknowledgement may wait for a batch to ride on before it goes alone
    #: (it goes at once when half a window is owed, or after a duplicate or a gap).
    ack_delay: float = 0.01
    #: A SEND whose chosen client left before the delivery is routed again this often.
    reroutes: PositiveCount = 3
    #: Seconds between two load-balancing checks (the reference: 1 s).
    balance_interval: float = 1.0


class PeerOutbox:
    """Records waiting for one peer, in order, with the two bounds above; and the
    session's batches sent and not yet acknowledged."""

    __slots__ = ("ack_due", "ask", "cursor", "deliveries", "in_flight", "next_seq", "owed",
                 "peer_incarnation", "records", "resync", "rewind", "sent", "session",
                 "snapshot", "updates", "window")

    def __init__(self, session: int = 0, window: int = 64) -> None:
        self.records: deque[Record] = deque()
        self.deliveries = 0
        self.updates = 0
        #: A snapshot must go before any waiting record (peer added, or updates overflowed).
        self.resync = True
        #: The peer must be asked for its snapshot (it was just added).
        self.ask = True
        #: Records of a snapshot being sent, at the front of ``records``.
        self.snapshot = 0
        self.session = session
        self.window = window
        self.next_seq = 1
        #: ``(seq, batch, deliveries in it)`` sent and not acknowledged, oldest first.
        self.sent: deque[tuple[int, bytes, int]] = deque()
        #: Index in ``sent`` of the next batch to send again (``len(sent)``: none).
        self.cursor = 0
        #: Deliveries (``D``, ``U``) in ``sent``.
        self.in_flight = 0
        #: An acknowledgement (``A``) is owed to the peer; with ``rewind``, a request to
        #: send again what it has not acknowledged.
        self.ack_due = False
        self.rewind = False
        #: Batches taken from the peer since the last acknowledgement sent to it.
        self.owed = 0
        #: The peer's incarnation as its batches name it (0: none received yet).
        self.peer_incarnation = 0

    def __bool__(self) -> bool:
        return (
            self.ack_due
            or self.cursor < len(self.sent)
            or (len(self.sent) < self.window
                and (self.resync or self.ask or bool(self.records)))
        )

    def backlog(self) -> int:
        """Deliveries held for the peer: waiting, and sent but not acknowledged."""
        return self.deliveries + self.in_flight

    def acknowledged(self, seq: int, rewind: bool) -> None:
        """The peer took every batch up to ``seq``; ``rewind``: send the rest again."""
        sent = self.sent
        while sent and sent[0][0] <= seq:
            self.in_flight -= sent.popleft()[2]
            self.cursor = max(0, self.cursor - 1)
        if rewind:
            self.cursor = 0

    def restart(self, session: int) -> int:
        """A new session (the peer restarted): forget what was sent (nothing is sent
        again to a new incarnation) and start with a snapshot; the deliveries forgotten."""
        lost = self.in_flight
        self.sent.clear()
        self.cursor = self.in_flight = 0
        self.session = session
        self.next_seq = 1
        self.resynchronize()
        self.ask = True
        return lost

    def push_update(self, record: Record, limit: int) -> None:
        """Queue a replication record (``J``, ``L``, ``M``); overflow becomes a resync."""
        if self.resync:
            return  # the snapshot, built when taken, will carry this change
        if self.updates >= limit:
            self.resynchronize()
            return
        self.records.append(record)
        self.updates += 1

    def resynchronize(self) -> None:
        """Replace every waiting replication record by one snapshot (built when taken);
        deliveries keep their place."""
        self.records = deque(r for r in self.records if r[0] in "DU")
        self.updates = self.snapshot = 0
        self.resync = True

    def start_snapshot(self, records: list[Record]) -> None:
        """Put a snapshot (``S``, ``J``..., ``E``) in front of every waiting record; it
        is bounded by the state, so it does not count against ``peer_updates``."""
        self.resync = False
        self.records.extendleft(reversed(records))
        self.snapshot = len(records)

    def push_delivery(self, record: Record, limit: int) -> bool:
        """Queue a ``D`` or ``U`` record; False (nothing queued) when the bound
        (deliveries waiting and in flight) is reached."""
        if self.backlog() >= limit:
            return False
        self.records.append(record)
        self.deliveries += 1
        return True

    def take(self, count: int, room: int) -> tuple[list[bytes], list[Record]]:
        """``(packed, too_large)``: up to ``count`` records, oldest first, packed, whose
        sizes add up to at most ``room`` bytes; and the records taken that could never
        fit a batch (the caller counts them: they are not sent). Deliveries taken are
        counted ``in_flight`` until acknowledged."""
        packed: list[bytes] = []
        too_large: list[Record] = []
        records = self.records
        used = 0
        while records and len(packed) < count:
            record = records[0]
            data = pack_record(record)
            if used + len(data) > room and len(data) <= room:
                break  # the next batch takes it
            records.popleft()
            delivery = False
            if self.snapshot:
                self.snapshot -= 1
            elif record[0] in "DU":
                self.deliveries -= 1
                delivery = True
            else:
                self.updates -= 1
            if len(data) > room:
                too_large.append(record)
                continue
            self.in_flight += delivery
            packed.append(data)
            used += len(data)
        return packed, too_large


@dataclass(slots=True)
class _Inbound:
    """What a node took of one sender's session: every batch before ``expected``. A
    session is named by the sender's incarnation and its number (a restarted process
    seeded alike may draw the same numbers again)."""

    incarnation: int
    session: int
    expected: int
    #: A rewind was asked for since the last batch taken.
    asked: bool = False


def balance(own: int, others: Mapping[str, int]) -> int:
    """How many clients to send away with op 7: the reference's rule (§11).

    Every second the reference compares its client count with the other nodes':
    ``threshold = len(others) - 1``, nothing to do unless it is positive (three nodes or
    more); ``goal = threshold / 2``; above ``average + goal`` it says goodbye to
    ``trunc(own - (average + goal + 1))`` clients. The reference divides the others'
    sum by ``threshold`` (one less than their number, which doubles the average of a
    3-node cluster); here ``average`` is their mean (``docs/gateway.md``, difference 24).
    """
    threshold = len(others) - 1
    if threshold <= 0:
        return 0
    average = sum(others.values()) / len(others)
    goal = threshold / 2
    if own <= average + goal:
        return 0
    return max(0, math.trunc(own - (average + goal + 1)))


class ClusterMember:
    """The cluster half of ``GatewayCore`` (its base class): peers, replicas, remote
    deliveries, reroutes, identity conflicts and op 7. The core's own parts it uses are
    declared below for the type checker; the core defines them."""

    if TYPE_CHECKING:
        config: GatewayConfig
        directory: Directory
        _rng: Random
        _trace: Tracer | None
        _client_watchers: set[int]

        def _notify_watchers(
            self, watchers: set[int], t: str, payload: Mapping[str, Any], now: float
        ) -> None: ...

        def _dispatch_to(self, conns: tuple[int, ...], t: str, d: Any, now: float) -> None: ...

        def _apply_metadata(
            self, client: Client, changes: dict[str, TypedValue], now: float
        ) -> None: ...

        def _query(self, raw: object) -> tuple[Query, bytes]: ...

        def _route(self, client: Client, t: str, d: dict[str, Any], *, query: Query,
                   text: bytes, attempt: int, now: float) -> None: ...

        def _unroutable(self, client: Client, t: str, d: dict[str, Any], *, droppable: bool,
                        why: str, now: float) -> None: ...

        def _refuse_duplicate(self, client: Client, now: float) -> None: ...

        def _send_away(self, count: int, now: float) -> None: ...

    def _init_cluster(self, config: GatewayConfig) -> None:
        # Outboxes of the peers, their clients held here, the peers whose snapshot
        # arrived, the node list, the next load-balancing check.
        self._peers: dict[str, PeerOutbox] = {}
        self._remote: dict[str, dict[tuple[str, str], Client]] = {}
        # This process's incarnation (batches name it), drawn when the first peer is
        # added (``_start``): 0 until then.
        self._incarnation = 0
        # sender -> what this node took of its current session. Kept when the sender
        # is removed: added again in the same session, it is not taken twice.
        self._inbound: dict[str, _Inbound] = {}
        # peer -> when the acknowledgement owed to it goes alone (``ack_delay``).
        self._ack_at: dict[str, float] = {}
        self._synced: set[str] = set()
        # sender -> its clients not yet named by the snapshot it is sending.
        self._stale: dict[str, set[tuple[str, str]]] = {}
        self._nodes: tuple[str, ...] = ()
        self._next_balance: float | None = None
        limits = config.metadata_limits
        self._replica_limits = MetadataLimits(
            max_keys=limits.max_keys + len(RESERVED_KEYS), max_key_length=limits.max_key_length
        )
        #: Node-to-node input refused, by reason (malformed batches, unknown peers).
        self.cluster_rejected: Counter[str] = Counter()
        #: Dispatches not delivered across the cluster, by reason; each is also traced
        #: (``drop``) and, unless droppable, answered to its sender.
        self.cluster_dropped: Counter[str] = Counter()
        #: Clients sent away by load balancing (op 7).
        self.balanced = 0
        #: Batches sent again (``resent``), received again and dropped (``duplicate``),
        #: received after a missing one and dropped until it is resent (``gap``).
        self.cluster_retransmit: Counter[str] = Counter()

    def _new_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    @property
    def node(self) -> str:
        """This node's name in the cluster (``GatewayConfig.node_id``)."""
        return self.config.node_id

    @property
    def peers(self) -> tuple[str, ...]:
        """The peers this node replicates its clients to and routes to."""
        return tuple(self._peers)

    def add_peer(self, name: str, now: float) -> None:
        """Start exchanging with node ``name``: its batches are accepted from now on, and
        the first batch for it is a snapshot of this node's clients and a request for
        its own. Adding a known peer again (its link came back) does the same, after
        sending again, in order, every batch it has not acknowledged (some may have been
        lost with the link), and acknowledges what it took from the peer."""
        if name == self.config.node_id:
            raise LocalProtocolError("a node is not its own peer", node=name)
        if not self._incarnation:
            # The time is mixed in so that a restarted process draws another incarnation
            # even when its rng is seeded alike (the daemon seeds it from its
            # configuration); ``now`` is a clock shared by the processes of a host.
            self._incarnation = (self._rng.getrandbits(64) ^ round(now * 1e6)) % (1 << 64) or 1
        outbox = self._peers.get(name)
        if outbox is None:
            self._peers[name] = PeerOutbox(self._new_id(), self.config.cluster.window)
            self._remote.setdefault(name, {})
        else:
            outbox.resynchronize()
            outbox.ask = True
            outbox.cursor = 0
            inbound = self._inbound.get(name)
            outbox.ack_due = inbound is not None
            # A request to send again may have been lost with the link: repeat it.
            outbox.rewind = inbound is not None and inbound.asked

    def remove_peer(self, name: str, now: float) -> None:
        """Forget node ``name``: its clients leave routing (CLIENT_DISCONNECTED to the
        watchers); deliveries that waited for it, or were sent and not acknowledged,
        are counted in ``cluster_dropped["peer_removed"]`` and traced (``drop``,
        ``attrs.count``). Added again, it gets a new session."""
        outbox = self._peers.pop(name, None)
        self._ack_at.pop(name, None)
        if outbox is not None:
            self._lost(name, "peer_removed", outbox.backlog(), now)
        self._synced.discard(name)
        self._stale.pop(name, None)
        for client in list(self._remote.pop(name, {}).values()):
            self._forget_remote(client, now)

    def set_nodes(self, nodes: tuple[str, ...] | list[str], now: float) -> None:
        """The cluster's current node list (this node included), for op 7 load
        balancing; checked every ``ClusterConfig.balance_interval`` seconds."""
        self._nodes = tuple(nodes)
        if self._next_balance is None:
            self._next_balance = now + self.config.cluster.balance_interval

    def _lost(self, peer: str, why: str, count: int, now: float) -> None:
        """``count`` deliveries for ``peer`` that will never be sent: counted, traced."""
        if not count:
            return
        self.cluster_dropped[why] += count
        if self._trace is not None:
            self._trace(now, LAYER, "drop", peer=peer, attrs={"reason": why, "count": str(count)})

    def peer_backlog(self, name: str) -> tuple[int, int]:
        """``(deliveries, replication records)`` held for peer ``name`` (deliveries
        waiting or sent and not acknowledged; each bounded by ``ClusterConfig``);
        ``(0, 0)`` for a node that is not a peer."""
        outbox = self._peers.get(name)
        return (0, 0) if outbox is None else (outbox.backlog(), outbox.updates)

    def peers_waiting(self) -> list[str]:
        """The peers with a batch to take (``peer_batch``): records waiting (and room in
        the window), batches to send again, or an acknowledgement owed."""
        return [name for name, outbox in self._peers.items() if outbox]

    def peer_batch(self, name: str, now: float) -> bytes | None:
        """The next link message for peer ``name``, or None when nothing waits.

        The driver calls this when the link to ``name`` can take a message (it has
        credit), so records wait here, bounded (``cluster.py``), while a peer is slow.
        Batches to send again come first, as they were; then a new batch, numbered
        unless it carries only an acknowledgement.
        """
        outbox = self._peers.get(name)
        if outbox is None or not outbox:
            return None
        if outbox.cursor < len(outbox.sent):
            outbox.cursor += 1
            self.cluster_retransmit["resent"] += 1
            return outbox.sent[outbox.cursor - 1][1]
        packed: list[bytes] = []
        if outbox.ack_due or name in self._ack_at:  # owed now, or riding on this batch
            inbound = self._inbound[name]
            packed.append(pack_record(["A", inbound.session, inbound.expected - 1, outbox.rewind]))
            outbox.ack_due = outbox.rewind = False
            outbox.owed = 0
            self._ack_at.pop(name, None)
        header = Header(self.config.node_id, self._incarnation, outbox.peer_incarnation,
                        outbox.session)
        if len(outbox.sent) >= outbox.window:
            return join_batch(header, packed)  # an acknowledgement alone
        acks = len(packed)
        limits = self.config.cluster
        if outbox.resync:
            local = [c for c in self.directory.clients.values() if c.node is None]
            outbox.start_snapshot(
                [["S"], *(["J", self._client_record(c)] for c in local), ["E"]]
            )
        if outbox.ask:
            outbox.ask = False
            packed.append(pack_record(["R"]))
        before = outbox.in_flight
        more, too_large = outbox.take(
            limits.batch_records - len(packed),
            limits.max_batch - batch_overhead(header.sender) - 8 - sum(map(len, packed)),
        )
        for record in too_large:
            self._dropped("too_large", str(record[0]), None, now)
        packed += more
        if len(packed) == acks:
            return join_batch(header, packed) if acks else None
        seq = outbox.next_seq
        outbox.next_seq += 1
        base = outbox.sent[0][0] if outbox.sent else seq
        batch = join_batch(header._replace(seq=seq, base=base), packed)
        outbox.sent.append((seq, batch, outbox.in_flight - before))
        outbox.cursor = len(outbox.sent)
        return batch

    def peer_receive(self, data: bytes, now: float) -> None:
        """A link message from a peer. A malformed batch, one from a node that is not
        a peer, or one meant for this node's previous incarnation is counted in
        ``cluster_rejected`` and ignored, never raised (and never acknowledged: its
        sender keeps it). A numbered batch is taken only in order, once."""
        try:
            header, records = decode_batch(data, max_size=self.config.cluster.max_batch)
        except DecodeError as exc:
            self.cluster_rejected[exc.reason] += 1
            return
        sender = header.sender
        outbox = self._peers.get(sender)
        if outbox is None:
            self.cluster_rejected["unknown peer"] += 1
            return
        if header.to not in (0, self._incarnation):
            self.cluster_rejected["stale incarnation"] += 1
            return
        if outbox.peer_incarnation != header.incarnation:
            if outbox.peer_incarnation:  # it restarted: a new session, nothing resent
                self._lost(sender, "peer_restarted", outbox.restart(self._new_id()), now)
            outbox.peer_incarnation = header.incarnation
        if header.seq and not self._in_order(outbox, header, now):
            return
        for record in records:
            kind = record[0]
            if kind == "D":
                self._on_remote_delivery(sender, record, now)
            elif kind == "M":
                self._on_remote_metadata(sender, record[1], record[2], record[3], now)
            elif kind == "J":
                self._on_remote_join(sender, record[1], now)
            elif kind == "L":
                client = self._remote[sender].get((record[1], record[2]))
                if client is not None:
                    self._forget_remote(client, now)
            elif kind == "S":
                self._stale[sender] = set(self._remote[sender])
            elif kind == "E":
                self._end_snapshot(sender, now)
            elif kind == "R":
                outbox.resynchronize()
            elif kind == "A":
                if record[1] != outbox.session:
                    continue  # for a session this node has since replaced
                if record[2] >= outbox.next_seq:
                    self.cluster_rejected["bad acknowledgement"] += 1
                    continue
                outbox.acknowledged(record[2], record[3])
            else:
                self._on_bounce(record, now)

    def _in_order(self, outbox: PeerOutbox, header: Header, now: float) -> bool:
        """Take numbered batch ``header.seq`` of the sender's session? Only the next one:
        an older one is a duplicate, a later one follows a batch this node missed (it
        asks, once, for the rest again); for those an acknowledgement is owed at once,
        for the one taken within ``ack_delay`` (or at once past half a window)."""
        inbound = self._inbound.get(header.sender)
        if inbound is None or (inbound.incarnation, inbound.session) != (
                header.incarnation, header.session):
            inbound = self._inbound[header.sender] = _Inbound(
                header.incarnation, header.session, header.base)
        inbound.expected = max(inbound.expected, header.base)
        if header.seq < inbound.expected:
            self.cluster_retransmit["duplicate"] += 1
            outbox.ack_due = True
            return False
        if header.seq > inbound.expected:
            self.cluster_retransmit["gap"] += 1
            outbox.ack_due = True
            if not inbound.asked:
                inbound.asked = outbox.rewind = True
            return False
        inbound.expected += 1
        inbound.asked = False
        outbox.owed += 1
        if outbox.owed * 2 >= outbox.window:
            outbox.ack_due = True
        else:
            self._ack_at.setdefault(header.sender, now + self.config.cluster.ack_delay)
        return True

    def _cluster_deadline(self) -> float | None:
        """When the next delayed acknowledgement goes (``GatewayCore.next_deadline``)."""
        return min(self._ack_at.values(), default=None)

    def _cluster_timer(self, now: float) -> None:
        """Delayed acknowledgements that are due go alone (``GatewayCore.handle_timer``)."""
        for name, at in list(self._ack_at.items()):
            if at <= now:
                del self._ack_at[name]
                self._peers[name].ack_due = True

    def _replicate(self, record: Record) -> None:
        limit = self.config.cluster.peer_updates
        for outbox in self._peers.values():
            outbox.push_update(record, limit)

    def _replicate_metadata(self, client: Client, changes: dict[str, TypedValue]) -> None:
        self._replicate(
            ["M", client.app_id, client.client_id,
             {key: [type_name, plain_value(v)] for key, (type_name, v) in changes.items()}]
        )

    def _client_record(self, client: Client) -> list[Any]:
        types = client.types
        return [
            client.app_id,
            client.client_id,
            client.restricted,
            client.encoding,
            client.ip,
            client.receive_client_updates,
            client.receive_metadata_updates,
            {key: [types[key], plain_value(v)] for key, v in self.directory.values(client).items()},
        ]

    def _typed(self, raw: dict[Any, Any]) -> dict[str, TypedValue] | None:
        entries = {
            key: {"type": entry[0], "value": entry[1]}
            for key, entry in raw.items()
            if isinstance(entry, list) and len(entry) == 2
        }
        if len(entries) != len(raw):
            self.cluster_rejected["malformed metadata"] += 1
            return None
        # The reserved keys a gateway sets may be null (no namespace, a restricted
        # client's ip); every other value is checked as a client's would be.
        unset = {
            key: (entry["type"], None)
            for key, entry in entries.items()
            if entry["value"] is None and key in RESERVED_KEYS
        }
        accepted, errors = validate_metadata(
            {key: entry for key, entry in entries.items() if key not in unset},
            limits=self._replica_limits,
            allow_reserved=True,
        )
        if errors:
            self.cluster_rejected["invalid metadata"] += 1
            return None
        return {**accepted, **unset}

    def _admit(self, sender: str, app_id: str, client_id: str, now: float) -> bool:
        """May ``sender``'s client ``app_id/client_id`` be held here? One identity has one
        holder in the cluster: when two nodes accepted it at once, every node keeps the
        one on the node whose name sorts first, and that node's rival closes its own
        client (op 8 ``already registered``, 4004) when it learns of the winner."""
        existing = self.directory.by_identity.get((app_id, client_id))
        if existing is None:
            return True
        holder = existing.node if existing.node is not None else self.config.node_id
        if sender >= holder:
            return False
        if existing.node is None:
            self._refuse_duplicate(existing, now)
        else:
            self._forget_remote(existing, now)
        return self.directory.by_identity.get((app_id, client_id)) is None

    def _on_remote_join(self, sender: str, record: list[Any], now: float) -> None:
        app_id, client_id, restricted, encoding, ip, updates, meta_updates, raw = record
        stale = self._stale.get(sender)
        if stale is not None:
            stale.discard((app_id, client_id))
        held = self._remote[sender].get((app_id, client_id))
        if held is not None:  # a snapshot repeating what we hold: its values are newer
            metadata = self._typed(raw)
            if metadata is not None:
                self.directory.set_metadata(held, metadata)
            return
        metadata = self._typed(raw)
        if metadata is None or not self._admit(sender, app_id, client_id, now):
            return
        client = self.directory.add(
            app_id=app_id,
            client_id=client_id,
            conn=-1,
            restricted=restricted is True,
            encoding=str(encoding),
            metadata=metadata,
            receive_client_updates=updates is True,
            receive_metadata_updates=meta_updates is True,
            ip=ip if isinstance(ip, str) else None,
            node=sender,
        )
        self._remote[sender][(app_id, client_id)] = client
        self._notify_watchers(
            self._client_watchers, "CLIENT_CONNECTED", {"app": app_id, "client_id": client_id}, now
        )

    def _forget_remote(self, client: Client, now: float) -> None:
        assert client.node is not None
        held = self._remote.get(client.node)
        if held is not None:
            held.pop((client.app_id, client.client_id), None)
        self.directory.remove(client)
        self._notify_watchers(
            self._client_watchers,
            "CLIENT_DISCONNECTED",
            {"app": client.app_id, "client_id": client.client_id},
            now,
        )

    def _end_snapshot(self, sender: str, now: float) -> None:
        """A snapshot of ``sender`` is complete: its clients it did not name are gone."""
        self._synced.add(sender)
        held = self._remote[sender]
        for identity in self._stale.pop(sender, ()):
            client = held.get(identity)
            if client is not None:
                self._forget_remote(client, now)

    def _on_remote_metadata(
        self, sender: str, app_id: str, client_id: str, raw: dict[Any, Any], now: float
    ) -> None:
        client = self._remote[sender].get((app_id, client_id))
        if client is None:
            return  # a client this node does not hold (an identity it gave to another)
        changes = self._typed(raw)
        if changes is None:
            return
        if changes.keys() == {"last_heartbeat_time"}:
            # A heartbeat: on its own node it notifies nobody, so here neither.
            self.directory.set_metadata(client, changes)
        else:
            self._apply_metadata(client, changes, now)

    def _forward(
        self,
        sender: Client,
        t: str,
        d: dict[str, Any],
        *,
        out: dict[str, Any],
        targets: list[Client],
        droppable: bool,
        msg_id: str | None,
        reroute: list[Any] | None,
        now: float,
    ) -> None:
        """Queue the deliveries to other nodes' clients, one record per node."""
        by_node: dict[str, list[list[str]]] = {}
        for target in targets:
            if target.node is not None:
                by_node.setdefault(target.node, []).append([target.app_id, target.client_id])
        limit = self.config.cluster.peer_deliveries
        for node, identities in by_node.items():
            record = ["D", msg_id, t, out, identities, reroute]
            if not self._peers[node].push_delivery(record, limit):
                self._unroutable(sender, t, d, droppable=droppable, why="node_busy", now=now)

    def _on_remote_delivery(self, sender: str, record: list[Any], now: float) -> None:
        _kind, msg_id, t, out, identities, reroute = record
        by_identity = self.directory.by_identity
        conns: list[int] = []
        for app_id, client_id in identities:
            client = by_identity.get((app_id, client_id))
            if client is not None and client.node is None:
                conns.append(client.conn)
                if self._trace is not None:
                    self._trace(now, LAYER, "deliver", msg=msg_id, peer=client.trace_id,
                                attrs={"type": t, "from": sender})
            elif reroute is not None:  # a SEND: its origin routes it again
                bounce = ["U", t, out, reroute]
                limit = self.config.cluster.peer_deliveries
                if not self._peers[sender].push_delivery(bounce, limit):
                    self._dropped("bounce_refused", t, msg_id, now)
            else:  # a BROADCAST reaching a client that just left, as on one node
                self._dropped("left", t, msg_id, now)
        if conns:
            self._dispatch_to(tuple(conns), t, out, now)

    def _dropped(self, why: str, t: str, msg_id: str | None, now: float) -> None:
        self.cluster_dropped[why] += 1
        if self._trace is not None:
            self._trace(now, LAYER, "drop", msg=msg_id, attrs={"reason": why, "type": t})

    def _on_bounce(self, record: list[Any], now: float) -> None:
        """A SEND whose chosen client had left its node: route it again from here."""
        _kind, t, out, (app_id, client_id, target, attempt) = record
        client = self.directory.by_identity.get((app_id, client_id))
        if client is None or client.node is not None:
            self._dropped("sender_left", t, None, now)
            return
        d = {"target": target, "payload": out.get("payload") if isinstance(out, dict) else None,
             "nonce": out.get("nonce") if isinstance(out, dict) else None}
        try:
            query, text = self._query(target)
        except QueryError:
            self.cluster_rejected["invalid query"] += 1
            return
        if attempt + 1 > self.config.cluster.reroutes:
            self._unroutable(client, t, d, droppable=query.droppable, why="no_route", now=now)
            return
        self._route(client, t, d, query=query, text=text, attempt=attempt + 1, now=now)

    def _load_balance(self, now: float) -> None:
        """op 7 ``load balancing`` to the newest clients when this node holds too many."""
        own = len(self.directory) - sum(len(held) for held in self._remote.values())
        others = {
            node: len(self._remote[node])
            for node in self._nodes
            if node != self.config.node_id and node in self._synced
        }
        count = balance(own, others)
        if count > 0:
            self._send_away(count, now)
