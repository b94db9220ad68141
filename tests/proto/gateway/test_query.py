"""gossamer.proto.gateway.query: the semantics table, in both query formats.

Every row is checked three ways: the compiled predicate on one client's metadata, the
indexed ``Directory.match`` and the naive ``Directory.scan`` over a directory that
holds that client among others (so the index never loses or invents a match).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gossamer.proto.gateway.metadata import MetadataLimits, validate_metadata
from gossamer.proto.gateway.query import (
    MISSING,
    QueryError,
    QueryLimits,
    json_equal,
    parse_query,
    resolve,
)
from gossamer.proto.gateway.routing import Directory
from gossamer.proto.gateway.semver import parse_version

METADATA: dict[str, Any] = {
    "s": {"type": "string", "value": "hello"},
    "n": {"type": "integer", "value": 5},
    "f": {"type": "float", "value": 2.5},
    "v": {"type": "version", "value": "1.10.0"},
    "sv": {"type": "string", "value": "1.10.0"},
    "b": {"type": "boolean", "value": True},
    "l": {"type": "list", "value": ["a", "b", 3]},
    "m": {"type": "map", "value": {"123": "x", "k": {"z": 1}}},
    "shard1": {"type": "integer", "value": 7},
}

# (key, operator, value, expected) -- usable in both formats.
ROWS: list[tuple[str, str, Any, bool]] = [
    # $eq: numbers compare numerically, nothing else is coerced
    ("s", "$eq", "hello", True),
    ("s", "$eq", "HELLO", False),
    ("n", "$eq", 5, True),
    ("n", "$eq", 5.0, True),
    ("n", "$eq", "5", False),
    ("n", "$eq", True, False),
    ("b", "$eq", True, True),
    ("b", "$eq", 1, False),
    ("v", "$eq", "1.10.0", True),
    ("v", "$eq", "1.10.0+build.7", True),
    ("v", "$eq", "1.10", False),
    ("l", "$eq", ["a", "b", 3], True),
    ("l", "$eq", ["a", "b", 3.0], True),
    ("l", "$eq", ["a", "b"], False),
    ("m", "$eq", {"123": "x", "k": {"z": 1}}, True),
    ("missing", "$eq", 1, False),
    ("shard1", "$eq", 7, True),
    # $ne: the exact negation of $eq (missing -> true)
    ("s", "$ne", "x", True),
    ("s", "$ne", "hello", False),
    ("n", "$ne", "5", True),
    ("missing", "$ne", 1, True),
    # orderings: only number/number, string/string, version/version
    ("n", "$gt", 4, True),
    ("n", "$gt", 5, False),
    ("n", "$gte", 5, True),
    ("n", "$lt", 5.5, True),
    ("n", "$lte", 4, False),
    ("f", "$gt", 2, True),
    ("f", "$lte", 2.5, True),
    ("s", "$gt", 5, False),
    ("s", "$lt", 5, False),
    ("n", "$lt", "a", False),
    ("n", "$gt", "a", False),
    ("s", "$gt", "hell", True),
    ("s", "$lt", "help", True),
    ("v", "$gt", "1.9.0", True),
    ("sv", "$gt", "1.9.0", False),
    ("v", "$lt", "1.10.0-rc.1", False),
    ("v", "$gt", "1.10.0-rc.1", True),
    ("v", "$gte", "1.10.0", True),
    ("v", "$gt", "garbage", False),
    ("v", "$lt", 2, False),
    ("b", "$gt", False, False),
    ("l", "$gt", ["a"], False),
    ("missing", "$gt", 0, False),
    ("missing", "$lte", 0, False),
    ("shard1", "$gte", 7, True),
    # $in / $nin
    ("s", "$in", ["hello", "x"], True),
    ("s", "$in", ["x"], False),
    ("n", "$in", [5.0], True),
    ("n", "$in", ["5"], False),
    ("b", "$in", [1], False),
    ("v", "$in", ["1.10.0"], True),
    ("l", "$in", [["a", "b", 3]], True),
    ("s", "$in", [], False),
    ("missing", "$in", [1], False),
    ("s", "$nin", ["x"], True),
    ("s", "$nin", ["hello"], False),
    ("missing", "$nin", [1], True),
    # $contains / $ncontains: list elements, map keys, nothing else
    ("l", "$contains", "a", True),
    ("l", "$contains", 3, True),
    ("l", "$contains", 3.0, True),
    ("l", "$contains", "z", False),
    ("m", "$contains", "123", True),
    ("m", "$contains", "x", False),
    ("s", "$contains", "h", False),
    ("missing", "$contains", "a", False),
    ("l", "$ncontains", "z", True),
    ("l", "$ncontains", "a", False),
    ("s", "$ncontains", "h", True),
    ("missing", "$ncontains", "a", True),
]

# (path, operator, value, expected) -- nested paths exist only in the path format.
PATH_ROWS: list[tuple[str, str, Any, bool]] = [
    ("/m/123", "$eq", "x", True),
    ("/m/k/z", "$eq", 1, True),
    ("/m/k/z", "$gt", 0, True),
    ("/l/0", "$eq", "a", True),
    ("/l/2", "$eq", 3, True),
    ("/l/9", "$eq", 3, False),
    ("/l/9", "$ne", 3, True),
    ("/l/01", "$eq", "b", False),
    ("/s/0", "$eq", "h", False),
    ("/m/missing/deeper", "$nin", [1], True),
]


def spec_op(key: str, op: str, value: Any) -> dict[str, Any]:
    return {key: {op: value}}


def path_op(key: str, op: str, value: Any) -> dict[str, Any]:
    path = key if key.startswith("/") else f"/{key}"
    return {"path": path, "op": op, "to": {"value": value}}


def stored(metadata: dict[str, Any]) -> dict[str, Any]:
    accepted, errors = validate_metadata(metadata, limits=MetadataLimits())
    assert not errors
    return {key: value for key, (_t, value) in accepted.items()}


def directory_with(target: dict[str, Any]) -> Directory:
    """A directory holding the table's client (``t/row``) among 60 others."""
    directory = Directory()
    rng = random.Random(7)
    accepted, _ = validate_metadata(target, limits=MetadataLimits())
    directory.add(
        app_id="t", client_id="row", conn=0, restricted=False, encoding="json", metadata=accepted
    )
    for i in range(60):
        other = {
            "s": {"type": "string", "value": rng.choice(["hello", "x", "zz", "a"])},
            "n": {"type": "integer", "value": rng.randrange(10)},
            "v": {"type": "version", "value": rng.choice(["1.9.0", "1.10.0", "2.0.0-rc.1"])},
            "l": {"type": "list", "value": rng.sample(["a", "b", "z", 3, 4], 2)},
        }
        if i % 3:
            other["b"] = {"type": "boolean", "value": bool(i % 2)}
        accepted, errors = validate_metadata(other, limits=MetadataLimits())
        assert not errors
        directory.add(
            app_id="t" if i % 4 else "other",
            client_id=f"c{i}",
            conn=i + 1,
            restricted=False,
            encoding="json",
            metadata=accepted,
        )
    return directory


