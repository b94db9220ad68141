"""Indexes over client metadata, so that a query does not scan every client.

The reference server compiles each query into an Mnesia match spec and scans the
whole client table on every node (singyeong-as-coded §8, §9.1; users asked for
indexes in queer/singyeong#35 and #36). gossamer keeps, per top-level metadata key:

- an **equality** index: stored scalar (string, number, boolean, null, version) ->
  clients, used by ``$eq`` and ``$in``;
- a **contains** index: scalar element of a ``list`` value, or key of a ``map`` value ->
  clients, used by ``$contains``;
- three **ordered** indexes (numbers, strings, versions: there is no cross-type
  ordering), used by ``$gt``/``$gte``/``$lt``/``$lte`` and by selectors;
- the set of clients that have the key at all;

plus the clients of each application and the restricted clients.
``IndexedClients.candidates`` returns a superset of the matching clients (or None when
nothing narrows the query) and says whether it is *exact*: when every operand was
answered by an index that holds precisely the clients satisfying it (a comparison of a
top-level key with a scalar constant: ``$eq``, ``$in``, ``$contains``, the orderings),
the set is the answer and the caller skips the predicate; otherwise the caller
confirms each candidate with the compiled predicate, so an inexact plan can never make
a query match a client it should not. The property tests check indexed results against
a scan for random metadata, updates and queries, exact plans included.

Planning an AND: each indexable operand's result size is *estimated* first (bucket
sizes, or two bisections in an ordered index), and only the smallest is built. An OR
is indexable when all its operands are (their union). Negations are not indexable.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterable, Iterator
from operator import itemgetter
from typing import Any, Final, TypeAlias

from gossamer.proto.gateway.query import Compare, Logical, Node
from gossamer.proto.gateway.semver import Version, parse_version

__all__ = ["IndexedClients", "SortedKeyList", "scalar_key"]

#: Builds the candidate set an index plan estimated.
_Builder: TypeAlias = Callable[[], set[int]]
#: ``(estimated size, builder, exact)``: ``exact`` when the built set is precisely the
#: clients satisfying the node (see ``IndexedClients.candidates``).
_Plan: TypeAlias = tuple[int, _Builder, bool]

_NEG_INF: Final = float("-inf")
_second: Final = itemgetter(1)
_POS_INF: Final = float("inf")


class SortedKeyList:
    """``(sort key, handle)`` pairs kept sorted in chunks (a small B+-tree-like list).

    Inserting or removing costs O(log n + chunk) instead of the O(n) memmove of one
    flat list, which matters for keys such as ``latency`` that 100,000 clients update
    all the time. Pairs are unique because handles are.
    """

    __slots__ = ("_chunks", "_len", "_maxes")

    _LOAD: Final = 256

    def __init__(self) -> None:
        self._chunks: list[list[tuple[Any, int]]] = []
        self._maxes: list[tuple[Any, int]] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, item: tuple[Any, int]) -> None:
        self._len += 1
        if not self._chunks:
            self._chunks.append([item])
            self._maxes.append(item)
            return
        i = bisect_left(self._maxes, item)
        if i == len(self._chunks):
            i -= 1
        chunk = self._chunks[i]
        insort(chunk, item)
        self._maxes[i] = chunk[-1]
        if len(chunk) > 2 * self._LOAD:
            half = chunk[self._LOAD :]
            del chunk[self._LOAD :]
            self._chunks.insert(i + 1, half)
            self._maxes[i] = chunk[-1]
            self._maxes.insert(i + 1, half[-1])

    def remove(self, item: tuple[Any, int]) -> None:
        i = bisect_left(self._maxes, item)
        chunk = self._chunks[i]
        j = bisect_left(chunk, item)
        if chunk[j] != item:
            raise KeyError(item)
        del chunk[j]
        self._len -= 1
        if chunk:
            self._maxes[i] = chunk[-1]
        else:
            del self._chunks[i]
            del self._maxes[i]

    def _position(self, bound: tuple[Any, float]) -> tuple[int, int]:
        # bisect over the chunk maxima, then inside the chunk: (chunk index, offset).
        i = bisect_left(self._maxes, bound)
        if i == len(self._chunks):
            return i, 0
        return i, bisect_left(self._chunks[i], bound)

    def _bounds(
        self, low: Any, low_inclusive: bool, high: Any, high_inclusive: bool
    ) -> tuple[tuple[int, int], tuple[int, int]]:
        start = (
            (0, 0)
            if low is None
            else self._position((low, _NEG_INF if low_inclusive else _POS_INF))
        )
        stop = (
            (len(self._chunks), 0)
            if high is None
            else self._position((high, _POS_INF if high_inclusive else _NEG_INF))
        )
        return start, stop

    def count(
        self, low: Any = None, low_inclusive: bool = True, high: Any = None,
        high_inclusive: bool = True,
    ) -> int:
        """How many pairs have a key in the range (None = unbounded on that side)."""
        (ci, co), (si, so) = self._bounds(low, low_inclusive, high, high_inclusive)
        if (ci, co) >= (si, so):
            return 0
        if ci == si:
            return so - co
        total = len(self._chunks[ci]) - co + so
        for k in range(ci + 1, si):
            total += len(self._chunks[k])
        return total

    def handles(
        self, low: Any = None, low_inclusive: bool = True, high: Any = None,
        high_inclusive: bool = True,
    ) -> Iterator[int]:
        """The handles whose key is in the range, in key order."""
        (ci, co), (si, so) = self._bounds(low, low_inclusive, high, high_inclusive)
        if (ci, co) >= (si, so):
            return
        chunks = self._chunks
        if ci == si:
            for _key, handle in chunks[ci][co:so]:
                yield handle
            return
        for _key, handle in chunks[ci][co:]:
            yield handle
        for k in range(ci + 1, si):
            for _key, handle in chunks[k]:
                yield handle
        if si < len(chunks):
            for _key, handle in chunks[si][:so]:
                yield handle

    def collect(
        self, into: set[int], low: Any = None, low_inclusive: bool = True, high: Any = None,
        high_inclusive: bool = True,
    ) -> None:
        """Add the handles of ``handles(...)`` to ``into``, a chunk slice at a time (the
        per-handle work stays in C: no generator step per handle)."""
        (ci, co), (si, so) = self._bounds(low, low_inclusive, high, high_inclusive)
        if (ci, co) >= (si, so):
            return
        chunks = self._chunks
        if ci == si:
            into.update(map(_second, chunks[ci][co:so]))
            return
        into.update(map(_second, chunks[ci][co:]))
        for k in range(ci + 1, si):
            into.update(map(_second, chunks[k]))
        if si < len(chunks):
            into.update(map(_second, chunks[si][:so]))

    def items(self, reverse: bool = False) -> Iterator[tuple[Any, int]]:
        """Every pair in key order (or reversed)."""
        chunks = reversed(self._chunks) if reverse else iter(self._chunks)
        for chunk in chunks:
            yield from (reversed(chunk) if reverse else chunk)


def scalar_key(value: Any) -> Hashable | None:
    """The equality-index key of a stored scalar, or None for lists and maps.

    Integers and floats share one key space (``1`` and ``1.0`` hash and compare
    equal, as ``json_equal`` wants); booleans do not join it.
    """
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, Version):
        return ("v", value.key)
    if value is None:
        return ("z", None)
    return None


def _query_keys(value: Any) -> list[Hashable]:
    """The equality-index keys a query value may equal (a string may be a version too)."""
    key = scalar_key(value)
    if key is None:
        return []
    if isinstance(value, str):
        version = parse_version(value)
        if version is not None:
            return [key, ("v", version.key)]
    return [key]


def _order_class(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return "n"
    if isinstance(value, str):
        return "s"
    if isinstance(value, Version):
        return "v"
    return None


#: op -> (the query value is the low bound?, inclusive?)
_RANGES: Final = {
    "$gt": (True, False),
    "$gte": (True, True),
    "$lt": (False, False),
    "$lte": (False, True),
}


class _KeyIndex:
    __slots__ = ("contains", "eq", "ordered", "present")

    def __init__(self) -> None:
        self.eq: dict[Hashable, set[int]] = {}
        self.contains: dict[Hashable, set[int]] = {}
        self.ordered: dict[str, SortedKeyList] = {}
        self.present: set[int] = set()


class IndexedClients:
    """The metadata of every connected client, indexed by top-level key.

    Clients are small integer ``handle``s. ``values(handle)`` is the stored metadata
    (key -> stored value, versions as ``Version``) that compiled predicates read.
    """

    def __init__(self) -> None:
        self._values: dict[int, dict[str, Any]] = {}
        self._keys: dict[str, _KeyIndex] = {}
        self.by_app: dict[str, set[int]] = {}
        self.restricted: set[int] = set()
        self._app_of: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, handle: int) -> bool:
        return handle in self._values

    @property
    def all(self) -> Iterable[int]:
        """Every handle (a live view)."""
        return self._values.keys()

    def values(self, handle: int) -> dict[str, Any]:
        return self._values[handle]

    def add(self, handle: int, *, app: str, restricted: bool, values: dict[str, Any]) -> None:
        """Index a new client with its initial metadata."""
        self._values[handle] = {}
        self._app_of[handle] = app
        self.by_app.setdefault(app, set()).add(handle)
        if restricted:
            self.restricted.add(handle)
        self.update(handle, values)

    def remove(self, handle: int) -> None:
        """Forget a client and every index entry it had."""
        stored = self._values.get(handle)
        if stored is None:
            return
        for key, value in stored.items():
            self._unindex(handle, key, value)
        del self._values[handle]
        app = self._app_of.pop(handle)
        members = self.by_app[app]
        members.discard(handle)
        if not members:
            del self.by_app[app]
        self.restricted.discard(handle)

    def update(self, handle: int, changes: dict[str, Any]) -> None:
        """Set keys of a client's metadata (merge: other keys are kept)."""
        stored = self._values[handle]
        for key, value in changes.items():
            if key in stored:
                old = stored[key]
                # Unchanged scalars skip the index work (common for heartbeats' peers);
                # containers are re-indexed, since Python's == equates [True] and [1].
                if type(old) is type(value) and isinstance(old, str | int | float) and old == value:
                    continue
                self._unindex(handle, key, old)
            stored[key] = value
            self._index(handle, key, value)

    # -- maintenance ---------------------------------------------------------

    def _index(self, handle: int, key: str, value: Any) -> None:
        index = self._keys.get(key)
        if index is None:
            index = self._keys[key] = _KeyIndex()
        index.present.add(handle)
        scalar = scalar_key(value)
        if scalar is not None:
            index.eq.setdefault(scalar, set()).add(handle)
            cls = _order_class(value)
            if cls is not None:
                ordered = index.ordered.get(cls)
                if ordered is None:
                    ordered = index.ordered[cls] = SortedKeyList()
                ordered.add((_sort_key(value), handle))
        for element in _elements(value):
            index.contains.setdefault(element, set()).add(handle)

    def _unindex(self, handle: int, key: str, value: Any) -> None:
        index = self._keys[key]
        index.present.discard(handle)
        scalar = scalar_key(value)
        if scalar is not None:
            _discard(index.eq, scalar, handle)
            cls = _order_class(value)
            if cls is not None:
                index.ordered[cls].remove((_sort_key(value), handle))
        for element in _elements(value):
            _discard(index.contains, element, handle)

    # -- planning ------------------------------------------------------------

    def ordered(self, key: str, cls: str) -> SortedKeyList | None:
        """The ordered index of ``key`` for values of class ``n``, ``s`` or ``v``."""
        index = self._keys.get(key)
        return None if index is None else index.ordered.get(cls)

    def candidates(self, ops: tuple[Node, ...]) -> tuple[set[int], bool] | None:
        """``(clients, exact)`` for ``ops`` (ANDed), or None if no operand narrows.

        ``clients`` is a superset of the clients matching ``ops``; ``exact`` says it is
        precisely them, so the caller may skip confirming each with the predicate. A
        plan is exact when every operand is answered by an index that is exact for it
        (below) and every operand was intersected. The set may be one of the index's
        own: callers must not modify it.

        Exact indexes, for a comparison of a top-level key with a constant: the
        equality buckets for ``$eq``/``$in`` with scalar values (``scalar_key`` keeps
        the query module's equality: numbers by value, booleans apart, a string also
        under its version key), the contains buckets for ``$contains`` of a scalar
        (list elements are plain JSON, map keys strings, as ``_contains`` reads them)
        and the ordered indexes for the orderings (one per comparable class, as
        ``order_pair``). Deeper paths (only "has the key") and list or map operands
        are not exact.
        """
        if not ops:
            return None
        plan = self._plan(Logical(op="$and", items=ops))
        return None if plan is None else (plan[1](), plan[2])

    def _plan(self, node: Node) -> _Plan | None:
        """``(estimated size, builder, exact)`` for ``node``, or None when not indexable."""
        if isinstance(node, Compare):
            return self._plan_compare(node)
        if node.op == "$and":
            plans = []
            exact = True
            for item in node.items:
                plan = self._plan(item)
                if plan is None:
                    exact = False
                    continue
                if plan[0] == 0:
                    return 0, set, True  # one operand matches nobody: neither does the AND
                plans.append(plan)
            if not plans:
                return None
            plans.sort(key=lambda p: p[0])
            if len(plans) == 1:
                n, build, alone = plans[0]
                return n, build, exact and alone
            smallest = plans[0][0]
            # Intersecting costs one hash lookup per element of the smaller set, much
            # less than running the predicate on a candidate: narrow by every operand
            # whose set is not much bigger than the best one (building a big range
            # result would cost more than it saves).
            used = [p for p in plans if p[0] <= 8 * smallest]
            builders = [b for _n, b, _e in used]
            exact = exact and len(used) == len(plans) and all(e for _n, _b, e in used)

            def intersect() -> set[int]:
                result = builders[0]()
                for build in builders[1:]:
                    if not result:
                        break
                    result = result & build()
                return result

            return smallest, intersect, exact
        if node.op == "$or":
            plans = []
            for item in node.items:
                plan = self._plan(item)
                if plan is None:
                    return None
                plans.append(plan)
            builders = [b for _n, b, _e in plans]
            return (
                sum(n for n, _b, _e in plans),
                lambda: set().union(*(b() for b in builders)),
                all(e for _n, _b, e in plans),
            )
        return None  # $nor

    def _plan_compare(self, node: Compare) -> _Plan | None:
        if node.to_path is not None or node.op in ("$ne", "$nin", "$ncontains"):
            return None
        index = self._keys.get(node.path[0])
        if index is None:
            return 0, set, True  # nobody has the key: no positive operator holds
        if len(node.path) > 1:
            # Deeper paths are not indexed; the client must at least have the key.
            present = index.present
            return len(present), lambda: present, False
        op, value = node.op, node.value
        if op == "$eq":
            return self._buckets(index.eq, _query_keys(value), index.present)
        if op == "$in":
            if any(scalar_key(item) is None for item in value):
                # A list or map element can only equal a list or map value.
                present = index.present
                return len(present), lambda: present, False
            keys = [k for item in value for k in _query_keys(item)]
            return self._buckets(index.eq, keys, None)
        if op == "$contains":
            element = scalar_key(value)
            if element is None:
                present = index.present
                return len(present), lambda: present, False
            return self._buckets(index.contains, [element], None)
        return self._plan_range(index, op, value)

    @staticmethod
    def _buckets(
        table: dict[Hashable, set[int]], keys: list[Hashable], fallback: set[int] | None
    ) -> _Plan:
        if not keys:
            if fallback is None:
                return 0, set, True
            # An $eq against a list or map: only clients having the key can match.
            return len(fallback), lambda: fallback, False
        found = [table[k] for k in dict.fromkeys(keys) if k in table]
        if not found:
            return 0, set, True
        if len(found) == 1:
            only = found[0]
            return len(only), lambda: only, True
        return sum(len(s) for s in found), lambda: set().union(*found), True

    def _plan_range(self, index: _KeyIndex, op: str, value: Any) -> _Plan:
        is_low, inclusive = _RANGES[op]
        ranges: list[tuple[SortedKeyList, Any]] = []
        cls = _order_class(value)
        if cls is not None and cls in index.ordered:
            ranges.append((index.ordered[cls], _sort_key(value)))
        if isinstance(value, str) and "v" in index.ordered:
            version = parse_version(value)
            if version is not None:
                ranges.append((index.ordered["v"], version.key))
        total = 0
        spans: list[tuple[SortedKeyList, tuple[Any, bool, Any, bool]]] = []
        for ordered, key in ranges:
            span = (key, inclusive, None, True) if is_low else (None, True, key, inclusive)
            total += ordered.count(*span)
            spans.append((ordered, span))

        def build() -> set[int]:
            result: set[int] = set()
            for ordered, span in spans:
                ordered.collect(result, *span)
            return result

        return total, build, True


def _sort_key(value: Any) -> Any:
    return value.key if isinstance(value, Version) else value


def _elements(value: Any) -> Iterator[Hashable]:
    if isinstance(value, list):
        seen: set[Hashable] = set()
        for element in value:
            key = scalar_key(element)
            if key is not None and key not in seen:
                seen.add(key)
                yield key
    elif isinstance(value, dict):
        for name in value:
            yield ("s", name)


def _discard(table: dict[Hashable, set[int]], key: Hashable, handle: int) -> None:
    members = table.get(key)
    if members is not None:
        members.discard(handle)
        if not members:
            del table[key]
