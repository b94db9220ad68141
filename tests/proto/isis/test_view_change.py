"""ISIS view changes driven by hand (``begin_view_change``, ``install_view``,
``state_for_joiner``, ``IsisCore.joining``): held and withdrawn multicasts, the closed set
of a flushed member, joiners' ids and sequence numbers, the settling of a crashed
sender's message by a flushed member, and the errors."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gossamer.errors import DecodeError, LocalProtocolError
from gossamer.proto.isis import Delivered, Discarded, IsisConfig, IsisCore, members_from
from gossamer.proto.isis.core import ViewFlushed
from gossamer.proto.isis.join import JoinState, Member
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import isis as wire
from gossamer.wire.buffer import Buffer
from gossamer.wire.mode import WireMode

Address = tuple[str, int]


def addr_of(name: str) -> Address:
    return (f"10.0.0.{int(name[1:]) + 1}", 7000)


class Net:
    """Cores by name, the datagrams between them, and what each told its layer."""

    def __init__(self, names: list[str], **tunables: Any) -> None:
        self.sink = MemorySink()
        self.tunables = tunables
        founders = members_from([(n, addr_of(n)) for n in names])
        self.cores: dict[str, IsisCore] = {}
        for m in founders:
            self.cores[m.name] = IsisCore(
                IsisConfig(me=m.id, members=founders, **tunables),
                tracer=Tracer(self.sink, run="t", node=m.name),
                rng=random.Random(m.id),
            )
        self.by_addr = {addr_of(n): n for n in names}
        self.wire: list[tuple[str, str, bytes]] = []
        self.events: dict[str, list[object]] = {n: [] for n in names}
        self.dead: set[str] = set()
        self.now = 0.0

    def join(self, name: str, state: bytes, view_id: int, members: list[tuple[str, Address]]):
        self.cores[name] = IsisCore.joining(
            state,
            name,
            view_id,
            members,
            tracer=Tracer(self.sink, run="t", node=name),
            rng=random.Random(99),
            **self.tunables,
        )
        self.by_addr[addr_of(name)] = name
        self.events[name] = []

    def pump(self) -> None:
        for name, core in self.cores.items():
            for data, addr in core.datagrams_to_send():
                if name not in self.dead:
                    self.wire.append((name, self.by_addr[addr], data))
            self.events[name].extend(core.events_received())

    def deliver(self, keep=lambda src, dst, msg: True) -> None:
        chosen = [w for w in self.wire if keep(w[0], w[1], wire.pull_isis(Buffer(w[2])))]
        self.wire = [w for w in self.wire if w not in chosen]
        for src, dst, data in chosen:
            if dst not in self.dead and dst in self.cores:
                self.cores[dst].receive_datagram(data, addr_of(src), self.now)
        self.pump()

    def settle(self, limit: float = 30.0) -> None:
        while self.now <= limit:
            if self.wire:
                self.deliver()
                continue
            deadlines = [
                (d, n)
                for n, c in self.cores.items()
                if n not in self.dead and (d := c.next_deadline()) is not None
            ]
            if not deadlines:
                return
            self.now, name = min(deadlines)
            self.cores[name].handle_timer(self.now)
            self.pump()

    def call(self, name: str, method: str, *args: Any) -> Any:
        result = getattr(self.cores[name], method)(*args, self.now)
        self.pump()
        return result

    def delivered(self, name: str) -> list[bytes]:
        return [e.data for e in self.events[name] if isinstance(e, Delivered)]

    def flushed(self, name: str) -> int:
        return sum(isinstance(e, ViewFlushed) for e in self.events[name])

    def ids(self, name: str, names: list[str]) -> list[int | None]:
        return [self.cores[name].id_of(n) for n in names]


def view(names: list[str]) -> list[tuple[str, Address]]:
    return [(n, addr_of(n)) for n in names]


def test_multicasts_during_a_change_are_held_and_go_out_in_order_after_install() -> None:
    net = Net(["n0", "n1", "n2"])
    net.call("n0", "multicast", b"before")
    net.settle()
    for name in net.cores:
        net.call(name, "begin_view_change", [1, 2, 3])
    assert all(net.flushed(n) == 1 for n in net.cores)
    assert all(net.cores[n].flushed for n in net.cores)
    held = [net.call("n1", "multicast", b"held-%d" % i) for i in range(3)]
    net.settle()
    assert net.delivered("n0") == [b"before"]  # nothing held went out
    for name in net.cores:
        net.call(name, "install_view", 2, view(["n0", "n1", "n2"]))
    # What the install sent by itself, for a snapshot layer to trace as its own sends.
    assert net.cores["n1"].sent_in_view() == [(i, b"held-%d" % k) for k, i in enumerate(held)]
    assert net.cores["n0"].sent_in_view() == []  # "before" was view 1's
    net.settle()
    expected = [b"before", b"held-0", b"held-1", b"held-2"]
    assert all(net.delivered(n) == expected for n in net.cores)
    assert held == [1, 2, 3]
    assert all(net.cores[n].view_id == 2 and not net.cores[n].flushed for n in net.cores)
    # Each held multicast is traced ``hold`` when asked for, ``multicast`` when sent.
    traced = [(e.kind, e.msg) for e in net.sink.events if e.node == "n1" and e.kind in
              ("hold", "multicast")]  # fmt: skip
    assert traced == [
        *(("hold", f"n1/{i}") for i in held),
        *(("multicast", f"n1/{i}") for i in held),
    ]


def test_a_message_lacking_an_ack_is_withdrawn_everywhere_and_sent_again_in_the_next_view() -> None:
    net = Net(["n0", "n1", "n2"])
    net.call("n0", "multicast", b"job")
    # n2 never answers: the message collects Acks when the change begins.
    net.deliver(keep=lambda s, d, m: d != "n2" and s != "n2")
    net.wire.clear()
    net.call("n0", "begin_view_change", [1, 2, 3])
    assert net.cores["n0"].counters.withdrawn == 1
    for name in ("n1", "n2"):
        net.call(name, "begin_view_change", [1, 2, 3])
    # n2's answers to n0 are lost for now: the discard of msg 1 is still unacknowledged
    # when view 2 is installed.
    while net.wire:
        net.wire = [w for w in net.wire if w[:2] != ("n2", "n0")]
        net.deliver()
    assert all(net.cores[n].flushed for n in net.cores)
    discarded = [e for e in net.events["n1"] if isinstance(e, Discarded)]
    assert [e.data for e in discarded] == [b"job"]
    assert all(net.delivered(n) == [] for n in net.cores)
    # Were n0 to stop now, msg 1 would still be in progress: its data waits for view 2.
    assert stop_attrs(net, "n0")["outstanding"] == "n0/1"
    for name in net.cores:
        net.call(name, "install_view", 2, view(["n0", "n1", "n2"]))
    # What the install sent by itself: msg 2, not msg 1 (view 1's, still in progress).
    assert [out["msg_id"] for out in net.cores["n0"].state()["outgoing"]] == [1, 2]
    assert net.cores["n0"].sent_in_view() == [(2, b"job")]
    net.settle()
    assert all(net.delivered(n) == [b"job"] for n in net.cores)
    sent_again = next(e for e in net.events["n2"] if isinstance(e, Delivered))
    assert sent_again.msg_id == 2  # a new id: msg 1 was discarded
    # The sender's trace links the two ids, for latency and validity (docs/analysis.md).
    (withdraw,) = [e for e in net.sink.events if e.kind == "withdraw"]
    assert (withdraw.node, withdraw.msg, withdraw.attrs) == ("n0", "n0/1", {"as": "n0/2"})
    assert stop_attrs(net, "n0")["outstanding"] == ""


def stop_attrs(net: Net, name: str) -> dict[str, str]:
    """What ``name`` would trace, stopping now (``IsisCore.trace_stop``)."""
    net.cores[name].trace_stop(net.now)
    return dict(net.sink.events[-1].attrs)


def test_a_flushed_member_takes_no_new_message_of_the_view_and_its_sender_withdraws_it() -> None:
    net = Net(["n0", "n1", "n2"])
    for name in ("n0", "n1"):
        net.call(name, "begin_view_change", [1, 2, 3])
    # n2 has not heard of the change yet and multicasts: the flushed ones hold it back.
    net.call("n2", "multicast", b"late")
    net.deliver()
    assert net.cores["n0"].counters.deferred >= 1 and net.cores["n0"].pending == 0
    net.call("n2", "begin_view_change", [1, 2, 3])
    net.settle()
    assert all(net.delivered(n) == [] for n in net.cores)
    for name in net.cores:
        net.call(name, "install_view", 2, view(["n0", "n1", "n2"]))
    net.settle()
    # Delivered once, in the new view, under its new id (the first was discarded).
    assert all(net.delivered(n) == [b"late"] for n in net.cores)


def test_with_view_tags_a_flushed_member_drops_its_closed_views_data_and_defers_the_next() -> None:
    """As above, but the datagrams say the view they were sent in (``GroupCore`` tags
    them): the late message of view 0 is dropped at once instead of waiting in the queue
    of the next view for its sender's discard, and Data of view 2 still waits for it."""
    net = Net(["n0", "n1", "n2"])
    for name in ("n0", "n1"):
        net.call(name, "begin_view_change", [1, 2, 3])
    net.call("n2", "multicast", b"late")
    for src, dst, data in net.wire:
        net.cores[dst].receive_datagram(data, addr_of(src), net.now, view=0)
    net.wire.clear()
    assert [net.cores[n].counters.stale_data for n in ("n0", "n1")] == [1, 1]
    assert [net.cores[n].counters.deferred for n in ("n0", "n1")] == [0, 0]
    net.call("n2", "begin_view_change", [1, 2, 3])
    net.settle()
    for name in ("n1", "n2"):  # n0 hears of view 2 last
        net.call(name, "install_view", 2, view(["n0", "n1", "n2"]))
    for src, dst, data in net.wire:  # n2's data again, now of view 2
        net.cores[dst].receive_datagram(data, addr_of(src), net.now, view=2)
    net.wire.clear()
    assert net.cores["n0"].counters.deferred == 1 and net.cores["n0"].pending == 0
    net.call("n0", "install_view", 2, view(["n0", "n1", "n2"]))
    assert net.cores["n0"].pending == 1  # the deferred data, and no stale copy before it
    net.settle()
    assert all(net.delivered(n) == [b"late"] for n in net.cores)


