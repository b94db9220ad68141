"""gossamer.proto.gateway.index and .routing: indexes agree with a scan; routing rules."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.proto.gateway.index import SortedKeyList
from gossamer.proto.gateway.metadata import MetadataLimits, TypedValue, validate_metadata
from gossamer.proto.gateway.query import parse_query
from gossamer.proto.gateway.routing import Client, Directory, rendezvous


def typed(values: dict[str, Any]) -> dict[str, TypedValue]:
    raw = {}
    for key, raw_value in values.items():
        value = raw_value
        if isinstance(value, bool):
            kind = "boolean"
        elif isinstance(value, int):
            kind = "integer"
        elif isinstance(value, float):
            kind = "float"
        elif isinstance(value, list):
            kind = "list"
        elif isinstance(value, dict):
            kind = "map"
        elif isinstance(value, str) and value.startswith("v"):
            kind, value = "version", value[1:]
        else:
            kind = "string"
        raw[key] = {"type": kind, "value": value}
    accepted, errors = validate_metadata(raw, limits=MetadataLimits())
    assert not errors, errors
    return accepted


def add(
    directory: Directory, cid: str, app: str = "a", restricted: bool = False, **values: Any
) -> Client:
    return directory.add(
        app_id=app,
        client_id=cid,
        conn=len(directory) + 1,
        restricted=restricted,
        encoding="json",
        metadata=typed(values),
    )


# ------------------------------------------------------------------ SortedKeyList


@given(st.lists(st.tuples(st.booleans(), st.integers(-50, 50)), max_size=400))
def test_sorted_key_list_matches_a_sorted_list(steps: list[tuple[bool, int]]) -> None:
    skl = SortedKeyList()
    model: list[tuple[int, int]] = []
    for handle, (insert, key) in enumerate(steps):
        if insert or not model:
            skl.add((key, handle))
            model.append((key, handle))
        else:
            victim = model.pop(key % len(model))
            skl.remove(victim)
    model.sort()
    assert list(skl.items()) == model
    assert list(skl.items(reverse=True)) == model[::-1]
    assert len(skl) == len(model)
    for low, high in [(-10, 10), (0, 0), (None, 5), (7, None), (60, 70)]:
        for low_inc in (True, False):
            for high_inc in (True, False):
                expected = [
                    h
                    for k, h in model
                    if (low is None or (k >= low if low_inc else k > low))
                    and (high is None or (k <= high if high_inc else k < high))
                ]
                assert list(skl.handles(low, low_inc, high, high_inc)) == expected
                collected: set[int] = set()
                skl.collect(collected, low, low_inc, high, high_inc)
                assert collected == set(expected)
                assert skl.count(low, low_inc, high, high_inc) == len(expected)


def test_sorted_key_list_splits_chunks_and_removes_missing() -> None:
    skl = SortedKeyList()
    for i in range(2000):
        skl.add((i % 97, i))
    assert len(skl._chunks) > 1
    assert skl.count(10, True, 10, True) == len([i for i in range(2000) if i % 97 == 10])
    for span in [(10, True, 80, False), (None, True, 50, True), (5, False, None, True)]:
        collected: set[int] = set()
        skl.collect(collected, *span)
        assert collected == set(skl.handles(*span)) and len(collected) == skl.count(*span)
    with pytest.raises(KeyError):
        skl.remove((10, 5))


# ---------------------------------------------- the index never loses a match

VALUES = st.one_of(
    st.integers(-3, 3),
    st.floats(-3, 3, allow_nan=False).map(lambda f: round(f, 1)),
    st.sampled_from(["x", "y", "z", "v1.0.0", "v1.2.0-rc.1", "v2.0.0"]),
    st.booleans(),
    st.lists(st.sampled_from(["x", "y", 1, 2]), max_size=3),
    st.dictionaries(st.sampled_from(["x", "y", "1"]), st.integers(0, 2), max_size=2),
)
KEYS = st.sampled_from(["a", "b", "c1"])
QUERY_VALUES = st.one_of(
    st.integers(-3, 3),
    st.sampled_from(["x", "y", "1.0.0", "1.1.0", 1.0, 2.5]),
    st.booleans(),
    st.lists(st.sampled_from(["x", 1, "1.0.0"]), max_size=3),
)
COMPARE = st.builds(
    lambda key, op, value: {"path": f"/{key}", "op": op, "to": {"value": value}},
    KEYS,
    st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$contains", "$ncontains"]),
    QUERY_VALUES,
)
IN = st.builds(
    lambda key, op, value: {key: {op: value}},
    KEYS,
    st.sampled_from(["$in", "$nin"]),
    st.lists(QUERY_VALUES, max_size=3),
)
OPS = st.recursive(
    st.one_of(COMPARE, IN),
    lambda inner: st.builds(
        lambda op, items: {"op": op, "with": items},
        st.sampled_from(["$and", "$or", "$nor"]),
        st.lists(inner, max_size=3),
    ),
    max_leaves=6,
)


@settings(max_examples=150)
@given(
    clients=st.lists(st.dictionaries(KEYS, VALUES, max_size=3), min_size=1, max_size=25),
    ops=st.lists(OPS, max_size=3),
    app=st.sampled_from([None, "a", "b"]),
    restricted=st.booleans(),
    updates=st.lists(st.tuples(st.integers(0, 24), st.dictionaries(KEYS, VALUES, max_size=2))),
)
def test_indexed_match_equals_scan(
    clients: list[dict[str, Any]],
    ops: list[Any],
    app: str | None,
    restricted: bool,
    updates: list[tuple[int, dict[str, Any]]],
) -> None:
    directory = Directory()
    added = [
        add(directory, f"c{i}", app="a" if i % 3 else "b", restricted=i % 5 == 0, **values)
        for i, values in enumerate(clients)
    ]
    for index, values in updates:
        directory.set_metadata(added[index % len(added)], typed(values))
    if len(added) > 2:
        directory.remove(added[1])
    query = parse_query({"application": app, "restricted": restricted, "ops": ops})
    indexed = sorted(c.client_id for c in directory.match(query))
    scanned = sorted(c.client_id for c in directory.scan(query))
    assert indexed == scanned


# ------------------------------------------------------------------ routing rules


def test_application_and_restricted_filters() -> None:
    d = Directory()
    add(d, "n1", app="a")
    add(d, "r1", app="a", restricted=True)
    add(d, "o1", app="b")
    names = lambda q: sorted(c.client_id for c in d.match(parse_query(q)))  # noqa: E731
    assert names({"application": "a"}) == ["n1"]
    assert names({"application": "a", "restricted": True}) == ["n1", "r1"]
    assert names({}) == ["n1", "o1"]  # no application: every application (§9.1)
    assert names({"application": "nobody"}) == []


def test_selectors_pick_min_max_and_closest_to_mean() -> None:
    d = Directory()
    add(d, "low", lat=1)
    add(d, "mid", lat=4.5)
    add(d, "high", lat=10)
    add(d, "text", lat="fast")  # not a number: never selected
    add(d, "none")
    rng = random.Random(1)
    pick = lambda sel: [  # noqa: E731
        c.client_id for c in d.route(parse_query({"selector": sel}), rng, broadcast=True).targets
    ]
    assert pick({"$min": "lat"}) == ["low"]
    assert pick({"$max": "lat"}) == ["high"]
    assert pick({"$avg": "lat"}) == ["mid"]  # mean 5.17: 4.5 is closest
    assert pick({"$min": "/lat"}) == ["low"]
    assert pick({"$min": "absent"}) == []  # no numeric value: nobody (the reference crashes)


def test_selector_ties_split_by_key_then_random() -> None:
    d = Directory()
    for i in range(8):
        add(d, f"c{i}", lat=1)
    query = parse_query({"selector": {"$min": "lat"}, "key": "user-9"})
    chosen = {
        d.route(query, random.Random(i), broadcast=False).targets[0].client_id for i in range(20)
    }
    assert len(chosen) == 1
    unkeyed = parse_query({"selector": {"$min": "lat"}})
    spread = {
        d.route(unkeyed, random.Random(i), broadcast=False).targets[0].client_id for i in range(40)
    }
    assert len(spread) > 1


def test_key_hashing_is_stable_and_moves_few_keys() -> None:
    d = Directory()
    clients = [add(d, f"c{i}", app="a", shard=i) for i in range(20)]
    keys = [f"user-{i}" for i in range(2000)]
    query_for = lambda k: parse_query({"application": "a", "key": k})  # noqa: E731
    before = {k: d.route(query_for(k), random.Random(0), broadcast=False).targets[0] for k in keys}
    again = {k: d.route(query_for(k), random.Random(9), broadcast=False).targets[0] for k in keys}
    assert before == again  # stable while the match set is unchanged
    # One client leaves: only its keys move.
    d.remove(clients[3])
    after = {k: d.route(query_for(k), random.Random(0), broadcast=False).targets[0] for k in keys}
    moved = [k for k in keys if after[k] is not before[k]]
    assert moved and all(before[k] is clients[3] for k in moved)
    # One client joins: it takes about 1/n of the keys, and only those move.
    newcomer = add(d, "new", app="a", shard=99)
    joined = {k: d.route(query_for(k), random.Random(0), broadcast=False).targets[0] for k in keys}
    moved = [k for k in keys if joined[k] is not after[k]]
    assert all(joined[k] is newcomer for k in moved)
    assert 2000 / 20 / 2 < len(moved) < 2000 / 20 * 2
    # Spread: every client gets some keys.
    assert len({c.client_id for c in joined.values()}) == 20
    assert rendezvous(clients[:1], "x") is clients[0]


def test_optional_reruns_without_ops_and_selector() -> None:
    d = Directory()
    add(d, "a1", app="a", lat=5)
    add(d, "a2", app="a", lat=7)
    add(d, "b1", app="b", lat=1)
    add(d, "r1", app="a", restricted=True, lat=1)
    strict = parse_query({"application": "a", "ops": [{"lat": {"$gt": 100}}]})
    assert d.route(strict, random.Random(0), broadcast=True).targets == ()
    optional = parse_query(
        {
            "application": "a",
            "optional": True,
            "ops": [{"lat": {"$gt": 100}}],
            "selector": {"$min": "lat"},
        }
    )
    route = d.route(optional, random.Random(0), broadcast=True)
    assert route.fallback
    assert sorted(c.client_id for c in route.targets) == ["a1", "a2"]  # app kept, restricted out
    hit = parse_query({"application": "a", "optional": True, "ops": [{"lat": {"$gt": 6}}]})
    route = d.route(hit, random.Random(0), broadcast=True)
    assert not route.fallback and [c.client_id for c in route.targets] == ["a2"]


def test_send_picks_uniformly_among_matches() -> None:
    d = Directory()
    for i in range(4):
        add(d, f"c{i}", app="a")
    query = parse_query({"application": "a"})
    rng = random.Random(3)
    counts: dict[str, int] = {}
    for _ in range(4000):
        (target,) = d.route(query, rng, broadcast=False).targets
        counts[target.client_id] = counts.get(target.client_id, 0) + 1
    assert len(counts) == 4 and min(counts.values()) > 850


def test_route_cache_follows_metadata_and_membership() -> None:
    d = Directory()
    c1 = add(d, "c1", lat=5)
    query = parse_query({"ops": [{"lat": {"$lt": 10}}]})
    assert [c.client_id for c in d.match(query, cache_key="q")] == ["c1"]
    d.set_metadata(c1, typed({"lat": 50}))
    assert d.match(query, cache_key="q") == []
    add(d, "c2", lat=1)
    assert [c.client_id for c in d.match(query, cache_key="q")] == ["c2"]
    d.set_metadata(c1, typed({"other": 1}))  # a key the query does not read
    assert [c.client_id for c in d.match(query, cache_key="q")] == ["c2"]


def test_route_cache_eviction_keeps_invalidation_right() -> None:
    d = Directory(cache_size=2)
    c1 = add(d, "c1", lat=5, tags=["a"])
    queries = {
        "lat": parse_query({"ops": [{"lat": {"$lt": 10}}]}),
        "tags": parse_query({"ops": [{"tags": {"$contains": "a"}}]}),
        "both": parse_query({"ops": [{"lat": {"$lt": 10}}, {"tags": {"$contains": "a"}}]}),
    }
    for text, query in queries.items():  # three results in a cache of two: "lat" goes
        assert [c.client_id for c in d.match(query, cache_key=text)] == ["c1"]
    d.set_metadata(c1, typed({"tags": ["b"]}))
    assert d.match(queries["tags"], cache_key="tags") == []
    assert d.match(queries["both"], cache_key="both") == []
    assert [c.client_id for c in d.match(queries["lat"], cache_key="lat")] == ["c1"]
    d.set_metadata(c1, typed({"lat": 50}))
    assert d.match(queries["lat"], cache_key="lat") == []
    # A caller changing its result does not change the cached one.
    d.set_metadata(c1, typed({"lat": 1}))
    d.match(queries["lat"], cache_key="lat").clear()
    assert [c.client_id for c in d.match(queries["lat"], cache_key="lat")] == ["c1"]


@pytest.mark.parametrize(
    ("ops", "exact"),
    [
        ([{"tags": {"$contains": "t1"}}], True),
        ([{"tags": {"$contains": 3}}], True),
        ([{"tags": {"$contains": ["t1"]}}], False),  # a list element: only "has the key"
        ([{"shard": 3}], True),
        ([{"shard": {"$in": [3, 4, "x"]}}], True),
        ([{"shard": {"$in": [3, [4]]}}], False),
        ([{"shard": {"$gte": 3}}, {"version": {"$lt": "2.0.0"}}], True),
        ([{"shard": {"$eq": [1]}}], False),
        ([{"path": "/meta/x", "op": "$eq", "to": {"value": 1}}], False),  # deeper path
        ([{"shard": 3}, {"tags": {"$ncontains": "t1"}}], False),  # a negation is scanned
        ([{"$or": [{"shard": 3}, {"shard": 4}]}], True),
        ([{"$or": [{"shard": 3}, {"tags": {"$ncontains": "t1"}}]}], None),
        ([{"absent": 1}, {"tags": {"$ncontains": "t1"}}], True),  # nobody: exactly nobody
    ],
)
def test_index_plans_say_when_they_are_exact(ops: list[Any], exact: bool | None) -> None:
    d = Directory()
    for i in range(12):
        add(d, f"c{i}", shard=i % 6, tags=[f"t{i % 3}", i % 4], version=f"v1.{i}.0",
            meta={"x": i % 2})
    query = parse_query({"ops": ops})
    planned = d.index.candidates(query.ops)
    if exact is None:
        assert planned is None
        return
    assert planned is not None and planned[1] is exact
    matched = sorted(c.client_id for c in d.match(query))
    assert matched == sorted(c.client_id for c in d.scan(query))
    if exact:
        assert sorted(f"c{h - 1}" for h in planned[0]) == matched


def test_duplicate_identity_and_remove_are_checked() -> None:
    d = Directory()
    c = add(d, "c1")
    with pytest.raises(Exception, match="already registered"):
        add(d, "c1")
    d.remove(c)
    d.remove(c)  # idempotent
    assert len(d) == 0 and d.index.by_app == {}
