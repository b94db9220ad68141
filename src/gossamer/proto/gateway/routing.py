"""The directory of identified clients and query routing over it.

``Directory.route(query, broadcast=...)`` decides who receives a dispatch:

1. **Eligible clients**: those of ``query.application`` (every application when it is
   absent, §9.1), minus restricted clients unless ``query.restricted`` (§9.4).
2. **Ops**: the eligible clients whose metadata satisfies the ops, found through the
   indexes (``index.py``), never by scanning every client, and confirmed by the
   compiled predicate. Results are cached per query text and reused while neither
   the set of clients nor any metadata key the query reads has changed.
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
from typing import TYPE_CHECKING, Any

import xxhash

from gossamer.errors import LocalProtocolError
from gossamer.proto.gateway.index import IndexedClients
from gossamer.proto.gateway.metadata import TypedValue, plain_value
from gossamer.proto.gateway.query import Query, resolve

if TYPE_CHECKING:
    from random import Random

__all__ = ["Client", "Directory", "Route", "rendezvous"]


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

    def __post_init__(self) -> None:
        self.hash_id = f"{self.app_id}\x00{self.client_id}".encode()

    @property
    def trace_id(self) -> str:
        """The client as trace events name it: ``app/client`` (commas escaped)."""
        return f"{self.app_id}/{self.client_id}".replace("%", "%25").replace(",", "%2C")


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
        # Route-result cache: query text -> (generation stamp, matching handles, the
        # keys the query reads); valid while the stamp is unchanged.
        self._cache: dict[str, tuple[tuple[int, ...], list[int], tuple[str, ...]]] = {}
        self._members_gen = 0
        self._key_gen: dict[str, int] = {}

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
        self._members_gen += 1
        return client

    def remove(self, client: Client) -> None:
        """Forget a client (its metadata goes with it, as in the reference, §8)."""
        if self.clients.pop(client.handle, None) is None:
            return
        del self.by_identity[(client.app_id, client.client_id)]
        self.index.remove(client.handle)
        self._members_gen += 1

    def set_metadata(self, client: Client, changes: dict[str, TypedValue]) -> None:
        """Merge typed values into a client's metadata (top-level keys overwrite)."""
        for key, (type_name, _v) in changes.items():
            client.types[key] = type_name
            self._key_gen[key] = self._key_gen.get(key, 0) + 1
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

    def match(self, query: Query, *, cache_key: str | None = None) -> list[Client]:
        """Clients satisfying the query's application, restriction and ops (indexed)."""
        clients = self.clients
        if cache_key is None:
            return [clients[h] for h in self._match_handles(query)]
        hit = self._cache.get(cache_key)
        if hit is not None:
            stamp, handles, keys = hit
            key_gen = self._key_gen
            if stamp == (self._members_gen, *[key_gen.get(k, 0) for k in keys]):
                return [clients[h] for h in handles]
        keys = tuple(sorted(query.keys))
        stamp = (self._members_gen, *[self._key_gen.get(k, 0) for k in keys])
        handles = self._match_handles(query)
        if hit is None and len(self._cache) >= self._cache_size:
            del self._cache[next(iter(self._cache))]
        self._cache[cache_key] = (stamp, handles, keys)
        return [clients[h] for h in handles]

    def _match_handles(self, query: Query) -> list[int]:
        index = self.index
        candidates = index.candidates(query.ops)
        if candidates is None:
            pool: Iterable[int] = self.eligible(query)
        else:
            # The candidate set may belong to the index: derive new sets, never mutate.
            if query.application is not None:
                candidates = candidates & index.by_app.get(query.application, set())
            if not query.restricted and index.restricted:
                candidates = candidates - index.restricted
            pool = candidates
        if not query.ops:
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

    def select(self, query: Query, matches: list[Client], rng: Random) -> list[Client]:
        """Apply the query's selector to ``matches``: one client, or none."""
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

    def pick(self, query: Query, clients: list[Client], rng: Random) -> Client:
        """One of ``clients``: by ``key`` hashing when the query has a key, else random."""
        if len(clients) == 1:
            return clients[0]
        if query.key is not None:
            return rendezvous(clients, query.key)
        return clients[rng.randrange(len(clients))]

    def resolve_targets(
        self, query: Query, rng: Random, *, cache_key: str | None = None
    ) -> tuple[list[Client], list[Client], bool]:
        """``(matched, selected, fallback)``: ops + selector, then ``optional``."""
        matched = self.match(query, cache_key=cache_key)
        selected = self.select(query, matched, rng) if matched else []
        if selected or not query.optional:
            return matched, selected, False
        everyone = [self.clients[h] for h in self.eligible(query)]
        return everyone, everyone, True

    def targets(
        self, query: Query, rng: Random, *, broadcast: bool, cache_key: str | None = None
    ) -> tuple[list[Client], list[Client], bool]:
        """``(matched, targets, fallback)`` of ``route`` without building a ``Route``."""
        matched, selected, fallback = self.resolve_targets(query, rng, cache_key=cache_key)
        if broadcast or len(selected) <= 1:
            return matched, selected, fallback
        return matched, [self.pick(query, selected, rng)], fallback

    def route(
        self, query: Query, rng: Random, *, broadcast: bool, cache_key: str | None = None
    ) -> Route:
        """Who receives a SEND (``broadcast=False``) or BROADCAST routed by ``query``."""
        matched, targets, fallback = self.targets(
            query, rng, broadcast=broadcast, cache_key=cache_key
        )
        return Route(matched=tuple(matched), targets=tuple(targets), fallback=fallback)
