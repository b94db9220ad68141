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
  of the state instead of the rate of change).

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
    Record,
    batch_overhead,
    decode_batch,
    join_batch,
    pack_record,
)

if TYPE_CHECKING:
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
    #: A SEND whose chosen client left before the delivery is routed again this often.
    reroutes: PositiveCount = 3
    #: Seconds between two load-balancing checks (the reference: 1 s).
    balance_interval: float = 1.0


class PeerOutbox:
    """Records waiting for one peer, in order, with the two bounds above."""

    __slots__ = ("ask", "deliveries", "records", "resync", "snapshot", "updates")

    def __init__(self) -> None:
        self.records: deque[Record] = deque()
        self.deliveries = 0
        self.updates = 0
        #: A snapshot must go before any waiting record (peer added, or updates overflowed).
        self.resync = True
        #: The peer must be asked for its snapshot (it was just added).
        self.ask = True
        #: Records of a snapshot being sent, at the front of ``records``.
        self.snapshot = 0

    def __bool__(self) -> bool:
        return self.resync or self.ask or bool(self.records)

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
        """Queue a ``D`` or ``U`` record; False (nothing queued) when the bound is reached."""
        if self.deliveries >= limit:
            return False
        self.records.append(record)
        self.deliveries += 1
        return True

    def take(self, count: int, room: int) -> tuple[list[bytes], list[Record]]:
        """``(packed, too_large)``: up to ``count`` records, oldest first, packed, whose
        sizes add up to at most ``room`` bytes; and the records taken that could never
        fit a batch (the caller counts them: they are not sent)."""
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
            if self.snapshot:
                self.snapshot -= 1
            elif record[0] in "DU":
                self.deliveries -= 1
            else:
                self.updates -= 1
            if len(data) > room:
                too_large.append(record)
                continue
            packed.append(data)
            used += len(data)
        return packed, too_large


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
        its own. Adding a known peer again (its link came back) does the same."""
        if name == self.config.node_id:
            raise LocalProtocolError("a node is not its own peer", node=name)
        outbox = self._peers.get(name)
        if outbox is None:
            self._peers[name] = PeerOutbox()
            self._remote.setdefault(name, {})
        else:
            outbox.resynchronize()
            outbox.ask = True

    def remove_peer(self, name: str, now: float) -> None:
        """Forget node ``name``: its clients leave routing (CLIENT_DISCONNECTED to the
        watchers); deliveries that waited for it are counted in
        ``cluster_dropped["peer_removed"]`` and traced (``drop``, ``attrs.count``)."""
        outbox = self._peers.pop(name, None)
        if outbox is not None and outbox.deliveries:
            self.cluster_dropped["peer_removed"] += outbox.deliveries
            if self._trace is not None:
                self._trace(now, LAYER, "drop", peer=name, attrs={
                    "reason": "peer_removed", "count": str(outbox.deliveries)})
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

    def peer_backlog(self, name: str) -> tuple[int, int]:
        """``(deliveries, replication records)`` waiting for peer ``name`` (each bounded
        by ``ClusterConfig``); ``(0, 0)`` for a node that is not a peer."""
        outbox = self._peers.get(name)
        return (0, 0) if outbox is None else (outbox.deliveries, outbox.updates)

    def peers_waiting(self) -> list[str]:
        """The peers with records waiting (take them with ``peer_batch``)."""
        return [name for name, outbox in self._peers.items() if outbox]

    def peer_batch(self, name: str, now: float) -> bytes | None:
        """The next link message for peer ``name``, or None when nothing waits.

        The driver calls this when the link to ``name`` can take a message (it has
        credit), so records wait here, bounded (``cluster.py``), while a peer is slow.
        """
        outbox = self._peers.get(name)
        if outbox is None or not outbox:
            return None
        limits = self.config.cluster
        if outbox.resync:
            local = [c for c in self.directory.clients.values() if c.node is None]
            outbox.start_snapshot(
                [["S"], *(["J", self._client_record(c)] for c in local), ["E"]]
            )
        packed: list[bytes] = []
        if outbox.ask:
            outbox.ask = False
            packed.append(pack_record(["R"]))
        sender = self.config.node_id
        more, too_large = outbox.take(
            limits.batch_records - len(packed), limits.max_batch - batch_overhead(sender) - 8
        )
        for record in too_large:
            self._dropped("too_large", str(record[0]), None, now)
        return join_batch(sender, packed + more)

    def peer_receive(self, data: bytes, now: float) -> None:
        """A link message from a peer. A malformed batch or one from a node that is not
        a peer is counted in ``cluster_rejected`` and ignored, never raised."""
        try:
            sender, records = decode_batch(data, max_size=self.config.cluster.max_batch)
        except DecodeError as exc:
            self.cluster_rejected[exc.reason] += 1
            return
        if sender not in self._peers:
            self.cluster_rejected["unknown peer"] += 1
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
                self._peers[sender].resynchronize()
            else:
                self._on_bounce(record, now)

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
