"""The views core driven by hand, with explicit times: the change protocol, the flush and
state hooks, coordinator failure, primary partition, exclusion, incarnations and bad input.
``group.Group`` carries datagrams only when a test says so."""

from __future__ import annotations

import random

import pytest

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.views import (
    Blocked,
    Excluded,
    FlushRequired,
    Member,
    StateNeeded,
    Unblocked,
    ViewInstalled,
    ViewsConfig,
    ViewsCore,
)
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire import views as wire
from gossamer.wire.views import Ballot, ViewsMessage, ViewsType

from .group import Group, member


def installed(group: Group, name: str) -> list[ViewInstalled]:
    return [e for e in group.events[name] if isinstance(e, ViewInstalled)]


def test_founders_start_in_view_one_with_the_oldest_as_coordinator() -> None:
    group = Group.founded("a", "b", "c")
    for name in "abc":
        [first] = installed(group, name)
        assert first.view.id == 1 and first.view.names == ("a", "b", "c")
        assert first.view.coordinator.name == "a" and first.state is None
        assert group.cores[name].next_deadline() is None  # nothing to do: no timer


def test_a_suspected_member_is_removed_only_after_the_others_flushed() -> None:
    group = Group.founded("a", "b", "c")
    group.auto_flush = False
    group.cut = {frozenset("ac"), frozenset("bc")}
    group.cores["a"].suspect("c", group.now)
    group.pump("a")
    group.settle()
    # Both were asked to flush view 1 for {a, b}; without flush_done nothing is installed.
    for name in "ab":
        flushes = [e for e in group.events[name] if isinstance(e, FlushRequired)]
        assert [(f.view_id, tuple(m.name for m in f.next_members)) for f in flushes] == [
            (1, ("a", "b"))
        ]
    assert group.views("a", "b") == {"a": (1, ("a", "b", "c")), "b": (1, ("a", "b", "c"))}
    for name in "ab":
        group.cores[name].flush_done(1, group.now)
        group.pump(name)
    group.settle()
    assert group.views("a", "b") == {"a": (2, ("a", "b")), "b": (2, ("a", "b"))}
    assert installed(group, "b")[-1].agreed_by == ("a", "b")


def test_the_coordinator_waits_for_every_survivor_and_one_left_behind_is_excluded() -> None:
    """c's layer never finishes its flush: the coordinator does not install without c
    (though a, b, d are a majority) until it suspects c; then c, which did not flush for
    the view it is in, is excluded instead of installing it."""
    group = Group.founded("a", "b", "c", "d", "e")
    group.held = {"c"}
    group.cut = {frozenset(("e", n)) for n in "abcd"}
    group.cores["a"].suspect("e", group.now)
    group.pump("a")
    group.settle()
    assert {group.cores[n].view.id for n in "abcd"} == {1}  # type: ignore[union-attr]
    group.cores["a"].suspect("c", group.now)  # c looks dead to a
    group.pump("a")
    group.settle()
    for name in "abd":  # view 2 is the one c did not flush for; view 3 drops c
        assert [(e.view.id, e.view.names) for e in installed(group, name)][1:] == [
            (2, ("a", "b", "c", "d")),
            (3, ("a", "b", "d")),
        ]
    assert group.cores["c"].excluded and group.events["c"][-1] == Excluded(view_id=2)


def test_a_suspicion_at_a_member_reaches_the_coordinator() -> None:
    group = Group.founded("a", "b", "c", "d", "e")
    group.cut = {frozenset(("e", n)) for n in "abcd"}
    group.cores["d"].suspect("e", group.now)  # only d's membership layer noticed
    group.pump("d")
    group.settle()
    assert {n: v for n, v in group.views().items() if n != "e"} == {
        n: (2, ("a", "b", "c", "d")) for n in "abcd"
    }


def test_a_joiner_starts_from_the_state_the_coordinator_hands_over() -> None:
    group = Group.founded("a", "b")
    group.join("j", seeds=("b",))  # it asks b, which forwards to the coordinator a
    group.settle()
    needed = [e for e in group.events["a"] if isinstance(e, StateNeeded)]
    assert [(e.view_id, [m.name for m in e.joiners]) for e in needed] == [(2, ["j"])]
    [first] = installed(group, "j")
    assert first.view.id == 2 and first.view.names == ("a", "b", "j")
    assert first.state == b"state@1"  # the state at the end of view 1
    assert installed(group, "b")[-1].state is None  # only a joiner gets state


def test_a_joiner_waits_for_the_state_and_the_view_waits_with_it() -> None:
    group = Group.founded("a", "b", "c")
    core = group.cores["a"]
    # Play a's layer by hand: hold StateNeeded.
    group.pump = _holding_state(group)  # type: ignore[method-assign]
    group.join("j")
    group.settle()
    assert group.cores["j"].view is None and core.view is not None and core.view.id == 1
    core.provide_state(2, b"snapshot", group.now)
    Group.pump(group, "a")
    group.settle()
    assert installed(group, "j")[0].state == b"snapshot"
    assert group.views() == {n: (2, ("a", "b", "c", "j")) for n in "abcj"}
    with pytest.raises(LocalProtocolError):
        core.provide_state(3, b"x" * (wire.MAX_STATE + 1), group.now)


