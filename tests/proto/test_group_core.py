"""``GroupCore``: views and ISIS on one address, as one sans-I/O core."""

from __future__ import annotations

import random
from collections.abc import Callable

from gossamer.proto.group import ISIS_TAG, VIEW_TAG_SIZE, GroupCore
from gossamer.proto.isis import Delivered
from gossamer.proto.views import ViewsConfig
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire import isis as wire

from .views.group import member


def test_an_isis_deadline_at_time_zero_is_the_groups_deadline() -> None:
    # A batch held until the end of the turn is due at once: at 0.0 for a multicast at
    # the simulator's first instant, which is a deadline like any other (not "none").
    a, b = member("a"), member("b")
    core = GroupCore(
        ViewsConfig(me=a, initial=(a, b)),
        isis={"batch_turn": True},
        tracer=Tracer(MemorySink(), run="r", node="a"),
        rng=random.Random(1),
        now=0.0,
    )
    core.multicast(b"x", 0.0)
    assert core.isis is not None and core.isis.next_deadline() == 0.0
    assert core.next_deadline() == 0.0


class Hand:
    """Founders ``names`` as ``GroupCore``s, datagrams carried only when asked."""

    def __init__(self, *names: str) -> None:
        initial = tuple(member(n) for n in names)
        self.sink = MemorySink()
        self.now = 0.0
        self.cores = {
            m.name: GroupCore(
                ViewsConfig(me=m, initial=initial),
                tracer=Tracer(self.sink, run="r", node=m.name),
                rng=random.Random(i),
                now=0.0,
            )
            for i, m in enumerate(initial)
        }
        self.at = {m.address: m.name for m in initial}
        self.events: dict[str, list[object]] = {n: [] for n in names}

    def outbox(self, name: str) -> list[tuple[str, bytes]]:
        """``name``'s datagrams as ``(destination, bytes)``; its events are kept."""
        core = self.cores[name]
        self.events[name] += core.events_received()
        return [(self.at[a], d) for d, a in core.datagrams_to_send()]

    def run(
        self, live: set[str], until: float, lose: Callable[[bytes], bool] | None = None
    ) -> None:
        """Carry datagrams among ``live`` members, but those ``lose`` picks, and fire
        their timers, until ``until``."""
        while self.now <= until:
            moved = False
            for name in sorted(live):
                for dst, data in self.outbox(name):
                    if dst in live and not (lose is not None and lose(data)):
                        src = self.cores[name].me.address
                        self.cores[dst].receive_datagram(data, src, self.now)
                        moved = True
            if moved:
                continue
            due = [(d, n) for n in live if (d := self.cores[n].next_deadline()) is not None]
            if not due:
                return
            self.now, name = min(due)
            self.cores[name].handle_timer(self.now)


def test_late_data_of_a_closed_view_is_dropped_not_held_until_its_discard() -> None:
    # a multicasts while c is crashed and its Data to b is held up on the way: the view
    # change that removes c withdraws it, and a sends the data again in view 2. The late
    # copy, tagged view 1, reaches b in view 2: b drops it at once rather than holding it
    # in its queue (in front of later messages) until a's discard.
    hand = Hand("a", "b", "c")
    a, b = hand.cores["a"], hand.cores["b"]
    a.multicast(b"m", hand.now)
    late = [data for dst, data in hand.outbox("a") if dst == "b"]
    assert len(late) == 1 and late[0][:5] == b"I\x00\x00\x00\x01"  # ISIS, view 1
    for name in ("a", "b"):
        hand.cores[name].suspect("c", hand.now)
    # a's discard of its withdrawn message is lost too, until b is in view 2.
    hand.run({"a", "b"}, until=0.05, lose=discards)
    assert a.view is not None and b.view is not None and a.view.id == b.view.id == 2
    assert a.isis is not None and b.isis is not None and a.isis.counters.withdrawn == 1
    assert [e.data for e in hand.events["b"] if isinstance(e, Delivered)] == [b"m"]
    b.receive_datagram(late[0], a.me.address, hand.now)
    assert b.isis.counters.stale_data == 1 and b.isis.pending == 0
    (drop,) = [e for e in hand.sink.events if e.node == "b" and e.kind == "drop"]
    assert drop.attrs == {"reason": "Data of a closed view", "type": "DataMsg"}


def discards(datagram: bytes) -> bool:
    """An ISIS datagram holding a discard (a Seq with final 0)."""
    if datagram[:1] != ISIS_TAG:
        return False
    messages = wire.decode_batch(datagram[1 + VIEW_TAG_SIZE :])
    return any(isinstance(m, wire.SeqMessage) and m.final_seq == 0 for m in messages)


def test_an_isis_datagram_too_short_for_its_view_tag_is_dropped_and_counted() -> None:
    hand = Hand("a", "b")
    b = hand.cores["b"]
    b.receive_datagram(b"I\x00\x01", hand.cores["a"].me.address, 0.0)
    assert b.counters == {"unknown_protocol": 0, "malformed": 1}
    (drop,) = [e for e in hand.sink.events if e.kind == "drop"]
    assert drop.layer == "isis"
    assert drop.attrs["reason"] == "an ISIS datagram shorter than its view tag"


def test_a_falsely_suspected_member_cannot_get_its_late_message_ordered_in_the_next_view() -> None:
    # c is alive but cut off: a and b suspect it and go on in view 2 without it. c, still
    # in view 1 and never told, multicasts. a and b removed c from ISIS as the change
    # began, before they could install view 2: they drop its Data without an Ack, so c
    # fixes no final with an Ack given in view 2 and nobody delivers the message there
    # (docs/cluster.md, "A falsely suspected member"). c learns it was excluded instead.
    hand = Hand("a", "b", "c")
    a, b, c = (hand.cores[n] for n in "abc")
    for core in (a, b):
        core.suspect("c", hand.now)
    hand.run({"a", "b"}, until=0.05)
    assert a.view is not None and b.view is not None and a.view.id == b.view.id == 2
    assert c.view is not None and c.view.id == 1 and not c.excluded
    c.multicast(b"late", hand.now)
    hand.run({"a", "b", "c"}, until=hand.now + 5.0)
    assert a.isis is not None and b.isis is not None
    assert a.isis.counters.from_removed >= 1 and b.isis.counters.from_removed >= 1
    for name in "abc":
        assert b"late" not in [e.data for e in hand.events[name] if isinstance(e, Delivered)]
    assert c.excluded
