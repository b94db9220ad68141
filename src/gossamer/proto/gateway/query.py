"""Routing queries: parsing both formats, defined semantics, compiled predicates.

A query (singyeong.md "node queries"; singyeong-as-coded §9) is a map::

    {"application": "api", "restricted": false, "key": "user-1", "droppable": false,
     "optional": false, "ops": [...], "selector": {"$min": "latency"}}

``ops`` are ANDed. Each op is written in either of two formats, and both may be mixed:

- the **path format** real clients send (§9.1): ``{"path": "/lat", "op": "$lt",
  "to": {"value": 50}}``; ``to`` may instead be ``{"path": "/other", "default": d}``
  to compare against another value of the same client (queer/singyeong#152); logical
  ops are ``{"op": "$and" | "$or" | "$nor", "with": [op, ...]}``;
- the **spec format** (``shared/specs/singyeong.md``): ``{"lat": {"$lt": 50}}``, several
  operators on one key ANDed (``{"lat": {"$gt": 1, "$lt": 9}}``), logical ops over one key
  (``{"lat": {"$or": [{"$lt": 1}, {"$gt": 9}]}}``) or over whole documents
  (``{"$or": [{"a": {"$eq": 1}}, {"b": {"$eq": 2}}]}``), and a bare value meaning
  ``$eq``. A spec-format key is one top-level metadata key, taken literally.

An item is in the path format when it has an ``"op"`` whose value is a string.

Semantics, defined where the reference crashes or is undefined (§9.2, §18.1):

- **Paths**: ``/a/b/0`` walks maps by key and lists by index; a segment is a list index
  only when the value at that point is a list and the segment is a plain decimal
  number, so keys with digits (``/shard1``, ``/guilds/123``) work. ``~1`` and ``~0``
  unescape to ``/`` and ``~`` (RFC 6901).
- **Missing values**: the positive operators (``$eq``, the orderings, ``$in``,
  ``$contains``) are false on a missing value; the negations ``$ne``, ``$nin``,
  ``$ncontains`` and ``$nor`` are exactly their logical negations, hence true (the
  MongoDB choice). Evaluation never raises, so operand order never matters.
- **Equality**: JSON equality without cross-type coercion, except that integers and
  floats compare numerically (``5 == 5.0``); booleans are not numbers; lists and maps
  compare element by element. A ``version`` value equals a string that parses to the
  same SemVer precedence.
- **Ordering** (``$gt``, ``$gte``, ``$lt``, ``$lte``) holds only between two numbers, two
  strings (code point order, which is UTF-8 byte order) or a version and a version (or a
  string that parses as one, compared by precedence). Any other pair (a string and a
  number, booleans, lists, maps, null) is not ordered: the comparison is false.
- ``$in`` / ``$nin``: the value equals (does not equal) some element of the ``to`` list
  (which must be a list). ``$contains`` / ``$ncontains``: a list value has (has not) an
  element equal to ``to``; a map value has (has not) ``to`` as a key; any other value
  contains nothing.

Flags: ``restricted``, ``droppable`` and ``optional`` accept ``true``/``false`` and the
strings ``"true"``/``"false"`` (what the reference accepts); ``null`` or absent means
false; anything else is a bad query. ``key`` is a string (or a number, used as its JSON
text). A bad query raises ``QueryError`` with the reason; the gateway answers op 3 and
keeps the socket (§18.2).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from gossamer.errors import RemoteProtocolError
from gossamer.params import Checked, PositiveCount
from gossamer.proto.gateway.semver import Version, parse_version

__all__ = [
    "COMPARISONS",
    "LOGICALS",
    "MISSING",
    "SELECTORS",
    "Compare",
    "Logical",
    "Node",
    "Predicate",
    "Query",
    "QueryError",
    "QueryLimits",
    "Selector",
    "json_equal",
    "order_pair",
    "parse_query",
    "resolve",
]

COMPARISONS: Final = frozenset(
    {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$contains", "$ncontains"}
)
LOGICALS: Final = frozenset({"$and", "$or", "$nor"})
SELECTORS: Final = frozenset({"$min", "$max", "$avg"})


class _Missing:
    """The value at a path that leads nowhere."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()

