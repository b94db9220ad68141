"""The ISIS core on its own: no network, no clock; every datagram moved by hand.

``Group`` holds a few cores and the datagrams in flight between them, so a test can
deliver, duplicate, reorder or lose exactly the datagrams it wants.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from typing import Any

import orjson
import pytest

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.isis import (
    Delivered,
    Discarded,
    IsisConfig,
    IsisCore,
    Member,
    MemberRemoved,
    members_from,
    payload_digest,
)
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import isis as wire
from gossamer.wire.buffer import Buffer
from gossamer.wire.mode import WireMode

Pred = Callable[[int, int, wire.IsisMessage], bool]


def everything(src: int, dst: int, msg: wire.IsisMessage) -> bool:
    return True


def u32(value: int) -> bytes:
    """The original's uint32 payload."""
    return value.to_bytes(4, "big")


def first(data: bytes) -> wire.IsisMessage:
    """The first message of a datagram (a batch holds several)."""
    return wire.pull_isis(Buffer(data))


class Group:
    """``n`` members ``n1``..``n<n>`` (ids 1..n) and the datagrams between them."""

    def __init__(self, n: int, *, seed: int = 0, **tunables: Any) -> None:
        self.members = members_from([(f"n{i}", (f"10.0.0.{i}", 7000)) for i in range(1, n + 1)])
        self.sink = MemorySink()
        self.cores = {
            m.id: IsisCore(
                IsisConfig(me=m.id, members=self.members, **tunables),
                tracer=Tracer(self.sink, run="t", node=m.name),
                rng=random.Random(seed + m.id),
            )
            for m in self.members
        }
        self.by_addr = {m.addr: m.id for m in self.members}
        self.wire: list[tuple[int, int, bytes]] = []
        self.events: dict[int, list[object]] = {m.id: [] for m in self.members}
        self.dead: set[int] = set()
        self.now = 0.0

    def addr(self, member: int) -> tuple[str, int]:
        return self.members[member - 1].addr

    def pump(self) -> None:
        for i, core in self.cores.items():
            for data, addr in core.datagrams_to_send():
                if i not in self.dead:
                    self.wire.append((i, self.by_addr[addr], data))
            self.events[i].extend(core.events_received())

    def multicast(self, member: int, data: bytes | int) -> int:
        msg_id = self.cores[member].multicast(data, self.now)
        self.pump()
        return msg_id

    def in_flight(self, pred: Pred = everything) -> list[tuple[int, int, wire.IsisMessage]]:
        return [(s, d, first(b)) for s, d, b in self.wire if pred(s, d, first(b))]

    def deliver(self, pred: Pred = everything, *, keep: bool = False) -> int:
        """Deliver (and unless ``keep``, remove) the matching datagrams, oldest first."""
        chosen = [item for item in self.wire if pred(item[0], item[1], first(item[2]))]
        if not keep:
            self.wire = [item for item in self.wire if item not in chosen]
        for src, dst, data in chosen:
            if dst not in self.dead:
                self.cores[dst].receive_datagram(data, self.addr(src), self.now)
        self.pump()
        return len(chosen)

    def lose(self, pred: Pred = everything) -> None:
        self.wire = [i for i in self.wire if not pred(i[0], i[1], first(i[2]))]

    def settle(self, limit: float = 60.0) -> None:
        """Deliver everything, firing timers, until nothing is left to do."""
        while self.now <= limit:
            if self.wire:
                self.deliver()
                continue
            deadlines = [
                (d, i)
                for i, c in self.cores.items()
                if i not in self.dead and (d := c.next_deadline()) is not None
            ]
            if not deadlines:
                return
            self.now, i = min(deadlines)
            self.cores[i].handle_timer(self.now)
            self.pump()

    def delivered(self, member: int) -> list[tuple[int, int, int, int]]:
        return [
            (e.sender_id, e.msg_id, e.final_seq, e.proposer)
            for e in self.events[member]
            if isinstance(e, Delivered)
        ]

    def crash(self, member: int) -> None:
        self.dead.add(member)
        self.wire = [i for i in self.wire if i[0] != member]

    def remove(self, member: int, at: Collection[int] | None = None) -> None:
        for i in at if at is not None else self.cores:
            if i not in self.dead and i != member:
                self.cores[i].remove_member(member, self.now)
        self.pump()


def of_type(kind: type[wire.IsisMessage], *, dst: int | None = None) -> Pred:
    return lambda s, d, m: isinstance(m, kind) and (dst is None or d == dst)


# -- the normal exchange ----------------------------------------------------------------


