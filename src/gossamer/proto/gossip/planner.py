"""The distribution planner: multicast groups, then chunks of halving size, one next hop each.

chatter-as-coded.md §10 step 9, ``Planner.plan = group_mcast_peers |> build_tree``:

1. **Group** the distribution list into multicast groups: sets of peers assumed to reach each
   other by UDP multicast, judged from the "seen" reports (who said they heard whom).
2. **Build the tree**: with G groups, keep ceil(G/2) groups as one chunk and recurse on the
   other floor(G/2). Chunk sizes are ceil(G/2), ceil(floor(G/2)/2), ..., so there are
   floor(log2 G) + 1 chunks (vectors/chatter/planner_build_tree.json).
3. **Per chunk**: flatten its groups and shuffle; the head is the next hop, and it receives
   the rest of the chunk as its distribution list, to carry on with.

``group_as_coded`` is Chatter's grouping exactly (one-directional and order dependent: a
peer seen *by* x joins x's group only when x is visited first). gossamer groups by the
*closure* of the seen relation instead (``group_by_domain``, the domains kept by
``peers.PeerDB``): if anybody reported hearing both a and b, or a heard b, they share a
multicast domain whatever the order of the list. The chunking is Chatter's unchanged, and
so is the choice of a random head, except that peers which recently failed as a next hop
are put last (``suspect``) so that a dead node is not picked again and again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from gossamer.wire.chatter import NetID

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "NextHop",
    "build_tree",
    "chunk_sizes",
    "group_as_coded",
    "group_by_domain",
    "next_hop",
    "pick_others",
    "plan",
]

T = TypeVar("T")


def chunk_sizes(groups: int) -> list[int]:
    """The chunk sizes ``build_tree`` makes from ``groups`` groups, largest first."""
    sizes = []
    while groups:
        keep = (groups + 1) // 2
        sizes.append(keep)
        groups -= keep
    return sizes


def build_tree(groups: Sequence[T], rng: Random) -> list[list[T]]:
    """Chatter's ``build_tree``: chunks of ceil(G/2), ceil(floor(G/2)/2), ... random groups.

    Chatter shuffles before every split; one shuffle up front gives the same distribution.
    Chunks come largest first (Chatter's nested reverses permute them, which changes
    nothing: each chunk goes to its own next hop).
    """
    items = list(groups)
    rng.shuffle(items)
    chunks: list[list[T]] = []
    start = 0
    for size in chunk_sizes(len(items)):
        chunks.append(items[start : start + size])
        start += size
    return chunks


def group_as_coded(
    netids: Sequence[NetID], seen_by: Callable[[NetID], Sequence[NetID] | None]
) -> list[list[NetID]]:
    """Chatter's ``group_mcast_peers`` as coded (chatter-as-coded.md §10 step 9).

    Walk the list; each peer x not yet assigned opens the group ``[x]`` plus the still
    unassigned list members that reported seeing x (``seen_by(x)``; ``None`` when x is not
    in the peer database, which gives ``[x]``). Groups come out in Chatter's order
    (prepended, so the last one formed first).
    """
    unassigned = dict.fromkeys(netids)
    groups: list[list[NetID]] = []
    for x in netids:
        if x not in unassigned:
            continue
        del unassigned[x]
        group = [x]
        for witness in seen_by(x) or ():
            if witness in unassigned:
                del unassigned[witness]
                group.insert(0, witness)  # Chatter prepends: [id | result_list2]
        groups.insert(0, group)
    return groups


def group_by_domain(
    netids: Iterable[NetID], domain_of: Callable[[NetID], Hashable]
) -> list[list[NetID]]:
    """Group ``netids`` by multicast domain, groups in order of first appearance."""
    groups: dict[Hashable, list[NetID]] = {}
    for netid in netids:
        domain = domain_of(netid)
        group = groups.get(domain)
        if group is None:
            groups[domain] = [netid]
        else:
            group.append(netid)
    return list(groups.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class NextHop:
    """One chunk of a plan: send to ``head``, which carries on with ``rest``.

    ``rest`` keeps the chunk's groups (minus the head; empty groups dropped), so that the
    message can tell the next hop how the sender grouped its list.
    """

    head: NetID
    rest: tuple[tuple[NetID, ...], ...]

    @property
    def members(self) -> tuple[NetID, ...]:
        """The next hop's distribution list, flattened."""
        return tuple(netid for group in self.rest for netid in group)


def next_hop(
    chunk: Sequence[Sequence[NetID]],
    rng: Random,
    suspect: Callable[[NetID], bool] = lambda netid: False,
) -> NextHop:
    """The next hop for one chunk: a random member (healthy ones first) and the rest."""
    flat = [netid for group in chunk for netid in group]
    rng.shuffle(flat)
    # Healthy members first: a member that recently failed as a next hop is the head only
    # when nothing else is left (Chatter picks blindly and pays a timeout every time).
    head = next((netid for netid in flat if not suspect(netid)), flat[0])
    rest = tuple(
        remaining
        for remaining in (tuple(n for n in group if n != head) for group in chunk)
        if remaining
    )
    return NextHop(head=head, rest=rest)


def plan(
    groups: Sequence[Sequence[NetID]],
    rng: Random,
    *,
    suspect: Callable[[NetID], bool] = lambda netid: False,
) -> list[NextHop]:
    """The next hops for ``groups``: ``build_tree`` chunks, one random head per chunk."""
    nonempty = [group for group in groups if group]
    return [next_hop(chunk, rng, suspect) for chunk in build_tree(nonempty, rng)]


def pick_others(
    candidates: Sequence[NetID],
    domain_of: Callable[[NetID], Hashable],
    rng: Random,
    count: int,
    *,
    attempts: int = 4,
) -> list[NetID]:
    """Up to ``count`` random peers from distinct multicast domains ("remote NetIDs").

    Chatter groups every known peer, shuffles the groups and takes one member of each of the
    first four (§10 step 5). Grouping the whole database on every send costs O(peers); this
    samples ``count * attempts`` random candidates and keeps the first of each domain, which
    gives the same kind of list at O(count) cost.
    """
    if count <= 0 or not candidates:
        return []
    tries = min(len(candidates), count * attempts)
    picked: list[NetID] = []
    domains: set[Hashable] = set()
    for netid in rng.sample(candidates, tries):
        domain = domain_of(netid)
        if domain in domains:
            continue
        domains.add(domain)
        picked.append(netid)
        if len(picked) == count:
            break
    return picked
