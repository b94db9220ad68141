"""Settling after the workload (``gossamer.lab.settle``): what counts as settled, and when
the nodes are stopped."""

from __future__ import annotations

from typing import Any

from gossamer.lab.settle import Settling


def line(t: float, *, pending: int = 0, delivered: int = 10, sent: int = 5) -> dict[str, Any]:
    return {
        "status": "progress",
        "t": t,
        "sent": sent,
        "delivered": delivered,
        "pending": pending,
        "idle": pending == 0,
    }


def test_two_idle_reports_with_nothing_moving_settle_a_node() -> None:
    s = Settling(workload_end=10.0, linger=1.0, settle=5.0)
    s.update("h1", line(9.5))  # before the workload's end: not evidence
    s.update("h1", line(10.2))
    assert not s.settled(["h1"], 10.3)
    s.update("h1", line(10.5))
    assert s.settled(["h1"], 10.6)
    # Settled during linger: the nodes are still stopped only once linger is over.
    assert not s.done(["h1"], 10.7)
    assert s.done(["h1"], 11.0)
    assert s.result(["h1"], 11.0) == {
        "settled": True,
        "seconds": 0.6,
        "stopped_after": 1.0,
        "linger": 1.0,
        "settle": 5.0,
    }


def test_a_busy_node_or_changing_counts_keep_the_group_unsettled() -> None:
    s = Settling(workload_end=0.0, linger=0.0, settle=5.0)
    for t in (0.25, 0.5):
        s.update("h1", line(t))
    s.update("h2", line(0.25, pending=3))
    s.update("h2", line(0.5, pending=0, delivered=10))
    s.update("h2", line(0.75, pending=0, delivered=13))  # it delivered in between
    assert not s.settled(["h1", "h2"], 0.8)
    assert s.pending(["h1", "h2"]) == {"h2": 0}
    s.update("h2", line(1.0, pending=0, delivered=13))
    assert s.done(["h1", "h2"], 1.1)
    assert s.result(["h1", "h2"], 1.1)["seconds"] == 1.1


def test_a_node_that_never_settles_is_stopped_at_the_bound_and_reported() -> None:
    s = Settling(workload_end=0.0, linger=1.0, settle=2.0)
    s.update("h1", line(0.5, pending=7))
    s.update("h1", line(0.75, pending=4))
    assert not s.done(["h1", "h2"], 2.9)
    assert s.done(["h1", "h2"], 3.0)
    assert s.result(["h1", "h2"], 3.0) == {
        "settled": False,
        "seconds": None,
        "stopped_after": 3.0,
        "linger": 1.0,
        "settle": 2.0,
        "pending": {"h1": 4, "h2": None},
    }


def test_only_live_nodes_are_waited_for() -> None:
    s = Settling(workload_end=0.0, linger=0.0, settle=9.0)
    s.update("h1", line(0.25))
    s.update("h1", line(0.5))
    # h2 crashed (or exited): it reports nothing, and is not waited for.
    assert s.done(["h1"], 0.6)
