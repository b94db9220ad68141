"""The peer database: who exists, who hears whom on multicast, and who failed lately.

What is recorded, as the spec's FAQ says ("When does Chatter populate the peer database")
and chatter-as-coded.md §9 describes:

- **Peers** (``add``): every NetID a node sends to, and from every message it receives the
  sender, the distribution list, the seen list's origins and the "other ids".
- **Our sightings** (``heard_on_multicast``): the senders of multicast datagrams we received.
  They become the *seen list* we attach to every message we send (Chatter's
  ``get_senders``). Only datagrams that really arrived on the multicast group count: the
  driver says so (chatter-as-coded.md §8: Chatter's wildcard-bound socket counted unicast
  datagrams too, §12 item 5).
- **Reports** (``reported_seen``): a message from R whose seen list names X means "R hears X
  on multicast". For X = ourselves these are the peers our multicast reaches, which the
  broadcast removes from its TCP list (``seen_us``). This is Chatter's reverse map
  ``seen_ids(X)``.
- **Group hints** (``link``): a gossamer message may say how its sender grouped the list it
  carries; members of one group are linked.

Multicast domains. Every sighting, report and hint is an edge "same multicast domain"; the
domains are the connected components, kept in a union-find (``domain``) so that grouping a
list costs one lookup per member. Only the edges that joined two components are stored (a
spanning forest, at most one per peer), each with the time it was learnt: Chatter kept the
whole relation, a LAN's size squared per node (chatter-as-coded.md §9). An edge expires
``seen_ttl`` after it was learnt and the forest is rebuilt from the survivors; an edge that
is still true is learnt again from the next report that carries it (every message carries
its sender's seen list).

Bounds and expiry (Chatter had neither, §9): at most ``max_peers`` peers (past that the
least recently refreshed eighth is evicted at once), ``max_seen`` sightings and
``max_witnesses`` peers that saw us (the oldest go). A peer expires ``peer_ttl`` seconds
after it was last refreshed; a sighting or a report of us ``seen_ttl`` seconds after it was
last renewed. Reads ignore expired entries at once; ``sweep`` deletes them (the core calls
it periodically).

Speed: every received message carries a seen list (a LAN's worth of entries), so recording
a report is the hot path: entries are keyed by the NetIDs' 6-byte wire form, whose hash
``bytes`` caches, and an entry that changes nothing costs two dict lookups.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gossamer.wire.chatter import BroadcastID, NetID

__all__ = ["PeerDB", "PeerInfo"]

_NEVER = float("-inf")


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerInfo:
    """What the database knows about one peer (``PeerDB.peers``).

    ``heard``: we received its multicast (it is on our seen list). ``saw_us``: it reported
    hearing our multicast. ``domain``: a representative of its multicast domain (peers with
    the same one are grouped together). ``suspect``: it failed as a next hop within
    ``suspect_time``.
    """

    netid: NetID
    last_refreshed: float
    seqno: int
    heard: bool
    saw_us: bool
    domain: NetID
    suspect: bool


class _Peer:
    __slots__ = ("netid", "refreshed", "seqno", "suspect_until")

    def __init__(self, netid: NetID, now: float) -> None:
        self.netid = netid
        self.refreshed = now
        self.seqno = 0
        self.suspect_until = _NEVER


class PeerDB:
    """The peer database of the node ``own``. See the module docstring."""

    __slots__ = (
        "_dirty",
        "_edges",
        "_heard",
        "_index",
        "_order",
        "_own",
        "_parent",
        "_peers",
        "_seen_us",
        "max_peers",
        "max_seen",
        "max_witnesses",
        "own",
        "peer_ttl",
        "seen_ttl",
    )

    def __init__(
        self,
        own: NetID,
        *,
        max_peers: int = 16_384,
        peer_ttl: float = 3600.0,
        seen_ttl: float = 600.0,
        max_seen: int = 1024,
        max_witnesses: int = 1024,
    ) -> None:
        self.own = own
        self._own = own.packed
        self.max_peers = max_peers
        self.peer_ttl = peer_ttl
        self.seen_ttl = seen_ttl
        self.max_seen = max_seen
        self.max_witnesses = max_witnesses
        self._peers: dict[bytes, _Peer] = {}
        # An indexable copy of the peers, for O(1) random sampling.
        self._order: list[NetID] = []
        self._index: dict[bytes, int] = {}
        #: Our sightings: sender -> (seqno, when), in order of last renewal.
        self._heard: dict[bytes, tuple[int, float]] = {}
        #: Peers that reported hearing us -> when, in order of last renewal.
        self._seen_us: dict[bytes, float] = {}
        #: The union-find forest over wire forms, and the edges that built it.
        self._parent: dict[bytes, bytes] = {}
        self._edges: list[tuple[bytes, bytes, float]] = []
        self._dirty = False

    def __len__(self) -> int:
        return len(self._peers)

    def __contains__(self, netid: object) -> bool:
        return isinstance(netid, NetID) and netid.packed in self._peers

    # -- recording ------------------------------------------------------------

    def add(self, netids: Iterable[NetID], now: float) -> None:
        """Record peers (refreshing them); ourselves is never a peer."""
        peers, own = self._peers, self._own
        for netid in netids:
            key = netid.packed
            peer = peers.get(key)
            if peer is not None:
                peer.refreshed = now
            elif key != own:
                self._new_peer(netid, now)

    def heard_on_multicast(self, sender: NetID, seqno: int, now: float) -> None:
        """We received a multicast datagram from ``sender`` (Chatter's ``local_seen_peer``)."""
        key = sender.packed
        if key == self._own:
            return
        peer = self._refresh(sender, now)
        peer.seqno = max(peer.seqno, seqno)
        heard = self._heard
        if key in heard:
            del heard[key]  # re-inserted last: the dict stays ordered by renewal
        else:
            self._union(self._own, key, now)
            if len(heard) >= self.max_seen:
                del heard[next(iter(heard))]
        heard[key] = (peer.seqno, now)

    def reported_seen(self, reporter: NetID, seen: Iterable[BroadcastID], now: float) -> None:
        """``reporter`` says it hears each origin of ``seen`` on multicast (Chatter's
        ``peer_seen_others``): record the origins, their max seqno, and the report."""
        by = reporter.packed
        own = self._own
        if by == own:
            return
        self._refresh(reporter, now)
        peers = self._peers
        root = self._find(by)
        parent = self._parent  # after _find: a rebuild replaces the dict
        for bid in seen:
            origin = bid.origin
            key = origin.packed
            peer = peers.get(key)
            if peer is None:
                if key == own:
                    self._saw_us(by, now)
                elif key != by:
                    self._new_peer(origin, now)
                    self._union(key, by, now)
                else:
                    continue
                root = self._find(by)
                parent = self._parent
                continue
            peer.refreshed = now
            # An if, not max(): this loop runs for every entry of every seen list received.
            if bid.seqno > peer.seqno:  # noqa: PLR1730
                peer.seqno = bid.seqno
            if key == root or parent.get(key) == root:
                continue  # already in the reporter's domain: the common case
            if self._union(key, by, now):
                root = self._find(by)
                parent = self._parent

    def _saw_us(self, by: bytes, now: float) -> None:
        seen_us = self._seen_us
        if by in seen_us:
            del seen_us[by]  # re-inserted last: ordered by renewal
        else:
            self._union(self._own, by, now)
            if len(seen_us) >= self.max_witnesses:
                del seen_us[next(iter(seen_us))]
        seen_us[by] = now

    def link(self, groups: Iterable[Sequence[NetID]], now: float) -> None:
        """A sender grouped these peers into multicast groups: link each group's members."""
        own = self._own
        for group in groups:
            if len(group) < 2:
                continue
            first = group[0]
            if first.packed == own:
                continue
            self._refresh(first, now)
            for member in group[1:]:
                key = member.packed
                if key != own:
                    self._refresh(member, now)
                    self._union(key, first.packed, now)

    def mark_failed(self, netid: NetID, now: float, suspect_time: float) -> None:
        """``netid`` failed as a next hop: avoid it as one for ``suspect_time`` seconds."""
        peer = self._peers.get(netid.packed)
        if peer is not None:
            peer.suspect_until = now + suspect_time

    def clear_suspect(self, netid: NetID) -> None:
        """We heard from ``netid``: it is alive after all."""
        peer = self._peers.get(netid.packed)
        if peer is not None:
            peer.suspect_until = _NEVER

    # -- reading --------------------------------------------------------------

    def seen_list(self, now: float) -> list[BroadcastID]:
        """Our seen list: the multicast senders heard within ``seen_ttl``, latest first,
        each with the highest seqno known for it (Chatter's ``get_senders``)."""
        oldest = now - self.seen_ttl
        out = []
        peers = self._peers
        for key, (seqno, when) in reversed(self._heard.items()):
            if when < oldest:
                break  # ordered by renewal: the rest are older
            peer = peers.get(key)
            if peer is not None:
                out.append(BroadcastID(peer.netid, seqno))
        return out

    def seen_us(self, now: float) -> set[bytes]:
        """The wire forms (``NetID.packed``) of the peers that reported hearing our
        multicast within ``seen_ttl``."""
        oldest = now - self.seen_ttl
        return {key for key, when in self._seen_us.items() if when >= oldest}

    def is_suspect(self, netid: NetID, now: float) -> bool:
        peer = self._peers.get(netid.packed)
        return peer is not None and peer.suspect_until > now

    def domain(self, netid: NetID) -> bytes:
        """The multicast domain of ``netid``: the wire form of its component's representative."""
        if self._dirty:
            self._rebuild()
        return self._find(netid.packed)

    def candidates(self) -> list[NetID]:
        """Every known peer, in no particular order (for sampling "other ids")."""
        return self._order

    def peers(self, now: float) -> list[PeerInfo]:
        """Every live peer."""
        oldest = now - self.peer_ttl
        recent = now - self.seen_ttl
        seen_us = self.seen_us(now)
        return [
            PeerInfo(
                netid=peer.netid,
                last_refreshed=peer.refreshed,
                seqno=peer.seqno,
                heard=key in self._heard and self._heard[key][1] >= recent,
                saw_us=key in seen_us,
                domain=NetID.unpack(self.domain(peer.netid)),
                suspect=peer.suspect_until > now,
            )
            for key, peer in self._peers.items()
            if peer.refreshed >= oldest
        ]

    # -- upkeep ---------------------------------------------------------------

    def sweep(self, now: float) -> int:
        """Delete expired peers, sightings, reports and domain edges; return how many."""
        peer_oldest = now - self.peer_ttl
        oldest = now - self.seen_ttl
        stale = [key for key, peer in self._peers.items() if peer.refreshed < peer_oldest]
        for key in stale:
            self._drop_peer(key)
        removed = len(stale)
        for entries in (self._seen_us, self._heard):
            old = [key for key, value in entries.items() if _when(value) < oldest]
            for key in old:
                del entries[key]
            removed += len(old)
        kept = [edge for edge in self._edges if edge[2] >= oldest]
        removed += len(self._edges) - len(kept)
        self._edges = kept
        if removed:
            self._dirty = True
        return removed

    # -- internals --------------------------------------------------------------

    def _refresh(self, netid: NetID, now: float) -> _Peer:
        peer = self._peers.get(netid.packed)
        if peer is None:
            return self._new_peer(netid, now)
        peer.refreshed = now
        return peer

    def _new_peer(self, netid: NetID, now: float) -> _Peer:
        if len(self._peers) >= self.max_peers:
            # Evict the least recently refreshed eighth at once: one O(n) pass per
            # max_peers/8 new peers, instead of one per new peer.
            by_age = sorted(self._peers, key=lambda k: self._peers[k].refreshed)
            for key in by_age[: max(1, self.max_peers // 8)]:
                self._drop_peer(key)
        key = netid.packed
        peer = self._peers[key] = _Peer(netid, now)
        self._index[key] = len(self._order)
        self._order.append(netid)
        return peer

    def _drop_peer(self, key: bytes) -> None:
        del self._peers[key]
        index = self._index.pop(key)
        last = self._order.pop()
        if last.packed != key:
            self._order[index] = last
            self._index[last.packed] = index
        self._heard.pop(key, None)
        self._seen_us.pop(key, None)
        self._edges = [edge for edge in self._edges if key not in (edge[0], edge[1])]
        self._dirty = True

    def _find(self, key: bytes) -> bytes:
        if self._dirty:
            self._rebuild()
        parent = self._parent
        root = key
        up = parent.get(root)
        while up is not None and up != root:
            root = up
            up = parent.get(root)
        while key != root:  # path compression
            up = parent[key]
            parent[key] = root
            key = up
        return root

    def _union(self, a: bytes, b: bytes, now: float) -> bool:
        """Join the domains of ``a`` and ``b``; True (and the edge kept) if they were apart."""
        ra, rb = self._find(a), self._find(b)
        if ra == rb:
            return False
        # The smaller wire form represents: the same components give the same names,
        # whatever the order the edges arrived in.
        if rb < ra:
            ra, rb = rb, ra
        self._parent[rb] = ra
        self._edges.append((a, b, now))
        return True

    def _rebuild(self) -> None:
        self._dirty = False
        self._parent = {}
        edges, self._edges = self._edges, []
        own = self._own
        for key, (_, when) in self._heard.items():
            self._union(own, key, when)
        for key, when in self._seen_us.items():
            self._union(own, key, when)
        for a, b, when in edges:
            self._union(a, b, when)


def _when(value: float | tuple[int, float]) -> float:
    return value[1] if isinstance(value, tuple) else value
