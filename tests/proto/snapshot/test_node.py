"""Snapshots composed with ISIS on one socket: the FIFO rules at work, and the cut they give."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.proto.isis import Delivered, IsisConfig, IsisCore, members_from
from gossamer.proto.snapshot import SnapshotDone, SnapshotNode, check_cut
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import isis as wire


class Net:
    """``n`` SnapshotNodes over ISIS and the datagrams in flight between them."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.members = members_from([(f"n{i}", (f"10.0.0.{i}", 7000)) for i in range(1, n + 1)])
        self.sink = MemorySink()
        self.nodes: dict[int, SnapshotNode] = {}
        for m in self.members:
            tracer = Tracer(self.sink, run="t", node=m.name)
            core = IsisCore(
                IsisConfig(me=m.id, members=self.members),
                tracer=tracer,
                rng=random.Random(seed + m.id),
            )
            self.nodes[m.id] = SnapshotNode(core, tracer=tracer, rng=random.Random(seed - m.id))
        self.by_addr = {m.addr: m.id for m in self.members}
        self.wire: list[tuple[int, int, bytes]] = []
        self.delivered: dict[int, list[tuple[int, int]]] = {m.id: [] for m in self.members}
        self.parts: dict[int, dict[str, dict[str, Any]]] = {}
        self.now = 0.0

    def pump(self) -> None:
        for i, node in self.nodes.items():
            self.wire += [(i, self.by_addr[a], d) for d, a in node.datagrams_to_send()]
            for event in node.events_received():
                if isinstance(event, Delivered):
                    self.delivered[i].append((event.sender_id, event.msg_id))
                elif isinstance(event, SnapshotDone):
                    self.parts.setdefault(event.snapshot_id, {})[event.node] = event.to_json()

    def deliver_at(self, index: int) -> None:
        src, dst, data = self.wire.pop(index)
        self.nodes[dst].receive_datagram(data, self.members[src - 1].addr, self.now)
        self.pump()

    def deliver(self, pred: Any = lambda s, d, m: True) -> None:
        while True:
            for k, (s, d, b) in enumerate(self.wire):
                if pred(s, d, wire.decode(b)):
                    self.deliver_at(k)
                    break
            else:
                return

    def settle(self) -> None:
        while True:
            if self.wire:
                self.deliver_at(0)
                continue
            deadlines = [(dl, i) for i, n in self.nodes.items() if (dl := n.next_deadline())]
            if not deadlines:
                return
            self.now, i = min(deadlines)
            self.nodes[i].handle_timer(self.now)
            self.pump()


def is_marker(s: int, d: int, m: wire.IsisMessage) -> bool:
    return isinstance(m, wire.SnapshotMarker)


def test_a_marker_waits_for_the_data_before_it_and_new_data_waits_for_the_marker() -> None:
    net = Net(3)
    n1 = net.nodes[1]
    assert n1.multicast(11, 0.0) == 1
    net.pump()  # Data n1/1 in flight to 2 and 3
    sid = n1.initiate_snapshot(0.0)
    net.pump()
    assert not any(is_marker(s, d, wire.decode(b)) for s, d, b in net.wire)  # rule 1
    assert n1.multicast(12, 0.0) is None and n1.queued == 1  # rule 2: held back
    net.deliver(lambda s, d, m: isinstance(m, wire.DataMessage))
    net.deliver(lambda s, d, m: isinstance(m, wire.AckMessage))  # now the markers go
    markers = [(s, d) for s, d, b in net.wire if is_marker(s, d, wire.decode(b))]
    assert sorted(markers) == [(1, 2), (1, 3)]
    assert n1.queued == 1  # still held: the markers are not acknowledged yet
    net.settle()
    assert n1.queued == 0
    assert net.delivered[1] == net.delivered[2] == net.delivered[3] == [(1, 1), (1, 2)]
    parts = net.parts[sid]
    assert sorted(parts) == ["n1", "n2", "n3"] and check_cut(parts) == []
    # n1 had sent exactly one message at its cut, which both others had received.
    assert parts["n1"]["local_state"]["isis"]["msg_id"] == 1
    assert parts["n1"]["local_state"]["queued"] == []
    assert parts["n1"]["local_state"]["unread"] == []  # nobody queues deliveries here
    assert all(parts[n]["local_state"]["isis"]["received_from"] == {"n1": 1} for n in ("n2", "n3"))