#: A compiled query: true when a client's metadata (key -> stored value) matches.
Predicate: TypeAlias = Callable[[Mapping[str, Any]], bool]


class QueryError(RemoteProtocolError):
    """A routing query the gateway cannot run; ``reason`` says why, ``where`` where."""

    def __init__(self, reason: str, *, where: str = "target") -> None:
        super().__init__(reason, where=where)
        self.where = where


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryLimits(Checked):
    """Bounds on one query, so that a query's cost is bounded before it runs."""

    max_nodes: PositiveCount = 256
    max_depth: PositiveCount = 16
    max_path_segments: PositiveCount = 32
    max_in_list: PositiveCount = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Compare:
    """``path op to``: ``value`` is the ``to`` value, unless ``to_path`` names another value."""

    path: tuple[str, ...]
    op: str
    value: Any = None
    to_path: tuple[str, ...] | None = None
    #: Used when ``to_path`` leads nowhere; MISSING when the query gave no default.
    default: Any = MISSING


@dataclass(frozen=True, slots=True, kw_only=True)
class Logical:
    """``$and`` / ``$or`` / ``$nor`` over ``items``."""

    op: str
    items: tuple[Node, ...]


Node: TypeAlias = Compare | Logical


@dataclass(frozen=True, slots=True, kw_only=True)
class Selector:
    """Pick one client by the value at ``path``: ``$min``, ``$max`` or ``$avg``."""

    kind: str
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    """A parsed, compiled routing query. ``predicate`` evaluates ``ops`` (ANDed)."""

    application: str | None = None
    restricted: bool = False
    key: str | None = None
    droppable: bool = False
    optional: bool = False
    ops: tuple[Node, ...] = ()
    selector: Selector | None = None
    #: Top-level metadata keys the ops and the selector read (for result caching).
    keys: frozenset[str] = frozenset()
    predicate: Predicate = field(default=lambda _values: True, compare=False, repr=False)


# ----------------------------------------------------------------------------- values


def resolve(values: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The value at ``path`` in a client's metadata, or MISSING."""
    value: Any = values.get(path[0], MISSING)
    for segment in path[1:]:
        if isinstance(value, dict):
            value = value.get(segment, MISSING)
        elif isinstance(value, list):
            index = _index(segment)
            value = value[index] if index is not None and index < len(value) else MISSING
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


def _index(segment: str) -> int | None:
    # A list index is a plain decimal number: no sign, no leading zero (RFC 6901 §4).
    if segment.isascii() and segment.isdigit() and (segment == "0" or segment[0] != "0"):
        return int(segment)
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(a: Any, b: Any) -> bool:
    """Equality as the module docstring defines it (no cross-type coercion but numbers)."""
    if isinstance(a, Version) or isinstance(b, Version):
        left = a if isinstance(a, Version) else parse_version(a) if isinstance(a, str) else None
        right = b if isinstance(b, Version) else parse_version(b) if isinstance(b, str) else None
        return left is not None and right is not None and left == right
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if _is_number(a):
        return _is_number(b) and a == b
    if isinstance(a, str):
        return isinstance(b, str) and a == b
    if a is None:
        return b is None
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(json_equal(item, b[key]) for key, item in a.items())
        )
    return False


def order_pair(a: Any, b: Any) -> tuple[Any, Any] | None:
    """``(ka, kb)`` that order ``a`` against ``b``, or None when the two are not ordered."""
    if isinstance(a, Version) or isinstance(b, Version):
        left = a if isinstance(a, Version) else parse_version(a) if isinstance(a, str) else None
        right = b if isinstance(b, Version) else parse_version(b) if isinstance(b, str) else None
        if left is None or right is None:
            return None
        return left.key, right.key
    if _is_number(a) and _is_number(b):
        return a, b
    if isinstance(a, str) and isinstance(b, str):
        return a, b
    return None


def _contains(container: Any, item: Any) -> bool:
    if isinstance(container, list):
        return any(json_equal(element, item) for element in container)
    if isinstance(container, dict):
        return isinstance(item, str) and item in container
    return False


