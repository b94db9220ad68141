"""gossamer.aio.views on real, sealed UDP sockets on 127.0.0.1.

Every member runs in one event loop (uvloop and the default loop); the layer above is
played by each member's reader, which answers ``FlushRequired`` with ``flush_done`` and
``StateNeeded`` with ``provide_state``, as ISIS and the application will. Nothing leaves
127.0.0.1. Assertions are about the views installed, never about speed.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import socket

import pytest

import gossamer
from gossamer.aio.faults import FaultInjector
from gossamer.aio.sealing import new_session
from gossamer.aio.views import ViewsService, open_views
from gossamer.errors import (
    ClosedError,
    ConfigError,
    LocalProtocolError,
    NetworkError,
    TimedOutError,
)
from gossamer.faults import FaultPlan
from gossamer.proto.views import (
    Blocked,
    Excluded,
    FlushRequired,
    Member,
    StateNeeded,
    Unblocked,
    ViewInstalled,
    ViewsConfig,
    ViewsEvent,
)
from gossamer.testing import free_ports, sealed_wire
from gossamer.testing.aio import Runner, until
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import envelope
from gossamer.wire.mode import Wire, WireMode
from gossamer.wire.views import MAX_STATE

#: Retransmission every 20 ms: loopback round trips are short.
RETRY = 0.02
LOCALHOST = "127.0.0.1"


def state_of(name: str, view_id: int) -> bytes:
    """What member ``name`` hands the joiners of ``view_id``: its state at the cut."""
    return f"{name}'s state after view {view_id - 1}".encode()


class Node:
    """One running member and what it saw; its reader plays the layer above."""

    def __init__(self, service: ViewsService) -> None:
        self.service = service
        self.seen: list[ViewsEvent] = []
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def name(self) -> str:
        return self.service.member.name

    async def _read(self) -> None:
        async for event in self.service.events():
            self.seen.append(event)
            if isinstance(event, FlushRequired):
                self.service.flush_done(event.view_id)
            elif isinstance(event, StateNeeded):
                self.service.provide_state(event.view_id, state_of(self.name, event.view_id))

    def installed(self) -> list[ViewInstalled]:
        return [e for e in self.seen if isinstance(e, ViewInstalled)]

    def view_id(self) -> int:
        view = self.service.view
        return 0 if view is None else view.id

    async def close(self) -> None:
        await self.service.close()
        await self.reader  # the events end once the service is closed


class Group:
    """Founders ``names`` on 127.0.0.1, and whoever joins later, all with one key."""

    def __init__(self, names: tuple[str, ...], *, plan: FaultPlan | None = None) -> None:
        self.wire = sealed_wire()
        self.plan = plan
        self.injectors: list[FaultInjector] = []
        ports = free_ports(len(names), kind="udp")
        self.initial = tuple(
            Member(name=n, incarnation=1, address=(LOCALHOST, p))
            for n, p in zip(names, ports, strict=True)
        )
        self.nodes: dict[str, Node] = {}
        self.sink = MemorySink()

    def _tracer(self, name: str) -> Tracer:
        return Tracer(self.sink, run="aio", node=name)

    def _faults(self, tracer: Tracer) -> FaultInjector | None:
        if self.plan is None:
            return None
        injector = FaultInjector(self.plan, rng=random.Random(len(self.injectors)), tracer=tracer)
        self.injectors.append(injector)
        return injector

    async def _open(self, config: ViewsConfig) -> Node:
        tracer = self._tracer(config.me.name)
        service = await open_views(
            config, wire=self.wire, tracer=tracer, faults=self._faults(tracer)
        )
        node = Node(service)
        self.nodes[config.me.name] = node
        return node

    async def found(self) -> None:
        for me in self.initial:
            config = ViewsConfig(me=me, initial=self.initial, retry=RETRY)
            await self._open(config)

    async def join(self, name: str, *, seed: str, incarnation: int = 1, port: int = 0) -> Node:
        me = Member(name=name, incarnation=incarnation, address=(LOCALHOST, port))
        config = ViewsConfig(me=me, seeds=(self.nodes[seed].service.address,), retry=RETRY)
        return await self._open(config)

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if not n.service.closed]

    async def until_view(self, view_id: int) -> None:
        await until(lambda: all(n.view_id() >= view_id for n in self.live()), timeout=10)

    async def __aenter__(self) -> Group:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for node in self.nodes.values():  # a failed assertion must not leave sockets open
            await node.close()


def keys(node: Node) -> list[tuple[str, int]]:
    view = node.service.view
    assert view is not None
    return [m.key for m in view.members]


def test_three_founders_install_view_1(run: Runner) -> None:
    async def main() -> None:
        async with Group(("a", "b", "c")) as g:
            await g.found()
            await g.until_view(1)
            for node in g.nodes.values():
                first = await asyncio.wait_for(asyncio.shield(_first(node)), 5)
                assert first.view.id == 1 and first.state is None
                assert first.view.members == g.initial
                assert node.service.view == first.view
                assert node.service.view.coordinator.name == "a"
                assert not node.service.blocked and not node.service.excluded
                assert node.service.rejected == {}

    run(main())


async def _first(node: Node) -> ViewInstalled:
    await until(lambda: bool(node.installed()), timeout=5)
    return node.installed()[0]


def test_a_joiner_gets_the_coordinators_state_and_all_four_install_view_2(run: Runner) -> None:
    async def main() -> None:
        async with Group(("a", "b", "c")) as g:
            await g.found()
            # The seed is not the coordinator: it forwards the request to it.
            d = await g.join("d", seed="b")
            await g.until_view(2)
            expected = [("a", 1), ("b", 1), ("c", 1), ("d", 1)]
            for node in g.nodes.values():
                assert keys(node) == expected, node.name
            # The coordinator, and only it, was asked for the state; the joiner got it.
            a = g.nodes["a"]
            needed = [e for e in a.seen if isinstance(e, StateNeeded)]
            assert [(e.view_id, [m.name for m in e.joiners]) for e in needed] == [(2, ["d"])]
            for name in ("b", "c", "d"):
                assert not any(isinstance(e, StateNeeded) for e in g.nodes[name].seen)
            (joined,) = d.installed()
            assert joined.view.id == 2 and joined.state == state_of("a", 2)
            assert d.service.member.address == d.service.address  # port 0: the one bound
            # The founders flushed view 1 for exactly the new members before installing 2.
            for name in ("a", "b", "c"):
                seen = g.nodes[name].seen
                flushes = [e for e in seen if isinstance(e, FlushRequired)]
                assert flushes and flushes[-1].view_id == 1
                assert [m.key for m in flushes[-1].next_members] == expected
                assert seen.index(flushes[-1]) < seen.index(g.nodes[name].installed()[1])
                assert g.nodes[name].installed()[1].state is None
            # Each member traced its install of view 2 (layer "views").
            changes = g.sink.select(layer="views", kind="view_change")
            assert sorted(e.node for e in changes if e.seq == 2) == ["a", "b", "c", "d"]

    run(main())


@pytest.mark.parametrize("victim", ["c", "a"], ids=["member", "coordinator"])
def test_a_crashed_member_leaves_the_view_of_every_survivor(run: Runner, victim: str) -> None:
    async def main() -> None:
        async with Group(("a", "b", "c")) as g:
            await g.found()
            await g.until_view(1)
            await g.nodes[victim].close()  # a crash: the protocol has no goodbye
            survivors = [n for n in g.nodes.values() if n.name != victim]
            for node in survivors:
                node.service.suspect(victim)  # what discovery's peer_down does
            await g.until_view(2)
            expected = [m.key for m in g.initial if m.name != victim]
            for node in survivors:
                assert keys(node) == expected, node.name
                assert [e.view.id for e in node.installed()] == [1, 2]
                # Each installed view 2 only after its layer flushed view 1 for it.
                flush = next(e for e in node.seen if isinstance(e, FlushRequired))
                assert flush.view_id == 1
                assert [m.key for m in flush.next_members] == expected
                assert node.seen.index(flush) < node.seen.index(node.installed()[1])
                assert node.installed()[1].view.coordinator.name == expected[0][0]
            # The closed member's events ended; its inputs refuse.
            with pytest.raises(ClosedError):
                g.nodes[victim].service.suspect("b")
            with pytest.raises(ClosedError):
                await g.nodes[victim].service.next_event(timeout=1)

    run(main())


def test_a_restarted_member_rejoins_as_a_new_incarnation(run: Runner) -> None:
    async def main() -> None:
        async with Group(("a", "b", "c")) as g:
            await g.found()
            await g.until_view(1)
            old = g.nodes["c"]
            port = old.service.address[1]
            await old.close()
            # The same name at the same address, one incarnation later, and nobody said
            # the old one crashed: its new incarnation asking in is proof enough.
            new = await g.join("c", seed="a", incarnation=2, port=port)
            await g.until_view(2)
            expected = [("a", 1), ("b", 1), ("c", 2)]
            for node in g.live():
                assert keys(node) == expected, node.name
                view = node.service.view
                assert view is not None and not view.has(("c", 1))
            assert new.installed()[0].state == state_of("a", 2)
            assert old.installed()[-1].view.id == 1  # the old incarnation saw no more

    run(main())


def test_a_join_and_a_crash_under_loss_duplication_and_reordering(run: Runner) -> None:
    async def main() -> None:
        plan = FaultPlan(drop=0.2, duplicate=0.1, reorder=0.2, reorder_by=0.01)
        async with Group(("a", "b", "c"), plan=plan) as g:
            await g.found()
            await g.join("d", seed="c")
            await g.until_view(2)
            await g.nodes["c"].close()
            for name in ("a", "b", "d"):
                g.nodes[name].service.suspect("c")
            await g.until_view(3)
            for node in g.live():
                assert keys(node) == [("a", 1), ("b", 1), ("d", 1)], node.name
                assert [e.view.id for e in node.installed()] == ([2, 3] if node.name == "d"
                                                                 else [1, 2, 3])  # fmt: skip
            assert g.nodes["d"].installed()[0].state == state_of("a", 2)
            assert {k for inj in g.injectors for k in inj.counts} >= {"drop", "duplicate"}
            assert sum(n.service.counters["retransmitted"] for n in g.live()) > 0

    run(main())


def test_a_live_member_the_others_suspect_is_excluded(run: Runner) -> None:
    async def main() -> None:
        async with Group(("a", "b", "c")) as g:
            await g.found()
            await g.until_view(1)
            c = g.nodes["c"]
            for name in ("a", "b"):
                g.nodes[name].service.suspect("c")  # wrongly: c is alive
            await until(lambda: c.service.excluded, timeout=10)
            await until(lambda: g.nodes["a"].view_id() == 2 and g.nodes["b"].view_id() == 2)
            assert keys(g.nodes["a"]) == keys(g.nodes["b"]) == [("a", 1), ("b", 1)]
            assert isinstance(c.seen[-1], Excluded) and c.seen[-1].view_id == 2
            assert c.view_id() == 1 and not c.service.closed  # closing is the process's act
            c.service.suspect("a")  # an excluded core ignores its inputs
            assert c.view_id() == 1 and c.service.excluded

    run(main())


def test_a_member_that_suspects_a_majority_blocks_until_they_are_back(run: Runner) -> None:
    async def main() -> None:
        async with Group(("a", "b", "c")) as g:
            await g.found()
            await g.until_view(1)
            a = g.nodes["a"]
            a.service.suspect("b")
            a.service.suspect("c")
            assert a.service.blocked
            await until(lambda: any(isinstance(e, Blocked) for e in a.seen))
            blocked = next(e for e in a.seen if isinstance(e, Blocked))
            assert blocked.view_id == 1 and blocked.reachable == ("a",)
            for name in ("b", "c"):  # what discovery's peer_up says: alive after all
                a.service.join_request(g.nodes[name].service.member)
            assert not a.service.blocked
            await until(lambda: any(isinstance(e, Unblocked) for e in a.seen))
            # A change a started meanwhile may end in a view of the same members: either
            # way all three agree on one view of all three.
            await until(lambda: len({n.service.view for n in g.nodes.values()}) == 1)
            assert keys(a) == [m.key for m in g.initial]

    run(main())


def test_garbage_and_datagrams_under_another_key_are_counted_not_raised(run: Runner) -> None:
    async def main() -> None:
        async with Group(("a", "b", "c")) as g:
            await g.found()
            await g.until_view(1)
            a = g.nodes["a"].service
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                raw.sendto(b"\x00garbage, not an envelope", a.address)
                # Sealed with the group key but no views message: the core refuses it.
                sealed = envelope.seal(
                    g.wire.keyring(), new_session("stranger"), seq=1, payload=b"\x07junk"
                )
                raw.sendto(sealed, a.address)
            # A process with another key asks to join: every request is refused.
            other = Wire(key=secrets.token_bytes(32), cluster=g.wire.cluster)
            me = Member(name="x", incarnation=1, address=(LOCALHOST, 0))
            config = ViewsConfig(me=me, seeds=(a.address,), retry=RETRY)
            async with open_views(config, wire=other) as x:
                await until(lambda: a.rejected.total() >= 4)
                assert x.view is None  # never admitted
                assert x.rejected == {}  # nobody answered it
            refused = a.rejected
            assert refused["malformed"] >= 2  # the garbage (envelope), the junk (core)
            assert refused["forged"] >= 2  # the other key's requests, repeated
            assert a.counters["malformed"] == 1
            assert not a.closed and keys(g.nodes["a"]) == [m.key for m in g.initial]
            assert [e.view.id for e in g.nodes["a"].installed()] == [1]

    run(main())


def test_opening_refuses_the_original_wire_and_a_taken_address(run: Runner) -> None:
    async def main() -> None:
        me = Member(name="a", incarnation=1, address=(LOCALHOST, 0))
        config = ViewsConfig(me=me, initial=(me,), retry=RETRY)
        with pytest.raises(ConfigError, match="sealed wire only"):
            open_views(config, wire=Wire(mode=WireMode.ORIGINAL))
        async with gossamer.open_views(config, wire=sealed_wire()) as a:
            # A group of one is installed at once, on the port it got.
            event = await a.next_event(timeout=5)
            assert isinstance(event, ViewInstalled) and event.view.members == (a.member,)
            with pytest.raises(TimedOutError):
                await a.next_event(timeout=0.05)
            with pytest.raises(LocalProtocolError, match="state exceeds"):
                a.provide_state(2, bytes(MAX_STATE + 1))  # the caller's error, raised to it
            assert not a.closed
            taken = Member(name="b", incarnation=1, address=a.address)
            with pytest.raises(NetworkError) as caught:
                await open_views(ViewsConfig(me=taken, initial=(taken,)), wire=sealed_wire())
            assert isinstance(caught.value.__cause__, OSError)
        assert a.closed
        await a.close()  # idempotent

    run(main())