def test_one_multicast_goes_data_ack_seq_seqack_and_is_delivered_everywhere() -> None:
    g = Group(3)
    assert g.multicast(1, 11) == 1
    datas = g.in_flight()
    # The sender's own copy is looped back inside the core: two datagrams, not three.
    assert [(s, d, m) for s, d, m in datas] == [
        (1, 2, wire.DataMessage(sender=1, msg_id=1, data=u32(11))),
        (1, 3, wire.DataMessage(sender=1, msg_id=1, data=u32(11))),
    ]
    assert all(len(b) == 16 for _, _, b in g.wire)
    g.deliver()
    acks = g.in_flight()
    assert {(s, d) for s, d, _ in acks} == {(2, 1), (3, 1)}
    assert all(isinstance(m, wire.AckMessage) and m.proposed_seq == 1 for _, _, m in acks)
    g.deliver()
    seqs = g.in_flight()
    # Everybody proposed 1; the tie goes to the smallest proposer, 1.
    assert (
        all(
            m == wire.SeqMessage(sender=1, msg_id=1, final_seq=1, final_seq_proposer=1)
            for _, _, m in seqs
        )
        and len(seqs) == 2
    )
    g.deliver()
    assert all(isinstance(m, wire.SeqAckMessage) for _, _, m in g.in_flight())
    g.deliver()
    assert g.wire == []
    for i in (1, 2, 3):
        assert g.delivered(i) == [(1, 1, 1, 1)]
        assert g.cores[i].quiescent and g.cores[i].next_deadline() is None
    (event,) = [e for e in g.events[2] if isinstance(e, Delivered)]
    assert event.log_line() == (
        "delivering dataMsg: type: 1, sender: 1, msg_id: 1, data: 11, "
        "finalSeqId: 1, finalSeqProposer: 1"
    )
    kinds = [(e.node, e.kind) for e in g.sink.events]
    assert ("n1", "multicast") in kinds and ("n1", "sequence") in kinds
    deliver = next(e for e in g.sink.events if e.kind == "deliver" and e.node == "n3")
    assert (deliver.msg, deliver.seq, deliver.attrs["proposer"]) == ("n1/1", 1, "1")


def test_a_stop_names_what_was_held_back_and_what_was_still_awaited() -> None:
    g = Group(3)
    g.multicast(1, 11)  # n1/1 ordered and delivered everywhere
    g.settle()
    g.multicast(1, 12)  # n1/2: its Data reaches n2 only, and no Ack comes back
    g.deliver(of_type(wire.DataMessage, dst=2))
    g.lose()
    g.multicast(3, 13)  # n3/1: nothing of it leaves n3
    g.lose()
    for core in g.cores.values():
        core.trace_stop(g.now)
    stops = {e.node: e.attrs for e in g.sink.events if e.kind == "stop"}
    assert stops == {
        "n1": {"held": "n1/2", "outstanding": "n1/2", "view": "n1,n2,n3"},
        "n2": {"held": "n1/2", "outstanding": "", "view": "n1,n2,n3"},
        "n3": {"held": "n3/1", "outstanding": "n3/1", "view": "n1,n2,n3"},
    }


@pytest.mark.parametrize(
    ("proposals", "final"),
    [
        ({2: 5, 3: 7}, (7, 3)),  # the largest proposal wins
        ({2: 5, 3: 5}, (5, 2)),  # a tie goes to the smallest proposer
        ({2: 1, 3: 1}, (1, 1)),  # the sender's own proposal (1) ties too, and is smallest
    ],
)
def test_final_sequence_is_the_largest_proposal_ties_to_the_smallest_proposer(
    proposals: dict[int, int], final: tuple[int, int]
) -> None:
    g = Group(3)
    g.multicast(1, 11)
    g.wire.clear()
    for proposer, proposal in proposals.items():
        ack = wire.AckMessage(sender=1, msg_id=1, proposed_seq=proposal, proposer=proposer)
        g.cores[1].receive_datagram(wire.encode(ack), g.addr(proposer), 0.0)
    g.pump()
    (seq,) = {m for _, _, m in g.in_flight()}
    assert isinstance(seq, wire.SeqMessage)
    assert (seq.final_seq, seq.final_seq_proposer) == final


def test_messages_are_delivered_in_final_order_whatever_order_the_seqs_arrive() -> None:
    g = Group(3)
    g.multicast(1, 11)
    g.multicast(2, 21)
    # Member 3 gets 2's Data first, then 1's: it proposes 1 for n2/1 and 2 for n1/1.
    g.deliver(lambda s, d, m: s == 2 and d == 3)
    g.deliver(of_type(wire.DataMessage))
    g.deliver(of_type(wire.AckMessage))
    seqs = g.in_flight(of_type(wire.SeqMessage))
    finals = {(m.sender, m.final_seq, m.final_seq_proposer) for _, _, m in seqs}  # type: ignore[union-attr]
    assert len(finals) == 2
    # Deliver the Seqs newest-first everywhere: the order must still be by final.
    g.wire.reverse()
    g.settle()
    orders = {i: [(s, m) for s, m, _, _ in g.delivered(i)] for i in (1, 2, 3)}
    assert orders[1] == orders[2] == orders[3] and len(orders[1]) == 2
    by_final = sorted(g.delivered(1), key=lambda d: (d[2], d[3]))
    assert g.delivered(1) == by_final


# -- every duplicate case -----------------------------------------------------------------


