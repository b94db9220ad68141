"""The directory of identified clients and query routing over it.

``Directory.route(query, broadcast=...)`` decides who receives a dispatch:

1. **Eligible clients**: those of ``query.application`` (every application when it is
   absent, §9.1), minus restricted clients unless ``query.restricted`` (§9.4).
2. **Ops**: the eligible clients whose metadata satisfies the ops, found through the
   indexes (``index.py``), never by scanning every client, and confirmed by the
   compiled predicate unless the index plan is exact. Results are cached per query
   text; a change of the client set clears the cache, a metadata change drops the
   results of the queries that read a changed key (so a hit is one lookup).
3. **Selector** (``$min``/``$max``/``$avg`` of a numeric value): one client among the
   matches, across the whole gateway (the reference picks one per cluster node,
   §9.3). Only numeric values take part; ``$avg`` picks the client closest to the
   mean. Clients tied on the value are split by ``key`` (below) or at random.
   A selector that finds no numeric value selects nobody.
4. **optional**: when steps 2-3 leave nobody, the query is rerun as though it had no
   ops and no selector (singyeong.md "optional"); application and restriction still
   apply.
5. **Choice**: BROADCAST takes every client left. SEND takes one: with ``key``, by
   rendezvous (highest-random-weight) hashing of the key against each client's
   identity, so the same key picks the same client while the match set is unchanged,
   and when it changes only the keys of the clients that left (or ~1/n of the keys, to
   a client that joined) move; without ``key``, uniformly at random.

``droppable`` is not decided here: an empty ``targets`` is the caller's to drop or to
answer with ``no_route``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import xxhash

from gossamer.errors import LocalProtocolError
from gossamer.proto.gateway.index import IndexedClients
from gossamer.proto.gateway.metadata import TypedValue, plain_value
from gossamer.proto.gateway.query import Query, resolve
from gossamer.proto.gateway.tracing import client_label

if TYPE_CHECKING:
    from random import Random

__all__ = ["CacheKey", "Client", "Directory", "Route", "rendezvous"]

#: What keys a cached route result: the query's text (the gateway uses its JSON bytes).
CacheKey: TypeAlias = str | bytes


@dataclass(slots=True, kw_only=True, eq=False)
class Client:
    """One identified client (mutable: the gateway updates its metadata types)."""

    handle: int
    app_id: str
    client_id: str
    conn: int
    restricted: bool
    encoding: str
    #: Declared type of each metadata key (reserved keys included).
    types: dict[str, str] = field(default_factory=dict)
    receive_client_updates: bool = False
    receive_metadata_updates: bool = False
    #: Where ``POST /api/v1/proxy`` sends requests for this client (identify ``ip``).
    ip: str | None = None
    #: Queues this client is waiting on (QUEUE_REQUEST).
    queues: set[str] = field(default_factory=set)
    #: The identity hashed by ``key`` routing: stable across reconnects.
    hash_id: bytes = b""
    #: The cluster node the client is connected to; None for this node's own clients
    #: (``conn`` is then a connection of this node, else -1).
    node: str | None = None

    def __post_init__(self) -> None:
        self.hash_id = f"{self.app_id}\x00{self.client_id}".encode()

    @property
    def trace_id(self) -> str:
        """The client as trace events name it: ``app/client`` (commas escaped)."""
        return client_label(self.app_id, self.client_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """Who a query matched (after ops, before the selector) and who receives."""

    matched: tuple[Client, ...]
    targets: tuple[Client, ...]
    #: True when ``optional`` replaced an empty result with every eligible client.
    fallback: bool = False


def rendezvous(clients: Iterable[Client], key: str) -> Client:
    """The client with the highest hash weight for ``key`` (rendezvous hashing).

    The weight of a client depends only on the key and the client's identity, so the
    choice changes only when the chosen client leaves or a heavier one joins.
    """
    seed = xxhash.xxh64_intdigest(key.encode("utf-8", "surrogatepass"))
    return max(clients, key=lambda c: (xxhash.xxh64_intdigest(c.hash_id, seed), c.hash_id))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Directory:
    """Identified clients, their indexed metadata, and routing queries over them."""

    def __init__(self, *, cache_size: int = 1024) -> None:
        self.index = IndexedClients()
        self.clients: dict[int, Client] = {}
        self.by_identity: dict[tuple[str, str], Client] = {}
        self._next_handle = 1
        self._cache_size = cache_size
        # Route-result cache: query text -> (matching clients, the keys the query reads).
        # Invalidated eagerly, so that a hit is one lookup: a membership change clears
        # it, a metadata change drops the results that read a changed key (``_readers``:
        # key -> query texts of the cached results that read it).
        self._cache: dict[CacheKey, tuple[list[Client], frozenset[str]]] = {}
        self._readers: dict[str, set[CacheKey]] = {}

    def __len__(self) -> int:
        return len(self.clients)

    # -- membership and metadata --------------------------------------------

    def add(
        self,
        *,
        app_id: str,
        client_id: str,
        conn: int,
        restricted: bool,
        encoding: str,
        metadata: dict[str, TypedValue],
        **options: Any,
    ) -> Client:
        """Register a client with its initial metadata (reserved keys included)."""
        if (app_id, client_id) in self.by_identity:
            raise LocalProtocolError("client already registered", client_id=client_id)
        handle = self._next_handle
        self._next_handle += 1
        client = Client(
            handle=handle,
            app_id=app_id,
            client_id=client_id,
            conn=conn,
            restricted=restricted,
            encoding=encoding,
            **options,
        )
        self.clients[handle] = client
        self.by_identity[(app_id, client_id)] = client
        client.types = {key: type_name for key, (type_name, _v) in metadata.items()}
        self.index.add(
            handle,
            app=app_id,
            restricted=restricted,
            values={key: value for key, (_t, value) in metadata.items()},
        )
        self._forget_results()
        return client

    def remove(self, client: Client) -> None:
        """Forget a client (its metadata goes with it, as in the reference, §8)."""
        if self.clients.pop(client.handle, None) is None:
            return
        del self.by_identity[(client.app_id, client.client_id)]
        self.index.remove(client.handle)
        self._forget_results()

    def _forget_results(self) -> None:
        if self._cache:
            self._cache.clear()
            self._readers.clear()

    def set_metadata(self, client: Client, changes: dict[str, TypedValue]) -> None:
        """Merge typed values into a client's metadata (top-level keys overwrite)."""
        readers = self._readers
        for key, (type_name, _v) in changes.items():
            client.types[key] = type_name
            if key in readers:
                cache = self._cache
                for text in readers.pop(key):
                    cache.pop(text, None)
        self.index.update(client.handle, {key: value for key, (_t, value) in changes.items()})

    def values(self, client: Client) -> dict[str, Any]:
        """The stored metadata of a client (read-only by convention)."""
        return self.index.values(client.handle)

    def plain_metadata(self, client: Client) -> dict[str, Any]:
        """A client's metadata as JSON values."""
        return {key: plain_value(v) for key, v in self.index.values(client.handle).items()}

    # -- matching ------------------------------------------------------------

    def eligible(self, query: Query) -> Iterable[int]:
        """Handles of the application's clients, restricted ones only when allowed."""
        if query.application is None:
            pool: Iterable[int] = self.index.all
        else:
            pool = self.index.by_app.get(query.application, ())
        if query.restricted or not self.index.restricted:
            return pool
        restricted = self.index.restricted
        return [h for h in pool if h not in restricted]

    def match(self, query: Query, *, cache_key: CacheKey | None = None) -> list[Client]:
        """Clients satisfying the query's application, restriction and ops (indexed)."""
        if cache_key is None:
            clients = self.clients
            return [clients[h] for h in self._match_handles(query)]
        hit = self._cache.get(cache_key)
        if hit is not None:
            return list(hit[0])  # a copy: callers may keep or change their list
        clients = self.clients
        matched = [clients[h] for h in self._match_handles(query)]
        cache = self._cache
        if len(cache) >= self._cache_size:
            oldest = next(iter(cache))
            for key in cache.pop(oldest)[1]:
                texts = self._readers.get(key)
                if texts is not None:
                    texts.discard(oldest)
                    if not texts:
                        del self._readers[key]
        keys = query.keys
        cache[cache_key] = (matched, keys)
        for key in keys:
            self._readers.setdefault(key, set()).add(cache_key)
        return list(matched)

    def _match_handles(self, query: Query) -> list[int]:
        index = self.index
        planned = index.candidates(query.ops)
        if planned is None:
            pool: Iterable[int] = self.eligible(query)
            exact = not query.ops
        else:
            # The candidate set may belong to the index: derive new sets, never mutate.
            candidates, exact = planned
            if query.application is not None:
                members = index.by_app.get(query.application, set())
                if len(members) != len(index):  # else every client is the app's
                    candidates = candidates & members
            if not query.restricted and index.restricted:
                candidates = candidates - index.restricted
            pool = candidates
        if exact:
            return list(pool)
        predicate = query.predicate
        values = index.values
        return [h for h in pool if predicate(values(h))]

    def scan(self, query: Query) -> list[Client]:
        """The same result as ``match`` by testing every client: the naive baseline."""
        predicate = query.predicate
        values = self.index.values
        app, allow_restricted = query.application, query.restricted
        return [
            c
            for c in self.clients.values()
            if (app is None or c.app_id == app)
            and (allow_restricted or not c.restricted)
            and predicate(values(c.handle))
        ]

    def select(
        self, query: Query, matches: list[Client], rng: Random | None
    ) -> list[Client]:
        """Apply the query's selector to ``matches``: one client, or none (ties as
        ``pick`` breaks them)."""
        selector = query.selector
        if selector is None:
            return matches
        path = selector.path
        values = self.index.values
        scored = [
            (v, c) for c in matches if _number(v := resolve(values(c.handle), path))
        ]
        if not scored:
            return []
        if selector.kind == "$min":
            best = min(v for v, _c in scored)
            tied = [c for v, c in scored if v == best]
        elif selector.kind == "$max":
            best = max(v for v, _c in scored)
            tied = [c for v, c in scored if v == best]
        else:
            mean = sum(v for v, _c in scored) / len(scored)
            nearest = min(abs(v - mean) for v, _c in scored)
            tied = [c for v, c in scored if abs(v - mean) == nearest]
        return [self.pick(query, tied, rng)]

    def pick(self, query: Query, clients: list[Client], rng: Random | None) -> Client:
        """One of ``clients``: by ``key`` hashing when the query has a key, else random;
        with ``rng=None``, the first (deterministic: the replicated queues' choice)."""
        if len(clients) == 1 or (rng is None and query.key is None):
            return clients[0]
        if query.key is not None:
            return rendezvous(clients, query.key)
        assert rng is not None
        return clients[rng.randrange(len(clients))]

    def resolve_targets(
        self, query: Query, rng: Random, *, cache_key: CacheKey | None = None
    ) -> tuple[list[Client], list[Client], bool]:
        """``(matched, selected, fallback)``: ops + selector, then ``optional``."""
        matched = self.match(query, cache_key=cache_key)
        selected = self.select(query, matched, rng) if matched else []
        if selected or not query.optional:
            return matched, selected, False
        everyone = [self.clients[h] for h in self.eligible(query)]
        return everyone, everyone, True

    def targets(
        self, query: Query, rng: Random, *, broadcast: bool, cache_key: CacheKey | None = None
    ) -> tuple[list[Client], list[Client], bool]:
        """``(matched, targets, fallback)`` of ``route`` without building a ``Route``."""
        if query.selector is None:
            # The common case without a selector, in fewer steps (a routed SEND's path).
            matched = self.match(query, cache_key=cache_key)
            if matched:
                if broadcast or len(matched) == 1:
                    return matched, matched, False
                return matched, [self.pick(query, matched, rng)], False
            if not query.optional:
                return matched, matched, False
        matched, selected, fallback = self.resolve_targets(query, rng, cache_key=cache_key)
        if broadcast or len(selected) <= 1:
            return matched, selected, fallback
        return matched, [self.pick(query, selected, rng)], fallback

    def route(
        self, query: Query, rng: Random, *, broadcast: bool, cache_key: CacheKey | None = None
    ) -> Route:
        """Who receives a SEND (``broadcast=False``) or BROADCAST routed by ``query``."""
        matched, targets, fallback = self.targets(
            query, rng, broadcast=broadcast, cache_key=cache_key
        )
        return Route(matched=tuple(matched), targets=tuple(targets), fallback=fallback)