DIRECTORY = directory_with(METADATA)


def check(query_raw: dict[str, Any], expected: bool) -> None:
    query = parse_query(query_raw)
    assert query.predicate(stored(METADATA)) is expected
    indexed = {c.client_id for c in DIRECTORY.match(query)}
    scanned = {c.client_id for c in DIRECTORY.scan(query)}
    assert indexed == scanned
    assert ("row" in indexed) is expected


@pytest.mark.parametrize("fmt", ["spec", "path"])
@pytest.mark.parametrize(("key", "op", "value", "expected"), ROWS)
def test_semantics_table(fmt: str, key: str, op: str, value: Any, expected: bool) -> None:
    build = spec_op if fmt == "spec" else path_op
    check({"application": "t", "ops": [build(key, op, value)]}, expected)


@pytest.mark.parametrize(("path", "op", "value", "expected"), PATH_ROWS)
def test_nested_paths(path: str, op: str, value: Any, expected: bool) -> None:
    check({"application": "t", "ops": [path_op(path, op, value)]}, expected)


LOGICAL_ROWS: list[tuple[str, list[tuple[str, str, Any]], bool]] = [
    ("$and", [("n", "$eq", 5), ("s", "$eq", "hello")], True),
    ("$and", [("n", "$eq", 5), ("s", "$eq", "x")], False),
    # the reference's $or fails when a missing key is evaluated first (§9.2): not here
    ("$or", [("missing", "$eq", 1), ("n", "$eq", 5)], True),
    ("$or", [("n", "$eq", 5), ("missing", "$eq", 1)], True),
    ("$or", [("n", "$eq", 6), ("missing", "$eq", 1)], False),
    ("$nor", [("n", "$eq", 6), ("s", "$eq", "x")], True),
    ("$nor", [("n", "$eq", 5), ("s", "$eq", "x")], False),
    ("$nor", [("missing", "$eq", 1)], True),
    ("$and", [], True),
    ("$or", [], False),
]