def test_duplicate_data_before_the_seq_gets_the_same_ack_again() -> None:
    g = Group(3)
    g.multicast(1, 11)
    g.multicast(3, 31)  # so that member 2's next proposal would differ
    g.deliver(lambda s, d, m: d == 2 and s == 1, keep=True)
    first = g.in_flight(lambda s, d, m: s == 2 and isinstance(m, wire.AckMessage))
    g.lose(of_type(wire.AckMessage))  # the Ack is lost ...
    g.deliver(lambda s, d, m: d == 2 and s == 3)  # ... member 2 proposes for another one
    g.lose(of_type(wire.AckMessage))
    g.deliver(lambda s, d, m: d == 2 and s == 1)  # ... and the retransmitted Data arrives
    again = g.in_flight(lambda s, d, m: s == 2 and isinstance(m, wire.AckMessage))
    assert [m for _, _, m in again] == [m for _, _, m in first]  # same proposal
    assert g.cores[2].counters.duplicate_data == 1
    g.settle()
    assert g.delivered(1) == g.delivered(2) == g.delivered(3) and len(g.delivered(1)) == 2


def test_late_data_after_the_seq_is_ignored_without_crashing() -> None:
    """Reference (a) bug 2: a Data overtaken by its Seq made the original throw."""
    g = Group(3)
    g.multicast(1, 11)
    late = [item for item in g.wire if item[1] == 2]
    g.settle()
    for src, dst, data in late + late:
        g.cores[dst].receive_datagram(data, g.addr(src), g.now)
    g.pump()
    assert g.wire == [] and g.cores[2].counters.late_data == 2
    assert g.delivered(2) == [(1, 1, 1, 1)]


def test_data_of_a_message_ordered_but_not_yet_delivered_is_not_re_added() -> None:
    """Reference (a) bug 1: the original erased the wrong id; a duplicate Data of a message
    marked deliverable but blocked behind another was accepted as new, blocked the queue,
    and a duplicate Seq then delivered it twice."""
    g = Group(3)
    g.multicast(1, 11)  # A
    g.multicast(3, 31)  # B
    g.deliver(of_type(wire.DataMessage))
    g.deliver(of_type(wire.AckMessage))

    def seq_a(s: int, d: int, m: wire.IsisMessage) -> bool:
        return isinstance(m, wire.SeqMessage) and m.sender == 1

    def seq_b(s: int, d: int, m: wire.IsisMessage) -> bool:
        return isinstance(m, wire.SeqMessage) and m.sender == 3

    # At member 2, B's Seq arrives first; A (undeliverable) holds B back if A sorts first.
    g.deliver(lambda s, d, m: d == 2 and seq_b(s, d, m), keep=True)
    dup_b = wire.encode(wire.DataMessage(sender=3, msg_id=1, data=u32(31)))
    g.cores[2].receive_datagram(dup_b, g.addr(3), g.now)  # duplicate Data of B
    g.pump()
    g.deliver(lambda s, d, m: d == 2 and seq_a(s, d, m), keep=True)
    g.deliver(lambda s, d, m: d == 2 and seq_b(s, d, m))  # duplicate Seq of B
    g.settle()
    delivered = g.delivered(2)
    assert len(delivered) == 2 and len({(s, m) for s, m, _, _ in delivered}) == 2
    assert delivered == g.delivered(1) == g.delivered(3)
    assert g.cores[2].pending == 0 and g.cores[2].counters.duplicate_seqs >= 1


def test_duplicate_and_late_acks_are_ignored() -> None:
    g = Group(3)
    g.multicast(1, 11)
    g.deliver(of_type(wire.DataMessage))
    acks = list(g.wire)
    g.deliver(lambda s, d, m: s == 2)
    g.deliver(lambda s, d, m: s == 2, keep=False)  # nothing left from 2
    for src, dst, data in acks[:1]:  # a duplicate of 2's Ack while still collecting
        g.cores[dst].receive_datagram(data, g.addr(src), g.now)
    g.pump()
    assert g.in_flight(of_type(wire.SeqMessage)) == []
    g.deliver()  # 3's Ack: all in, the Seq goes out once
    assert len(g.in_flight(of_type(wire.SeqMessage))) == 2
    for src, dst, data in acks:  # late Acks after the Seq
        g.cores[dst].receive_datagram(data, g.addr(src), g.now)
    g.pump()
    assert len(g.in_flight(of_type(wire.SeqMessage))) == 2
    assert g.cores[1].counters.duplicate_acks == 3
    g.settle()
    assert len(g.delivered(1)) == 1


