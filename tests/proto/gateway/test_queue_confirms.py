"""The majority rule of the replicated queues' confirms, with real machines."""

from __future__ import annotations

from gossamer.proto.gateway.queue_confirms import ConfirmTracker
from gossamer.proto.gateway.replicated_queues import ReplicatedQueues
from gossamer.wire import queue_commands as qc

VIEW = ("a#1", "b#1", "c#1")


def push(n: int, node: str = "a#1") -> qc.Push:
    return qc.Push(queue="q", message_id=f"{node}/{n}", nonce=n, target={}, payload=n,
                   node=node, app="app", client="p")


def test_a_push_is_confirmed_once_a_majority_reports_the_same_history() -> None:
    mine, theirs = ReplicatedQueues(), ReplicatedQueues()
    tracker = ConfirmTracker("a#1")
    tracker.applied(mine.apply(push(1)))
    theirs.apply(push(1))
    assert tracker.confirmable(VIEW) == []  # only itself: 1 of 3
    tracker.reported("b#1", theirs.position, theirs.chain)
    [confirm] = tracker.confirmable(VIEW)
    assert confirm.message_id == "a#1/1" and confirm.position == 1
    assert tracker.confirmable(VIEW) == [] and tracker.pending == {}


def test_a_report_of_another_history_at_the_same_position_vouches_for_nothing() -> None:
    mine, other = ReplicatedQueues(), ReplicatedQueues()
    tracker = ConfirmTracker("a#1")
    tracker.applied(mine.apply(push(1)))
    other.apply(push(9, node="b#1"))  # position 1 too, another command
    tracker.reported("b#1", other.position, other.chain)
    tracker.reported("c#1", other.position, other.chain)
    assert tracker.confirmable(VIEW) == []
    assert [c.message_id for c in tracker.refuse_all()] == ["a#1/1"]


def test_a_report_ahead_counts_once_this_member_gets_there() -> None:
    mine, ahead = ReplicatedQueues(), ReplicatedQueues()
    tracker = ConfirmTracker("a#1")
    commands = [push(1), push(2)]
    for command in commands:
        ahead.apply(command)
    tracker.reported("b#1", ahead.position, ahead.chain)
    tracker.applied(mine.apply(commands[0]))
    assert tracker.confirmable(VIEW) == []  # b's chain at 2 is not known here yet
    tracker.applied(mine.apply(commands[1]))
    assert [c.message_id for c in tracker.confirmable(VIEW)] == ["a#1/1", "a#1/2"]


def test_only_the_view_counts() -> None:
    mine, theirs = ReplicatedQueues(), ReplicatedQueues()
    tracker = ConfirmTracker("a#1")
    tracker.applied(mine.apply(push(1)))
    theirs.apply(push(1))
    tracker.reported("x#1", theirs.position, theirs.chain)  # not in the view
    assert tracker.confirmable(VIEW) == []
    tracker.forget(VIEW)
    assert tracker.reports == {}