@pytest.mark.parametrize("fmt", ["spec", "path"])
@pytest.mark.parametrize(("logical", "items", "expected"), LOGICAL_ROWS)
def test_logical_operators(
    fmt: str, logical: str, items: list[tuple[str, str, Any]], expected: bool
) -> None:
    if fmt == "spec":
        op: dict[str, Any] = {logical: [spec_op(*item) for item in items]}
    else:
        op = {"op": logical, "with": [path_op(*item) for item in items]}
    check({"application": "t", "ops": [op]}, expected)


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"n": {"$gt": 1, "$lt": 9}}], True),
        ([{"n": {"$gt": 1, "$lt": 3}}], False),
        ([{"n": {"$or": [{"$lt": 1}, {"$gt": 4}]}}], True),
        ([{"n": {"$and": [{"$gt": "1"}, {"$lt": 20}]}}], False),  # "1": no cross-type order
        ([{"n": {"$nor": [{"$lt": 1}, {"$gt": 9}]}}], True),
        ([{"n": 5}], True),  # a bare value means $eq
        ([{"s": "hello", "n": 5}], True),  # several keys in one document: AND
        ([{"s": "hello", "n": 6}], False),
        ([{"m": {"123": "x", "k": {"z": 1}}}], True),  # a map without operators: equality
        # both formats mixed in one query
        ([{"s": "hello"}, {"path": "/n", "op": "$gte", "to": {"value": 5}}], True),
    ],
)
def test_spec_format_forms(ops: list[Any], expected: bool) -> None:
    check({"application": "t", "ops": ops}, expected)


@pytest.mark.parametrize(
    ("to", "op", "expected"),
    [
        ({"path": "/n"}, "$eq", True),  # compare with itself
        ({"path": "/shard1"}, "$lt", True),  # 5 < 7 (queer/singyeong#152)
        ({"path": "/shard1"}, "$gt", False),
        ({"path": "/missing"}, "$eq", False),
        ({"path": "/missing"}, "$ne", True),
        ({"path": "/missing", "default": 5}, "$eq", True),
        ({"path": "/l/2"}, "$gt", True),  # 5 > 3, inside a list
    ],
)
def test_compare_with_another_path(to: dict[str, Any], op: str, expected: bool) -> None:
    check({"application": "t", "ops": [{"path": "/n", "op": op, "to": to}]}, expected)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("not a map", "the target must be an object"),
        ({"ops": "x"}, "'ops' must be a list"),
        ({"ops": [{"path": "/a", "op": "$regex", "to": {"value": 1}}]}, "unknown operator"),
        ({"ops": [{"a": {"$regex": 1}}]}, "unknown operator"),
        ({"ops": [{"$where": []}]}, "unknown operator"),
        ({"ops": [{"path": "a", "op": "$eq", "to": {"value": 1}}]}, "a path must be"),
        ({"ops": [{"path": "/a", "op": "$eq", "to": 1}]}, "'to' must be an object"),
        ({"ops": [{"path": "/a", "op": "$eq"}]}, "'to' must be an object"),
        ({"ops": [{"path": "/a", "op": "$in", "to": {"value": 1}}]}, "$in needs a list"),
        ({"ops": [{"op": "$and", "with": 1}]}, "needs a 'with' list"),
        ({"ops": [{"a": {"$eq": 1, "b": 2}}]}, "mixes operators"),
        ({"ops": [5]}, "an op must be an object"),
        ({"ops": [{"$or": [1]}]}, "list of objects"),
        ({"application": 5}, "'application' must be a string"),
        ({"key": [1]}, "'key' must be a string"),
        ({"droppable": 1}, "must be true or false"),
        ({"selector": {"$median": "a"}}, "unknown selector"),
        ({"selector": {"$min": "a", "$max": "b"}}, "'selector' must be one of"),
        ({"selector": {"$min": 5}}, "a selector names a metadata key"),
    ],
)
def test_bad_queries_raise_query_error(raw: Any, reason: str) -> None:
    with pytest.raises(QueryError) as info:
        parse_query(raw)
    assert reason in info.value.reason


def test_query_limits_bound_size_and_depth() -> None:
    wide = {"ops": [{"a": {"$eq": i}} for i in range(300)]}
    with pytest.raises(QueryError, match="more than 256 operators"):
        parse_query(wide)
    deep: dict[str, Any] = {"a": {"$eq": 1}}
    for _ in range(40):
        deep = {"$or": [deep]}
    with pytest.raises(QueryError, match="nested deeper"):
        parse_query({"ops": [deep]}, limits=QueryLimits(max_nodes=1000))


def test_flags_accept_booleans_and_their_strings() -> None:
    query = parse_query({"restricted": "true", "droppable": True, "optional": "false", "key": 12})
    assert (query.restricted, query.droppable, query.optional, query.key) == (
        True,
        True,
        False,
        "12",
    )
    assert parse_query({}).ops == ()
    assert parse_query({"ops": None}).predicate({}) is True


def test_keys_lists_what_the_query_reads() -> None:
    query = parse_query(
        {
            "ops": [{"a": 1}, {"path": "/b/c", "op": "$eq", "to": {"path": "/d"}}],
            "selector": {"$min": "lat"},
        }
    )
    assert query.keys == {"a", "b", "d", "lat"}


def test_resolve_and_equality_helpers() -> None:
    values = stored(METADATA)
    assert resolve(values, ("m", "k", "z")) == 1
    assert resolve(values, ("n", "x")) is MISSING
    assert json_equal(parse_version("1.0.0+a"), "1.0.0+b")
    assert not json_equal(True, 1)
    assert not json_equal(None, 0)
    assert json_equal({"a": [1, 2.0]}, {"a": [1.0, 2]})