def test_duplicate_seq_is_re_acknowledged_never_re_delivered() -> None:
    g = Group(3)
    g.multicast(1, 11)
    g.deliver(of_type(wire.DataMessage))
    g.deliver(of_type(wire.AckMessage))
    seqs = list(g.wire)
    g.deliver(of_type(wire.SeqMessage))
    g.lose(of_type(wire.SeqAckMessage))  # the SeqAcks are lost: the Seq comes again
    for src, dst, data in seqs:
        g.cores[dst].receive_datagram(data, g.addr(src), g.now)
    g.pump()
    assert len(g.in_flight(of_type(wire.SeqAckMessage))) == 2
    g.settle()
    for i in (2, 3):
        assert g.delivered(i) == [(1, 1, 1, 1)] and g.cores[i].counters.duplicate_seqs == 1
    assert g.cores[1].quiescent


def test_duplicate_seq_ack_is_ignored() -> None:
    g = Group(3)
    g.multicast(1, 11)
    g.deliver(of_type(wire.DataMessage))
    g.deliver(of_type(wire.AckMessage))
    g.deliver(of_type(wire.SeqMessage))
    seq_acks = list(g.wire)
    g.deliver()
    for src, dst, data in seq_acks:
        g.cores[dst].receive_datagram(data, g.addr(src), g.now)
    assert g.cores[1].counters.duplicate_seq_acks == 2 and g.cores[1].quiescent


def test_answers_about_unknown_messages_are_counted_and_traced_not_raised() -> None:
    g = Group(3)
    core = g.cores[1]
    bogus: list[wire.IsisMessage] = [
        wire.SeqMessage(sender=2, msg_id=9, final_seq=3, final_seq_proposer=2),
        wire.AckMessage(sender=1, msg_id=9, proposed_seq=3, proposer=2),
        wire.SeqAckMessage(sender=1, msg_id=9, ack_sender=2),
    ]
    for msg in bogus:
        core.receive_datagram(wire.encode(msg), g.addr(2), 0.0)
    assert core.counters.unknown == 3
    assert core.datagrams_to_send() == [] and core.events_received() == []
    reasons = [e.attrs["reason"] for e in g.sink.select(kind="drop")]
    assert reasons == [
        "seq for a message never received",
        "ack for a message never sent",
        "seq ack for a message never sent",
    ]


def test_malformed_unknown_sender_spoofed_and_marker_datagrams_are_dropped() -> None:
    g = Group(3)
    core = g.cores[1]
    data = wire.encode(wire.DataMessage(sender=2, msg_id=1, data=u32(5)))
    core.receive_datagram(b"\x00\x00\x00\x01\x00", g.addr(2), 0.0)  # truncated
    core.receive_datagram(b"\x00\x00\x00\x63" + bytes(12), g.addr(2), 0.0)  # type 99
    core.receive_datagram(data + b"x", g.addr(2), 0.0)  # trailing byte
    core.receive_datagram(data, ("10.9.9.9", 7000), 0.0)  # not a member's address
    core.receive_datagram(data, g.addr(3), 0.0)  # says sender 2, comes from 3
    core.receive_datagram(wire.encode(wire.SnapshotMarker(sender=2, snapshot_id=1)), g.addr(2), 0.0)
    c = core.counters
    assert (c.malformed, c.unknown_sender, c.spoofed) == (3, 1, 1)
    assert core.datagrams_to_send() == [] and core.pending == 0
    drops = g.sink.select(kind="drop")
    assert len(drops) == 6
    assert drops[3].peer == "10.9.9.9:7000" and drops[3].attrs["reason"] == "unknown sender"
    assert drops[5].attrs["type"] == "SnapshotMarkerMsg"


# -- retransmission ---------------------------------------------------------------------


def timer_sends(g: Group, member: int, until: float) -> list[tuple[float, int]]:
    """Fire ``member``'s timers up to ``until``; what it sent, when, to whom."""
    sends = []
    while (deadline := g.cores[member].next_deadline()) is not None and deadline < until:
        g.now = deadline
        g.cores[member].handle_timer(deadline)
        g.pump()
        sends += [(round(deadline, 6), d) for _, d, _ in g.wire]
        g.wire.clear()
    return sends


def test_data_is_retransmitted_only_to_the_silent_member_on_the_spec_schedule() -> None:
    # The original wire keeps the spec's schedule, per message.
    g = Group(3, wire=WireMode.ORIGINAL)
    g.multicast(1, 11)
    g.deliver(lambda s, d, m: d == 2)
    g.deliver(lambda s, d, m: s == 2)  # member 2's Ack arrives; member 3 hears nothing
    g.wire.clear()
    sends = timer_sends(g, 1, 6.5)
    assert sends == [(0.2, 3), (0.6, 3), (1.4, 3), (3.0, 3), (6.2, 3), (6.4, 3)]
    retransmits = g.sink.select(kind="retransmit")
    assert [e.attrs["to"] for e in retransmits] == ["n3"] * 6
    assert retransmits[0].attrs["type"] == "DataMsg" and retransmits[0].msg == "n1/1"
    assert "cause" not in retransmits[0].attrs  # the original wire's trace, unchanged
    assert g.cores[1].counters.retransmissions == 6