def _holding_state(group: Group):  # type: ignore[no-untyped-def]
    def pump(name: str) -> None:
        core = group.cores[name]
        for data, addr in core.datagrams_to_send():
            group.in_flight.append((name, data, addr))
        for event in core.events_received():
            group.events[name].append(event)
            if isinstance(event, FlushRequired):
                core.flush_done(event.view_id, group.now)
                pump(name)

    return pump


def test_a_restarted_member_replaces_its_old_incarnation() -> None:
    group = Group.founded("a", "b", "c")
    old_b = group.cores["b"]
    group.join("b", incarnation=2)  # the same name and address, a new process
    group.settle()
    assert group.views("a", "c", "b") == {n: (2, ("a", "c", "b")) for n in "acb"}
    assert [m.incarnation for m in group.cores["a"].view.members] == [1, 1, 2]  # type: ignore[union-attr]
    # The old incarnation, were it still running, is told it is out when it speaks.
    sink = MemorySink()
    ghost = ViewsCore(
        ViewsConfig(me=member("b"), initial=old_b.config.initial),
        tracer=Tracer(sink, run="t", node="b"),
        rng=random.Random(1),
        now=0.0,
    )
    ghost.suspect("c", group.now)
    ghost.handle_timer(group.now + 1)
    for data, addr in ghost.datagrams_to_send():
        if addr == group.cores["a"].me.address:
            group.cores["a"].receive_datagram(data, ghost.me.address, group.now)
    answers = group.cores["a"].datagrams_to_send()
    for data, _ in answers:
        ghost.receive_datagram(data, group.cores["a"].me.address, group.now)
    assert ghost.excluded
    assert [e for e in ghost.events_received() if isinstance(e, Excluded)] == [Excluded(view_id=2)]
    # The answers went to b's address, where b#2 listens now: they are not meant for it.
    new_b = group.cores["b"]
    stale = new_b.counters["stale"]
    for data, _ in answers:
        new_b.receive_datagram(data, group.cores["a"].me.address, group.now)
    assert not new_b.excluded and new_b.counters["stale"] > stale


def test_a_minority_blocks_and_is_excluded_once_it_hears_the_majority() -> None:
    group = Group.founded("a", "b", "c", "d", "e")
    minority, majority = "ab", "cde"
    group.cut = {frozenset((x, y)) for x in minority for y in majority}
    for x in minority:
        for y in majority:
            group.cores[x].suspect(y, group.now)
            group.cores[y].suspect(x, group.now)
            group.pump(x)
            group.pump(y)
    group.settle()
    for x in minority:
        assert [e for e in group.events[x] if isinstance(e, Blocked)] == [
            Blocked(view_id=1, reachable=tuple(minority))
        ]
        assert group.cores[x].blocked and group.cores[x].view.id == 1  # type: ignore[union-attr]
    assert group.views(*majority) == {y: (2, ("c", "d", "e")) for y in majority}
    assert installed(group, "c")[-1].agreed_by == ("c", "d", "e")
    group.cut = set()  # the partition heals: the minority hears it was removed
    group.settle()
    for x in minority:
        assert group.cores[x].excluded
        assert isinstance(group.events[x][-1], Excluded)


def test_a_withdrawn_suspicion_unblocks() -> None:
    group = Group.founded("a", "b", "c")
    core = group.cores["c"]
    core.suspect("a", group.now)
    core.suspect("b", group.now)
    group.pump("c")
    assert core.blocked
    core.join_request(group.cores["a"].me, group.now)  # the membership layer: a is up
    group.pump("c")
    assert not core.blocked
    assert [type(e) for e in group.events["c"][-2:]] == [Blocked, Unblocked]


def test_a_coordinator_that_dies_after_deciding_is_succeeded_with_the_same_view() -> None:
    """a decides view 2 = {a, b, c, d} and installs it, but every INSTALL is lost with it.
    b takes over: Paxos binds it to the decided value, so view 2 is the same everywhere,
    and only view 3 removes a."""
    group = Group.founded("a", "b", "c", "d", "e")
    group.cut = {frozenset(("e", n)) for n in "abcd"}
    group.cores["a"].suspect("e", group.now)
    group.pump("a")
    while group.cores["a"].view.id == 1:  # type: ignore[union-attr]
        sender, data, addr = group.in_flight.pop(0)
        target = next(n for n, c in group.cores.items() if c.me.address == addr)
        if frozenset((sender, target)) not in group.cut:
            group.cores[target].receive_datagram(data, group.cores[sender].me.address, group.now)
            group.pump(target)
    decided = group.cores["a"].view
    assert decided is not None and decided.names == ("a", "b", "c", "d")
    del group.cores["a"]  # crashes with its INSTALLs unsent
    group.in_flight = [f for f in group.in_flight if f[0] != "a"]
    assert group.views("b", "c", "d") == {n: (1, ("a", "b", "c", "d", "e")) for n in "bcd"}
    for name in "bcd":
        group.cores[name].suspect("a", group.now)
        group.cores[name].suspect("e", group.now)
        group.pump(name)
    group.settle()
    for name in "bcd":
        assert [(e.view.id, e.view.names) for e in installed(group, name)] == [
            (1, ("a", "b", "c", "d", "e")),
            (2, ("a", "b", "c", "d")),
            (3, ("b", "c", "d")),
        ]