def _ordered(op: str) -> Callable[[Any, Any], bool]:
    def check(a: Any, b: Any) -> bool:
        pair = order_pair(a, b)
        if pair is None:
            return False
        x, y = pair
        if op == "$gt":
            return bool(x > y)
        if op == "$gte":
            return bool(x >= y)
        if op == "$lt":
            return bool(x < y)
        return bool(x <= y)

    return check


def _positive(op: str) -> Callable[[Any, Any], bool]:
    """The check of a positive operator on two present values."""
    if op in ("$eq", "$ne"):
        return json_equal
    if op in ("$in", "$nin"):
        return lambda a, b: isinstance(b, list) and any(json_equal(a, x) for x in b)
    if op in ("$contains", "$ncontains"):
        return _contains
    return _ordered(op)


_NEGATIONS: Final = frozenset({"$ne", "$nin", "$ncontains"})


# ------------------------------------------------------------------------- compiling


def _fast_in(values: list[Any]) -> Callable[[Any], bool]:
    """``$in`` against a fixed list: set lookups for strings and numbers."""
    strings = frozenset(x for x in values if isinstance(x, str))
    numbers = frozenset(x for x in values if _is_number(x))
    versions = frozenset(v for v in (parse_version(x) for x in strings) if v is not None)
    others = [x for x in values if not isinstance(x, str) and not _is_number(x)]

    def member(value: Any) -> bool:
        if isinstance(value, str):
            return value in strings
        if _is_number(value):
            return value in numbers
        if isinstance(value, Version):
            return value in versions
        return any(json_equal(value, x) for x in others)

    return member


def _compile_compare(node: Compare) -> Predicate:
    path, op = node.path, node.op
    negated = op in _NEGATIONS
    if node.to_path is not None:
        to_path, default = node.to_path, node.default
        check = _positive(op)

        def dynamic(values: Mapping[str, Any]) -> bool:
            left = resolve(values, path)
            right = resolve(values, to_path)
            if right is MISSING:
                right = default
            if left is MISSING or right is MISSING:
                return negated
            return check(left, right) != negated

        return dynamic
    key = path[0]
    simple = len(path) == 1
    value = node.value
    if op in ("$in", "$nin"):
        member = _fast_in(value)
        if simple:
            return lambda values: (
                negated if (v := values.get(key, MISSING)) is MISSING else member(v) != negated
            )
        return lambda values: (
            negated if (v := resolve(values, path)) is MISSING else member(v) != negated
        )
    test = _static(op, value)
    if simple:
        return lambda values: (
            negated if (v := values.get(key, MISSING)) is MISSING else test(v) != negated
        )
    return lambda values: (
        negated if (v := resolve(values, path)) is MISSING else test(v) != negated
    )


_CMP: Final = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def _static(op: str, value: Any) -> Callable[[Any], bool]:
    """The check of a positive operator against a fixed query value, specialised once.

    Same results as ``_positive(op)(v, value)``; the query value's class (and its
    parse as a version) is decided here instead of for every client.
    """
    version = parse_version(value) if isinstance(value, str) else None
    vkey = None if version is None else version.key
    if op in ("$eq", "$ne"):
        if isinstance(value, str):

            def eq_string(v: Any) -> bool:
                if type(v) is str:
                    return bool(v == value)
                return isinstance(v, Version) and v.key == vkey

            return eq_string
        if _is_number(value):
            return lambda v: _is_number(v) and v == value
        return lambda v: json_equal(v, value)
    if op in _CMP:
        cmp = _CMP[op]
        if _is_number(value):
            return lambda v: _is_number(v) and bool(cmp(v, value))
        if isinstance(value, str):

            def ordered_string(v: Any) -> bool:
                if type(v) is str:
                    return bool(cmp(v, value))
                if isinstance(v, Version):
                    return vkey is not None and bool(cmp(v.key, vkey))
                return False

            return ordered_string
        return lambda _v: False  # booleans, lists, maps and null are not ordered
    # $contains / $ncontains
    if isinstance(value, str):
        # A string equals only a string: plain membership is json_equal membership.
        return lambda v: isinstance(v, list | dict) and value in v
    return lambda v: _contains(v, value)


