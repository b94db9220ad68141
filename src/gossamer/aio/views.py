"""Agreed membership (``gossamer.proto.views``) on a real UDP socket, sealed.

The public API of the views service (``docs/api.md``, ``docs/cluster.md``), over
``gossamer.aio.datagram``: the protocol is entirely in ``gossamer.proto.views``; this
module resolves the addresses, binds the socket, seals the datagrams and turns the
layers' inputs into ``driver.call``::

    from gossamer.proto.views import FlushRequired, Member, ViewsConfig

    me = Member(name="d", incarnation=1, address=("127.0.0.1", 0))
    async with gossamer.open_views(ViewsConfig(me, seeds=(seed,)), wire=wire) as views:
        async for event in views.events():     # ViewInstalled, FlushRequired, ...
            if isinstance(event, FlushRequired):
                views.flush_done(event.view_id)  # after settling the ending view
        views.view                               # the current view (None: not admitted)

There is no goodbye in the protocol: ``close()`` stops the member as a crash does, and the
others remove it once their membership layer suspects it (``suspect``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, Protocol, TypeVar, cast

from gossamer._types import Address
from gossamer.aio._pump import now
from gossamer.aio.addresses import resolve
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.inbox import Inbox
from gossamer.aio.opening import Opening
from gossamer.aio.sealing import rejected_by, seal_core
from gossamer.aio.sockets import udp_socket
from gossamer.errors import ClosedError, ConfigError, NetworkError
from gossamer.proto.core import DatagramCore
from gossamer.proto.views import LAYER, Member, View, ViewsConfig, ViewsCore, ViewsEvent
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.mode import Wire

__all__ = ["MemberService", "ViewsService", "open_views"]


class _MemberCore(DatagramCore, Protocol):
    """What ``MemberService`` asks of its core (``ViewsCore`` and ``GroupCore`` have it)."""

    @property
    def me(self) -> Member: ...
    @property
    def view(self) -> View | None: ...
    @property
    def blocked(self) -> bool: ...
    @property
    def excluded(self) -> bool: ...
    def suspect(self, name: str, now: float, *, incarnation: int | None = None) -> None: ...
    def join_request(self, member: Member, now: float) -> None: ...
    def provide_state(self, view_id: int, state: bytes, now: float) -> None: ...


C = TypeVar("C", bound=_MemberCore)
E = TypeVar("E")
S = TypeVar("S")

#: What the core refuses from the network (``ViewsCore.counters``), beside the envelope's.
_REFUSED = ("malformed", "spoofed", "unknown_sender")


def open_views(
    config: ViewsConfig,
    *,
    wire: Wire,
    tracer: Tracer | None = None,
    rng: random.Random | None = None,
    faults: FaultInjector | None = None,
    sock: socket.socket | None = None,
) -> Opening[ViewsService]:
    """Open this member of the group: ``await`` it for the started service, or use it
    with ``async with`` to close it on the way out (``docs/api.md``).

    ``config.me.address`` is bound (or ``sock``, already bound, is used); its port may be
    0 for a joiner, which then joins with the port it got. Host names in ``me``,
    ``initial`` and ``seeds`` are resolved to IPv4 once, here: the core names members by
    the exact address their datagrams come from. ``wire`` carries the group key; views
    exist only on the sealed wire (there is no original program, hence no plaintext one)
    and there is no default key. ``tracer`` receives the core's ``views`` events and the
    envelope's refusals (default: nowhere); ``rng`` draws the back-off after a lost
    ballot; ``faults`` injects network faults around the socket.

    Raises ``ConfigError`` for a wire that is not sealed and ``NetworkError`` (its cause
    the ``OSError``) when a name does not resolve or the address cannot be bound.
    """
    if not isinstance(wire, Wire) or not wire.sealed:
        raise ConfigError(
            "views run on the sealed wire only: give wire=Wire(key=...) (there is no default key)"
        )
    return Opening(
        lambda: _start(config, wire=wire, tracer=tracer, rng=rng, faults=faults, sock=sock)
    )


class MemberService(Generic[C, E]):
    """What a running group member over one sealed socket is, whatever its core (a
    ``ViewsCore``, or a ``GroupCore`` with ISIS on top): its names and state, its events,
    and its close. Use it from one event loop."""

    def __init__(self, driver: DatagramDriver[Any], core: C, events: Inbox[E]) -> None:
        self.driver = driver
        self.core = core
        self._events = events
        self._closing = False
        self._close_task: asyncio.Task[None] | None = None
        self._watch = asyncio.get_running_loop().create_task(self._watch_driver())

    # -- names --------------------------------------------------------------------------

    @property
    def member(self) -> Member:
        """This member as the group knows it (its address the one bound)."""
        return self.core.me

    @property
    def address(self) -> Address:
        """The ``(host, port)`` this member listens on."""
        return self.driver.local_address

    @property
    def view(self) -> View | None:
        """The current view; ``None`` for a joiner not yet admitted."""
        return self.core.view

    @property
    def blocked(self) -> bool:
        """True while fewer than a majority of the view are unsuspected (``Blocked``)."""
        return self.core.blocked

    @property
    def excluded(self) -> bool:
        """True once this member learned it was removed (``Excluded``): the core ignores
        every input from then on; close it, and open a higher incarnation to rejoin."""
        return self.core.excluded

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called or the driver stopped."""
        return self._closing or self.driver.closed

    # -- inputs -------------------------------------------------------------------------

    def suspect(self, name: str, *, incarnation: int | None = None) -> None:
        """The membership layer believes member ``name`` (that ``incarnation``, or
        whichever is in the view) failed."""
        self._require_open().call(lambda t: self.core.suspect(name, t, incarnation=incarnation))

    def join_request(self, member: Member) -> None:
        """The membership layer saw ``member``: a process that wants in, or a current
        member that is alive after all (a suspicion of it is withdrawn)."""
        self._require_open().call(lambda t: self.core.join_request(member, t))

    def provide_state(self, view_id: int, state: bytes) -> None:
        """The state the joiners of view ``view_id`` start from (after ``StateNeeded``).
        ``LocalProtocolError`` when it exceeds ``gossamer.wire.views.MAX_STATE``."""
        self._require_open().call(lambda t: self.core.provide_state(view_id, state, t))

    # -- outputs ------------------------------------------------------------------------

    def events(self) -> AsyncIterator[E]:
        """Every event in order until the service closes (one stream: a second reader
        shares it)."""
        return self._events

    async def next_event(self, timeout: float | None = None) -> E:
        """The next event. Raises ``TimedOutError`` when none comes within ``timeout``
        seconds, and ``ClosedError`` once closed and the events already made are read."""
        return await self._events.get(timeout)

    # -- close --------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop: nothing more is sent or received (the group sees a crash: the protocol
        has no goodbye). Idempotent; ``events()`` ends after the events already made."""
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._closing = True
        self.driver.close()
        await self._watch

    async def _watch_driver(self) -> None:
        # However the driver stops (close, or a bug in the core), the events end with it.
        failure: BaseException | None = None
        try:
            await self.driver.wait_closed()
        except Exception as exc:  # readers get it as the ClosedError's cause
            failure = exc
        self._closing = True
        self._events.end(failure)

    def _require_open(self) -> DatagramDriver[Any]:
        if self.closed:
            raise ClosedError("the group member is closed")
        return self.driver


class ViewsService(MemberService[ViewsCore, ViewsEvent]):
    """One running member of a views group (from :func:`open_views`). Use it from one
    event loop.

    Inputs, each run on the core at once (``docs/cluster.md`` has what they mean):
    ``suspect``, ``join_request``, ``flush_done``, ``provide_state``. Outputs: the events
    (``FlushRequired``, ``StateNeeded``, ``ViewInstalled``, ``Blocked``, ``Unblocked``,
    ``Excluded``) from ``events()`` or ``next_event()``, in the order the core made them;
    ``view``, ``blocked`` and ``excluded`` say the same at any time.
    """

    @property
    def counters(self) -> Counter[str]:
        """The core's counters (``gossamer.proto.views.COUNTERS``)."""
        return Counter(self.core.counters)

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams refused, by reason: by the envelope (forged, replayed, not sealed
        with the group key: ``malformed``, ``forged``, ...) and by the core (``malformed``
        messages, ``spoofed`` senders, ``unknown_sender``)."""
        refused = rejected_by(self.driver.core)
        refused.update({k: self.core.counters[k] for k in _REFUSED if self.core.counters[k]})
        return refused

    def flush_done(self, view_id: int) -> None:
        """The layer above settled view ``view_id`` for the latest ``FlushRequired``."""
        self._require_open().call(lambda t: self.core.flush_done(view_id, t))


async def _resolved(config: ViewsConfig) -> ViewsConfig:
    """``config`` with literal IPv4 addresses (each name resolved once)."""

    async def member(m: Member) -> Member:
        return dataclasses.replace(m, address=await resolve(m.address, ipv6=False))

    return dataclasses.replace(
        config,
        me=await member(config.me),
        initial=tuple([await member(m) for m in config.initial]),
        seeds=tuple([await resolve(seed, ipv6=False) for seed in config.seeds]),
    )


def _bound(config: ViewsConfig, port: int) -> ViewsConfig:
    """``config`` with this member at the port its socket got (port 0 asked for any)."""
    if config.me.address[1] == port:
        return config
    me = dataclasses.replace(config.me, address=(config.me.address[0], port))
    initial = tuple(me if m.key == me.key else m for m in config.initial)
    return dataclasses.replace(config, me=me, initial=initial)


async def _start(
    config: ViewsConfig,
    *,
    wire: Wire,
    tracer: Tracer | None,
    rng: random.Random | None,
    faults: FaultInjector | None,
    sock: socket.socket | None,
) -> ViewsService:
    def core(config: ViewsConfig, tracer: Tracer) -> ViewsCore:
        return ViewsCore(config, tracer=tracer, rng=rng or random.Random(), now=now())

    return await start_member(
        config, core, ViewsService, wire=wire, tracer=tracer, faults=faults, sock=sock
    )


async def start_member(
    config: ViewsConfig,
    core: Callable[[ViewsConfig, Tracer], C],
    service: Callable[[DatagramDriver[Any], C, Inbox[E]], S],
    *,
    wire: Wire,
    tracer: Tracer | None,
    faults: FaultInjector | None,
    sock: socket.socket | None,
) -> S:
    """Resolve ``config``, bind ``me`` (or take ``sock``), make the ``core`` for the port
    bound, and run it sealed on the socket as ``service`` (``MemberService``)."""
    config = await _resolved(config)
    if sock is None:
        host, port = config.me.address
        try:
            sock = udp_socket(host, port)
        except OSError as exc:
            raise NetworkError(
                f"cannot bind UDP {host}:{port}: {exc.strerror or exc}", host=host, port=port
            ) from exc
    try:
        config = _bound(config, int(sock.getsockname()[1]))
        me = config.me
        if tracer is None:
            tracer = Tracer(NullSink(), run="views", node=me.name)
        made = core(config, tracer)
    except BaseException:
        sock.close()
        raise
    # The inbox exists before the driver: a founder's core has its first ViewInstalled
    # ready, and the driver's first pump hands it over.
    events: Inbox[E] = Inbox("the group member")
    driver = await open_datagram(
        seal_core(made, wire, sender=me.name, tracer=tracer, layer=LAYER),
        sock,
        on_event=lambda event: events.put(cast(E, event)),
        event_queue=False,
        faults=faults,
        tracer=tracer,
    )
    return service(driver, made, events)