def exchange(g: Group, rtt: float, *, lose: Pred | None = None) -> None:
    """Deliver everything in flight, one hop every ``rtt / 2`` seconds (losing what
    ``lose`` matches), until nothing is in flight; timers are not fired."""
    while g.wire:
        g.now += rtt / 2
        if lose is not None:
            g.lose(lose)
        g.deliver()


def test_sealed_timeouts_come_from_the_measured_round_trip_and_back_off_per_member() -> None:
    g = Group(3, retransmit_initial=0.2, retransmit_granularity=0.001)
    for value in range(10):  # ten exchanges with a round trip of exactly 10 ms
        g.multicast(1, value)
        exchange(g, 0.010)
    rtt = g.cores[1]._tx.estimator(3)  # type: ignore[union-attr]
    assert rtt.srtt == pytest.approx(0.010)
    # At most one sample per round trip (Acks and SeqAcks, about twenty); RTTVAR decays
    # by 3/4 per sample from 5 ms, and the timeout is SRTT + max(G, 4 RTTVAR).
    assert 0.005 * 0.75**20 <= rtt.rttvar <= 0.005 * 0.75**15
    assert rtt.rto == pytest.approx(0.010 + 0.001)
    start = g.now
    g.multicast(1, 99)
    g.deliver(lambda s, d, m: d == 2)
    g.deliver(lambda s, d, m: s == 2)  # member 3 hears nothing from here on
    g.wire.clear()
    sends = [(round(t - start, 6), d) for t, d in timer_sends(g, 1, start + 0.2)]
    timeout = round(rtt.rto, 6)
    # One timeout, then doubling while member 3 stays silent; only member 3 is sent to.
    assert sends == [
        (round(timeout * (2**k - 1), 6), 3) for k in range(1, 5) if timeout * (2**k - 1) < 0.2
    ]
    assert sends[0][0] < 0.02  # not the spec's 200 ms
    assert {e.attrs["cause"] for e in g.sink.select(kind="retransmit")} == {"timeout"}


def test_sealed_repairs_a_lost_data_as_soon_as_a_later_answer_shows_the_gap() -> None:
    g = Group(3)
    for value in range(5):  # round trips of 10 ms measured
        g.multicast(1, value)
        exchange(g, 0.010)
    g.multicast(1, 100)
    g.lose(of_type(wire.DataMessage, dst=3))  # member 3 never hears of message 6
    g.now += 0.005
    g.multicast(1, 101)  # message 7, 5 ms later
    g.now += 0.005
    g.deliver(of_type(wire.DataMessage))  # 7 reaches 2 and 3
    g.now += 0.005
    g.deliver(of_type(wire.AckMessage, dst=1))  # 3's Ack of 7 shows 6 lost: sent again
    resent = g.in_flight(of_type(wire.DataMessage, dst=3))
    assert [m.msg_id for _, _, m in resent] == [6]  # type: ignore[union-attr]
    assert g.now < 0.2 + 0.015  # no timer fired: far sooner than any timeout
    (repair,) = g.sink.select(kind="retransmit")
    assert repair.attrs["cause"] == "gap" and repair.msg == "n1/6" and repair.attrs["to"] == "n3"
    exchange(g, 0.010)
    assert sorted(d[1] for d in g.delivered(3))[-2:] == [6, 7]
    assert all(g.delivered(i) == g.delivered(1) for i in (2, 3))


def test_seq_is_retransmitted_until_every_seq_ack() -> None:
    g = Group(3)
    g.multicast(1, 11)
    g.deliver(of_type(wire.DataMessage))
    g.deliver(of_type(wire.AckMessage))
    g.lose(of_type(wire.SeqMessage, dst=3))
    g.deliver()
    g.deliver()
    assert len(g.cores[1]._tx) == 1  # the Seq, still waiting for member 3
    g.settle()
    assert g.delivered(3) == [(1, 1, 1, 1)] and g.cores[1].quiescent
    assert [e.attrs["type"] for e in g.sink.select(kind="retransmit")] == ["SeqMsg"]


# -- the original's fault flags -------------------------------------------------------


def test_drop_rate_drops_every_type_on_receipt_and_traces_it() -> None:
    g = Group(3, drop_rate=1.0)
    g.multicast(1, 11)
    g.deliver()
    assert g.wire == [] and g.cores[2].counters.injected_drops == 1
    (drop,) = [e for e in g.sink.select(kind="drop") if e.node == "n2"]
    assert drop.attrs == {"reason": "injected", "type": "DataMsg"} and drop.peer == "n1"


def test_delayed_acks_wait_on_the_timer_while_everything_else_goes_on() -> None:
    """The original slept in its only receive thread; here a held Ack stalls nothing."""
    g = Group(3, ack_delay=2.0, seed=2)  # member 2's first two draws hold its Acks back
    g.multicast(1, 11)
    g.multicast(3, 31)
    g.deliver(lambda s, d, m: d == 2)  # member 2 gets both Data at t=0
    assert g.in_flight(lambda s, d, m: s == 2) == []  # both of its Acks are held ...
    assert g.cores[2].next_deadline() == 2.0
    assert g.cores[2].counters.delayed == 2 and g.cores[2].pending == 2  # ... not its work
    delays = [e for e in g.sink.select(kind="delay") if e.node == "n2"]
    assert [e.attrs["type"] for e in delays] == ["AckMsg", "AckMsg"]
    assert delays[0].attrs["ms"] == "2000"
    g.now = 2.0
    g.cores[2].handle_timer(2.0)
    g.pump()
    assert len(g.in_flight(lambda s, d, m: s == 2)) == 2
    g.settle()
    assert g.delivered(1) == g.delivered(2) == g.delivered(3) and len(g.delivered(2)) == 2


