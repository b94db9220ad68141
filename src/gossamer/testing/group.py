"""Real groups on 127.0.0.1 for tests, ours and users': ``cluster(n)`` and ``pair()``.

``cluster(n, open_member)`` is the one mechanism: it gives every member a *seat* (its
index, its name, an address on ``host`` with a port free for TCP and UDP, the
addresses of all the other seats, and one sealed wire with a fresh key shared by the
group), opens the members one seat at a time with ``open_member(seat)``, and closes
every member it opened on the way out, also when opening one of them failed. Because
every address is known before anything opens, members whose configuration names their
peers (discovery, gossip, ISIS) can be opened as easily as link nodes.

``open_member`` returns an awaitable of anything with ``async close()``: a coroutine
(``gossamer.aio.link.open_node(...)``), or an ``Opening`` of the service API
(``docs/api.md``: ``await opening`` gives the started service). Without it the
members are link nodes (:func:`gossamer.aio.link.open_node`) listening on their seats.

``pair()`` is ``cluster(2)`` for the commonest test: two link sockets on two nodes,
the first linked to the second and both sides established, ready to ``send`` and
``receive``. Example::

    from gossamer.testing import cluster, pair

    async with pair() as (a, b):                   # two "pair" sockets, linked
        await a.send(b"ping")
        assert await b.receive(timeout=5) == b"ping"

    async with cluster(3) as nodes:                # three link nodes, one sealed wire
        pull = nodes[0].socket("pull", tag="jobs")
        push = nodes[1].socket("push", tag="feed")
        await push.link(pull.address, "jobs", timeout=5)

Ports are chosen free and released before the members bind them (see
:mod:`gossamer.testing.ports`): another process may take one in between, which a test
on a busy machine reports as a ``NetworkError`` from ``open_member``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, overload

from gossamer._types import Address
from gossamer.aio import link
from gossamer.errors import ConfigError
from gossamer.testing.ports import free_ports
from gossamer.testing.wire import sealed_wire
from gossamer.wire.mode import Wire

__all__ = ["Cluster", "Seat", "cluster", "pair"]


class Closable(Protocol):
    """What a member must offer: ``close()``, awaited once when the group ends."""

    async def close(self) -> None: ...


M = TypeVar("M", bound=Closable)


@dataclass(frozen=True, slots=True)
class Seat:
    """Where member ``index`` of a group sits; ``name`` is ``m<index+1>``."""

    index: int
    name: str
    address: Address
    #: The other seats' addresses, in index order.
    peers: tuple[Address, ...]
    #: The group's wire: one sealed key for every member.
    wire: Wire

    @property
    def host(self) -> str:
        return self.address[0]

    @property
    def port(self) -> int:
        return self.address[1]


class Cluster(Sequence[M]):
    """The open members of a group, in seat order, with their ``seats`` and ``wire``."""

    def __init__(self, seats: tuple[Seat, ...], wire: Wire) -> None:
        self.seats = seats
        self.wire = wire
        self._members: list[M] = []

    @overload
    def __getitem__(self, index: int) -> M: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[M]: ...

    def __getitem__(self, index: int | slice) -> M | Sequence[M]:
        return self._members[index]

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[M]:
        return iter(self._members)


def _seats(n: int, host: str, wire: Wire) -> tuple[Seat, ...]:
    addresses = [(host, port) for port in free_ports(n, host=host)]
    return tuple(
        Seat(
            index=i,
            name=f"m{i + 1}",
            address=address,
            peers=tuple(a for j, a in enumerate(addresses) if j != i),
            wire=wire,
        )
        for i, address in enumerate(addresses)
    )


def _open_link_node(seat: Seat) -> Awaitable[link.Node]:
    return link.open_node(seat.host, seat.port, wire=seat.wire)


@overload
def cluster(
    n: int, *, wire: Wire | None = None, host: str = "127.0.0.1"
) -> contextlib.AbstractAsyncContextManager[Cluster[link.Node]]: ...


@overload
def cluster(
    n: int,
    open_member: Callable[[Seat], Awaitable[M]],
    *,
    wire: Wire | None = None,
    host: str = "127.0.0.1",
) -> contextlib.AbstractAsyncContextManager[Cluster[M]]: ...


def cluster(
    n: int,
    open_member: Callable[[Seat], Awaitable[M]] | None = None,
    *,
    wire: Wire | None = None,
    host: str = "127.0.0.1",
) -> contextlib.AbstractAsyncContextManager[Cluster[M]] | contextlib.AbstractAsyncContextManager[
    Cluster[link.Node]
]:
    """``n`` members opened by ``open_member(seat)`` (default: link nodes) on ``host``.

    An async context manager (see the module docstring); ``wire`` defaults to a sealed
    wire with a fresh key. ``ConfigError`` unless ``n >= 1``.
    """
    if n < 1:
        raise ConfigError("a cluster needs at least one member", n=n)
    if open_member is None:
        return _group(n, _open_link_node, wire, host)
    return _group(n, open_member, wire, host)


@contextlib.asynccontextmanager
async def _group(
    n: int, open_member: Callable[[Seat], Awaitable[M]], wire: Wire | None, host: str
) -> AsyncIterator[Cluster[M]]:
    shared = sealed_wire() if wire is None else wire
    group: Cluster[M] = Cluster(_seats(n, host, shared), shared)
    try:
        for seat in group.seats:
            group._members.append(await open_member(seat))
        yield group
    finally:
        # Last opened, first closed; every member is closed even if one close fails.
        async with contextlib.AsyncExitStack() as closing:
            for member in group._members:
                closing.push_async_callback(member.close)


@contextlib.asynccontextmanager
async def pair(
    kinds: tuple[str, str] = ("pair", "pair"),
    *,
    wire: Wire | None = None,
    transport: str = "tcp",
    timeout: float = 10.0,
) -> AsyncIterator[tuple[link.Socket, link.Socket]]:
    """Two link sockets of ``kinds`` (e.g. ``("push", "pull")``), the first linked to the
    second, both ends established within ``timeout`` seconds; closed on the way out."""

    def open_socket(seat: Seat) -> Awaitable[link.Socket]:
        return link.open_socket(
            kinds[seat.index],
            tag=seat.name,
            host=seat.host,
            port=seat.port,
            transport=transport,
            wire=seat.wire,
        )

    async with cluster(2, open_socket, wire=wire) as (a, b):
        await a.link(b.address, "m2", timeout=timeout)
        await b.wait_links(1, timeout=timeout)
        yield a, b