def _compile(node: Node) -> Predicate:
    if isinstance(node, Compare):
        return _compile_compare(node)
    parts = tuple(_compile(item) for item in node.items)
    if node.op == "$and":
        if len(parts) == 1:
            return parts[0]
        return lambda values: all(part(values) for part in parts)
    if node.op == "$or":
        return lambda values: any(part(values) for part in parts)
    return lambda values: not any(part(values) for part in parts)


# --------------------------------------------------------------------------- parsing


class _Parser:
    def __init__(self, limits: QueryLimits) -> None:
        self.limits = limits
        self.nodes = 0
        self.keys: set[str] = set()

    def _count(self, where: str) -> None:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise QueryError(f"query has more than {self.limits.max_nodes} operators", where=where)

    def path(self, raw: object, where: str) -> tuple[str, ...]:
        if not isinstance(raw, str) or not raw.startswith("/"):
            raise QueryError("a path must be a string starting with '/'", where=where)
        segments = raw[1:].split("/")
        if len(segments) > self.limits.max_path_segments:
            raise QueryError(
                f"a path has more than {self.limits.max_path_segments} segments", where=where
            )
        parsed = tuple(s.replace("~1", "/").replace("~0", "~") for s in segments)
        self.keys.add(parsed[0])
        return parsed

    def compare(self, path: tuple[str, ...], op: str, value: Any, where: str) -> Compare:
        self._count(where)
        if op in ("$in", "$nin"):
            if not isinstance(value, list):
                raise QueryError(f"{op} needs a list", where=where)
            if len(value) > self.limits.max_in_list:
                raise QueryError(f"{op} list longer than {self.limits.max_in_list}", where=where)
        return Compare(path=path, op=op, value=value)

    # -- path format ---------------------------------------------------------

    def item(self, raw: object, where: str, depth: int) -> Node:
        if depth > self.limits.max_depth:
            raise QueryError(f"ops nested deeper than {self.limits.max_depth}", where=where)
        if not isinstance(raw, dict):
            raise QueryError("an op must be an object", where=where)
        op = raw.get("op")
        if not isinstance(op, str):
            return _all(self.document(raw, where, depth))
        if op in LOGICALS:
            items = raw.get("with")
            if not isinstance(items, list):
                raise QueryError(f"{op} needs a 'with' list of ops", where=where)
            self._count(where)
            return Logical(
                op=op,
                items=tuple(
                    self.item(x, f"{where}.with[{i}]", depth + 1) for i, x in enumerate(items)
                ),
            )
        if op not in COMPARISONS:
            raise QueryError(f"unknown operator {op!r}", where=where)
        path = self.path(raw.get("path"), f"{where}.path")
        to = raw.get("to", MISSING)
        if not isinstance(to, dict):
            raise QueryError("'to' must be an object with 'value' or 'path'", where=where)
        if "path" in to and "value" not in to:
            self._count(where)
            to_path = self.path(to["path"], f"{where}.to.path")
            if op in ("$in", "$nin") and "default" in to and not isinstance(to["default"], list):
                raise QueryError(f"{op} needs a list", where=where)
            return Compare(
                path=path, op=op, to_path=to_path, default=to.get("default", MISSING)
            )
        if "value" not in to:
            raise QueryError("'to' must be an object with 'value' or 'path'", where=where)
        return self.compare(path, op, to["value"], where)

    # -- spec format ---------------------------------------------------------

    def logical(
        self, op: str, arg: Any, where: str, build: Callable[[Any, str], Node]
    ) -> Logical:
        """``$and``/``$or``/``$nor`` over a list: each element built by ``build(element,
        where)``; counted towards the query's size."""
        if not isinstance(arg, list):
            raise QueryError(f"{op} needs a list", where=where)
        self._count(where)
        return Logical(op=op, items=tuple(build(sub, f"{where}[{i}]") for i, sub in enumerate(arg)))

    def document(self, raw: dict[str, Any], where: str, depth: int) -> list[Node]:
        nodes: list[Node] = []
        for key, value in raw.items():
            here = f"{where}.{key}"
            if key in LOGICALS:

                def sub_document(sub: Any, at: str, key: str = key) -> Node:
                    if not isinstance(sub, dict):
                        raise QueryError(f"{key} needs a list of objects", where=at)
                    return self.item(sub, at, depth + 1)

                nodes.append(self.logical(key, value, here, sub_document))
            elif key.startswith("$"):
                raise QueryError(f"unknown operator {key!r}", where=here)
            else:
                self.keys.add(key)
                nodes.extend(self.field((key,), value, here, depth))
        return nodes

    def field(self, path: tuple[str, ...], value: Any, where: str, depth: int) -> list[Node]:
        if depth > self.limits.max_depth:
            raise QueryError(f"ops nested deeper than {self.limits.max_depth}", where=where)
        if not (isinstance(value, dict) and value and any(k.startswith("$") for k in value)):
            # A bare value (including a map without operators) means equality.
            return [self.compare(path, "$eq", value, where)]
        if not all(k.startswith("$") for k in value):
            raise QueryError("an operator object mixes operators and plain keys", where=where)
        nodes: list[Node] = []
        for op, arg in value.items():
            here = f"{where}.{op}"
            if op in LOGICALS:
                nodes.append(
                    self.logical(
                        op, arg, here, lambda sub, at: _all(self.field(path, sub, at, depth + 1))
                    )
                )
            elif op in COMPARISONS:
                nodes.append(self.compare(path, op, arg, here))
            else:
                raise QueryError(f"unknown operator {op!r}", where=here)
        return nodes