def test_a_joiner_gets_the_next_id_and_proposes_above_every_final_before_it() -> None:
    net = Net(["n0", "n1", "n2"])
    for i in range(5):
        net.call("n0", "multicast", b"old-%d" % i)
    net.settle()
    latest = max(e.final_seq for e in net.events["n1"] if isinstance(e, Delivered))
    for name in list(net.cores):
        net.call(name, "begin_view_change", [1, 3])  # n1 leaves, n3 joins
    net.settle()
    members = view(["n0", "n2", "n3"])
    state = net.cores["n0"].state_for_joiner(members)
    assert JoinState.decode(state).latest >= latest
    for name in ("n0", "n2"):
        installed = net.call(name, "install_view", 2, members)
        assert [m.id for m in installed] == [1, 3, 4]  # ids are never reused
    net.join("n3", state, 2, members)
    assert net.cores["n3"].me == 4 and net.cores["n3"].view == (1, 3, 4)
    net.call("n3", "multicast", b"new-from-joiner")
    net.call("n2", "multicast", b"new-from-n2")
    net.settle()
    orders = [net.delivered(n)[-2:] if n != "n3" else net.delivered(n) for n in ("n0", "n2", "n3")]
    assert orders[0] == orders[1] == orders[2] and len(orders[2]) == 2
    assert min(e.final_seq for e in net.events["n3"] if isinstance(e, Delivered)) > latest