def test_competing_coordinators_never_install_two_views_with_one_id() -> None:
    """a and b each believe they coordinate (each suspects the other's side) and propose
    different views; whatever the order of delivery, view 2 is one view everywhere."""
    for seed in range(40):
        group = Group.founded("a", "b", "c", "d", "e")
        rng = random.Random(seed)
        group.cores["a"].suspect("e", group.now)
        group.cores["b"].suspect("a", group.now)
        group.cores["b"].suspect("d", group.now)
        for name in "ab":
            group.pump(name)
        for _ in range(400):
            if group.in_flight and rng.random() < 0.8:
                i = rng.randrange(len(group.in_flight))
                sender, data, addr = group.in_flight.pop(i)
                target = next(n for n, c in group.cores.items() if c.me.address == addr)
                if rng.random() < 0.8:  # the rest are lost
                    group.cores[target].receive_datagram(
                        data, group.cores[sender].me.address, group.now
                    )
                    group.pump(target)
            else:
                group.tick(0.05)
        views2 = {
            e.view.members
            for c in group.events.values()
            for e in c
            if isinstance(e, ViewInstalled) and e.view.id == 2
        }
        assert len(views2) <= 1, (seed, views2)


def test_malformed_and_spoofed_datagrams_are_counted_never_raised() -> None:
    group = Group.founded("a", "b")
    core = group.cores["a"]
    core.receive_datagram(b"GV\x01\x63garbage", ("10.9.9.9", 1), group.now)
    assert core.counters["malformed"] == 1
    prepare = wire.encode(
        ViewsMessage(
            type=ViewsType.PREPARE,
            view=1,
            sender="b",
            incarnation=1,
            ballot=Ballot(round=9, name="b"),
        )
    )
    core.receive_datagram(prepare, ("10.9.9.9", 1), group.now)  # b's name, not b's address
    assert core.counters["spoofed"] == 1 and core.datagrams_to_send() == []
    drops = group.sinks["a"].select(layer="views", kind="drop")
    assert [d.attrs["reason"] for d in drops][-1] == "address does not match the member's"


def test_an_acceptor_refuses_a_ballot_lower_than_its_promise() -> None:
    group = Group.founded("a", "b", "c")
    core, b = group.cores["a"], group.cores["b"].me

    def send(kind: ViewsType, ballot: Ballot) -> list[ViewsMessage]:
        data = wire.encode(
            ViewsMessage(
                type=kind, view=1, sender="b", incarnation=1, ballot=ballot, members=(b.record(),)
            )
        )
        core.receive_datagram(data, b.address, group.now)
        return [wire.decode(d) for d, _ in core.datagrams_to_send()]

    [promise] = send(ViewsType.PREPARE, Ballot(round=5, name="b"))
    assert promise.type is ViewsType.PROMISE and promise.accepted is None
    assert send(ViewsType.PREPARE, Ballot(round=5, name="b")) == [promise]  # a duplicate
    [nack] = send(ViewsType.PREPARE, Ballot(round=4, name="c"))
    assert nack.type is ViewsType.NACK and nack.ballot == Ballot(round=5, name="b")
    [nack] = send(ViewsType.PROPOSE, Ballot(round=2, name="b"))
    assert nack.type is ViewsType.NACK


def test_configuration_is_checked() -> None:
    a = member("a")
    with pytest.raises(ConfigError, match="seeds"):
        ViewsConfig(me=a)
    with pytest.raises(ConfigError, match="founder"):
        ViewsConfig(me=a, initial=(member("b"),))
    with pytest.raises(ConfigError, match="distinct"):
        ViewsConfig(me=a, initial=(a, member("a", 2)))
    with pytest.raises(ConfigError, match="retry"):
        ViewsConfig(me=a, initial=(a,), retry=0.0)


def test_joiners_beyond_what_an_install_can_carry_wait() -> None:
    """An INSTALL (with a joiner's largest state) must fit one datagram: a coordinator
    admits only the joiners that fit, so no input can make it encode a datagram too big."""
    group = Group.founded("a")
    core = group.cores["a"]
    long = "x" * 200
    for i in range(200):
        joiner = Member(name=f"{long}{i}", incarnation=1, address=(f"10.1.{i}.1", 7100))
        core.join_request(joiner, group.now)
    assert core.view is not None and core.view.id == 1  # it waits for its flush and state
    core.flush_done(1, group.now)
    [needed] = [e for e in core.events_received() if isinstance(e, StateNeeded)]
    assert 0 < len(needed.joiners) < 200
    core.provide_state(2, b"s" * wire.MAX_STATE, group.now)
    assert all(len(data) <= wire.MAX_SIZE for data, _ in core.datagrams_to_send())
