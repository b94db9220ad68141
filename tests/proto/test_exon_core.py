"""The Exon core without I/O: cores joined by a seeded in-memory network that loses,
duplicates and reorders datagrams; every message arrives exactly once."""

from __future__ import annotations

import heapq
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer._types import Address
from gossamer.errors import ConfigError, LocalProtocolError, NoRouteError
from gossamer.proto.link.exon_core import ExonConfig, ExonCore, ExonMessage, _FreeSlots
from gossamer.wire import exon_transport as wire


class Net:
    """Cores at fake addresses; datagrams take 1-20 ms, and may be lost or doubled.
    ``drop_if`` drops chosen datagrams (by decoded content)."""

    def __init__(self, seed: int, *, loss: float = 0.0, dup: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.loss, self.dup = loss, dup
        self.now = 0.0
        self.cores: dict[Address, ExonCore] = {}
        self.flight: list[tuple[float, int, bytes, Address, Address]] = []
        self.seq = 0
        self.lost = 0
        self.delivered: dict[str, list[ExonMessage]] = {}
        self.drop_if = None  # type: ignore[var-annotated]

    def add(self, core: ExonCore, port: int) -> Address:
        addr = ("10.0.0.1", port)
        self.cores[addr] = core
        self.delivered[core.node_id] = []
        return addr

    def _collect(self) -> None:
        for addr, core in self.cores.items():
            self.delivered[core.node_id] += core.events_received()
            for data, to in core.datagrams_to_send():
                if self.drop_if is not None and self.drop_if(wire.decode(data)):
                    self.lost += 1
                    continue
                if self.rng.random() < self.loss:
                    self.lost += 1
                    continue
                for _ in range(2 if self.rng.random() < self.dup else 1):
                    self.seq += 1
                    due = self.now + self.rng.uniform(0.001, 0.02)
                    heapq.heappush(self.flight, (due, self.seq, data, addr, to))

    def run(self, until: float) -> None:
        self._collect()
        while True:
            timers = [(c.next_deadline(), a) for a, c in self.cores.items()]
            due_timers = [(t, a) for t, a in timers if t is not None]
            nxt = min([t for t, _ in due_timers] + ([self.flight[0][0]] if self.flight else []),
                      default=None)
            if nxt is None or nxt > until:
                self.now = until
                return
            self.now = max(self.now, nxt)
            if self.flight and self.flight[0][0] <= self.now:
                _, _, data, src, dst = heapq.heappop(self.flight)
                self.cores[dst].receive_datagram(data, src, self.now)
            for t, a in due_timers:
                if t <= self.now:
                    self.cores[a].handle_timer(self.now)
            self._collect()

    def send(self, core: ExonCore, to: str, data: bytes) -> None:
        core.send(to, data, self.now)
        self._collect()


def _pair(net: Net, config: ExonConfig | None = None) -> tuple[ExonCore, ExonCore]:
    a, b = ExonCore("a", config), ExonCore("b", config)
    addr_a, addr_b = net.add(a, 1), net.add(b, 2)
    a.register("b", addr_b)
    b.register("a", addr_a)
    return a, b


@pytest.mark.parametrize("seed", range(4))
def test_exactly_once_under_loss_duplication_and_reordering(seed: int) -> None:
    net = Net(seed, loss=0.2, dup=0.1)
    a, b = _pair(net, ExonConfig(in_transit=8, slots=16))
    sent = [b"m%d" % i for i in range(300)]
    for i, data in enumerate(sent):
        net.send(a, "b", data)
        net.send(b, "a", data + b"r")
        if i % 10 == 0:
            net.run(net.now + 0.01)
    net.run(net.now + 60)
    assert Counter(m.data for m in net.delivered["b"]) == Counter(sent)
    assert Counter(m.data for m in net.delivered["a"]) == Counter(d + b"r" for d in sent)
    assert {m.node for m in net.delivered["b"]} == {"a"}
    assert a.pending("b") == 0 and b.pending("a") == 0
    assert net.lost > 0 and a.counters["retransmissions"] > 0 and b.counters["duplicates"] > 0
    # Datagrams took 1-20 ms each: some messages overtook others.
    assert [m.data for m in net.delivered["b"]] != sent


def test_the_window_bounds_tokens_in_flight() -> None:
    net = Net(1)
    a, _ = _pair(net, ExonConfig(in_transit=4, slots=8))
    for i in range(20):
        a.send("b", b"%d" % i, 0.0)
    net.run(0.0005)  # REQSLOTS out, SLOTS not back yet
    assert a.pending("b") == 20 and a.counters["tokens_sent"] == 0
    net.run(0.03)
    assert a.counters["tokens_sent"] >= 4
    net.run(5.0)
    assert len(net.delivered["b"]) == 20


def test_records_close_and_reopen_with_a_larger_clock() -> None:
    net = Net(2)
    a, b = _pair(net, ExonConfig(in_transit=4, slots=4))
    net.send(a, "b", b"one")
    net.run(5.0)
    assert [m.data for m in net.delivered["b"]] == [b"one"]
    # Idle and holding its N spare slots, the sender closed its record, and the
    # receiver forgot its record when the closing REQSLOTS arrived.
    assert a.pending("b") == 0 and not a._sends and not b._receives
    assert a.clock > 0
    net.send(a, "b", b"two")
    net.run(10.0)
    assert [m.data for m in net.delivered["b"]] == [b"one", b"two"]


def _lose_first_close(net: Net) -> None:
    state = {"dropped": 0}

    def drop(d: wire.ExonDatagram) -> bool:
        body = d.body
        if isinstance(body, wire.ReqSlots) and body.n == 0 and not state["dropped"]:
            state["dropped"] = 1
            return True
        return False

    net.drop_if = drop


@pytest.mark.parametrize("renew", [True, False])
def test_a_lost_close_with_the_originals_numbering(renew: bool) -> None:
    """The original numbers a new send record's TOKENs from 0; if its previous closing
    REQSLOTS was lost, the stale receive record has used slot 0 already: the message
    is acknowledged and never delivered, unless the receiver renews its record."""
    net = Net(3)
    a = ExonCore("a", ExonConfig(in_transit=4, slots=4, original_numbering=True))
    b = ExonCore("b", ExonConfig(in_transit=4, slots=4, renew_records=renew))
    a.register("b", net.add(b, 2))
    b.register("a", net.add(a, 1))
    _lose_first_close(net)
    net.send(a, "b", b"one")
    net.run(5.0)
    assert not a._sends and b._receives  # the close was lost: b kept its record
    net.send(a, "b", b"two")
    net.run(10.0)
    assert a.pending("b") == 0  # acknowledged either way
    got = [m.data for m in net.delivered["b"]]
    if renew:
        assert got == [b"one", b"two"] and b.counters["records_renewed"] == 1
    else:
        assert got == [b"one"] and b.counters["duplicates"] == 1


def test_our_numbering_survives_a_lost_close_at_an_original_receiver() -> None:
    net = Net(4)
    a = ExonCore("a", ExonConfig(in_transit=4, slots=4))
    b = ExonCore("b", ExonConfig(in_transit=4, slots=4, renew_records=False))
    a.register("b", net.add(b, 2))
    b.register("a", net.add(a, 1))
    _lose_first_close(net)
    for data in (b"one", b"two"):
        net.send(a, "b", data)
        net.run(net.now + 5.0)
    assert [m.data for m in net.delivered["b"]] == [b"one", b"two"]


def test_node_ids_addresses_and_refusals() -> None:
    net = Net(5)
    a, b = _pair(net)
    with pytest.raises(NoRouteError):
        a.send("nobody", b"x", 0.0)
    with pytest.raises(LocalProtocolError, match="exceeds"):
        a.send("b", b"x" * (a.max_message("b") + 1), 0.0)
    a.send("a", b"self", 0.0)  # to itself: no network
    assert a.events_received() == [ExonMessage("a", b"self")] and not a.datagrams_to_send()
    # A datagram for another node id is dropped; one from a new address moves the id.
    b.receive_datagram(wire.encode(wire.ExonDatagram("a", "zed", wire.Slots(0, 0, 1))),
                       ("10.0.0.9", 9), 0.0)
    assert b.counters["not_for_me"] == 1 and b.addresses["a"] == ("10.0.0.1", 1)
    b.receive_datagram(wire.encode(wire.ExonDatagram("a", "b", wire.Ack(0, (1,)))),
                       ("10.0.0.9", 9), 0.0)
    assert b.addresses["a"] == ("10.0.0.9", 9) and b.counters["stale"] == 1
    b.receive_datagram(b"\x00junk", ("10.0.0.9", 9), 0.0)
    assert b.counters["malformed"] == 1
    # Slots past the largest number a datagram carries are refused, both ways.
    top = 2**63 - 1
    b.receive_datagram(wire.encode(wire.ExonDatagram("a", "b", wire.ReqSlots(top, 1, 0, 1.0))),
                       ("10.0.0.9", 9), 0.0)
    assert b.counters["malformed"] == 2 and not b._receives and not b.datagrams_to_send()
    a.clock = 5
    a.send("b", b"x", 0.0)
    a.receive_datagram(wire.encode(wire.ExonDatagram("b", "a", wire.Slots(5, 0, top))),
                       ("10.0.0.1", 2), 0.0)
    assert a.counters["malformed"] == 1 and a.counters["tokens_sent"] == 0


def test_an_idle_receive_record_probes_and_is_forgotten() -> None:
    net = Net(6)
    a, b = _pair(net, ExonConfig(in_transit=4, slots=4, probe_after=2.0))
    # b granted slots [0, 4) to a sender that then restarted (its clock, persisted,
    # is past them) before the SLOTS arrived.
    b.receive_datagram(
        wire.encode(wire.ExonDatagram("a", "b", wire.ReqSlots(0, 4, 0, 10.0))), ("10.0.0.1", 1), 0.0
    )
    b.datagrams_to_send()  # the SLOTS never reach a
    a.clock = 4
    assert b._receives
    net.run(1.9)
    assert b._receives
    net.run(5.0)
    # The probe, SLOTS(n=0), reached a, which has no record: its closing REQSLOTS
    # (n=0, l=4) freed the slots and b forgot the record.
    assert not b._receives and b.counters["slots_sent"] == 2


@given(st.lists(st.tuples(st.sampled_from(["extend", "take", "drop"]),
                          st.integers(min_value=0, max_value=80)), max_size=60))
def test_free_slots_behave_like_the_originals_sliding_bitmap(ops: list[tuple[str, int]]) -> None:
    """Against a plain set: extend adds [end, n), take uses one, drop frees those below."""
    free, model, end = _FreeSlots(), set(), 0
    for op, n in ops:
        if op == "extend":
            free.extend_to(n)
            if n > end:
                model |= set(range(end, n))
                end = n
        elif op == "take":
            assert free.take(n) == (n in model)
            model.discard(n)
        else:
            free.drop_below(n)
            model = {s for s in model if s >= n}
        assert len(free) == len(model) and free.empty() == (not model)
        assert all(lo < hi for lo, hi in zip(free.los, free.his, strict=True))
        assert all(a < b for a, b in zip(free.his, free.los[1:], strict=False))


_numbers = st.one_of(st.integers(0, 40), st.just(2**63 - 1), st.integers(0, 2**63 - 1))
_bodies = st.one_of(
    st.builds(wire.ReqSlots, _numbers, _numbers, _numbers, st.floats(0, 1e6)),
    st.builds(wire.Slots, _numbers, _numbers, _numbers),
    st.builds(wire.Token, _numbers, _numbers, st.binary(max_size=8)),
    st.builds(wire.Ack, _numbers, st.lists(_numbers, min_size=1, max_size=3).map(tuple)),
)


@given(st.lists(st.tuples(st.sampled_from(["a", "c"]), _bodies, st.floats(0, 100)),
                max_size=40))
def test_any_datagram_sequence_leaves_the_core_working(
    inputs: list[tuple[str, wire.Body, float]],
) -> None:
    """Whatever well-formed datagrams arrive, in whatever order, the core neither raises
    nor sends anything the codec cannot decode."""
    core = ExonCore("b", ExonConfig(in_transit=2, slots=3))
    core.register("a", ("10.0.0.1", 1))
    now = 0.0
    core.send("a", b"mine", now)
    for src, body, step in inputs:
        now += step
        core.receive_datagram(wire.encode(wire.ExonDatagram(src, "b", body)), ("10.0.0.1", 1), now)
        core.handle_timer(now)
        if step > 50:
            core.send("a", b"more", now)
        for data, _ in core.datagrams_to_send():
            assert wire.decode(data).src == "b"
        core.events_received()


@pytest.mark.parametrize(
    ("values", "reason"),
    [({"in_transit": 0}, "in_transit"), ({"slots": -1}, "slots"),
     ({"initial_rtt": 0.0}, "initial_rtt"), ({"timeout_min": 2.0}, "timeout_min <= timeout_max")],
)
def test_config_refuses_what_cannot_work(values: dict[str, float], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        ExonConfig(**values)  # type: ignore[arg-type]