def test_the_local_state_holds_the_deliveries_the_application_has_not_taken() -> None:
    net = Net(2)
    waiting = [(1, b"\x02\x00\x00\x07")]
    net.nodes[2].unread = lambda: waiting  # as a driver with a delivery queue sets it
    sid = net.nodes[1].initiate_snapshot(0.0)
    net.pump()
    net.settle()
    assert net.parts[sid]["n2"]["local_state"]["unread"] == [{"sender": 1, "data": "02000007"}]
    assert net.parts[sid]["n1"]["local_state"]["unread"] == []


def test_without_rule_1_a_marker_overtaking_data_breaks_the_cut_and_the_check_sees_it() -> None:
    net = Net(3)
    # Sabotage: pretend every channel is always drained, as the original's TCP markers did.
    net.nodes[1].snapshot._drained = lambda peer: True
    net.nodes[1].multicast(11, 0.0)
    net.pump()
    sid = net.nodes[1].initiate_snapshot(0.0)
    net.pump()
    net.deliver(is_marker)  # the markers overtake the Data
    net.settle()
    problems = check_cut(net.parts[sid])
    assert problems and "n1 had sent 1 messages when it recorded, n2 had received 0" in problems[0]


def test_markers_from_strangers_and_malformed_markers_are_dropped() -> None:
    net = Net(3)
    node = net.nodes[1]
    node.receive_datagram(
        wire.encode(wire.SnapshotMarker(sender=9, snapshot_id=1 << 16 | 1)), ("10.9.9.9", 1), 0.0
    )
    node.receive_datagram(
        wire.encode(wire.SnapshotMarker(sender=3, snapshot_id=2 << 16 | 1)),
        net.members[1].addr,
        0.0,
    )  # says 3, comes from 2
    node.receive_datagram(b"\x00\x00\x00\x06\x00", net.members[1].addr, 0.0)
    drops = [e for e in net.sink.select(layer="snapshot", kind="drop")]
    assert len(drops) == 3 and node.snapshot.in_progress == []


def test_remove_member_reaches_both_cores() -> None:
    net = Net(3)
    sid = net.nodes[1].initiate_snapshot(0.0)
    net.pump()
    net.wire = [w for w in net.wire if w[0] != 3 and w[1] != 3]
    net.nodes[1].remove_member(3, 0.0)
    net.nodes[2].remove_member(3, 0.0)
    net.pump()
    net.settle()
    assert net.nodes[1].inner.view == (1, 2)
    assert net.parts[sid]["n1"]["channels"]["n3"]["closed_by"] == "removed"


@settings(max_examples=40)
@given(st.integers(0, 2**32), st.floats(0.0, 0.4), st.floats(0.0, 0.3))
def test_any_delivery_order_loss_and_duplication_gives_consistent_cuts(
    seed: int, loss: float, dup: float
) -> None:
    """Datagrams are delivered in a random order, some lost, some duplicated, with
    multicasts and snapshots interleaved: every snapshot is a consistent cut and the
    total order holds."""
    rng = random.Random(seed)
    net = Net(4, seed=seed)
    actions = [("m", i) for i in range(1, 5) for _ in range(3)] + [("s", i) for i in (1, 3)]
    rng.shuffle(actions)
    steps = 0
    while steps < 5000:
        steps += 1
        if actions and rng.random() < 0.3:
            kind, who = actions.pop()
            if kind == "m":
                net.nodes[who].multicast(100 * who + len(actions), net.now)
            else:
                net.nodes[who].initiate_snapshot(net.now)
            net.pump()
        elif net.wire:
            k = rng.randrange(len(net.wire))
            if rng.random() < loss:
                net.wire.pop(k)
            else:
                if rng.random() < dup:
                    net.wire.append(net.wire[k])
                net.deliver_at(k)
        else:
            deadlines = [(dl, i) for i, n in net.nodes.items() if (dl := n.next_deadline())]
            if not deadlines:
                if not actions:
                    break
                continue
            net.now, i = min(deadlines)
            net.nodes[i].handle_timer(net.now)
            net.pump()
    assert len(net.parts) == 2
    for sid, parts in net.parts.items():
        assert sorted(parts) == ["n1", "n2", "n3", "n4"], sid
        assert check_cut(parts) == [], (seed, sid)
    orders = list(net.delivered.values())
    assert all(o == orders[0] for o in orders) and len(orders[0]) == 12