def test_delay_fraction_holds_back_about_half() -> None:
    g = Group(3, ack_delay=1.0, seed=5)
    for i in range(200):
        g.multicast(1, i)
    g.deliver(lambda s, d, m: d == 2)
    delayed = g.cores[2].counters.delayed
    assert 70 < delayed < 130  # half of 200 Acks, give or take the draws


# -- membership ----------------------------------------------------------------------------


def test_a_crashed_non_sender_is_removed_and_the_survivors_do_not_block() -> None:
    g = Group(4)
    g.crash(4)
    g.multicast(1, 11)
    g.multicast(2, 21)
    g.settle(limit=10.0)
    assert g.delivered(1) == []  # blocked: member 4 never answers (reference (a), bug 6)
    g.remove(4)
    g.settle()
    assert len(g.delivered(1)) == 2
    assert g.delivered(1) == g.delivered(2) == g.delivered(3)
    assert all(g.cores[i].quiescent for i in (1, 2, 3))
    removed = [e for e in g.events[1] if isinstance(e, MemberRemoved)]
    assert removed == [MemberRemoved(member=4, view=(1, 2, 3))]
    assert g.sink.select(kind="view_change")[0].peer == "n4"
    # Nothing is sent to the removed member any more, and its datagrams are refused.
    g.multicast(1, 12)
    assert all(d != 4 for _, d, _ in g.wire)
    late = wire.encode(wire.AckMessage(sender=1, msg_id=3, proposed_seq=9, proposer=4))
    g.cores[1].receive_datagram(late, g.addr(4), g.now)
    assert g.cores[1].counters.from_removed == 1


def test_a_crashed_senders_message_that_one_survivor_ordered_is_delivered_by_all() -> None:
    g = Group(4)
    g.multicast(4, 41)
    g.deliver(of_type(wire.DataMessage))
    g.deliver(of_type(wire.AckMessage))
    g.deliver(of_type(wire.SeqMessage, dst=3))  # only member 3 got the Seq ...
    g.crash(4)  # ... before the sender crashed
    assert g.delivered(3) == [(4, 1, 1, 1)] and g.delivered(1) == g.delivered(2) == []
    g.remove(4, at=[1])  # the coordinator (smallest id) notices first
    g.settle(limit=5.0)
    g.remove(4, at=[2, 3])
    g.settle()
    for i in (1, 2, 3):
        assert g.delivered(i) == [(4, 1, 1, 1)], i
        assert g.cores[i].quiescent


def test_a_crashed_senders_message_nobody_ordered_is_discarded_by_all() -> None:
    g = Group(4)
    g.multicast(4, 41)
    g.deliver(lambda s, d, m: isinstance(m, wire.DataMessage) and d in (2, 3))
    g.crash(4)
    g.remove(4)
    g.settle()
    for i in (1, 2, 3):
        assert g.delivered(i) == [] and g.cores[i].pending == 0
    assert [e for e in g.events[2] if isinstance(e, Discarded)] == [
        Discarded(data=u32(41), sender="n4", sender_id=4, msg_id=1)
    ]
    assert {e.node for e in g.sink.select(kind="discard")} == {"n2", "n3"}
    # Later traffic flows normally.
    g.multicast(2, 21)
    g.settle()
    assert [d[:2] for d in g.delivered(1)] == [(2, 1)]


def test_the_flush_survives_the_coordinator_crashing_too() -> None:
    g = Group(5)
    g.multicast(5, 51)
    g.deliver(of_type(wire.DataMessage))
    g.deliver(of_type(wire.AckMessage))
    g.deliver(of_type(wire.SeqMessage, dst=4))  # only member 4 knows the final
    g.crash(5)
    g.remove(5)  # coordinator 1 starts collecting ...
    g.crash(1)  # ... and crashes before anything is delivered
    g.remove(1)
    g.settle()
    assert g.delivered(2) == g.delivered(3) == g.delivered(4) == [(5, 1, 1, 1)]


def test_remove_member_argument_handling() -> None:
    g = Group(3)
    with pytest.raises(LocalProtocolError):
        g.cores[1].remove_member(1, 0.0)
    g.cores[1].remove_member(99, 0.0)  # unknown: ignored
    g.cores[1].remove_member(3, 0.0)
    g.cores[1].remove_member(3, 0.0)  # idempotent
    assert g.cores[1].view == (1, 2)


