"""A clustered gateway's bookkeeping: peers, bounded outboxes, load balancing (sans-I/O).

Every node holds a replica of every client of the cluster (the choice and its figures
are in ``docs/gateway.md``, "Clustering"): a node sends its own clients' joins, leaves
and metadata changes to every peer, in order, over one link each (FIFO), preceded by a
snapshot of all its clients whenever a peer is (re)added. Routing then runs on the
local ``Directory`` over the whole cluster, with exactly the single-node semantics
(selectors, ``key`` hashing and ``optional`` over every client), and only the
deliveries to other nodes' clients travel.

``PeerOutbox`` holds what waits for one peer. The driver takes a batch when the link
has credit (``GatewayCore.peer_batch``), so a slow peer makes the outbox grow, never
the peer's memory; the outbox is bounded:

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
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from gossamer.params import Checked, PositiveCount
from gossamer.wire.gateway_cluster import Record, pack_record

__all__ = ["ClusterConfig", "PeerOutbox", "balance"]


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