def test_a_flushed_member_settles_a_crashed_senders_undecided_message() -> None:
    """n2 multicasts, n1 Acks, n2 crashes before any Seq; n0 never had the Data and
    flushed: its answer (discarded, for good) lets n1 flush too."""
    net = Net(["n0", "n1", "n2"])
    net.call("n2", "multicast", b"orphan")
    net.deliver(keep=lambda s, d, m: d == "n1")
    net.wire.clear()
    net.dead.add("n2")
    net.call("n0", "begin_view_change", [1, 2])
    assert net.cores["n0"].flushed
    net.call("n1", "begin_view_change", [1, 2])
    assert not net.cores["n1"].flushed  # the orphan is undecided here
    net.settle()
    assert net.cores["n1"].flushed
    assert [e.data for e in net.events["n1"] if isinstance(e, Discarded)] == [b"orphan"]
    assert all(net.delivered(n) == [] for n in ("n0", "n1"))


def test_the_original_wire_has_no_dynamic_membership() -> None:
    members = members_from([("a", ("10.0.0.1", 10001)), ("b", ("10.0.0.2", 10001))])
    core = IsisCore(
        IsisConfig(me=1, members=members, wire=WireMode.ORIGINAL),
        tracer=Tracer(MemorySink(), run="t", node="a"),
        rng=random.Random(1),
    )
    with pytest.raises(LocalProtocolError, match="sealed wire"):
        core.begin_view_change([1], 0.0)
    with pytest.raises(LocalProtocolError, match="sealed wire"):
        core.install_view(2, [("a", ("10.0.0.1", 10001))], 0.0)


def test_bad_join_states_and_views_are_refused() -> None:
    net = Net(["n0", "n1"])
    with pytest.raises(LocalProtocolError, match="not in the view"):
        net.cores["n0"].install_view(2, view(["n1"]), 0.0)
    for garbage in (b"", b"{}", b"[1,2]", b'{"members":[[1,"a","h",-1]],"next_id":2,"latest":0}'):
        with pytest.raises(DecodeError):
            JoinState.decode(garbage)
    state = net.cores["n0"].state_for_joiner(view(["n0", "n1", "n2"]))
    with pytest.raises(DecodeError, match="another view"):
        net.join("n2", state, 2, view(["n0", "n2"]))
    assert JoinState.decode(state).members[2] == Member(id=3, name="n2", addr=addr_of("n2"))


def test_a_joiner_ignores_late_data_of_the_views_before_it() -> None:
    """A copy of view 1's Data that reaches the joiner after it joined is not ordered
    there: the join state says it is old."""
    net = Net(["n0", "n1", "n2"])
    net.call("n0", "multicast", b"old")
    net.settle()
    assert net.wire == []  # nothing in flight: make a late copy by hand
    data = wire.encode(wire.DataMessage(sender=1, msg_id=1, data=b"old"))
    for name in list(net.cores):
        net.call(name, "begin_view_change", [1, 2, 3])
    net.settle()
    members = view(["n0", "n1", "n2", "n3"])
    state = net.cores["n1"].state_for_joiner(members)
    for name in ("n0", "n1", "n2"):
        net.call(name, "install_view", 2, members)
    net.join("n3", state, 2, members)
    net.wire.append(("n0", "n3", data))  # the late copy
    net.call("n2", "multicast", b"new")
    net.settle()
    assert net.delivered("n3") == [b"new"]
    assert net.cores["n3"].counters.late_data == 1 and net.cores["n3"].pending == 0