# -- API contract ----------------------------------------------------------------------


def test_multicast_rejects_data_that_does_not_fit_and_state_is_json() -> None:
    g = Group(3)
    with pytest.raises(LocalProtocolError):
        g.cores[1].multicast(1 << 32, 0.0)
    with pytest.raises(LocalProtocolError):
        g.cores[1].multicast(-1, 0.0)
    g.multicast(1, 7)
    state = orjson.loads(orjson.dumps(g.cores[1].state()))
    assert state["msg_id"] == 1 and state["latest_seq"] == 1
    assert (
        state["holdback"][0]["data"] == "00000007" and state["outgoing"][0]["phase"] == "collecting"
    )
    assert g.cores[1].unacked_data(2) and not g.cores[1].unacked_data(1)


@pytest.mark.parametrize(
    "members",
    [
        (Member(id=1, name="a", addr=("h", 1)), Member(id=1, name="b", addr=("h", 2))),
        (Member(id=1, name="a", addr=("h", 1)), Member(id=2, name="a", addr=("h", 2))),
        (Member(id=1, name="a", addr=("h", 1)), Member(id=2, name="b", addr=("h", 1))),
        (Member(id=0, name="a", addr=("h", 1)),),
        (Member(id=2, name="a", addr=("h", 1)),),  # ``me`` (1) is missing
    ],
)
def test_bad_configurations_are_config_errors(members: tuple[Member, ...]) -> None:
    with pytest.raises(ConfigError):
        IsisConfig(me=1 if members[0].id != 0 else 0, members=members)


@pytest.mark.parametrize(
    "tunables",
    [
        {"drop_rate": 1.5},
        {"ack_delay": -1.0},
        {"batch_delay": -0.1},
        {"retransmit_initial": 0.0},
        {"retransmit_initial": 1.0, "retransmit_max": 0.5},
        {"batch_bytes": wire.MAX_SIZE - 1},
        {"batch_turn": True, "batch_delay": 0.001},
    ],
)
def test_bad_tunables_are_config_errors(tunables: dict[str, Any]) -> None:
    members = members_from([("a", ("h", 1)), ("b", ("h", 2))])
    with pytest.raises(ConfigError):
        IsisConfig(me=1, members=members, **tunables)


def test_the_retransmission_schedule_is_applied() -> None:
    members = members_from([("a", ("h", 1)), ("b", ("h", 2))])
    core = IsisCore(
        IsisConfig(me=1, members=members, retransmit_initial=0.05),
        tracer=Tracer(MemorySink(), run="t", node="a"),
        rng=random.Random(0),
    )
    core.multicast(1, 10.0)
    assert core.next_deadline() == pytest.approx(10.05)


# -- batching (a gossamer extension) -------------------------------------------------


def batched_group(n: int, delay: float = 0.001, size: int = 1400) -> Group:
    g = Group(n)
    for m in g.members:
        g.cores[m.id] = IsisCore(
            IsisConfig(me=m.id, members=g.members, batch_delay=delay, batch_bytes=size),
            tracer=Tracer(g.sink, run="t", node=m.name),
            rng=random.Random(m.id),
        )
    return g


def test_batching_sends_messages_to_one_member_together_after_the_delay() -> None:
    g = batched_group(3)
    for i in range(5):
        g.cores[1].multicast(i, 0.0)
    g.pump()
    assert g.wire == [] and g.cores[1].next_deadline() == pytest.approx(0.001)
    g.now = 0.001
    g.cores[1].handle_timer(0.001)
    g.pump()
    assert [(s, d, len(b)) for s, d, b in g.wire] == [(1, 2, 80), (1, 3, 80)]
    g.settle()
    assert len(g.delivered(2)) == 5 and g.delivered(1) == g.delivered(2) == g.delivered(3)
    c = g.cores[2].counters
    assert c.messages_in > c.datagrams_in and c.messages_out > c.datagrams_out


def test_batches_are_bounded_and_a_bad_batch_is_dropped_whole() -> None:
    g = batched_group(3, size=wire.MAX_SIZE)
    for i in range(5):
        g.cores[1].multicast(bytes([i]) * 200, 0.0)  # 216-byte messages: two per batch
    g.cores[1].handle_timer(0.001)
    g.pump()
    assert all(len(b) <= wire.MAX_SIZE for _, _, b in g.wire) and len(g.wire) == 6
    core = g.cores[2]
    good = wire.encode(wire.DataMessage(sender=1, msg_id=9, data=u32(1)))
    core.receive_datagram(good + good[:-1], g.addr(1), 0.0)
    assert core.counters.malformed == 1 and core.pending == 0 and core.datagrams_to_send() == []
    # Members that do not batch still accept batches.
    plain = Group(3)
    plain.cores[2].receive_datagram(
        good + wire.encode(wire.DataMessage(sender=1, msg_id=10, data=b"two")), plain.addr(1), 0.0
    )
    assert plain.cores[2].pending == 2 and len(plain.cores[2].datagrams_to_send()) == 2
    with pytest.raises(ConfigError):
        IsisConfig(me=1, members=g.members, batch_bytes=10)


