"""``GroupCore``: views and ISIS on one address, as one sans-I/O core."""

from __future__ import annotations

import random

from gossamer.proto.group import GroupCore
from gossamer.proto.views import ViewsConfig
from gossamer.trace.sink import MemorySink, Tracer

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
