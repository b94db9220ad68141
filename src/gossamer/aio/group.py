"""A group member on a real UDP socket, sealed: agreed views with ISIS total order flushed
through them (``gossamer.proto.group``, ``docs/cluster.md`` "ISIS on the views").

The protocol and the glue between views and ISIS are entirely in ``GroupCore``; this module
resolves the addresses, binds one socket for both protocols, seals the datagrams and turns
the calls into ``driver.call``::

    me = Member(name="d", incarnation=1, address=("127.0.0.1", 0))
    async with gossamer.open_group(ViewsConfig(me, seeds=(seed,)), wire=wire) as group:
        async for event in group.events():      # Delivered, ViewInstalled, StateNeeded, ...
            if isinstance(event, StateNeeded):
                group.provide_state(event.view_id, application_state())
        await group.send(b"job")                 # total order, in the current view

``close()`` is a crash to the others (no goodbye), which remove the member once their
membership layer suspects it (``suspect``).
"""

from __future__ import annotations

import random
import socket
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gossamer.aio._pump import now
from gossamer.aio.faults import FaultInjector
from gossamer.aio.opening import Opening
from gossamer.aio.sealing import rejected_by
from gossamer.aio.views import MemberService, start_member
from gossamer.errors import ConfigError
from gossamer.proto.group import GroupCore, GroupEvent
from gossamer.proto.isis import payload
from gossamer.proto.views import ViewsConfig
from gossamer.trace.sink import Tracer
from gossamer.wire.mode import Wire, WireMode

__all__ = ["GroupService", "open_group"]


def open_group(
    config: ViewsConfig,
    *,
    wire: Wire,
    isis: Mapping[str, Any] | None = None,
    tracer: Tracer | None = None,
    rng: random.Random | None = None,
    faults: FaultInjector | None = None,
    sock: socket.socket | None = None,
) -> Opening[GroupService]:
    """Open this member of the group: ``await`` it for the started service, or use it
    with ``async with`` to close it on the way out (``docs/api.md``).

    ``config`` is the views' (``me``, founders' ``initial`` or a joiner's ``seeds``,
    ``retry``): as for ``open_views``, ``me.address`` is bound (port 0: any, for a
    joiner) and names are resolved once. ``isis`` holds ``IsisConfig``'s tunables
    (``retransmit_initial=``, ``batch_delay=``...). ``wire`` carries the group key: the
    group runs on the sealed wire only. ``tracer`` receives the ``views`` and ``isis``
    events; ``faults`` injects network faults around the socket.

    Raises ``ConfigError`` for a wire that is not sealed and ``NetworkError`` (its cause
    the ``OSError``) when a name does not resolve or the address cannot be bound.
    """
    if not isinstance(wire, Wire) or not wire.sealed:
        raise ConfigError(
            "a group runs on the sealed wire only: give wire=Wire(key=...) (no default key)"
        )
    return Opening(
        lambda: _start(
            config, wire=wire, isis=isis, tracer=tracer, rng=rng, faults=faults, sock=sock
        )
    )


class GroupService(MemberService[GroupCore, GroupEvent]):
    """One running member of a group (from :func:`open_group`). Use it from one loop.

    Inputs, run on the core at once: ``send`` (a multicast in total order), ``suspect``
    and ``join_request`` (the membership layer), ``provide_state`` (the application's
    state, after ``StateNeeded``). Outputs, in order, from ``events()`` or
    ``next_event()``: ``Delivered`` and ``Discarded`` (ISIS), ``ViewInstalled`` (a
    joiner's first with the application's state), ``StateNeeded``, ``Blocked``,
    ``Unblocked``, ``Excluded``; what is delivered before ``ViewInstalled(v+1)`` belongs
    to view v. ``view``, ``blocked`` and ``excluded`` say the same at any time.
    """

    @property
    def rejected(self) -> Counter[str]:
        """Datagrams refused, by reason: by the envelope (not sealed with the group key,
        replayed...) and by the group (``unknown_protocol``)."""
        refused = rejected_by(self.driver.core)
        refused.update({k: v for k, v in self.core.counters.items() if v})
        return refused

    async def send(self, data: bytes | int) -> int:
        """Multicast ``data`` (bytes up to 512) in total order; returns its ISIS ``msg_id``.
        During a view change it is held and goes out in the next view.
        ``LocalProtocolError`` for a payload that does not fit or before this member is
        admitted; ``ClosedError`` once closed."""
        payload(data, WireMode.SEALED)  # refused here, not inside the driver
        driver = self._require_open()
        return driver.call(lambda t: self.core.multicast(data, t))


async def _start(
    config: ViewsConfig,
    *,
    wire: Wire,
    isis: Mapping[str, Any] | None,
    tracer: Tracer | None,
    rng: random.Random | None,
    faults: FaultInjector | None,
    sock: socket.socket | None,
) -> GroupService:
    def core(config: ViewsConfig, tracer: Tracer) -> GroupCore:
        return GroupCore(config, isis=isis, tracer=tracer, rng=rng or random.Random(), now=now())

    return await start_member(
        config, core, GroupService, wire=wire, tracer=tracer, faults=faults, sock=sock
    )