def test_turn_batching_holds_a_turns_messages_until_its_deadline_which_is_at_once() -> None:
    g = Group(3, batch_turn=True)
    g.now = 2.0
    for i in range(5):
        g.cores[1].multicast(i, 2.0)
    g.pump()
    # Held for the end of the driver's turn, and due at once: no delay to wait out.
    assert g.wire == [] and g.cores[1].next_deadline() == 2.0 and not g.cores[1].quiescent
    g.cores[1].handle_timer(2.0)
    g.pump()
    assert [(s, d, len(b)) for s, d, b in g.wire] == [(1, 2, 80), (1, 3, 80)]
    assert g.cores[1].next_deadline() != 2.0  # nothing held any more
    # A receiver's answers to everything one turn took share a datagram too.
    g.deliver(lambda s, d, m: d == 2)
    assert [(s, d) for s, d, _ in g.wire] == [(1, 3)] and g.cores[2].next_deadline() == 2.0
    g.cores[2].handle_timer(2.0)
    g.pump()
    assert [(s, d) for s, d, _ in g.wire] == [(1, 3), (2, 1)]
    assert len(wire.decode_batch(g.wire[1][2])) == 5  # the five Acks
    g.settle()
    assert len(g.delivered(2)) == 5 and g.delivered(1) == g.delivered(2) == g.delivered(3)
    c = g.cores[1].counters
    assert c.messages_out > c.datagrams_out


# -- bytes payloads ---------------------------------------------------------------------


def test_bytes_payloads_of_every_size_are_delivered_as_sent() -> None:
    g = Group(3)
    sizes = [0, 1, 3, 4, 5, 200, wire.MAX_DATA_SIZE]
    for n in sizes:
        g.multicast(1 + n % 3, bytes([n % 256]) * n)
    g.settle()
    delivered = [[e for e in g.events[i] if isinstance(e, Delivered)] for i in (1, 2, 3)]
    orders = [[(e.sender, e.msg_id, e.data) for e in d] for d in delivered]
    assert orders[0] == orders[1] == orders[2]
    assert sorted(len(e.data) for e in delivered[0]) == sizes
    assert all(e.data == bytes([len(e.data) % 256]) * len(e.data) for e in delivered[0])
    assert {e.sender for e in delivered[0]} <= {"n1", "n2", "n3"}
    # Traces: the payload by size and digest, never its bytes.
    deliver = next(e for e in g.sink.events if e.kind == "deliver" and e.size == 200)
    assert deliver.attrs["digest"] == payload_digest(bytes([200]) * 200)
    assert "data" not in deliver.attrs


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"x" * (wire.MAX_DATA_SIZE + 1), "at most 512 bytes"),
        ("text", "carries bytes"),
        (1.5, "carries bytes"),
        (1 << 32, "uint32"),
        (-1, "uint32"),
    ],
)
def test_payloads_that_do_not_fit_are_refused_before_the_wire(data: object, match: str) -> None:
    g = Group(3)
    with pytest.raises(LocalProtocolError, match=match):
        g.cores[1].multicast(data, 0.0)  # type: ignore[arg-type]
    assert g.cores[1].counters.multicasts == 0 and g.cores[1].datagrams_to_send() == []


def test_several_byte_messages_share_one_batch_datagram() -> None:
    g = batched_group(3)
    for i in range(6):
        g.cores[1].multicast(f"job-{i}".encode() * 20, 0.0)  # 100-byte payloads
    g.cores[1].handle_timer(0.001)
    g.pump()
    # Six 116-byte type 7 messages to each member: one datagram each (696 <= 1,400).
    assert [(s, d, len(b)) for s, d, b in g.wire] == [(1, 2, 696), (1, 3, 696)]
    assert [len(m.data) for m in _all(g.wire[0][2])] == [100] * 6  # type: ignore[union-attr]
    g.settle()
    orders = {i: [e.data for e in g.events[i] if isinstance(e, Delivered)] for i in (1, 2, 3)}
    assert orders[1] == orders[2] == orders[3] and len(orders[1]) == 6


def _all(datagram: bytes) -> list[wire.IsisMessage]:
    buf = Buffer(datagram)
    messages = []
    while not buf.eof():
        messages.append(wire.pull_isis(buf))
    return messages


def test_the_done_log_keeps_the_finals_of_the_last_retain_messages() -> None:
    from gossamer.proto.isis.core import _DoneLog

    log = _DoneLog(3)
    for msg_id in (2, 1, 3, 5, 4, 6, 7, 8, 9, 10):
        log.add(msg_id, (msg_id + 10, 1))
    log.add(10, (20, 1))  # the same message again: kept once
    assert log.finals == {8: (18, 1), 9: (19, 1), 10: (20, 1)}
    assert list(log.kept) == [8, 9, 10]
    assert log.watermark == 10 and all(msg_id in log for msg_id in range(1, 11))
