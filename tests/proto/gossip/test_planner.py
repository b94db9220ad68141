"""The distribution planner: Chatter's chunking (vectors), grouping as coded and as fixed."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gossamer.proto.gossip.planner import (
    build_tree,
    chunk_sizes,
    group_as_coded,
    group_by_domain,
    next_hop,
    pick_others,
    plan,
)
from gossamer.wire.chatter import NetID

VECTORS = Path(__file__).parent / "vectors" / "planner_build_tree.json"


def netids(n: int, subnet: int = 0) -> list[NetID]:
    return [NetID(f"10.0.{subnet}.{i + 1}", 29999) for i in range(n)]


def test_chunk_sizes_reproduce_the_original_planner_vectors() -> None:
    cases = json.loads(VECTORS.read_text())["cases"]
    assert len(cases) >= 10
    for case in cases:
        groups = case["groups"]
        chunks = build_tree(list(range(groups)), random.Random(groups))
        sizes = sorted((len(c) for c in chunks), reverse=True)
        assert sizes == case["chunk_sizes"], case
        assert len(chunks) == case["chunks"] == math.floor(math.log2(groups)) + 1
        assert chunk_sizes(groups) == case["chunk_sizes"]


@given(st.integers(0, 300), st.integers(0, 2**32))
def test_build_tree_partitions_the_groups(count: int, seed: int) -> None:
    groups = list(range(count))
    chunks = build_tree(groups, random.Random(seed))
    flat = [g for chunk in chunks for g in chunk]
    assert sorted(flat) == groups
    assert [len(c) for c in chunks] == chunk_sizes(count)
    if count:
        assert len(chunks) == math.floor(math.log2(count)) + 1


def test_build_tree_membership_is_random_but_seeded() -> None:
    groups = list(range(16))
    a = build_tree(groups, random.Random(1))
    assert a == build_tree(groups, random.Random(1))
    assert any(build_tree(groups, random.Random(s)) != a for s in range(2, 6))


def test_group_as_coded_is_one_directional_and_order_dependent() -> None:
    # b reported seeing a; nobody reported seeing b (chatter-as-coded.md §10 step 9).
    a, b, c = netids(3)
    witnesses = {a: [b], b: [], c: []}
    # Visiting a first pulls b into a's group ...
    assert sorted(map(sorted_key, group_as_coded([a, b, c], witnesses.get))) == sorted(
        map(sorted_key, [[a, b], [c]])
    )
    # ... but visiting b first leaves a and b apart: the grouping depends on the order.
    groups = group_as_coded([b, a, c], witnesses.get)
    assert sorted(map(len, groups)) == [1, 1, 1]


def test_group_as_coded_keeps_to_the_list_and_to_unassigned_peers() -> None:
    a, b, c, d = netids(4)
    outsider = NetID("10.9.9.9", 29999)
    witnesses = {a: [b, outsider], c: [b, d]}
    groups = group_as_coded([a, b, c, d], witnesses.get)
    flat = [n for g in groups for n in g]
    assert sorted(flat, key=lambda n: n.packed) == [a, b, c, d]  # outsider never joins
    assert [a, b] in [sorted(g, key=lambda n: n.packed) for g in groups]
    assert [c, d] in [sorted(g, key=lambda n: n.packed) for g in groups]


def sorted_key(group: list[NetID]) -> list[bytes]:
    return sorted(n.packed for n in group)


def test_group_by_domain_groups_whatever_the_order() -> None:
    lan1, lan2 = netids(3, 1), netids(2, 2)
    domain = {n: "x" for n in lan1} | {n: "y" for n in lan2}
    mixed = [lan1[0], lan2[0], lan1[1], lan2[1], lan1[2]]
    assert group_by_domain(mixed, domain.__getitem__) == [lan1, lan2]
    assert group_by_domain(list(reversed(mixed)), domain.__getitem__) == [
        list(reversed(lan1)),
        list(reversed(lan2)),
    ]


@given(st.lists(st.integers(1, 6), min_size=0, max_size=40), st.integers(0, 2**32))
def test_plan_reaches_every_member_once_through_disjoint_chunks(
    sizes: list[int], seed: int
) -> None:
    groups = [netids(size, subnet) for subnet, size in enumerate(sizes)]
    hops = plan(groups, random.Random(seed))
    everyone = [n for g in groups for n in g]
    covered = [h.head for h in hops] + [n for h in hops for n in h.members]
    assert sorted(n.packed for n in covered) == sorted(n.packed for n in everyone)
    assert len(hops) == (math.floor(math.log2(len(groups))) + 1 if groups else 0)
    for hop in hops:
        assert hop.head not in hop.members  # a receiver is never in its own list
        assert all(hop.rest)  # no empty group is passed on


def test_next_hop_avoids_suspects_while_others_remain() -> None:
    members = netids(5)
    dead = set(members[:4])
    for seed in range(20):
        hop = next_hop([members], random.Random(seed), suspect=dead.__contains__)
        assert hop.head == members[4]
        assert sorted(n.packed for n in hop.members) == sorted(n.packed for n in members[:4])
    only_dead = next_hop([members[:2]], random.Random(0), suspect=dead.__contains__)
    assert only_dead.head in members[:2]  # nothing healthy left: a suspect is tried


def test_pick_others_takes_at_most_count_from_distinct_domains() -> None:
    peers = [n for s in range(6) for n in netids(5, s)]
    domain = {n: n.host.rsplit(".", 1)[0] for n in peers}
    for seed in range(20):
        picked = pick_others(peers, domain.__getitem__, random.Random(seed), 4)
        assert len(picked) == 4
        assert len({domain[n] for n in picked}) == 4
    one_domain = netids(8)
    picked = pick_others(one_domain, lambda n: 0, random.Random(1), 4)
    assert len(picked) == 1
    assert pick_others([], lambda n: 0, random.Random(1), 4) == []
    assert pick_others(peers, domain.__getitem__, random.Random(1), 0) == []
