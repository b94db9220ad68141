"""The shared per-datagram fault plan."""

from __future__ import annotations

import random

import pytest

from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan


def test_clean_plan_passes_everything_without_drawing() -> None:
    rng = random.Random(1)
    state = rng.getstate()
    decision = FaultPlan().decide(rng)
    assert decision.copies == (0.0,) and decision.faults == ()
    assert rng.getstate() == state


def test_rates_match_probabilities() -> None:
    rng = random.Random(7)
    plan = FaultPlan(drop=0.3, duplicate=0.2, delay=0.01)
    decisions = [plan.decide(rng) for _ in range(20000)]
    dropped = sum(not d.copies for d in decisions)
    duplicated = sum(len(d.copies) == 2 for d in decisions)
    assert 0.28 < dropped / 20000 < 0.32
    assert 0.18 < duplicated / (20000 - dropped) < 0.22
    assert all(0.0 <= c <= 0.01 for d in decisions for c in d.copies)
    assert all("delay" in d.faults for d in decisions if d.copies)


def test_reorder_holds_some_copies_back() -> None:
    rng = random.Random(3)
    plan = FaultPlan(reorder=0.5, reorder_by=0.2)
    held = [d for d in (plan.decide(rng) for _ in range(1000)) if d.copies[0] >= 0.2]
    assert 400 < len(held) < 600 and all(d.faults == ("reorder",) for d in held)


def test_same_seed_same_decisions() -> None:
    plan = FaultPlan(drop=0.1, duplicate=0.1, delay=0.5, reorder=0.1)
    a, b = random.Random(9), random.Random(9)
    assert [plan.decide(a) for _ in range(500)] == [plan.decide(b) for _ in range(500)]


@pytest.mark.parametrize(
    "kwargs", [{"drop": 1.5}, {"duplicate": -0.1}, {"delay": -1.0}, {"reorder": 2.0}]
)
def test_invalid_plans_are_config_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        FaultPlan(**kwargs)