def _all(nodes: list[Node]) -> Node:
    return nodes[0] if len(nodes) == 1 else Logical(op="$and", items=tuple(nodes))


def _flag(raw: Mapping[str, Any], name: str) -> bool:
    value = raw.get(name)
    if value is None or value is False or value == "false":
        return False
    if value is True or value == "true":
        return True
    raise QueryError(f"{name!r} must be true or false", where=f"target.{name}")


def parse_query(raw: object, *, limits: QueryLimits | None = None) -> Query:
    """Parse and compile a routing query; raise ``QueryError`` when it is unusable."""
    if not isinstance(raw, dict):
        raise QueryError("the target must be an object")
    parser = _Parser(limits or QueryLimits())
    application = raw.get("application")
    if application is not None and not isinstance(application, str):
        raise QueryError("'application' must be a string", where="target.application")
    key = raw.get("key")
    if key is not None:
        if isinstance(key, bool) or not isinstance(key, str | int | float):
            raise QueryError("'key' must be a string", where="target.key")
        key = key if isinstance(key, str) else repr(key)
    ops_raw = raw.get("ops")
    if ops_raw is None:
        ops_raw = []
    if not isinstance(ops_raw, list):
        raise QueryError("'ops' must be a list", where="target.ops")
    ops = tuple(parser.item(item, f"ops[{i}]", 1) for i, item in enumerate(ops_raw))
    selector = _selector(raw.get("selector"), parser)
    predicate = _compile(Logical(op="$and", items=ops)) if ops else Query().predicate
    return Query(
        application=application,
        restricted=_flag(raw, "restricted"),
        key=key,
        droppable=_flag(raw, "droppable"),
        optional=_flag(raw, "optional"),
        ops=ops,
        selector=selector,
        keys=frozenset(parser.keys),
        predicate=predicate,
    )


def _selector(raw: object, parser: _Parser) -> Selector | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or len(raw) != 1:
        raise QueryError(
            "'selector' must be one of {'$min': key}, {'$max': key}, {'$avg': key}",
            where="target.selector",
        )
    ((kind, key),) = raw.items()
    if kind not in SELECTORS:
        raise QueryError(f"unknown selector {kind!r}", where="target.selector")
    if not isinstance(key, str) or not key:
        raise QueryError("a selector names a metadata key", where="target.selector")
    path = parser.path(key, "target.selector") if key.startswith("/") else (key,)
    parser.keys.add(path[0])
    return Selector(kind=kind, path=path)
